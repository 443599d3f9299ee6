"""The vacuum removes only the placeholders purges wrote, and only old versions that hold erased users.

Every check compares bytes in the lake (every version), not lakepurge's own reading of them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import pytest

from lakepurge.core import aws as clients
from lakepurge.core.config import parse_settings
from lakepurge.indexing.backfill import run_reconcile
from tests.support.cli import cli
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.e2e

# Someone else's record whose quoted note holds an empty line and a line of only commas: physical lines a naive
# vacuum would take for placeholders.
NOTE = '"first line\n\n,,,\nlast line"'
CSV = f'customer_id,city,note\nalice,Paris,plain\nbob,Oslo,{NOTE}\nalice,Rome,"two\nlines"\ncarol,Bern,plain\n'


def jsonl(*users: str) -> bytes:
    return b"".join(orjson.dumps({"user_id": u, "n": i}) + b"\n" for i, u in enumerate(users))


def every_version(s3) -> dict[tuple[str, str], bytes]:
    found = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket="vac"):
        for v in page.get("Versions", []):
            found[v["Key"], v["VersionId"]] = s3.get_object(Bucket="vac", Key=v["Key"], VersionId=v["VersionId"])[
                "Body"
            ].read()
    return found


@pytest.fixture
def vacuum_lake(aws, pg_dsn, tmp_path, monkeypatch, spark):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="vac")
    s3.create_bucket(Bucket="vac-reports")
    s3.put_bucket_versioning(Bucket="vac", VersioningConfiguration={"Status": "Enabled"})
    # An unrelated recovery point: an old version holding only other people's data.
    old = s3.put_object(Bucket="vac", Key="events/a.jsonl", Body=jsonl("dave", "erin"))["VersionId"]
    s3.put_object(Bucket="vac", Key="events/a.jsonl", Body=jsonl("alice", "bob", "alice", "carol"))
    s3.put_object(Bucket="vac", Key="profiles/p.csv", Body=CSV.encode())
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://vac-reports/"\n\n'
        "[purge]\nmax_object_fraction = 1.0\nmax_dataset_fraction = 1.0\n\n"
        '[[datasets]]\nname = "events"\nlocation = "s3://vac/events/"\nformat = "jsonl"\nid_fields = ["user_id"]\n\n'
        '[[datasets]]\nname = "profiles"\nlocation = "s3://vac/profiles/"\nformat = "csv"\n'
        'id_fields = ["customer_id"]\n'
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    run_reconcile(None, parse_settings(tomllib.loads(toml)))
    return s3, str(config), old


def test_given_a_purge_when_vacuumed_then_only_its_placeholders_go_and_other_records_stay_byte_for_byte(
    vacuum_lake, capsys
):
    s3, config, old = vacuum_lake
    assert cli(capsys, "purge", "alice", "--yes", "--config", config)[0] == 0
    purged_csv = s3.get_object(Bucket="vac", Key="profiles/p.csv")["Body"].read()
    assert purged_csv.count(b"\n") == CSV.count("\n"), "blanking changed the line count"
    before = every_version(s3)

    # The purge job wrote its placeholder records in one batch; the dry run reads them there, the applied run files
    # them under each object first.
    batches = s3.list_objects_v2(Bucket="vac-reports", Prefix="placeholders/batches/").get("KeyCount", 0)
    assert batches == 1
    code, plan = cli(capsys, "vacuum", "--config", config)
    assert code == 0 and plan["dry_run"] is True
    assert plan["lines_removed"] == 2 + 3  # two `{}` lines; a one-line and a two-line CSV record
    assert every_version(s3) == before, "the dry run changed something"

    code, done = cli(capsys, "vacuum", "--yes", "--config", config)

    assert code == 0 and done["lines_removed"] == 5 and done["versions_deleted"] == 0
    kept = b"".join(orjson.dumps({"user_id": u, "n": n}) + b"\n" for n, u in ((1, "bob"), (3, "carol")))
    assert s3.get_object(Bucket="vac", Key="events/a.jsonl")["Body"].read() == kept
    expected_csv = f"customer_id,city,note\nbob,Oslo,{NOTE}\ncarol,Bern,plain\n".encode()
    assert s3.get_object(Bucket="vac", Key="profiles/p.csv")["Body"].read() == expected_csv
    after = every_version(s3)
    assert after[("events/a.jsonl", old)] == jsonl("dave", "erin"), "an unrelated old version was deleted"
    assert not any(b"alice" in body for body in after.values())
    record = done["record"].removeprefix("s3://vac-reports/")
    document = orjson.loads(s3.get_object(Bucket="vac-reports", Key=record)["Body"].read())
    assert sum(o["placeholders_removed"] for o in document["objects"]) == 5

    assert s3.list_objects_v2(Bucket="vac-reports", Prefix="placeholders/").get("KeyCount", 0) == 0, "records left"
    code, again = cli(capsys, "vacuum", "--yes", "--config", config)
    assert code == 0 and again["lines_removed"] == 0, "a second vacuum found placeholders the first one left"
    assert cli(capsys, "lookup", "bob", "carol", "--config", config)[1]["users"]["bob"]


def test_given_a_line_changed_after_the_purge_when_vacuumed_then_the_object_is_left_as_it_is(vacuum_lake, capsys):
    s3, config, _ = vacuum_lake
    assert cli(capsys, "purge", "alice", "--yes", "--config", config)[0] == 0
    blanked = s3.get_object(Bucket="vac", Key="events/a.jsonl")["Body"].read()
    # Another writer replaces the object, keeping a `{}` line where the purge left one: not the purge's version.
    s3.put_object(Bucket="vac", Key="events/a.jsonl", Body=blanked.replace(b'"bob"', b'"bobby"'))

    code, done = cli(capsys, "vacuum", "--yes", "--config", config)

    assert code == 0 and done["lines_removed"] == 3  # the CSV object's; none of the rewritten JSON Lines object's
    assert s3.get_object(Bucket="vac", Key="events/a.jsonl")["Body"].read().count(b"{}") == 2


def test_given_old_versions_left_by_a_purge_when_vacuumed_then_those_holding_erased_users_go(
    vacuum_lake, capsys, tmp_path
):
    s3, config, old = vacuum_lake
    keep_versions = tmp_path / "keep.toml"
    text = Path(config).read_text()
    keep_versions.write_text(text.replace("[purge]\n", "[purge]\ndelete_noncurrent_versions = false\n"))
    code, summary = cli(capsys, "purge", "alice", "--yes", "--config", str(keep_versions))
    assert code == 1 and summary["verified"] is False, "old versions holding alice were kept: not verified"

    code, done = cli(capsys, "vacuum", "--yes", "--config", config)

    assert code == 0 and done["versions_deleted"] == 2  # the versions the purge read, of both objects
    after = every_version(s3)
    assert not any(b"alice" in body for body in after.values())
    assert after[("events/a.jsonl", old)] == jsonl("dave", "erin")
    code, verified = cli(capsys, "verify", "alice", "--config", config)
    assert code == 0 and verified["verified"] is True


def _download(s3, bucket: str, prefix: str, into: Path) -> Path:
    """The table's objects as a query engine would see them (Spark stands in for Athena/Glue here)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            target = into / item["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
    return into / prefix


