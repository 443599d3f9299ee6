"""Column names a catalog lower-cased (issue 31): a Glue table says `userid` where its files say `userId`.
`lakepurge datasets import` writes such tables with column_names = "case-insensitive", and then the indexer, the
lookup, the purge and its verification all find `userId` (Parquet, CSV header, JSON Lines keys), on both backends."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

DATABASE = "crm_db"
SERDES = {
    "parquet": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
    "jsonl": "org.openx.data.jsonserde.JsonSerDe",
    "csv": "org.apache.hadoop.hive.serde2.OpenCSVSerde",
}


def glue_table(name: str, fmt: str) -> dict[str, Any]:
    """A table as a crawler leaves it: the files' camelCase columns lower-cased, the id column named so."""
    parameters = {"lakepurge.id_fields": "userid", "classification": fmt}
    if fmt == "csv":
        parameters["skip.header.line.count"] = "1"
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "StorageDescriptor": {
            "Location": f"s3://lake/{name}/",
            "Columns": [{"Name": "userid", "Type": "string"}, {"Name": "note", "Type": "string"}],
            "SerdeInfo": {"SerializationLibrary": SERDES[fmt], "Parameters": {}},
        },
        "Parameters": parameters,
    }


def parquet(users: list[str]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"userId": users, "note": [f"n{i}" for i in range(len(users))]}), sink)
    return sink.getvalue()


# JSON Lines writers do not agree on a key's case either: every spelling of userid is the id field.
JSONL = (
    b'{"userId":"alice","note":"a"}\n'
    b'{"userId":"bob","note":"b"}\n'
    b'{"USERID":"alice","note":"c"}\n'
    b'{"userid":"bob","note":"d"}\n'
)
CSV = b"UserId,note\nalice,a\nbob,b\nalice,c\n"


@pytest.fixture
def imported_lake(index_backend, tmp_path, capsys, monkeypatch):
    """Three Glue tables over camelCase files, imported by `lakepurge datasets import` into a configuration."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3, glue = aws.client("s3"), aws.client("glue")
    for bucket in ("lake", "reports"):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket="lake", Key="events/a.parquet", Body=parquet(["alice", "bob", "alice"]))
    s3.put_object(Bucket="lake", Key="clicks/a.jsonl", Body=JSONL)
    s3.put_object(Bucket="lake", Key="orders/a.csv", Body=CSV)
    glue.create_database(DatabaseInput={"Name": DATABASE})
    for name, fmt in (("events", "parquet"), ("clicks", "jsonl"), ("orders", "csv")):
        glue.create_table(DatabaseName=DATABASE, TableInput=glue_table(name, fmt))
    entries = tmp_path / "datasets.toml"
    assert main(["datasets", "import", "--glue-database", DATABASE, "--out", str(entries), "--json"]) == 0
    capsys.readouterr()
    config = tmp_path / "lakepurge.toml"
    config.write_text(f'[index]\n{index_backend}\n[reports]\nlocation = "s3://reports/r/"\n\n{entries.read_text()}')
    runtime.reset()
    yield s3, str(config), entries.read_text()
    runtime.reset()


def run(capsys: pytest.CaptureFixture[str], config: str, *args: str) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main([*args, "--config", config, "--json"])
    captured = capsys.readouterr()
    return code, orjson.loads(captured.out), captured.err


def test_given_a_glue_table_of_camelcase_files_when_imported_backfilled_and_purged_then_alice_is_found_and_erased(
    imported_lake, capsys
):
    s3, config, entries = imported_lake
    assert entries.count('column_names = "case-insensitive"') == 3  # the catalog lower-cases: so does the match

    code, backfill, err = run(capsys, config, "index", "backfill", "--engine", "inline")
    assert code == 0 and backfill["unindexable"] == 0 and backfill["records"] == 10, err

    code, found, err = run(capsys, config, "lookup", "alice")
    assert code == 0, err
    assert {loc["s3path"]: loc["lines"] for loc in found["users"]["alice"]} == {
        "s3://lake/events/a.parquet": [0, 2],
        "s3://lake/clicks/a.jsonl": [0, 2],
        "s3://lake/orders/a.csv": [1, 3],
    }

    code, purged, err = run(capsys, config, "purge", "alice", "--yes", "--engine", "inline")
    assert code == 0 and purged["verified"] is True, err

    def body(key: str) -> bytes:
        return s3.get_object(Bucket="lake", Key=key)["Body"].read()

    table = pq.read_table(io.BytesIO(body("events/a.parquet")))
    assert table.column_names == ["userId", "note"] and table.to_pylist() == [{"userId": "bob", "note": "n1"}]
    clicks = body("clicks/a.jsonl").split(b"\n")
    assert clicks[1] == b'{"userId":"bob","note":"b"}' and clicks[3] == b'{"userid":"bob","note":"d"}'
    assert b"alice" not in body("clicks/a.jsonl") and b"alice" not in body("orders/a.csv")
    assert body("orders/a.csv").split(b"\n")[2] == b"bob,b"
    code, verified, err = run(capsys, config, "verify", "alice")
    assert code == 0 and verified["verified"] is True, err
    code, found, _ = run(capsys, config, "verify", "bob")  # it reads the lake's userId: bob, never erased, is found
    assert code == 1 and len(found["remaining"]) == 3
