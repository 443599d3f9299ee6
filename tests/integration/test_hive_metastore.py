"""Datasets from a real Hive metastore (Hive 2.3 from the pyspark wheel's jars, Derby embedded; one start per test
session: tests/support/hive_metastore.py). `lakepurge datasets import --hive-metastore` writes [[datasets]] entries
that the backfill indexes to the generator's ground truth, `datasets check --hive-metastore` reports every kind of
drift, and after a purge the Hive table still reads, through the metastore's partition locations, with its schema
and exactly the other users' rows.

Every test here uses the one metastore: they are kept in this file so that --dist loadfile runs them on one worker.
"""

from __future__ import annotations

import copy
import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import load_settings
from lakepurge.core.hive_metastore import HiveMetastore
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_backfill
from lakepurge.local.samples import SampleLake, generate_lake
from tests.support.hive_metastore import (
    HIVE_JSON_SERDE,
    OPEN_CSV_SERDE,
    ORC_INPUT,
    ORC_SERDE,
    PARQUET_INPUT,
    PARQUET_OUTPUT,
    PARQUET_SERDE,
    LocalMetastore,
    add_partitions,
    create_database,
    external_table,
    storage,
)
from tests.support.lakes import REPORTS, index_toml, partitioned_by_dt
from tests.support.purging import index_keys, purge_report, report_for

pytestmark = pytest.mark.integration

DATABASE = "lake_db"
REVIEWS = {"review_id": "string", "user_id": "string", "rating": "int", "title": "string", "body": "string"}
ORDERS = {
    "order_id": "string",
    "buyer": "struct<id:string,country:string>",
    "gift": "struct<recipients:array<string>,note:string>",
    "total": "double",
}
PROFILES = {"customer_id": "string", "name": "string", "city": "string", "note": "string"}
EVENTS = {"user_id": "string", "event": "string", "value": "double"}
ARROW = {"string": pa.string(), "int": pa.int32(), "double": pa.float64()}


@pytest.fixture
def metastore(hive_metastore_server: LocalMetastore) -> Iterator[LocalMetastore]:
    """The session's metastore with an empty database DATABASE; its tables are dropped after each test (the
    metastore's own drop_database needs a transaction store its jars cannot pool: the database stays)."""
    with hive_metastore_server.client() as client:
        if DATABASE not in client.get_all_databases():
            create_database(client, DATABASE, hive_metastore_server.root)
    yield hive_metastore_server
    with hive_metastore_server.client() as client:
        for table in client.get_all_tables(DATABASE):
            client.drop_table(DATABASE, table, False)


def parquet_table(name: str, location: str, cols: dict[str, str], parameters: dict[str, str] | None = None) -> Any:
    sd = storage(location, PARQUET_SERDE, cols, PARQUET_INPUT, PARQUET_OUTPUT)
    return external_table(DATABASE, name, sd, ("dt",), parameters)


def json_table(
    name: str, location: str, cols: dict[str, str], keys: tuple[str, ...] = ("dt",), **parameters: str
) -> Any:
    return external_table(DATABASE, name, storage(location, HIVE_JSON_SERDE, cols), keys, parameters)


def a_partitioned_lake(metastore: LocalMetastore) -> tuple[SampleLake, set[tuple[str, str, int]]]:
    """The sample lake on moto, and its tables in the metastore as Hive's DDL would leave them: JSON Lines (Hive's
    JSON SerDe, an s3a:// location without its '/'), nested JSON with the id fields named by the table parameter,
    CSV (OpenCSVSerde with a header row), Parquet; reviews and events partitioned by dt."""
    s3 = aws.client("s3")
    for bucket in ("lake", "lake-reports"):
        s3.create_bucket(Bucket=bucket)
    lake = generate_lake(bucket="lake", objects=40, users=15, records_per_object=12)
    truth, partitions = partitioned_by_dt(lake, ("reviews", "orders", "profiles", "events"))
    lake.upload(s3)
    with metastore.client() as client:
        client.create_table(json_table("reviews", "s3a://lake/reviews", REVIEWS))
        add_partitions(client, DATABASE, "reviews", {p: f"s3://lake/reviews/dt={p}/" for p in partitions})
        client.create_table(
            json_table(
                "orders", "s3://lake/orders/", ORDERS, (), **{"lakepurge.id_fields": "buyer.id, gift.recipients"}
            )
        )
        csv = storage("s3://lake/profiles/", OPEN_CSV_SERDE, PROFILES, serde_parameters={"separatorChar": ","})
        profiles = {"skip.header.line.count": "1", "lakepurge.id_fields": "customer_id"}
        client.create_table(external_table(DATABASE, "profiles", csv, (), profiles))
        client.create_table(parquet_table("events", "s3://lake/events/", EVENTS, {"lakepurge.id_fields": "user_id"}))
        add_partitions(client, DATABASE, "events", {p: f"s3://lake/events/dt={p}/" for p in partitions})
    return lake, truth


