"""The access export's reading of one object: the users' records of its current version, each checked to be theirs
by the purge's own ownership check, read only as far as the last wanted line (JSON Lines, CSV) or only the row
groups holding wanted rows (Parquet); and the table datasets followed to their newest version first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.s3io import ObjectChanged, ObjectHead, head_object, open_body, open_seekable
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import WHOLE_OBJECT, IndexStore
from lakepurge.purge.engine import find_user_lines
from lakepurge.purge.ownership import Ownership, owned_rows
from lakepurge.purge.rewrite import without_views
from lakepurge.records.csv_records import csv_records
from lakepurge.records.ids import parse_paths
from lakepurge.records.lines import iter_line_batches, open_decompressed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

TABLE_VERSION = "#version"  # where follow_tables puts a table's version among its files


@dataclass
class Extract:
    """The users' records of one object version, ready to be written."""

    head: ObjectHead
    stale: bool
    lines: list[int] = field(default_factory=list)  # exported line numbers ([WHOLE_OBJECT] for a whole object)
    # jsonl: the lines; csv: the header's physical lines then each record's (physical lines, fields)
    jsonl: list[bytes] = field(default_factory=list)
    csv_header: list[bytes] = field(default_factory=list)
    csv_columns: list[str] = field(default_factory=list)
    csv_rows: list[tuple[list[bytes], list[str]]] = field(default_factory=list)
    parquet_schema: Any = None
    parquet_tables: list[Any] = field(default_factory=list)


def read_users_records(
    s3: S3Client,
    settings: Settings,
    dataset: DatasetConfig,
    s3path: str,
    indexed_etag: str,
    indexed_lines: Iterable[int],
    users: frozenset[str],
    attempts: int = 3,
) -> Extract | None:
    """The users' records of one object (see the module docstring), or None when the object is gone or holds none
    of them now. A whole object (one-user-per-object dataset) is only checked here, and read when written."""
    uri = S3Uri.parse(s3path)
    for _ in range(attempts):
        head = head_object(s3, uri.bucket, uri.key)
        if head is None:
            return None
        stale = head.etag != indexed_etag
        if stale and dataset.is_table:
            return None  # a table's data file never changes: another one under its name left the table
        try:
            if dataset.per_object or stale:
                _, lines = find_user_lines(s3, settings, dataset, head, users)  # the owner / the lines, checked now
            else:
                lines = sorted(set(indexed_lines))
            if not lines:
                return None
            extract = Extract(head, stale)
            if dataset.per_object:
                extract.lines = [WHOLE_OBJECT]
            elif dataset.format == "parquet" or dataset.is_table:
                _read_parquet(s3, dataset, extract, lines, users)
            elif dataset.format == "csv":
                _read_csv(s3, settings, dataset, extract, lines, users)
            else:
                _read_jsonl(s3, settings, dataset, extract, lines, users)
            return extract if extract.lines else None
        except ObjectChanged:
            log.info(
                "object replaced while being exported; reading it again", extra={"object": object_ref(s3path, dataset)}
            )
    raise ObjectChanged(f"{object_ref(s3path, dataset)} kept changing while being exported ({attempts} attempts)")


def _read_jsonl(
    s3: S3Client, settings: Settings, dataset: DatasetConfig, extract: Extract, lines: list[int], users: frozenset[str]
) -> None:
    wanted, last = set(lines), max(lines)
    owner = Ownership(dataset, users, id_rules(dataset))
    with _decompressed(s3, settings, extract.head) as source:
        for first, batch in iter_line_batches(source, settings.indexing.max_record_bytes):
            for number, line in enumerate(batch, first):
                if number in wanted and line is not None and owner.json_line(number, line):
                    extract.jsonl.append(line)
            if first + len(batch) > last:
                break  # past the last wanted line: the rest of the object is not read
    extract.lines = owner.erased


