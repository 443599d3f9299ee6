"""The format rewriters: one object's bytes with the users' records blanked or dropped, every other byte kept.

JSON Lines and CSV stream (gzip in, gzip out), and each target line is checked against the engine's Ownership before
it is touched; Parquet is rewritten row group by row group, dropping the rows whose ids name one of the users.
"""

from __future__ import annotations

import tempfile
from collections.abc import Container, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from lakepurge.config import DatasetConfig
from lakepurge.formats import DEFAULT_INFLATION, GzipReader, Inflation, csv_records, extract_ids, parse_paths
from lakepurge.purge.splice import DROP, splice_lines
from lakepurge.purge.streams import LastByte, gzip_chunks, read_chunks
from lakepurge.s3io import ObjectHead, open_seekable

if TYPE_CHECKING:
    from lakepurge.purge.engine import Ownership

BLANK = b"{}"


def rewrite_jsonl(
    raw: IO[bytes],
    gz: bool,
    lines: Iterable[int],
    owner: Ownership,
    drop: bool,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Iterator[bytes]:
    def decide(line: int, content: bytes) -> bytes | None:
        if owner.json_line(line, content):
            return DROP if drop else BLANK
        return None

    source: IO[bytes] = GzipReader(raw, inflation) if gz else raw  # type: ignore[assignment]
    spliced = splice_lines(read_chunks(source), lines, decide)
    return gzip_chunks(spliced) if gz else spliced


def rewrite_csv(
    raw: IO[bytes],
    gz: bool,
    lines: Iterable[int],
    owner: Ownership,
    drop: bool,
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Iterator[bytes]:
    """CSV, record by record (a quoted field may span lines). A blanked record keeps its line count: its first
    line becomes empty fields (`,,,`) and its continuation lines become empty lines, so every later record's line
    number still holds. The header (line 0) is never touched; every other record passes through byte for byte."""
    targets = set(lines)
    source = LastByte(GzipReader(raw, inflation) if gz else raw)

    def output_lines() -> Iterator[bytes]:
        # The indexer's own record grammar: a line it could not parse as a record's start is passed through as it
        # is, and every record it indexed is found here at the same line.
        header = True
        for record in csv_records(source, max_bytes, rows_for=targets | {0}):
            if header:
                owner.csv_header(record.row or [])
                header = False
            elif record.line in targets and record.row is not None and owner.csv_record(record.line, record.row):
                if not drop:
                    first = record.lines[0] or b""
                    carriage = b"\r" if first.endswith(b"\r") else b""
                    yield b"," * max(len(record.row) - 1, 0) + carriage
                    yield from (b"" for _ in record.lines[1:])
                    if len(record.lines) > 1:
                        owner.lines_of[record.line] = len(record.lines)
                continue
            for number, line in enumerate(record.lines, record.line):
                if line is None:
                    raise ValueError(f"line {number} is longer than max_record_bytes; cannot rewrite it safely")
                yield line

    def terminated() -> Iterator[bytes]:
        batch: list[bytes] = []
        previous: bytes | None = None
        for line in output_lines():
            if previous is not None:
                batch.append(previous + b"\n")
                if len(batch) >= 4096:
                    yield b"".join(batch)
                    batch.clear()
            previous = line
        if previous is not None:
            batch.append(previous + (b"\n" if source.last == b"\n" else b""))
        yield b"".join(batch)

    return gzip_chunks(terminated()) if gz else terminated()


def rewrite_parquet(s3: Any, head: ObjectHead, users: Container[str], dataset: DatasetConfig) -> tuple[IO[bytes], int]:
    """Drop the users' rows, keeping the schema, physical types, compression and row-group layout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert dataset.id_fields is not None
    paths = parse_paths(dataset.id_fields)
    source = pq.ParquetFile(open_seekable(s3, head))
    metadata = source.metadata
    physical = source.schema
    int96 = any(physical.column(i).physical_type == "INT96" for i in range(len(physical)))
    compression: dict[str, str] = {}
    if metadata.num_row_groups:
        group = metadata.row_group(0)
        for i in range(group.num_columns):
            compression[group.column(i).path_in_schema] = group.column(i).compression.lower()
    out = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115 - returned to the caller
    writer = pq.ParquetWriter(
        out,
        source.schema_arrow,
        compression=compression or "snappy",
        use_deprecated_int96_timestamps=int96,
        version=metadata.format_version if metadata.format_version in ("1.0", "2.4", "2.6") else "2.6",
    )
    erased = 0
    for index in range(metadata.num_row_groups):
        table = source.read_row_group(index)
        keep = [not owned for owned in owned_rows(table, paths, users)]
        erased += keep.count(False)
        if not all(keep):
            table = table.filter(pa.array(keep, type=pa.bool_()))
        if table.num_rows:
            writer.write_table(table, row_group_size=table.num_rows)  # one output group per input group
    writer.close()
    out.seek(0)
    return out, erased


def owned_rows(table: Any, paths: tuple[tuple[str, ...], ...], users: Container[str]) -> list[bool]:
    """For each row of a Parquet table (a row group), whether its ids name one of the users. A row whose ids cannot
    be read (the indexer reports it unindexable) is nobody's. The purge drops these rows; the export takes them."""
    top = sorted({p[0] for p in paths})
    owned = []
    for record in table.select(top).to_pylist():
        try:
            ids: tuple[str, ...] = extract_ids(record, paths)
        except ValueError:
            ids = ()
        owned.append(any(u in users for u in ids))
    return owned
