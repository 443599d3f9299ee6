"""Datasets from the Glue Data Catalog (moto's Glue on the shared moto server): `lakepurge datasets import` writes
[[datasets]] entries that the backfill indexes to the generator's ground truth, and `lakepurge datasets check`
reports every kind of drift between a configuration and the catalog, and nothing when they agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import load_settings
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_backfill
from lakepurge.local.samples import SampleLake, generate_lake
from tests.support.lakes import REPORTS, index_toml, partitioned_by_dt

pytestmark = pytest.mark.integration

PARQUET = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
OPENX_JSON = "org.openx.data.jsonserde.JsonSerDe"
ORC = "org.apache.hadoop.hive.ql.io.orc.OrcSerde"
DATABASE = "lake_db"


def glue_table(
    name: str,
    serde: str,
    location: str,
    partition_keys: tuple[str, ...] = (),
    parameters: dict[str, str] | None = None,
    columns: tuple[str, ...] = ("user_id", "payload"),
) -> dict[str, Any]:
    """A TableInput as a crawler or a CREATE EXTERNAL TABLE would leave it."""
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "StorageDescriptor": {
            "Location": location,
            "Columns": [{"Name": c, "Type": "string"} for c in columns],
            "SerdeInfo": {"SerializationLibrary": serde, "Parameters": {}},
        },
        "PartitionKeys": [{"Name": k, "Type": "string"} for k in partition_keys],
        "Parameters": parameters or {},
    }


def register_partitions(glue: Any, table: str, location: str, values: list[str]) -> None:
    glue.batch_create_partition(
        DatabaseName=DATABASE,
        TableName=table,
        PartitionInputList=[
            {"Values": [value], "StorageDescriptor": {"Location": f"{location}dt={value}/"}} for value in values
        ],
    )


def partitioned_lake() -> tuple[SampleLake, set[tuple[str, str, int]], list[str]]:
    """The sample generator's reviews (JSON Lines, some gzip, under dt=... partitions) and events (Parquet, moved
    under dt=... partitions here), with the ground truth of exactly those objects; the partition values."""
    lake = generate_lake(bucket="lake", objects=40, users=15, records_per_object=12)
    truth, partitions = partitioned_by_dt(lake, ("reviews", "events"))
    return lake, truth, partitions


def test_given_a_glue_database_when_imported_and_backfilled_then_the_index_equals_the_ground_truth(
    aws, spark, pg_dsn, tmp_path, capsys
):
    s3, glue = aws_clients()
    s3.create_bucket(Bucket="lake")
    s3.create_bucket(Bucket="lake-reports")
    lake, truth, partitions = partitioned_lake()
    lake.upload(s3)
    assert any(k.startswith("events/dt=") and k.endswith(".parquet") for k in (o.key for o in lake.objects))
    assert any(k.endswith(".jsonl.gz") for k in (o.key for o in lake.objects))  # gzip found by the key's suffix
    glue.create_database(DatabaseInput={"Name": DATABASE})
    # Parquet, id column named by the table parameter; the location as Glue often holds it (no trailing '/').
    glue.create_table(
        DatabaseName=DATABASE,
        TableInput=glue_table(
            "events",
            PARQUET,
            "s3://lake/events",
            ("dt",),
            {"lakepurge.id_fields": "user_id", "classification": "parquet"},
        ),
    )
    register_partitions(glue, "events", "s3://lake/events/", partitions)
    # JSON Lines, id column from --id-column, an s3a:// location.
    glue.create_table(
        DatabaseName=DATABASE, TableInput=glue_table("reviews", OPENX_JSON, "s3a://lake/reviews/", ("dt",))
    )
    register_partitions(glue, "reviews", "s3://lake/reviews/", partitions)
    glue.create_table(DatabaseName=DATABASE, TableInput=glue_table("legacy", ORC, "s3://lake/legacy/"))
    out = tmp_path / "datasets.toml"

    code = main(
        ["datasets", "import", "--glue-database", DATABASE, "--id-column", "user_id", "--out", str(out), "--json"]
    )

    document = orjson.loads(capsys.readouterr().out)
    assert code == 0
    assert [(i["table"], i["format"], i["location"], i["partition_keys"]) for i in document["imported"]] == [
        ("events", "parquet", "s3://lake/events/", ["dt"]),
        ("reviews", "jsonl", "s3://lake/reviews/", ["dt"]),
    ]
    [(table, reason)] = [(n["table"], n["reason"]) for n in document["not_imported"]]
    assert table == "legacy" and "OrcSerde" in reason and "ORC" in reason
    config = tmp_path / "lakepurge.toml"
    config.write_text(
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "{REPORTS}"\n\n' + out.read_text()
    )
    settings = load_settings(config)

    result = run_backfill(spark, settings)

    assert result.failed == ()
    assert result.unindexable == 0
    store = open_store(settings.index)
    try:
        assert store.dump() == truth
    finally:
        store.close()


def aws_clients() -> tuple[Any, Any]:
    return aws.client("s3"), aws.client("glue")


def _check(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["datasets", "check", "--glue-database", DATABASE, "--config", str(config), "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_given_an_imported_configuration_when_the_catalog_drifts_then_check_reports_each_kind_and_exits_1(
    aws, tmp_path, capsys
):
    _, glue = aws_clients()
    glue.create_database(DatabaseInput={"Name": DATABASE})
    for name, serde in (("clicks", PARQUET), ("orders", OPENX_JSON), ("sessions", OPENX_JSON)):
        glue.create_table(DatabaseName=DATABASE, TableInput=glue_table(name, serde, f"s3://lake/{name}/", ("dt",)))
    entries = tmp_path / "datasets.toml"
    assert (
        main(["datasets", "import", "--glue-database", DATABASE, "--id-column", "user_id", "--out", str(entries)]) == 0
    )
    config = tmp_path / "lakepurge.toml"
    by_hand = (
        '[[datasets]]\nname = "avatars"\nlocation = "s3://lake/avatars/"\nid_tag = "owner"\nerase = "delete-object"\n'
    )
    config.write_text(
        f'[index]\n{index_toml("dynamodb")}\n\n[reports]\nlocation = "{REPORTS}"\n\n{by_hand}\n{entries.read_text()}'
    )
    capsys.readouterr()

    code, document = _check(config, capsys)

    assert (code, document["in_sync"], document["drift"]) == (0, True, [])
    assert sorted(document["checked"]) == ["clicks", "orders", "sessions"]
    assert document["not_from_catalog"] == ["avatars"]  # configured by hand, not a table: left alone

    glue.create_table(DatabaseName=DATABASE, TableInput=glue_table("payments", PARQUET, "s3://lake/payments/"))
    glue.update_table(DatabaseName=DATABASE, TableInput=glue_table("clicks", PARQUET, "s3://lake-v2/clicks/", ("dt",)))
    glue.update_table(DatabaseName=DATABASE, TableInput=glue_table("orders", PARQUET, "s3://lake/orders/", ("dt",)))
    glue.delete_table(DatabaseName=DATABASE, Name="sessions")
    glue.batch_create_partition(  # registered elsewhere than its table's prefix: never listed, never indexed
        DatabaseName=DATABASE,
        TableName="clicks",
        PartitionInputList=[{"Values": ["u0000042"], "StorageDescriptor": {"Location": "s3://archive/u0000042/"}}],
    )

    code, document = _check(config, capsys)

    assert code == 1
    assert document["in_sync"] is False
    assert [(d["kind"], d["table"]) for d in document["drift"]] == [
        ("new_table", "payments"),
        ("moved", "clicks"),
        ("format_changed", "orders"),
        ("removed", "sessions"),
        ("partitions_outside", "clicks"),
    ]
    details = {d["kind"]: d["detail"] for d in document["drift"]}
    assert "s3://lake/clicks/" in details["moved"] and "s3://lake-v2/clicks/" in details["moved"]
    assert "configured jsonl, the catalog says parquet (ParquetHiveSerDe)" in details["format_changed"]
    assert details["partitions_outside"].startswith("1 partition(s) outside s3://lake/clicks/ (in bucket archive)")
    assert "u0000042" not in str(document)  # a partition value may be a user id: never repeated


def test_given_an_existing_out_file_or_nothing_importable_when_importing_then_it_is_refused_with_the_reason(
    aws, tmp_path, capsys
):
    _, glue = aws_clients()
    glue.create_database(DatabaseInput={"Name": DATABASE})
    glue.create_table(DatabaseName=DATABASE, TableInput=glue_table("raw", "com.example.MySerDe", "s3://lake/raw/"))
    glue.create_table(DatabaseName=DATABASE, TableInput=glue_table("noid", OPENX_JSON, "s3://lake/noid/"))
    out = tmp_path / "datasets.toml"
    out.write_text("# mine\n")

    refused = main(["datasets", "import", "--glue-database", DATABASE, "--out", str(out), "--json"])
    assert refused == 2
    assert orjson.loads(capsys.readouterr().out)["code"] == "file_exists"
    assert out.read_text() == "# mine\n"

    code = main(["datasets", "import", "--glue-database", DATABASE, "--table", "raw", "--table", "noid", "--json"])

    document = orjson.loads(capsys.readouterr().out)
    assert code == 1
    assert document["imported"] == [] and document["toml"] == ""
    reasons = {n["table"]: n["reason"] for n in document["not_imported"]}
    assert reasons["raw"].startswith("unknown SerDe com.example.MySerDe")
    assert reasons["noid"].startswith("no id column: set the table parameter lakepurge.id_fields")
