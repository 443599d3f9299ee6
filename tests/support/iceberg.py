"""Iceberg tables on the moto server, written with pyiceberg as a data platform would write them, plus what pyiceberg
cannot write: a position delete file (carrying the deleted row, as Spark can) and an equality delete file, each in a
delete manifest of its own snapshot. Those files follow the Iceberg spec (Parquet with the reserved field ids,
manifests written with pyiceberg's own Avro writers, the delete manifest through lakepurge's delete-manifest writer);
pyiceberg's scan and DuckDB's iceberg extension read the table back, which checks them independently.

Catalogs: a SQL catalog on the test PostgreSQL (``postgresql+psycopg2://`` or ``postgresql+psycopg://``) or on
SQLite, or the Glue catalog on moto."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakepurge.core import aws
from lakepurge.core.config import CatalogConfig
from lakepurge.core.table_catalogs import pyiceberg_catalog
from lakepurge.tables.storage import duckdb_with
from tests.support import lakes

BUCKET = "lake"
WAREHOUSE = f"s3://{BUCKET}/warehouse"
NAMESPACE = "curated"
TABLE = f"{NAMESPACE}.events"
CATALOG = "lakecat"
ROOT = "warehouse/curated/events/"  # pyiceberg's default location for the table under the warehouse


def catalog_config(kind: str, pg_dsn: str | None = None, sqlite: str | None = None) -> CatalogConfig:
    """kind: "postgres" (psycopg2 URL), "postgres3" (psycopg URL), "sqlite", "glue"."""
    if kind == "glue":
        return CatalogConfig(type="glue")
    if kind == "sqlite":
        return CatalogConfig(type="sql", uri=f"sqlite:///{sqlite}", warehouse=WAREHOUSE)
    assert pg_dsn is not None
    driver = "psycopg2" if kind == "postgres" else "psycopg"
    uri = pg_dsn.replace("postgresql://", f"postgresql+{driver}://")
    return CatalogConfig(type="sql", uri=uri, warehouse=WAREHOUSE)


def catalog_toml(config: CatalogConfig) -> str:
    lines = [f"[catalogs.{CATALOG}]", f'type = "{config.type}"']
    lines += [f'{key} = "{getattr(config, key)}"' for key in ("uri", "warehouse") if getattr(config, key)]
    return "\n".join(lines) + "\n"


def config_toml(index: str, catalog: CatalogConfig, reports_bucket: str = "lake-reports", extra: str = "") -> str:
    return f"""
[index]
{index}

[reports]
location = "s3://{reports_bucket}/"

[[datasets]]
name = "events"
format = "iceberg"
table = "{TABLE}"
catalog = "{CATALOG}"
id_fields = ["user_id"]
{extra}

