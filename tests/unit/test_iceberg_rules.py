"""Iceberg rules without a lake: lakepurge's Avro reader against manifests pyiceberg writes (every codec it
writes), which delete files hide which rows (sequence numbers, partitions, referenced files), the forms a manifest's
bounds give an id, the configuration's keys, and a SQL catalog's SQLAlchemy URL as a libpq connection string."""

from __future__ import annotations

import pytest

from lakepurge.core.config import ConfigError, parse_settings
from lakepurge.tables.avro import read_container
from lakepurge.tables.iceberg import DATA, EQUALITY_DELETES, POSITION_DELETES, Entry, _DeleteIndex, bound_forms

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("codec", ["null", "deflate", "zstandard"])
def test_given_a_manifest_pyiceberg_wrote_when_read_then_every_entry_and_bound_is_as_written(tmp_path, codec):
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
    )
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.typedef import Record
    from pyiceberg.types import NestedField, StringType

    schema = Schema(NestedField(1, "user_id", StringType()), NestedField(2, "day", StringType()))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day"))
    path = str(tmp_path / "m0.avro")
    files = [
        DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"s3://lake/t/data/day=d{i}/{i}.parquet",
            file_format=FileFormat.PARQUET,
            partition=Record(f"d{i}"),
            record_count=10 + i,
            file_size_in_bytes=1000 + i,
            lower_bounds={1: f"alice{i}@example.co".encode(), 2: f"d{i}".encode()},
            upper_bounds={1: b"zed@example.com", 2: f"d{i}".encode()},
        )
        for i in range(3)
    ]
    avro_codec = {"zstandard": "zstd"}.get(codec, codec)
    with write_manifest(2, spec, schema, PyArrowFileIO().new_output(path), 7, avro_codec) as writer:
        for file in files:
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=file))

    metadata, records = read_container((tmp_path / "m0.avro").read_bytes())

    assert metadata["avro.codec"].decode() == codec
    assert [r["data_file"]["file_path"] for r in records] == [f.file_path for f in files]
    assert [r["data_file"]["record_count"] for r in records] == [10, 11, 12]
    assert [r["data_file"]["partition"] for r in records] == [{"day": "d0"}, {"day": "d1"}, {"day": "d2"}]
    assert records[2]["data_file"]["lower_bounds"] == [
        {"key": 1, "value": b"alice2@example.co"},
        {"key": 2, "value": b"d2"},
    ]
    assert {r["status"] for r in records} == {1} and {r["snapshot_id"] for r in records} == {7}


def entry(content: int, path: str, sequence: int, partition: str | None = "d1", **extra: object) -> Entry:
    parts = (("day", partition),) if partition is not None else ()
    return Entry(content, path, path, "PARQUET", 10, 1, 0, parts, sequence, "m.avro", **extra)


def test_given_delete_files_when_a_data_file_is_read_then_only_the_deletes_iceberg_applies_to_it_hide_its_rows():
    data = entry(DATA, "s3://lake/t/data/day=d1/a.parquet", sequence=5)
    deletes = _DeleteIndex(
        [
            entry(POSITION_DELETES, "s3://lake/t/pos-same-seq.parquet", 5),  # same commit: applies
            entry(POSITION_DELETES, "s3://lake/t/pos-older.parquet", 4),  # older than the data: does not
            entry(POSITION_DELETES, "s3://lake/t/pos-other-day.parquet", 9, "d2"),  # another partition
            entry(POSITION_DELETES, "s3://lake/t/pos-bounded.parquet", 9, file_path_bounds=("s3://z", "s3://zz")),
            entry(EQUALITY_DELETES, "s3://lake/t/eq-same-seq.parquet", 5, equality_ids=(1,)),  # not strictly newer
            entry(EQUALITY_DELETES, "s3://lake/t/eq-newer.parquet", 6, equality_ids=(1,)),
            entry(EQUALITY_DELETES, "s3://lake/t/eq-global.parquet", 7, None, equality_ids=(1,)),  # unpartitioned
            entry(POSITION_DELETES, "s3://lake/t/dv.puffin", 8, referenced_data_file=data.path, content_offset=4),
            entry(POSITION_DELETES, "s3://lake/t/dv-other.puffin", 8, referenced_data_file="s3://x", content_offset=4),
        ]
    )

    found = deletes.applying_to(data)

    assert found is not None
    assert found["positions"] == ["s3://lake/t/pos-same-seq.parquet"]
    assert [e["path"] for e in found["equality"]] == ["s3://lake/t/eq-newer.parquet", "s3://lake/t/eq-global.parquet"]
    assert [v["path"] for v in found["vectors"]] == ["s3://lake/t/dv.puffin"]
    assert _DeleteIndex([]).applying_to(data) is None