def import_entries(metastore: LocalMetastore, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, Any]:
    code = main(["datasets", "import", "--hive-metastore", metastore.uri, "--database", DATABASE, *options, "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def configuration(tmp_path: Path, index: str, entries: str) -> Path:
    config = tmp_path / "lakepurge.toml"
    config.write_text(f'[index]\n{index}\n\n[reports]\nlocation = "{REPORTS}"\n\n{entries}')
    return config


def test_given_a_hive_database_when_imported_and_backfilled_then_the_index_equals_the_ground_truth(
    aws, metastore, spark, pg_dsn, tmp_path, capsys
):
    _, truth = a_partitioned_lake(metastore)
    with metastore.client() as client:
        # partitions outside the table's prefix: their objects would never be listed
        client.create_table(json_table("archived", "s3://lake/archived/", REVIEWS))
        add_partitions(
            client, DATABASE, "archived", {"2025": "s3://lake/archived/dt=2025/", "2024": "s3://archive/2024/"}
        )
        orc = storage(
            "s3://lake/legacy/", ORC_SERDE, EVENTS, ORC_INPUT, "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat"
        )
        client.create_table(external_table(DATABASE, "legacy", orc))
    out = tmp_path / "datasets.toml"

    code, document = import_entries(metastore, capsys, "--id-column", "user_id", "--out", str(out))

    assert code == 0
    assert [
        (i["table"], i["format"], i["location"], i["id_fields"], i["partition_keys"]) for i in document["imported"]
    ] == [
        ("events", "parquet", "s3://lake/events/", ["user_id"], ["dt"]),
        ("orders", "jsonl", "s3://lake/orders/", ["buyer.id", "gift.recipients"], []),
        ("profiles", "csv", "s3://lake/profiles/", ["customer_id"], []),
        ("reviews", "jsonl", "s3://lake/reviews/", ["user_id"], ["dt"]),
    ]
    reasons = {n["table"]: n["reason"] for n in document["not_imported"]}
    assert reasons == {
        "archived": "1 partition(s) stored outside the table's location s3://lake/archived/ (in bucket archive):"
        " lakepurge lists one prefix per dataset and would miss their objects",
        "legacy": f"SerDe {ORC_SERDE} stores ORC: lakepurge reads Parquet, JSON Lines and CSV (with a header row)",
    }
    written = out.read_text()
    assert written.startswith(f"# [[datasets]] imported from the database {DATABASE} of the Hive metastore at")
    assert "# from Hive metastore table lake_db.events (ParquetHiveSerDe)" in written
    settings = load_settings(configuration(tmp_path, index_toml("postgres", pg_dsn), written))

    result = run_backfill(spark, settings)

    assert (result.failed, result.unindexable) == ((), 0)
    store = open_store(settings.index)
    try:
        assert store.dump() == truth
    finally:
        store.close()


def test_given_an_imported_configuration_when_the_metastore_drifts_then_check_reports_every_kind_and_exits_1(
    aws, metastore, tmp_path, capsys
):
    with metastore.client() as client:
        client.create_table(parquet_table("clicks", "s3://lake/clicks/", EVENTS))
        for name in ("orders", "sessions", "visits"):
            client.create_table(json_table(name, f"s3://lake/{name}/", EVENTS | {"visitor_id": "string"}))
    entries = tmp_path / "datasets.toml"
    assert import_entries(metastore, capsys, "--id-column", "user_id", "--out", str(entries))[0] == 0
    by_hand = 'name = "avatars"\nlocation = "s3://lake/avatars/"\nid_tag = "owner"\nerase = "delete-object"\n'
    config = configuration(tmp_path, index_toml("dynamodb"), f"[[datasets]]\n{by_hand}\n{entries.read_text()}")

    def check() -> tuple[int, dict[str, Any]]:
        argv = ["datasets", "check", "--hive-metastore", metastore.uri, "--database", DATABASE, "--config", str(config)]
        code = main([*argv, "--json"])
        return code, orjson.loads(capsys.readouterr().out)

    code, document = check()

    assert (code, document["in_sync"], document["drift"]) == (0, True, [])
    assert sorted(document["checked"]) == ["clicks", "orders", "sessions", "visits"]
    assert document["not_from_catalog"] == ["avatars"]

    with metastore.client() as client:
        client.create_table(parquet_table("payments", "s3://lake/payments/", EVENTS))
        clicks = client.get_table(DATABASE, "clicks")
        clicks.sd.location = "s3://lake-v2/clicks"
        client.alter_table(DATABASE, "clicks", clicks)
        add_partitions(client, DATABASE, "clicks", {"u0000042": "s3://archive/u0000042/"})
        orders = client.get_table(DATABASE, "orders")
        orders.sd = storage(orders.sd.location, PARQUET_SERDE, EVENTS, PARQUET_INPUT, PARQUET_OUTPUT)
        client.alter_table(DATABASE, "orders", orders)
        client.drop_table(DATABASE, "sessions", False)
        # the metastore refuses to change a table's partition keys: the table is created again
        visits = copy.deepcopy(client.get_table(DATABASE, "visits"))
        client.drop_table(DATABASE, "visits", False)
        client.create_table(
            json_table(
                "visits",
                "s3://lake/visits/",
                EVENTS | {"visitor_id": "string"},
                ("dt", "hour"),
                **{"lakepurge.id_fields": "visitor_id"},
            )
        )
        assert visits.partitionKeys != client.get_table(DATABASE, "visits").partitionKeys

    code, document = check()

    assert (code, document["in_sync"]) == (1, False)
    assert [(d["kind"], d["table"]) for d in document["drift"]] == [
        ("new_table", "payments"),
        ("moved", "clicks"),
        ("format_changed", "orders"),
        ("removed", "sessions"),
        ("partition_keys_changed", "visits"),
        ("id_fields_changed", "visits"),
        ("partitions_outside", "clicks"),
    ]
    details = {d["kind"]: d["detail"] for d in document["drift"]}
    assert details["moved"] == "configured at s3://lake/clicks/, the catalog says s3://lake-v2/clicks/"
    assert details["format_changed"] == "configured jsonl, the catalog says parquet (ParquetHiveSerDe)"
    assert details["partition_keys_changed"] == "configured ['dt'], the catalog says ['dt', 'hour']"
    assert details["id_fields_changed"] == (
        "configured ['user_id'], table parameter lakepurge.id_fields says ['visitor_id']"
    )
    assert details["partitions_outside"].startswith("1 partition(s) outside s3://lake/clicks/ (in bucket archive)")
    assert "u0000042" not in str(document)  # a partition value may be a user id: never repeated


def hive_schema(table: dict[str, Any]) -> pa.Schema:
    """The schema a Hive reader gives the table: its columns, then its partition keys (strings)."""
    columns = [(c["Name"], ARROW[c["Type"]]) for c in table["StorageDescriptor"]["Columns"]]
    return pa.schema(columns + [(k["Name"], pa.string()) for k in table["PartitionKeys"]])


def read_through_metastore(uri: str, table_name: str) -> pa.Table:
    """The table as a Hive reader sees it: the objects under each partition location the metastore states, read
    as the metastore's columns (a Parquet file's own columns must be those, types included; a JSON line must parse),
    with the partition's value as its column."""
    s3 = aws.client("s3")
    with HiveMetastore(uri) as hms:
        [table] = [t for t in hms.tables(DATABASE) if t["Name"] == table_name]
        partitions = list(hms.partitions(DATABASE, table_name))
    schema = hive_schema(table)
    columns = pa.schema([schema.field(c["Name"]) for c in table["StorageDescriptor"]["Columns"]])
    parquet = table["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    parts = []
    for partition in partitions:
        bucket, _, prefix = partition["StorageDescriptor"]["Location"].removeprefix("s3://").partition("/")
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix.rstrip("/") + "/").get("Contents", [])
        for key in sorted(o["Key"] for o in listed):
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            if parquet:
                part = pq.read_table(io.BytesIO(body))
                assert part.schema.remove_metadata() == columns, key
            else:
                body = gzip.decompress(body) if key.endswith(".gz") else body
                options = pa_json.ParseOptions(explicit_schema=columns, unexpected_field_behavior="ignore")
                part = pa_json.read_json(io.BytesIO(body), parse_options=options)
            for value in partition["Values"]:
                part = part.append_column(
                    pa.field(schema.names[part.num_columns], pa.string()),
                    pa.array([value] * part.num_rows, pa.string()),
                )
            parts.append(part)
    result = pa.concat_tables(parts)
    assert result.schema == schema
    return result


def test_given_a_purge_when_the_hive_table_is_read_through_the_metastore_then_its_schema_and_the_other_rows_remain(
    aws, metastore, pg_dsn, tmp_path, capsys
):
    lake, _ = a_partitioned_lake(metastore)
    code, document = import_entries(
        metastore, capsys, "--id-column", "user_id", "--table", "events", "--table", "reviews"
    )
    assert code == 0
    settings = load_settings(configuration(tmp_path, index_toml("postgres", pg_dsn), document["toml"]))
    index_keys(settings, "lake", [o.key for o in lake.objects if o.key.startswith(("events/", "reviews/"))])
    before = {name: read_through_metastore(metastore.uri, name).to_pylist() for name in ("events", "reviews")}
    erased = sorted({user for user, path, _ in lake.truth if path.startswith("s3://lake/events/dt=2026-01/")})[:3]
    store = open_store(settings.index)
    try:
        outcomes = purge_report(store, settings, report_for(store, settings, erased), set(erased))
    finally:
        store.close()
    assert outcomes and all(o.status == "erased" for o in outcomes)

    after = {name: read_through_metastore(metastore.uri, name).to_pylist() for name in ("events", "reviews")}

    def records(table: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(tuple(row.values()) for row in table if row["user_id"] is not None)

    for name in ("events", "reviews"):
        others = [row for row in before[name] if row["user_id"] not in erased]
        assert len(others) < len(before[name])
        assert records(after[name]) == records(others)
    # Parquet: the rows are dropped. JSON Lines: a blanked line (`{}`) reads as a row of NULLs (the vacuum removes
    # it later), every other line as before.
    assert len(after["events"]) == len([row for row in before["events"] if row["user_id"] not in erased])
    placeholders = [row for row in after["reviews"] if all(v is None for k, v in row.items() if k != "dt")]
    assert len(placeholders) == len([row for row in before["reviews"] if row["user_id"] in erased])
    assert len(after["reviews"]) == len(before["reviews"])


def test_given_table_formats_views_and_wrong_arguments_when_importing_then_each_is_mapped_or_refused_with_a_reason(
    aws, metastore, tmp_path, capsys
):
    with metastore.client() as client:
        # Delta as Spark registers it: a placeholder location, the table's root in the SerDe's path parameter
        delta = storage(
            (metastore.root / "deltas-__PLACEHOLDER__").as_uri(),
            "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
            {"col": "array<string>"},
            "org.apache.hadoop.mapred.SequenceFileInputFormat",
            "org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
            {"path": "s3a://lake/deltas", "serialization.format": "1"},
        )
        client.create_table(
            external_table(
                DATABASE, "deltas", delta, (), {"spark.sql.sources.provider": "delta", "lakepurge.id_fields": "user_id"}
            )
        )
        iceberg = {"table_type": "ICEBERG", "metadata_location": "s3://lake/ice/metadata/00001-a.metadata.json"}
        client.create_table(external_table(DATABASE, "ice", storage("s3://lake/ice/", "x", EVENTS), (), iceberg))
        view = storage("", "", EVENTS)
        view.location = None
        client.create_table(external_table(DATABASE, "recent", view, (), {}, table_type="VIRTUAL_VIEW"))

    code, document = import_entries(metastore, capsys, "--id-column", "user_id")

    assert code == 0
    assert [(i["table"], i["format"], i["location"]) for i in document["imported"]] == [
        ("deltas", "delta", "s3://lake/deltas/")
    ]
    reasons = {n["table"]: n["reason"] for n in document["not_imported"]}
    assert reasons["ice"].startswith("an Iceberg table in a Hive metastore: lakepurge reaches Iceberg tables through")
    assert reasons["recent"].startswith("a view: it holds no objects of its own")

    code, document = import_entries(metastore, capsys, "--table", "nosuch")
    assert code == 1
    assert document["not_imported"] == [
        {
            "table": "nosuch",
            "reason": f"no table 'nosuch' in the database {DATABASE} of the Hive metastore at {metastore.uri}",
        }
    ]
    refusals = {
        "no_such_database": ["--hive-metastore", metastore.uri, "--database", "nodb"],
        "usage": ["--hive-metastore", metastore.uri],
        "metastore_unreachable": ["--hive-metastore", "thrift://127.0.0.1:9", "--database", DATABASE],
        "bad_uri": ["--hive-metastore", f"127.0.0.1:{metastore.port}", "--database", DATABASE],
    }
    for expected, arguments in refusals.items():
        code = main(["datasets", "import", *arguments, "--json"])
        assert (code, orjson.loads(capsys.readouterr().out)["code"]) == (2, expected)
