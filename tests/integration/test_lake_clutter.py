"""Real lakes through the command line: Spark/Hive clutter is skipped, Delta/Iceberg/Hudi tables are refused,
Parquet erases by dropping rows with an index that stays right, and user ids are matched exactly."""

from __future__ import annotations

import io
import tomllib

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.index import open_store
from lakepurge.indexing.indexer import index_object
from lakepurge.tables.detect import TableFormatError
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, purge_report, report_for

pytestmark = pytest.mark.integration

CLUTTER = {
    "_SUCCESS": b"",
    "_committed_1": b'{"added": ["part-00000.parquet"]}',
    "_started_1": b"",
    ".part-00000.parquet.crc": b"crc\x00\x01",
    "folder/": b"",
    "dt=2026-01-01_$folder$": b"",
    "_temporary/0/part-00009.parquet": b"PAR1 half written",
}


def parquet_bytes(users: list[str], row_group_size: int = 4) -> bytes:
    table = pa.table({"user_id": users, "n": list(range(len(users)))})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size)
    return out.getvalue()


def config_toml(index: str, datasets: str) -> str:
    return (
        f'[index]\n{index}\n\n[reports]\nlocation = "s3://lake-reports/"\n\n[purge]\nmax_dataset_fraction = 1.0\n\n'
        + datasets
    )


EVENTS = '[[datasets]]\nname = "events"\nlocation = "s3://lake/events/"\nformat = "parquet"\nid_fields = ["user_id"]\n'
REVIEWS = '[[datasets]]\nname = "reviews"\nlocation = "s3://lake/reviews/"\nid_fields = ["user_id"]\n'


