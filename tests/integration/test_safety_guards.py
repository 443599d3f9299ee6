"""Guards wherever data is deleted: placeholder ids, shares of tables and objects, and executing exactly the plan an
operator reviewed. Every refusal is checked against the data itself: nothing changed."""

from __future__ import annotations

import tomllib

import orjson
import psycopg
import pytest

from lakepurge.core import aws as clients
from lakepurge.core.config import parse_settings
from lakepurge.indexing.backfill import run_reconcile
from tests.support.cli import cli
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration


def jsonl(*users: str) -> bytes:
    return b"".join(orjson.dumps({"user_id": u, "n": i}) + b"\n" for i, u in enumerate(users))


@pytest.fixture
def guarded_lake(aws, pg_dsn, tmp_path, monkeypatch):
    """A covered JSON Lines dataset and a relational table in which the placeholder id '0' fills 900 of 1,000 rows."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="glake")
    s3.create_bucket(Bucket="glake-reports")
    s3.put_object(Bucket="glake", Key="events/a.jsonl", Body=jsonl("alice", "bob", "0", "carol"))
    # 40 records, 30 of them dave's: past the default max_object_fraction (0.5 of objects of 20+ records).
    s3.put_object(Bucket="glake", Key="events/d.jsonl", Body=jsonl(*(["dave"] * 30 + [f"p{n}" for n in range(10)])))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS accounts")
        conn.execute("CREATE TABLE accounts (id serial PRIMARY KEY, customer_id text)")
        rows = ["0"] * 900 + ["alice"] + [f"c{n}" for n in range(99)]
        with conn.cursor().copy("COPY accounts (customer_id) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((row,))
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://glake-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\n\n"
        f'[[relational]]\nname = "accounts"\ndsn = "{pg_dsn}"\ntable = "accounts"\ncolumn = "customer_id"\n\n'
        '[[datasets]]\nname = "events"\nlocation = "s3://glake/events/"\nformat = "jsonl"\nid_fields = ["user_id"]\n'
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    run_reconcile(None, parse_settings(tomllib.loads(toml)))
    return s3, str(config), pg_dsn


def lake_bytes(s3) -> dict[str, bytes]:
    return {
        o["Key"]: s3.get_object(Bucket="glake", Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket="glake")["Contents"]
    }


def accounts(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM accounts").fetchone()
        return int(row[0]) if row else 0


def execute_reviewed(capsys, user: str, plan: dict, config: str) -> tuple[int, dict]:
    """`purge USER --report ID --sha256 H --yes`: execute the dry run's report, as reviewed."""
    return cli(
        capsys,
        "purge",
        user,
        "--report",
        plan["request_id"],
        "--sha256",
        plan["report_sha256"],
        "--yes",
        "--config",
        config,
    )


@pytest.mark.parametrize("placeholder", ["0", "NULL", "n/a", "", "  "])
def test_given_a_placeholder_id_when_purged_without_force_then_refused_and_nothing_deleted(
    guarded_lake, capsys, placeholder
):
    s3, config, dsn = guarded_lake
    before = lake_bytes(s3)

    code, document = cli(capsys, "purge", placeholder, "--yes", "--config", config)

    assert code == 3
    assert document["status"] == "REFUSED"
    assert "placeholder" in document["reason"] or "empty" in document["reason"]
    assert accounts(dsn) == 1000
    assert lake_bytes(s3) == before


def test_given_an_id_filling_most_of_a_table_when_purged_then_refused_with_the_share_named(guarded_lake, capsys):
    _, config, dsn = guarded_lake
    with psycopg.connect(dsn, autocommit=True) as conn:  # not a placeholder: a test account shared by everyone
        conn.execute("UPDATE accounts SET customer_id = 'qa-shared' WHERE customer_id = '0'")

    code, document = cli(capsys, "purge", "qa-shared", "--yes", "--config", config)

    assert code == 3
    assert "table accounts: 900 of 1000 rows" in document["reason"]
    assert accounts(dsn) == 1000


def test_given_a_user_owning_most_of_an_object_when_purged_then_refused_by_the_default_object_limit(
    guarded_lake, capsys
):
    s3, config, _ = guarded_lake
    before = lake_bytes(s3)
    code, document = cli(capsys, "purge", "dave", "--yes", "--config", config)
    assert code == 3
    assert "30 of 40 records (max_object_fraction 0.5)" in document["reason"]
    assert lake_bytes(s3) == before


def test_given_a_reviewed_dry_run_when_executed_by_report_id_then_exactly_that_report_is_purged(guarded_lake, capsys):
    s3, config, dsn = guarded_lake
    code, plan = cli(capsys, "purge", "alice", "--config", config)
    assert code == 0 and plan["dry_run"] is True
    assert plan["plan"]["relational_rows"] == {"accounts": 1}
    assert plan["plan"]["relational_totals"] == {"accounts": 1000}

    code, done = execute_reviewed(capsys, "alice", plan, config)

    assert code == 0, done
    assert done["request_id"] == plan["request_id"]
    assert done["report_sha256"] == plan["report_sha256"]
    assert done["verified"] is True
    assert done["lines_erased"] == 1
    assert accounts(dsn) == 999
    assert b'"alice"' not in lake_bytes(s3)["events/a.jsonl"]


def test_given_a_reviewed_report_changed_afterwards_when_executed_then_refused_and_nothing_erased(guarded_lake, capsys):
    s3, config, dsn = guarded_lake
    _, plan = cli(capsys, "purge", "alice", "--config", config)
    key = f"reports/{plan['request_id']}.json"
    report = orjson.loads(s3.get_object(Bucket="glake-reports", Key=key)["Body"].read())
    report["objects"].append({**report["objects"][0], "s3path": "s3://glake/events/d.jsonl", "lines": [0, 1, 2]})
    s3.put_object(Bucket="glake-reports", Key=key, Body=orjson.dumps(report))  # a changed plan (the hash is not)
    before = lake_bytes(s3)

    code, document = execute_reviewed(capsys, "alice", plan, config)

    assert code == 3
    assert document["status"] == "REFUSED"
    assert lake_bytes(s3) == before
    assert accounts(dsn) == 1000


def test_given_a_reviewed_report_when_executed_for_other_users_then_refused(guarded_lake, capsys):
    s3, config, _ = guarded_lake
    _, plan = cli(capsys, "purge", "alice", "--config", config)
    before = lake_bytes(s3)
    code, document = cli(capsys, "purge", "bob", "--report", plan["request_id"], "--yes", "--config", config)
    assert code == 3
    assert "other user ids" in document["reason"]
    assert lake_bytes(s3) == before


def test_given_a_purge_the_limits_refuse_when_dry_run_then_the_whole_plan_is_shown_and_only_force_executes_it(
    guarded_lake, capsys
):
    s3, config, _ = guarded_lake
    before = lake_bytes(s3)
    code, plan = cli(capsys, "purge", "dave", "--config", config)  # the dry run of a refused purge
    assert code == 3 and plan["status"] == "REFUSED" and plan["dry_run"] is True
    assert "max_object_fraction" in plan["reason"]
    assert plan["plan"]["lines"] == 30  # the plan the limits refuse, in full, to decide on

    code, refused = execute_reviewed(capsys, "dave", plan, config)  # executing it still needs --force
    assert code == 3 and "--force" in refused["reason"]
    assert lake_bytes(s3) == before

    forced = cli(capsys, "purge", "dave", "--report", plan["request_id"], "--sha256", plan["report_sha256"],
                 "--yes", "--force", "--config", config)  # fmt: skip
    assert forced[0] == 0 and forced[1]["lines_erased"] == 30 and forced[1]["verified"] is True
