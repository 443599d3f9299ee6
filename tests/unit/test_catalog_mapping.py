"""How a Glue table becomes a [[datasets]] entry: SerDe/InputFormat -> format, location normalisation, the id
column, and entries that lakepurge.core.config accepts as they are written. No network: tables are plain dicts."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from lakepurge.core.config import parse_settings
from lakepurge.indexing.catalog import Unmappable, describe_table, normalise_location, render_entry, table_format

pytestmark = pytest.mark.unit


def table(
    serde: str | None,
    input_format: str | None = None,
    serde_parameters: dict[str, str] | None = None,
    parameters: dict[str, str] | None = None,
    location: str | None = "s3://lake/t/",
    partition_keys: tuple[str, ...] = (),
    columns: tuple[str, ...] = ("user_id",),
) -> dict[str, Any]:
    storage: dict[str, Any] = {"Columns": [{"Name": c, "Type": "string"} for c in columns]}
    if location is not None:
        storage["Location"] = location
    if input_format is not None:
        storage["InputFormat"] = input_format
    if serde is not None:
        storage["SerdeInfo"] = {"SerializationLibrary": serde, "Parameters": serde_parameters or {}}
    return {
        "Name": "t",
        "StorageDescriptor": storage,
        "PartitionKeys": [{"Name": k, "Type": "string"} for k in partition_keys],
        "Parameters": parameters or {},
    }


TEXT = "org.apache.hadoop.mapred.TextInputFormat"
LAZY = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
HEADER = {"skip.header.line.count": "1"}


@pytest.mark.parametrize(
    ("glue", "expected"),
    [
        (table("org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"), "parquet"),
        (table(None, "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"), "parquet"),
        (table("org.openx.data.jsonserde.JsonSerDe", TEXT), "jsonl"),
        (table("org.apache.hive.hcatalog.data.JsonSerDe"), "jsonl"),
        (table("org.apache.hadoop.hive.serde2.JsonSerDe", TEXT), "jsonl"),
        (table(LAZY, TEXT, {"field.delim": ","}, HEADER), "csv"),
        (table(LAZY, TEXT, {"serialization.format": ","}, HEADER), "csv"),
        (table("org.apache.hadoop.hive.serde2.OpenCSVSerde", TEXT, {"separatorChar": ","}, HEADER), "csv"),
        (table("org.apache.hadoop.hive.serde2.OpenCSVSerde", TEXT, {}, HEADER), "csv"),
        ({**table("x"), "Parameters": {"spark.sql.sources.provider": "delta"}}, "delta"),
        ({**table(None), "Parameters": {"table_type": "DELTA"}}, "delta"),
        ({**table(None), "Parameters": {"classification": "delta"}}, "delta"),
        ({**table("x"), "Parameters": {"table_type": "ICEBERG"}}, "iceberg"),
    ],
)
def test_given_a_supported_serde_when_mapped_then_the_format_is_lakepurges(glue, expected):
    assert table_format(glue) == expected


@pytest.mark.parametrize(
    ("glue", "reason"),
    [
        (table("com.example.MySerDe", TEXT), "unknown SerDe com.example.MySerDe (InputFormat " + TEXT),
        (table("org.apache.hadoop.hive.ql.io.orc.OrcSerde"), "stores ORC"),
        (table(LAZY, TEXT, {"field.delim": "\t"}, HEADER), "field delimiter '\\t': CSV needs ','"),
        (table(LAZY, TEXT, {}, HEADER), "field delimiter '\\x01'"),
        (table(LAZY, TEXT, {"field.delim": ","}), "without a header row"),
        (
            table("org.openx.data.jsonserde.JsonSerDe", "org.apache.hadoop.mapred.SequenceFileInputFormat"),
            "stored as SequenceFileInputFormat, not text",
        ),
        (table(None), "no SerDe"),
        (table("x", "org.apache.hudi.hadoop.HoodieParquetInputFormat"), "a Hudi table"),
    ],
)
def test_given_an_unsupported_serde_when_mapped_then_the_error_names_it_and_why(glue, reason):
    with pytest.raises(Unmappable) as raised:
        table_format(glue)
    assert reason in str(raised.value)


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("s3://lake/t", "s3://lake/t/"),
        ("s3://lake/t/", "s3://lake/t/"),
        ("s3a://lake/a/b", "s3://lake/a/b/"),
        ("S3N://lake/x/", "s3://lake/x/"),
        ("s3://lake", "s3://lake/"),
    ],
)
def test_given_a_glue_location_when_normalised_then_it_is_an_s3_prefix(location, expected):
    assert normalise_location(location) == expected


@pytest.mark.parametrize("location", [None, "", "hdfs://nn/warehouse/t", "/local/path", "s3:///key"])
def test_given_a_location_not_on_s3_when_normalised_then_it_is_unmappable(location):
    with pytest.raises(Unmappable):
        normalise_location(location)


def test_given_an_id_parameter_or_a_default_when_described_then_the_parameter_wins_and_is_checked():
    parquet = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    named = table(parquet, parameters={"lakepurge.id_fields": " buyer.id , user_id"}, columns=("buyer", "user_id"))
    assert describe_table(named, "db", id_fields=["other"]).id_fields == ("buyer.id", "user_id")
    assert describe_table(table(parquet), "db", id_fields=["user_id"]).problems == ()
    missing = describe_table(table(parquet), "db", id_fields=["email"]).problems
    assert missing == ("id column 'email' is not a column of the table (columns: user_id)",)
    partition = describe_table(table(parquet, partition_keys=("user_id",)), "db", id_fields=["user_id"]).problems
    assert "is a partition key" in partition[0]
    assert "no id column" in describe_table(table(parquet), "db").problems[0]


def test_given_described_tables_when_rendered_then_load_settings_accepts_the_entries():
    odd = table(
        "org.openx.data.jsonserde.JsonSerDe",
        location='s3://lake/we"ird\\name/',
        parameters={"compressionType": "gzip"},
        partition_keys=("dt", "hour"),
    )
    parquet = {
        **table("org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe", location="s3://lake/p"),
        "Name": "p",
    }
    entries = [render_entry(describe_table(t, "db", id_fields=["user_id"])) for t in (odd, parquet)]
    text = '[index]\nbackend = "dynamodb"\ntable = "i"\n[reports]\nlocation = "s3://r/"\n' + "\n".join(entries)

    settings = parse_settings(tomllib.loads(text))

    first, second = settings.datasets
    assert (first.location, first.format, first.erase) == ('s3://lake/we"ird\\name/', "jsonl", "blank")
    assert (first.partition_keys, first.catalog_table, first.id_fields) == (("dt", "hour"), "db.t", ("user_id",))
    assert "# compressionType gzip: lakepurge reads objects whose key ends in .gz as gzip" in entries[0]
    assert (second.location, second.format, second.erase, second.partition_keys) == (
        "s3://lake/p/",
        "parquet",
        "drop",
        (),
    )


def test_given_an_unmappable_table_when_rendered_then_it_is_refused_with_every_reason():
    broken = describe_table(table("com.example.MySerDe", location="hdfs://x/y"), "db")
    with pytest.raises(Unmappable) as raised:
        render_entry(broken)
    assert "not on S3" in str(raised.value)
    assert "unknown SerDe com.example.MySerDe" in str(raised.value)
    assert "no id column" in str(raised.value)