@pytest.fixture
def buckets(aws, monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = aws_client()
    s3.create_bucket(Bucket="lake")
    s3.create_bucket(Bucket="lake-reports")
    return s3


def aws_client():
    return aws.client("s3")


def write_config(tmp_path, text: str) -> str:
    path = tmp_path / "lakepurge.toml"
    path.write_text(text)
    return str(path)


def run_cli(capsys, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    return code, orjson.loads(captured.out) if captured.out.strip() else {}, captured.err


def test_given_a_parquet_prefix_with_spark_clutter_when_backfilled_verified_and_purged_then_all_succeed(
    buckets, pg_dsn, spark, tmp_path, capsys
):
    s3 = buckets
    s3.put_object(Bucket="lake", Key="events/part-00000.parquet", Body=parquet_bytes(["u1", "u2", "u1", "u3"]))
    s3.put_object(Bucket="lake", Key="events/dt=2026-01-01/part-00001.parquet", Body=parquet_bytes(["u2", "u1"]))
    for name, body in CLUTTER.items():
        s3.put_object(Bucket="lake", Key=f"events/{name}", Body=body)
    config = write_config(tmp_path, config_toml(index_toml("postgres", pg_dsn), EVENTS))

    code, backfilled, err = run_cli(capsys, "index", "backfill", "--config", config)
    assert code == 0, err
    assert backfilled["objects"] == 2 and backfilled["failed"] == [] and backfilled["records"] == 6

    code, verified, err = run_cli(capsys, "verify", "u1", "--config", config)
    assert code == 1 and verified["objects_checked"] == 2 and len(verified["remaining"]) == 2, err

    code, purged, err = run_cli(capsys, "purge", "u1", "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True and purged["lines_erased"] == 3, err

    code, verified, err = run_cli(capsys, "verify", "u1", "--config", config)
    assert code == 0 and verified["verified"] is True and verified["remaining"] == [], err
    table = pq.read_table(io.BytesIO(s3.get_object(Bucket="lake", Key="events/part-00000.parquet")["Body"].read()))
    assert table.column("user_id").to_pylist() == ["u2", "u3"]
    for name, body in CLUTTER.items():  # clutter is never read, rewritten or deleted
        assert s3.get_object(Bucket="lake", Key=f"events/{name}")["Body"].read() == body


@pytest.mark.parametrize("name", ["_SUCCESS", "_committed_1", ".part-00000.parquet.crc", "folder/"])
def test_given_a_clutter_key_when_indexing_it_then_one_skipped_line_and_exit_0(buckets, pg_dsn, tmp_path, capsys, name):
    buckets.put_object(Bucket="lake", Key=f"events/{name}", Body=CLUTTER[name])
    config = write_config(tmp_path, config_toml(index_toml("postgres", pg_dsn), EVENTS))
    code, document, err = run_cli(capsys, "index", "object", f"s3://lake/events/{name}", "--config", config)
    assert code == 0
    assert document["action"] == "ignored" and document["reason"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: "), err
    assert "Traceback" not in err


TABLES = {
    "delta": ("events/_delta_log/00000000000000000000.json", "Delta Lake", 'format = "delta"'),
    "iceberg": ("events/metadata/00000-5d1f.metadata.json", "Iceberg", 'format = "iceberg"'),
    "hudi": ("events/.hoodie/hoodie.properties", "Hudi", "cleaner"),
}


@pytest.mark.parametrize("table_format", sorted(TABLES))
@pytest.mark.parametrize(
    "command",
    [
        ("index", "backfill"),
        ("index", "object", "s3://lake/events/part-00000.parquet"),
        ("purge", "u1", "--yes"),
        ("verify", "u1"),
        ("vacuum",),
    ],
    ids=lambda c: "-".join(c[:2]),
)
def test_given_a_table_format_prefix_when_a_lake_command_runs_then_exit_2_naming_the_format(
    buckets, tmp_path, capsys, table_format, command
):
    log_key, label, how = TABLES[table_format]
    buckets.put_object(Bucket="lake", Key=log_key, Body=b"{}")
    buckets.put_object(Bucket="lake", Key="events/part-00000.parquet", Body=parquet_bytes(["u1", "u2"]))
    config = write_config(tmp_path, config_toml(index_toml("dynamodb"), EVENTS))
    before = {o["Key"]: o["ETag"] for o in buckets.list_objects_v2(Bucket="lake")["Contents"]}

    code, _, err = run_cli(capsys, *command, "--config", config)

    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and label in lines[0] and "'events'" in lines[0] and how in lines[0], err
    assert {o["Key"]: o["ETag"] for o in buckets.list_objects_v2(Bucket="lake")["Contents"]} == before


@pytest.mark.parametrize("table_format", sorted(TABLES))
def test_given_a_table_format_prefix_when_the_indexer_sees_its_keys_then_they_are_refused(buckets, table_format):
    log_key, label, _ = TABLES[table_format]
    buckets.put_object(Bucket="lake", Key=log_key, Body=b"{}")
    buckets.put_object(Bucket="lake", Key="events/part-00000.parquet", Body=parquet_bytes(["u1", "u2"]))
    settings = parse_settings(tomllib.loads(config_toml(index_toml("dynamodb"), EVENTS)))
    store = open_store(settings.index)
    for key in (log_key, "events/part-00000.parquet"):
        with pytest.raises(TableFormatError, match=label) as refused:
            index_object(buckets, store, settings, "lake", key)
        assert refused.value.table_format == table_format
    assert store.lookup(["u1", "u2"]) == {}


def test_given_a_table_format_prefix_when_backfilling_then_it_is_refused_before_listing(buckets, spark):
    from lakepurge.indexing.backfill import run_backfill

    buckets.put_object(Bucket="lake", Key=TABLES["delta"][0], Body=b"{}")
    settings = parse_settings(tomllib.loads(config_toml(index_toml("dynamodb"), EVENTS)))
    with pytest.raises(TableFormatError, match="Delta Lake"):
        run_backfill(spark, settings)


def test_given_parquet_objects_when_purged_then_every_remaining_users_index_rows_hold_that_user(buckets, index_backend):
    s3 = buckets
    objects = {
        "events/a.parquet": ["u1", "u2", "u1", "u3", "u4", "u1", "u2", "u5", "u3"],
        "events/dt=2/b.parquet": ["u2", "u1", "u1", "u4", "u5"],
        "events/c.parquet": ["u3", "u4"],
    }
    for key, users in objects.items():
        s3.put_object(Bucket="lake", Key=key, Body=parquet_bytes(users, row_group_size=2))
    settings = parse_settings(tomllib.loads(config_toml(index_backend, EVENTS)))
    assert settings.datasets[0].erase == "drop"
    store = open_store(settings.index)
    for key in objects:
        index_object(s3, store, settings, "lake", key)

    report = report_for(store, settings, ["u1"])
    outcomes = purge_report(store, settings, report, {"u1"})
    assert sum(o.lines_erased for o in outcomes) == 5

    remaining = ["u2", "u3", "u4", "u5"]
    found = store.lookup(remaining)
    assert store.lookup(["u1"]) == {}
    checked = 0
    for user in remaining:
        for location in found[user]:
            key = location.s3path.removeprefix("s3://lake/")
            rows = pq.read_table(io.BytesIO(s3.get_object(Bucket="lake", Key=key)["Body"].read()))
            column = rows.column("user_id").to_pylist()
            assert [column[line] for line in location.lines] == [user] * len(location.lines), (user, key)
            assert len(location.lines) == column.count(user)
            checked += len(location.lines)
    assert checked == sum(len(users) for users in objects.values()) - 5


SPACED = " bob "


@pytest.mark.parametrize("via_file", [False, True], ids=["positional", "users-file"])
def test_given_an_id_with_surrounding_spaces_when_looked_up_and_purged_then_only_it_is_erased(
    buckets, pg_dsn, spark, tmp_path, capsys, via_file
):
    s3 = buckets
    lines = [{"user_id": SPACED, "text": "a"}, {"user_id": "bob", "text": "b"}, {"user_id": "alice", "text": "c"}]
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    s3.put_object(Bucket="lake", Key="reviews/part-0.jsonl", Body=body)
    config = write_config(tmp_path, config_toml(index_toml("postgres", pg_dsn), REVIEWS))
    assert run_cli(capsys, "index", "backfill", "--config", config)[0] == 0
    users_file = tmp_path / "users.txt"
    users_file.write_bytes(SPACED.encode() + b"\r\n\n")
    who = ["--users-file", str(users_file)] if via_file else [SPACED]

    code, found, _ = run_cli(capsys, "lookup", *who, "--config", config)
    assert code == 0 and list(found["users"]) == [SPACED]
    assert found["users"][SPACED] == [
        {"s3path": "s3://lake/reviews/part-0.jsonl", "etag": found["users"][SPACED][0]["etag"], "lines": [0]}
    ]

    code, purged, err = run_cli(capsys, "purge", *who, "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True and purged["lines_erased"] == 1, err

    after = s3.get_object(Bucket="lake", Key="reviews/part-0.jsonl")["Body"].read().split(b"\n")
    assert after[0] == b"{}"
    assert after[1:] == body.split(b"\n")[1:]  # "bob" and "alice" untouched, byte for byte
    _, found, _ = run_cli(capsys, "lookup", SPACED, "bob", "--config", config)
    assert found["users"][SPACED] == [] and found["users"]["bob"][0]["lines"] == [1]