def test_given_a_partitioned_parquet_table_when_purged_and_vacuumed_then_spark_reads_the_identical_schema(
    aws, pg_dsn, tmp_path, monkeypatch, spark, capsys
):
    """An external table over the lake keeps working: Parquet keeps its schema (partition column included) and
    loses exactly the user's rows; a blanked JSON line reads as one all-NULL row until the vacuum removes it."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="tbl")
    s3.create_bucket(Bucket="tbl-reports")
    schema = pa.schema(
        [
            ("user_id", pa.string()),
            ("amount", pa.decimal128(12, 2)),
            ("seen_at", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.string())),
            ("score", pa.float64()),
        ]
    )
    users = ["alice", "bob", "alice", "carol", "dave"]
    for day in ("2026-01-01", "2026-01-02"):
        rows = {
            "user_id": users,
            "amount": [pa.scalar(n, pa.decimal128(12, 2)).as_py() for n in range(len(users))],
            "seen_at": [dt.datetime(2026, 1, 1, n, tzinfo=dt.UTC) for n in range(len(users))],
            "tags": [[day, u] for u in users],
            "score": [n / 3 for n in range(len(users))],
        }
        out = pa.BufferOutputStream()
        pq.write_table(pa.table(rows, schema=schema), out, row_group_size=2)
        s3.put_object(Bucket="tbl", Key=f"clicks/dt={day}/part-0.parquet", Body=out.getvalue().to_pybytes())
    s3.put_object(Bucket="tbl", Key="events/a.jsonl", Body=jsonl(*users))
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://tbl-reports/"\n\n'
        "[purge]\nmax_object_fraction = 1.0\nmax_dataset_fraction = 1.0\n\n"
        '[[datasets]]\nname = "clicks"\nlocation = "s3://tbl/clicks/"\nformat = "parquet"\nid_fields = ["user_id"]\n\n'
        '[[datasets]]\nname = "events"\nlocation = "s3://tbl/events/"\nformat = "jsonl"\nid_fields = ["user_id"]\n'
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    run_reconcile(None, parse_settings(tomllib.loads(toml)))

    def read(stage: str):
        clicks = spark.read.parquet(str(_download(s3, "tbl", "clicks/", tmp_path / stage)))
        events = spark.read.json(str(_download(s3, "tbl", "events/", tmp_path / stage)))
        return clicks, events

    clicks, events = read("before")
    expected = sorted(tuple(r) for r in clicks.collect() if r["user_id"] != "alice")

    assert cli(capsys, "purge", "alice", "--yes", "--config", str(config))[0] == 0
    purged_clicks, purged_events = read("purged")
    assert purged_clicks.schema == clicks.schema
    assert sorted(tuple(r) for r in purged_clicks.collect()) == expected
    null_rows = [r for r in purged_events.collect() if all(v is None for v in r)]
    assert purged_events.count() == events.count() and len(null_rows) == 2  # alice's blanked `{}` lines

    assert cli(capsys, "vacuum", "--yes", "--config", str(config))[0] == 0
    vacuumed_clicks, vacuumed_events = read("vacuumed")
    assert vacuumed_clicks.schema == clicks.schema
    assert sorted(tuple(r) for r in vacuumed_clicks.collect()) == expected
    assert sorted(r["user_id"] for r in vacuumed_events.collect()) == ["bob", "carol", "dave"]
    assert vacuumed_events.schema == events.schema
