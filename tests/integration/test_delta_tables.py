"""Delta Lake tables (format = "delta") through the operator's commands, on the moto server: the index follows the
table, the erasure goes through the table's own commit, its history and log are erased, a second reader (DuckDB's
delta extension) and a scan of every object version verify it."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest

from lakepurge import aws
from lakepurge.cli import main
from tests.support import delta as D

pytestmark = pytest.mark.integration

HASH_KEY = "delta-tests-hash-key-0123456789abcdef"
LIMITS = "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n[[datasets]]"


def cli(capsys, *args: str) -> tuple[int, dict]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def lake(aws, monkeypatch, tmp_path):
    """Empty buckets and the configuration's file; the index backend comes from the test."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = aws_client()
    s3.create_bucket(Bucket=D.BUCKET)
    s3.create_bucket(Bucket="lake-reports")

    def configure(index: str, versioned: bool = False) -> str:
        if versioned:
            s3.put_bucket_versioning(Bucket=D.BUCKET, VersioningConfiguration={"Status": "Enabled"})
        path = tmp_path / "lakepurge.toml"
        path.write_text(D.config_toml(index).replace("[[datasets]]", LIMITS))
        return str(path)

    return configure


def aws_client():
    return aws.client("s3")


def row_of(s3path: str, row: int) -> dict:
    bucket, key = s3path.removeprefix("s3://").split("/", 1)
    body = aws_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body)).slice(row, 1).to_pylist()[0]


@pytest.mark.parametrize(
    ("backend", "versioned"), [("postgres", True), ("dynamodb", False)], ids=["postgres-versioned", "dynamodb-plain"]
)
def test_given_a_table_with_a_history_when_purged_then_no_version_of_any_object_names_the_users_and_other_rows_stay(
    lake, request, capsys, backend, versioned
):
    from tests.support.lakes import index_toml

    index = index_toml(backend, request.getfixturevalue("pg_dsn") if backend == "postgres" else None)
    config = lake(index, versioned)
    history = D.make_history_table()  # olga only in a removed file; dora deleted by deltalake (predicate, CDF)
    erased = [history.edge, history.old_only, history.deleted]
    assert all(D.holding(user) for user in erased)  # the log (stats, predicate), removed files, change data
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    before = D.current_rows()

    code, found = cli(capsys, "lookup", *erased, "--config", config)
    assert code == 0
    live = [e for e in found["users"][history.edge] if "lines" in e]
    assert len(live) == 2  # days d1 and d3, each the data file and the 0-based row in it
    for entry in live:
        assert all(row_of(entry["s3path"], row)["user_id"] == history.edge for row in entry["lines"])
    assert found["users"][history.old_only] and not any("lines" in e for e in found["users"][history.old_only])

    code, purged = cli(capsys, "purge", *erased, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True
    table = purged["tables"][0]
    assert table["status"] == "erased" and table["rows_erased"] == 2 and table["remaining"] == []
    assert D.current_rows() == [r for r in before if r["user_id"] not in erased]
    for user in erased:
        assert D.holding(user) == []  # data, change data, commits, checkpoints: every S3 version
    assert [r for r in D.current_rows() if r["user_id"] == "carol@example.com"]  # in a deleted old file too
    code, after = cli(capsys, "lookup", *erased, "--config", config)
    assert after["users"] == {user: [] for user in erased}
    # Time travel: the erasure's version (checkpointed) reads as the current one does.
    kept = D.open_delta(table["version_committed"]).to_pyarrow_table().to_pylist()
    assert sorted(r["note"] for r in kept) == sorted(r["note"] for r in D.current_rows())
    certificate = json.loads(
        aws_client().get_object(Bucket="lake-reports", Key=purged["certificate"].split("/", 3)[3])["Body"].read()
    )
    assert certificate["tables"][0]["version_committed"] == table["version_committed"]
    assert {d["what"] for d in certificate["tables"][0]["objects_deleted"]} == {"data", "log"}