def _read_csv(
    s3: S3Client, settings: Settings, dataset: DatasetConfig, extract: Extract, lines: list[int], users: frozenset[str]
) -> None:
    wanted, last = set(lines), max(lines)
    owner = Ownership(dataset, users, id_rules(dataset))
    with _decompressed(s3, settings, extract.head) as source:
        header = True
        for record in csv_records(source, settings.indexing.max_record_bytes, rows_for=wanted | {0}):
            if header:  # as the purge reads it: the first record is the header
                owner.csv_header(record.row or [])
                extract.csv_header = [line for line in record.lines if line is not None]
                extract.csv_columns = list(record.row or [])
                header = False
            elif record.line in wanted and record.row is not None and owner.csv_record(record.line, record.row):
                extract.csv_rows.append(([line or b"" for line in record.lines], record.row))
            if record.line >= last:
                break
    extract.lines = owner.erased


@contextmanager
def _decompressed(s3: S3Client, settings: Settings, head: ObjectHead) -> Iterator[IO[bytes]]:
    """The version's body, decompressed as the indexer reads it (with its inflation limits), closed after."""
    body = open_body(s3, head)
    try:
        yield open_decompressed(body, head.key, settings.indexing.inflation)
    finally:
        body.close()


def _read_parquet(
    s3: S3Client, dataset: DatasetConfig, extract: Extract, lines: list[int], users: frozenset[str]
) -> None:
    import pyarrow.parquet as pq

    assert dataset.id_fields is not None
    paths = parse_paths(dataset.id_fields)
    source = pq.ParquetFile(open_seekable(s3, extract.head))  # the footer, then only the groups read below
    extract.parquet_schema = source.schema_arrow
    plain = without_views(source.schema_arrow)  # Arrow takes no rows of view types: their plain forms are taken
    wanted = sorted(set(lines))
    start = 0
    for index in range(source.metadata.num_row_groups):
        rows = source.metadata.row_group(index).num_rows
        inside = [line - start for line in wanted if start <= line < start + rows]
        if inside:
            table = source.read_row_group(index)
            table = table.cast(plain) if plain is not None else table
            owned = owned_rows(table, paths, users, id_rules(dataset))
            keep = [row for row in inside if owned[row]]
            if keep:
                taken = table.take(keep)
                extract.parquet_tables.append(taken.cast(source.schema_arrow) if plain is not None else taken)
                extract.lines.extend(start + row for row in keep)
        start += rows


def follow_tables(s3: S3Client, store: IndexStore, settings: Settings) -> dict[str, dict[str, Any]]:
    """Each table dataset followed to its newest version: its live files (path -> the id fields as its data files
    name them, and the partition values its log gives them) and the version (under TABLE_VERSION). Raises TableError
    for a table that cannot be followed."""
    from lakepurge.tables.index import follow_table, open_table

    readers: dict[str, dict[str, Any]] = {}
    for dataset in (d for d in settings.datasets if d.is_table):
        follow_table(s3, store, settings, dataset)
        table = open_table(s3, dataset)
        state = table.state()
        fields = table.physical_id_fields()
        # An Iceberg data file holds its partition's source columns itself (its partition values are transforms).
        files = {
            path: (fields, dict(file.partition) if dataset.format == "delta" else {})
            for path, file in state.files.items()
        }
        readers[dataset.name] = files | {TABLE_VERSION: state.version}
    return readers


def with_partition(extract: Extract, partition: dict[str, Any]) -> None:
    """A table's partition values are in its log, not its data files: each exported row gets them back (as the
    log writes them, strings)."""
    import pyarrow as pa

    for name, value in partition.items():
        if name in extract.parquet_schema.names:
            continue
        extract.parquet_schema = extract.parquet_schema.append(pa.field(name, pa.string()))
        extract.parquet_tables = [
            t.append_column(name, pa.array([value] * t.num_rows, pa.string())) for t in extract.parquet_tables
        ]