{catalog_toml(catalog)}
"""


def open_catalog(config: CatalogConfig) -> Any:
    catalog = pyiceberg_catalog(CATALOG, config)
    if config.type == "glue":
        aws.client("glue").create_database(DatabaseInput={"Name": NAMESPACE, "LocationUri": WAREHOUSE})
    else:
        catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog


def rows(users: Iterable[str], day: str, start: int = 0) -> pa.Table:
    users = list(users)
    return pa.table(
        {
            "user_id": pa.array(users, pa.string()),
            "day": pa.array([day] * len(users), pa.string()),
            "amount": pa.array(range(start, start + len(users)), pa.int64()),
            "note": pa.array([f"n{start + i}" for i in range(len(users))], pa.string()),
        }
    )


def create_table(catalog: Any) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "user_id", StringType(), required=False),
        NestedField(2, "day", StringType(), required=False),
        NestedField(3, "amount", LongType(), required=False),
        NestedField(4, "note", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
    return catalog.create_table(TABLE, schema, partition_spec=spec, location=f"s3://{BUCKET}/{ROOT.rstrip('/')}")


@dataclass
class HistoryTable:
    """What the table with a history holds, by user."""

    current: set[str]  # users the current snapshot shows
    old_only: str  # only in a file an overwrite of its partition removed (an older snapshot's, still on storage)
    edge: str  # the lowest id of two files: a manifest's lower bound names its first 16 characters
    masked: str  # a row hidden by a position delete file that carries the row itself
    eq_deleted: str  # hidden by an equality delete file: the delete file holds the id
    returned: str  # hidden by the same equality delete in an older file, shown again by a newer one


def make_history_table(catalog: Any) -> HistoryTable:
    """s1: days d1, d2; s2: append d3; s3, s4: overwrite of d2 (so its old file, holding olga, stays on storage);
    s5: a position delete of mia's row of d1, carrying her row; s6: append d3 (sam, tom); s7: an equality delete of
    eve and sam (d3); s8: append d3 (sam again: a file newer than the delete, whose row it does not hide)."""
    from pyiceberg.expressions import EqualTo

    table = create_table(catalog)
    table.append(
        pa.concat_tables(
            [
                rows(["alice@example.com", "bob@example.com", "mia@example.com"], "d1"),
                rows(["carol@example.com", "olga@example.com"], "d2", 10),
            ]
        )
    )
    table.append(rows(["alice@example.com", "erin@example.com", "eve@example.com", "bob@example.com"], "d3", 20))
    table.overwrite(rows(["carol@example.com", "frank@example.com"], "d2", 30), overwrite_filter=EqualTo("day", "d2"))
    table = catalog.load_table(TABLE)
    add_position_delete(catalog, "d1", "mia@example.com")
    catalog.load_table(TABLE).append(rows(["sam@example.com", "tom@example.com"], "d3", 40))
    add_equality_delete(catalog, "d3", ["eve@example.com", "sam@example.com"])
    catalog.load_table(TABLE).append(rows(["sam@example.com"], "d3", 50))
    current = {"alice@example.com", "bob@example.com", "carol@example.com", "erin@example.com", "frank@example.com"}
    current |= {"tom@example.com", "sam@example.com"}
    return HistoryTable(
        current, "olga@example.com", "alice@example.com", "mia@example.com", "eve@example.com", "sam@example.com"
    )


def _data_entry(table: Any, day: str) -> Any:
    """The first data file of a day (pyiceberg's scan plans the data files only: no delete file is there yet)."""
    for task in table.scan().plan_files():
        if task.file.partition[0] == day:
            return task.file
    raise AssertionError(f"no data file of day {day}")


def _field(name: str, kind: pa.DataType, field_id: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable=nullable, metadata={b"PARQUET:field_id": str(field_id).encode()})


def _put(table: Any, day: str, body: pa.Table) -> tuple[str, int]:
    buffer = io.BytesIO()
    pq.write_table(body, buffer)
    key = f"{ROOT}data/day={day}/lakepurge-test-{uuid.uuid4()}-deletes.parquet"
    aws.client("s3").put_object(Bucket=BUCKET, Key=key, Body=buffer.getvalue())
    return f"s3://{BUCKET}/{key}", len(buffer.getvalue())


def add_position_delete(catalog: Any, day: str, user: str) -> None:
    """Hide a user's row of a day's data file with a position delete file that carries the deleted row."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    table = catalog.load_table(TABLE)
    data = _data_entry(table, day)
    found = pq.read_table(io.BytesIO(_read(data.file_path)))
    position = found.column("user_id").to_pylist().index(user)
    row_type = pa.struct(
        [
            _field("user_id", pa.string(), 1),
            _field("day", pa.string(), 2),
            _field("amount", pa.int64(), 3),
            _field("note", pa.string(), 4),
        ]
    )
    schema = pa.schema(
        [
            _field("file_path", pa.string(), 2147483546, nullable=False),
            _field("pos", pa.int64(), 2147483545, nullable=False),
            _field("row", row_type, 2147483544),
        ]
    )
    deleted = found.slice(position, 1).to_pylist()[0]
    body = pa.table({"file_path": [data.file_path], "pos": [position], "row": [deleted]}, schema=schema)
    path, size = _put(table, day, body)
    delete = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=data.partition,
        record_count=1,
        file_size_in_bytes=size,
    )
    delete.spec_id = data.spec_id
    _commit_deletes(catalog, table, [delete])


def add_equality_delete(catalog: Any, day: str, users: list[str]) -> None:
    """Delete users' rows of a day by an equality delete on user_id: the delete file holds their ids."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    table = catalog.load_table(TABLE)
    data = _data_entry(table, day)
    body = pa.table({"user_id": users}, schema=pa.schema([_field("user_id", pa.string(), 1)]))
    path, size = _put(table, day, body)
    delete = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=data.partition,
        record_count=len(users),
        file_size_in_bytes=size,
        equality_ids=[1],
    )
    delete.spec_id = data.spec_id
    _commit_deletes(catalog, table, [delete])


