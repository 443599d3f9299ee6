"""A Hive metastore's tables as the catalog mapping reads them: the metastore URI, a Thrift Table in the shape of a
Glue table (the same mapping then serves both), and what Hive's DDL leaves that Glue's crawlers do not (a numeric
field delimiter). No network: Thrift structs built in this process."""

from __future__ import annotations

import pytest
from hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

from lakepurge.core.hive_metastore import MetastoreError, glue_table, parse_uris
from lakepurge.indexing.catalog import Unmappable, describe_table, table_format

pytestmark = pytest.mark.unit

LAZY = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
TEXT = "org.apache.hadoop.mapred.TextInputFormat"


def hive_table(serde: str, serde_parameters: dict[str, str], parameters: dict[str, str]) -> Table:
    """A table as `CREATE EXTERNAL TABLE t (user_id string, note string) PARTITIONED BY (dt string) ...` leaves it."""
    return Table(
        tableName="t",
        dbName="db",
        tableType="EXTERNAL_TABLE",
        sd=StorageDescriptor(
            cols=[FieldSchema("user_id", "string", None), FieldSchema("note", "string", None)],
            location="s3a://lake/t",
            inputFormat=TEXT,
            outputFormat="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
            compressed=False,
            serdeInfo=SerDeInfo(serializationLib=serde, parameters=serde_parameters),
        ),
        partitionKeys=[FieldSchema("dt", "string", None)],
        parameters={"EXTERNAL": "TRUE", **parameters},
    )


def test_given_metastore_uris_when_parsed_then_each_is_a_host_and_port_and_anything_else_is_refused_by_name():
    assert parse_uris("thrift://hms-1:9083, thrift://hms-2") == [("hms-1", 9083), ("hms-2", 9083)]
    for wrong in ("hms:9083", "http://hms:9083", "thrift://:9083", "thrift://hms:x", "thrift://hms:9083/db", ""):
        with pytest.raises(MetastoreError) as raised:
            parse_uris(wrong)
        assert "is not a metastore URI: write thrift://host:9083" in str(raised.value)


def test_given_a_thrift_table_when_described_then_it_maps_as_the_same_glue_table_would():
    thrift = hive_table(
        LAZY,
        {"field.delim": ",", "serialization.format": ","},
        {"skip.header.line.count": "1", "lakepurge.id_fields": "user_id"},
    )

    table = describe_table(glue_table(thrift), "db")

    assert (table.location, table.format, table.partition_keys, table.id_fields, table.problems) == (
        "s3://lake/t/",
        "csv",
        ("dt",),
        ("user_id",),
        (),
    )


@pytest.mark.parametrize(
    ("serde_parameters", "delimiter"),
    [
        ({"serialization.format": "1"}, "'\\x01'"),  # Hive's DDL without ROW FORMAT DELIMITED: Ctrl-A
        ({"field.delim": "9", "serialization.format": "9"}, "'\\t'"),
        ({"field.delim": "|"}, "'|'"),
    ],
)
def test_given_a_hive_delimiter_that_is_not_a_comma_when_mapped_then_the_reason_names_the_byte_hive_reads(
    serde_parameters, delimiter
):
    with pytest.raises(Unmappable) as raised:
        table_format(glue_table(hive_table(LAZY, serde_parameters, {"skip.header.line.count": "1"})))
    assert f"LazySimpleSerDe with field delimiter {delimiter}: CSV needs ','" in str(raised.value)


def test_given_a_comma_written_as_its_byte_value_when_mapped_then_the_table_is_csv():
    assert table_format(glue_table(hive_table(LAZY, {"field.delim": "44"}, {"skip.header.line.count": "1"}))) == "csv"