def test_given_ids_when_a_manifest_bounds_them_then_long_ones_are_truncated_to_16_characters_both_ways():
    assert bound_forms("alice@example.com") == ("alice@example.co", "alice@example.cp")
    assert bound_forms("bob@example.com") == ()  # 15 characters: bounded whole
    assert bound_forms("ü" * 17) == ("ü" * 16, "ü" * 15 + chr(ord("ü") + 1))  # characters, not bytes


BASE = {"index": {"backend": "dynamodb", "table": "t"}, "reports": {"location": "s3://r/"}}
ICEBERG = {"name": "events", "format": "iceberg", "table": "db.events", "catalog": "lake", "id_fields": ["id"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"catalogs": {}}, "names catalog 'lake', which has no [catalogs.lake] table"),
        ({"dataset": {"catalog": None}}, 'catalog = "NAME"'),
        ({"dataset": {"table": "events"}}, "datasets[0].table: must be namespace.table"),
        ({"catalogs": {"lake": {"type": "sql"}}}, "a sql catalog needs 'uri'"),
        ({"catalogs": {"lake": {"type": "hive"}}}, "catalogs.lake.type: must be 'sql', 'glue' or 'rest'"),
        (
            {"dataset": {"format": "parquet", "location": "s3://lake/p/", "erase": "drop"}},
            "'table' and 'catalog' name an Iceberg table",
        ),
    ],
)
def test_given_an_iceberg_dataset_misconfigured_when_loading_then_the_error_names_the_key(change, message):
    dataset = {k: v for k, v in {**ICEBERG, **change.get("dataset", {})}.items() if v is not None}
    catalogs = change.get("catalogs", {"lake": {"type": "sql", "uri": "sqlite:///c.db", "warehouse": "s3://w/"}})
    with pytest.raises(ConfigError) as raised:
        parse_settings({**BASE, "datasets": [dataset], "catalogs": catalogs})
    assert message in str(raised.value)


def test_given_an_iceberg_dataset_when_loaded_then_it_has_no_location_until_its_catalog_is_asked():
    settings = parse_settings(
        {**BASE, "datasets": [{**ICEBERG, "catalog_table": "db.events"}], "catalogs": {"lake": {"type": "glue"}}}
    )
    [dataset] = settings.datasets
    assert dataset.is_table and dataset.erase == "drop" and dataset.configured_location is None
    assert dataset.catalog_config.type == "glue" and dataset.catalog_table == "db.events"  # two keys, two meanings
    with pytest.raises(ConfigError, match="location: required key missing"):  # the others still need theirs
        parse_settings({**BASE, "datasets": [{"name": "p", "format": "jsonl", "id_fields": ["id"]}]})


def test_given_a_sqlalchemy_postgresql_url_when_the_catalog_is_read_then_psycopg_gets_the_same_connection():
    from urllib.parse import urlsplit

    from lakepurge.core.table_catalogs import _conninfo

    for driver in ("psycopg2", "psycopg"):
        url = urlsplit(f"postgresql+{driver}://ice:p%40ss@db.internal:5433/catalog?sslmode=require")
        found = dict(part.split("=", 1) for part in _conninfo(url).split())
        assert found == {
            "dbname": "catalog",
            "host": "db.internal",
            "port": "5433",
            "user": "ice",
            "password": "p@ss",
            "sslmode": "require",
        }


def test_given_data_files_with_and_without_field_ids_when_matching_an_equality_delete_then_ids_then_names_or_refusal():
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakepurge.tables.base import TableError
    from lakepurge.tables.iceberg import _rows_by_field_ids

    def parquet(table: pa.Table) -> pq.ParquetFile:
        body = io.BytesIO()
        pq.write_table(table, body)
        return pq.ParquetFile(io.BytesIO(body.getvalue()))

    with_ids = pa.schema([pa.field("uid", pa.string(), metadata={b"PARQUET:field_id": b"1"})])
    assert _rows_by_field_ids(parquet(pa.table({"uid": ["a", "b"]}, schema=with_ids)), (1,), {}) == [("a",), ("b",)]
    plain = parquet(pa.table({"user_id": ["c"]}))  # no field ids: the current schema names field 1 user_id
    assert _rows_by_field_ids(plain, (1,), {1: "user_id"}) == [("c",)]
    with pytest.raises(TableError, match="no column for field id 1"):  # never read as "nothing hidden"
        _rows_by_field_ids(plain, (1,), {1: "customer"})