def _commit_deletes(catalog: Any, table: Any, deletes: list[Any]) -> None:
    """A snapshot that adds delete files: the parent's manifests and a delete manifest of the new ones."""
    import random

    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, write_manifest_list
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

    from lakepurge.purge.iceberg import _delete_manifest_writer

    metadata = table.metadata
    parent = table.current_snapshot()
    snapshot_id = random.getrandbits(63)
    commit = uuid.uuid4()
    provider = table.location_provider()
    manifest_path = provider.new_metadata_location(f"{commit}-m0.avro")
    spec = metadata.specs()[deletes[0].spec_id]
    output = table.io.new_output(manifest_path)
    writer = _delete_manifest_writer()(spec, metadata.schema(), output, snapshot_id, "deflate")
    with writer:
        for delete in deletes:
            entry = ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete)
            writer.add(entry)
    manifests = [*parent.manifests(table.io), writer.to_manifest_file()]
    list_path = provider.new_metadata_location(f"snap-{snapshot_id}-0-{commit}.avro")
    sequence = metadata.next_sequence_number()
    output = table.io.new_output(list_path)
    with write_manifest_list(2, output, snapshot_id, parent.snapshot_id, sequence, "deflate") as listed:
        listed.add_manifests(manifests)
    snapshot = Snapshot.model_validate(
        {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": parent.snapshot_id,
            "sequence-number": sequence,
            "manifest-list": list_path,
            "summary": Summary(operation=Operation.DELETE),
            "schema-id": metadata.current_schema_id,
        }
    )
    updates = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate.model_validate(
            {"ref-name": "main", "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot_id}
        ),
    )
    requirement = AssertRefSnapshotId.model_validate({"ref": "main", "snapshot-id": parent.snapshot_id})
    catalog.commit_table(table, (requirement,), updates)


def _read(path: str) -> bytes:
    bucket, key = path.removeprefix("s3://").split("/", 1)
    return aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()


def current_rows(catalog: Any, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The table's rows as the second reader (DuckDB's iceberg extension) reads them, sorted."""
    pointer = catalog.load_table(TABLE).metadata_location
    at = "" if snapshot_id is None else f", snapshot_from_id={snapshot_id}"
    connection = duckdb_with("iceberg")
    try:
        found = connection.execute(f"SELECT * FROM iceberg_scan('{pointer}'{at})").to_arrow_table()
    finally:
        connection.close()
    return sorted(found.to_pylist(), key=lambda r: (r["day"], r["user_id"], r["amount"]))


def every_version_bytes() -> dict[tuple[str, str], bytes]:
    """Every version of every object under the table's location: (key, version id) -> bytes."""
    return lakes.every_version_bytes(BUCKET, ROOT)


def holding(user: str) -> list[tuple[str, str]]:
    """The object versions under the location that name the user or its first 16 characters (a manifest's lower
    bound; with the 16th incremented, its upper bound): in their raw bytes, in an Avro file's records (read by
    DuckDB's avro extension), or in a Parquet file's values."""
    found = []
    needles = {user, user[:16], user[:15] + chr(ord(user[15]) + 1)} if len(user) > 16 else {user}
    connection = duckdb_with("iceberg")
    try:
        for (key, version), body in every_version_bytes().items():
            text = _avro_text(connection, body) if key.endswith(".avro") else ""
            if any(n.encode() in body or n in text for n in needles) or (
                key.endswith(".parquet") and _parquet_holds(body, needles)
            ):
                found.append((key, version))
    finally:
        connection.close()
    return found


def _avro_text(connection: Any, body: bytes) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".avro") as file:
        file.write(body)
        file.flush()
        return str(connection.execute(f"SELECT * FROM read_avro('{file.name}')").fetchall())


def _parquet_holds(body: bytes, needles: set[str]) -> bool:
    table = pq.read_table(io.BytesIO(body))
    return any(n in str(value) for column in table.columns for value in column.to_pylist() for n in needles)
