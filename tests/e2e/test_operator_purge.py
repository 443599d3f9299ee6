"""The operator path end to end: `lakepurge purge` (report, Spark purge, verify, certificate), `verify`, `vacuum`."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import psycopg
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_backfill
from tests.support.invariant import assert_invariant, snapshot
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.e2e


@pytest.fixture
def operator_lake(lake_factory, pg_dsn, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_contacts")
        conn.execute("CREATE TABLE crm_contacts (id serial PRIMARY KEY, customer_id text, email text)")
        for n in range(1, 13):
            conn.execute(
                "INSERT INTO crm_contacts (customer_id, email) VALUES (%s, %s)",
                (f"u{n:07d}", f"person{n}@example.com"),
            )
    case = lake_factory(index_toml("postgres", pg_dsn), objects=60, users=12, versioned=True)
    toml = case.toml.replace(
        "[[datasets]]",
        "[purge]\nmax_object_fraction = 1.0\nmax_dataset_fraction = 1.0\nmax_table_fraction = 1.0\n\n"
        f'[[relational]]\nname = "crm"\ndsn = "{pg_dsn}"\n'
        'table = "crm_contacts"\ncolumn = "customer_id"\n\n[[datasets]]',
        1,
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    run_backfill(spark, case.settings)
    return case, str(config), pg_dsn


def run_cli(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*args, "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_given_users_when_purging_without_yes_then_only_a_report_is_written(operator_lake, capsys):
    case, config, _ = operator_lake
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")
    code, summary = run_cli(capsys, "purge", case.lake.users[0], "--config", config)
    assert code == 0
    assert summary["dry_run"] is True
    assert summary["plan"]["objects"] > 0
    assert snapshot(s3, "lake") == before


def test_given_users_when_purging_with_yes_then_erased_verified_certified_without_raw_ids(
    operator_lake, capsys, pg_dsn
):
    case, config, _ = operator_lake
    users = case.lake.users[:2]
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")

    code, summary = run_cli(capsys, "purge", *users, "--yes", "--config", config)

    assert code == 0, summary
    assert summary["verified"] is True
    assert summary["objects_failed"] == []
    assert summary["lines_erased"] > 0
    assert summary["relational_rows_deleted"] == 2
    assert_invariant(case.lake, case.settings, set(users), before, snapshot(s3, "lake"))
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM crm_contacts WHERE customer_id = ANY(%s)", (users,)).fetchone() == (
            0,
        )
        assert conn.execute("SELECT count(*) FROM crm_contacts").fetchone() == (10,)
    bucket, _, key = summary["certificate"][5:].partition("/")
    certificate_bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    certificate = orjson.loads(certificate_bytes)
    assert certificate["verification"]["passed"] is True
    assert certificate["totals"]["lines_erased"] == summary["lines_erased"]
    for user in users:
        assert user.encode() not in certificate_bytes
    store = open_store(case.settings.index)
    assert store.lookup(users) == {}
    assert len(store.erased_among(certificate["user_hashes"])) == 2  # on the suppression list

    code, verified = run_cli(capsys, "verify", *users, "--config", config)
    assert code == 0 and verified["verified"] is True and verified["remaining"] == []


def test_given_an_erased_user_restored_from_backup_when_indexed_then_status_flags_it(operator_lake, capsys):
    case, config, _ = operator_lake
    user = case.lake.users[3]
    assert run_cli(capsys, "purge", user, "--yes", "--config", config)[0] == 0
    s3 = aws.client("s3")
    s3.put_object(Bucket="lake", Key="reviews/restored/backup.jsonl", Body=orjson.dumps({"user_id": user}) + b"\n")
    assert run_cli(capsys, "index", "object", "s3://lake/reviews/restored/backup.jsonl", "--config", config)[0] == 0
    assert run_cli(capsys, "status", "--config", config)[1]["index"]["objects_with_returning_users"] == 1


def test_given_purged_objects_when_vacuumed_then_placeholders_go_and_the_index_equals_a_fresh_backfill(
    operator_lake, capsys, spark
):
    case, config, _ = operator_lake
    users = case.lake.users[:4]
    assert run_cli(capsys, "purge", *users, "--yes", "--config", config)[0] == 0
    s3 = aws.client("s3")
    purged = every_version(s3, "lake")

    code, plan = run_cli(capsys, "vacuum", "--config", config)
    assert code == 0 and plan["dry_run"] is True and plan["lines_removed"] > 0
    assert every_version(s3, "lake") == purged, "a dry run changed the lake"

    code, vacuumed = run_cli(capsys, "vacuum", "--yes", "--config", config)

    assert code == 0 and vacuumed["lines_removed"] == plan["lines_removed"]
    assert vacuumed["record"].startswith("s3://lake-reports/vacuum/")
    for obj in case.lake.objects:
        key = obj.key
        if not key.endswith((".jsonl", ".jsonl.gz")):
            continue
        body = s3.get_object(Bucket="lake", Key=key)["Body"].read()
        text = gzip.decompress(body) if key.endswith(".gz") else body
        original = gzip.decompress(obj.body) if key.endswith(".gz") else obj.body
        # The purge's placeholders are gone; `{}` lines the lake already had are not the vacuum's to remove.
        assert text.split(b"\n").count(b"{}") == original.split(b"\n").count(b"{}"), key
    for (key, _), body in every_version(s3, "lake").items():
        text = gzip.decompress(body) if key.endswith(".gz") else body
        assert not any(user.encode() in text for user in users), f"{key}: a version still holds an erased user"
    # The index equals a fresh backfill of the vacuumed lake (into a separate, empty DynamoDB index).
    fresh = case.settings.model_copy(
        update={
            "index": case.settings.index.model_copy(
                update={"backend": "dynamodb", "table": "fresh-backfill", "dsn": None}
            )
        }
    )
    run_backfill(spark, fresh)
    assert open_store(case.settings.index).dump() == open_store(fresh.index).dump()


def every_version(s3, bucket: str) -> dict[tuple[str, str], bytes]:
    found = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            found[version["Key"], version["VersionId"]] = s3.get_object(
                Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"]
            )["Body"].read()
    return found


def test_given_a_request_over_the_safety_limit_when_purging_then_it_is_refused_and_nothing_changes(
    operator_lake, capsys, tmp_path
):
    case, config, _ = operator_lake
    strict = tmp_path / "strict.toml"
    strict.write_text(Path(config).read_text().replace("max_dataset_fraction = 1.0", "max_dataset_fraction = 0.001"))
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")
    code, document = run_cli(capsys, "purge", case.lake.users[0], "--yes", "--config", str(strict))
    assert code == 3
    assert document["status"] == "REFUSED" and "max_dataset_fraction" in document["reason"]
    assert snapshot(s3, "lake") == before


def test_given_a_report_changed_after_approval_when_the_purge_job_runs_then_it_refuses(operator_lake, capsys):
    from lakepurge_jobs.purge import main as purge_job

    case, config, _ = operator_lake
    code, summary = run_cli(capsys, "purge", case.lake.users[0], "--config", config)  # dry run: report only
    assert code == 0
    s3 = aws.client("s3")
    bucket, _, key = summary["report"][5:].partition("/")
    tampered = s3.get_object(Bucket=bucket, Key=key)["Body"].read().replace(b'"lines"', b'"lines" ', 1)
    s3.put_object(Bucket=bucket, Key=key, Body=tampered)
    before = snapshot(s3, "lake")
    assert purge_job(["--config", config, "--report", summary["report"], "--sha256", summary["report_sha256"]]) == 3
    assert snapshot(s3, "lake") == before
