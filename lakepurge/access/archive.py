"""The access export's archive: a zip built in memory (spooled to disk past IN_MEMORY_BYTES), one file per object in the
original format or converted to JSON Lines or CSV, one per relational table, each file's SHA-256 remembered for the
manifest. No user id appears in a file name.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

import orjson

from lakepurge.access.extract import Extract
from lakepurge.access.sealing import SEGMENT_BYTES
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.s3io import open_body
from lakepurge.index import relational_dsn
from lakepurge.records.limits import IN_MEMORY_BYTES

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Past this size, the archive being built (and its sealed copy) is spooled to disk.


class Archive:
    """The zip being built (spooled to disk past 64 MiB), each file's SHA-256 remembered for the manifest."""

    def __init__(self, created: datetime) -> None:
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES)  # noqa: SIM115 - closed in close()
        self._zip = zipfile.ZipFile(self.file, "w", compression=zipfile.ZIP_DEFLATED)
        self._when = (max(created.year, 1980), created.month, created.day, created.hour, created.minute, created.second)

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, self._when)
        info.compress_type = zipfile.ZIP_DEFLATED
        return info

    def write(self, name: str, chunks: Iterable[bytes]) -> str:
        digest = hashlib.sha256()
        with self._zip.open(self._info(name), "w") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        return digest.hexdigest()

    def finish(self, manifest: dict[str, Any]) -> None:
        self.write("manifest.json", [orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)])
        self._zip.close()
        self.file.seek(0)

    def close(self) -> None:
        self.file.close()


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _jsonl_bytes(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for record in records:
        yield orjson.dumps(record, default=_json_default) + b"\n"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return orjson.dumps(value, default=_json_default).decode()


def _csv_bytes(records: list[dict[str, Any]]) -> Iterator[bytes]:
    """Records as CSV: a header of every top-level field (in order of first appearance), nested values as JSON."""
    columns = list(dict.fromkeys(name for record in records for name in record))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([_csv_cell(record.get(name)) for name in columns])
    yield out.getvalue().encode()


def _csv_record(columns: list[str], row: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = dict(zip(columns, row, strict=False))
    for extra, value in enumerate(row[len(columns) :], len(columns)):
        record[f"_column_{extra}"] = value
    return record


def _parquet_bytes(extract: Extract) -> bytes:
    import pyarrow.parquet as pq

    out = io.BytesIO()
    with pq.ParquetWriter(out, extract.parquet_schema) as writer:
        for table in extract.parquet_tables:
            writer.write_table(table)
    return out.getvalue()


def _records(dataset: DatasetConfig, extract: Extract) -> list[dict[str, Any]]:
    """The extract's records as dicts (for a conversion)."""
    if dataset.format == "jsonl":
        return [orjson.loads(line) for line in extract.jsonl]
    if dataset.format == "csv":
        return [_csv_record(extract.csv_columns, row) for _, row in extract.csv_rows]
    return [row for table in extract.parquet_tables for row in table.to_pylist()]


def _suffix(key: str) -> str:
    """A whole object's file extension (never the rest of its name: keys may hold the user's id)."""
    name = key.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    suffix = name[dot:] if dot > 0 else ""
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def write_object(
    s3: S3Client, archive: Archive, dataset: DatasetConfig, extract: Extract, fmt: str, number: int
) -> tuple[str, str, str, int]:
    """Write one object's records into the archive: (file name, its format, its SHA-256, records)."""
    base = f"datasets/{_safe(dataset.name)}/{number:05d}"
    if dataset.per_object:
        name = base + _suffix(extract.head.key)
        body = open_body(s3, extract.head)
        try:
            digest = archive.write(name, iter(lambda: body.read(SEGMENT_BYTES), b""))
        finally:
            body.close()
        return name, "whole-object", digest, 1
    records = len(extract.lines)
    native = "parquet" if dataset.is_table else dataset.format  # a table's rows, as its data files hold them
    target = native if fmt == "original" else fmt
    chunks: Iterable[bytes]
    if target == native == "jsonl":
        chunks = (line + b"\n" for line in extract.jsonl)
    elif target == native == "csv":
        physical = extract.csv_header + [line for lines, _ in extract.csv_rows for line in lines]
        chunks = (line + b"\n" for line in physical)
    elif target == native == "parquet":
        chunks = [_parquet_bytes(extract)]
    elif target == "jsonl":
        chunks = _jsonl_bytes(_records(dataset, extract))
    else:
        chunks = _csv_bytes(_records(dataset, extract))
    name = f"{base}.{target}"
    return name, target, archive.write(name, chunks), records


def write_revealed(
    archive: Archive, dataset: DatasetConfig, extract: Extract, fmt: str, number: int, reveal: Callable[[list], list]
) -> tuple[str, str, str, int]:
    """Write one object of a crypto-shred dataset: its records decrypted by ``reveal`` (the vault), as JSON Lines (or
    CSV when asked): the original bytes hold ciphertext only."""
    target = "csv" if fmt == "csv" else "jsonl"
    records = reveal(_records(dataset, extract))
    name = f"datasets/{_safe(dataset.name)}/{number:05d}.{target}"
    chunks = _csv_bytes(records) if target == "csv" else _jsonl_bytes(records)
    return name, target, archive.write(name, chunks), len(records)


# -- relational tables ------------------------------------------------------------------------------------------------


def export_relational(settings: Settings, users: list[str], archive: Archive) -> list[dict[str, Any]]:
    """Each [[relational]] table's rows of the users (SELECT *), as JSON Lines; tables without any are left out."""
    if not settings.relational:
        return []
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    entries = []
    for table in settings.relational:
        query = sql.SQL("SELECT * FROM {} WHERE {} = ANY(%s)").format(
            sql.Identifier(*table.table.split(".")), sql.Identifier(table.column)
        )
        with psycopg.connect(relational_dsn(table, deleting=False), autocommit=True, row_factory=dict_row) as conn:
            rows = conn.execute(query, (users,)).fetchall()
        if not rows:
            continue
        name = f"relational/{_safe(table.name)}.jsonl"
        digest = archive.write(name, _jsonl_bytes(rows))
        entries.append({"file": name, "name": table.name, "table": table.table, "rows": len(rows), "sha256": digest})
    return entries
