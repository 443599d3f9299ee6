"""Record readers: JSON Lines (plain or gzip), CSV with a header row, Parquet, by format and compression.

Each reader streams an object and yields, per record, its position (0-based line number of the decompressed
object; row index for Parquet) and the user ids in it. Blank records (`{}`, empty lines) are skipped. A record
that cannot be indexed is yielded as :class:`Unindexable` with a reason that names the line and never quotes its
content: such a line may hold personal data we cannot locate, so it must be reported, not dropped.

The pieces: ``lines`` (bytes to lines, gzip and its inflation limits), ``ids`` (the ids a record names),
``jsonl_records`` and ``csv_records`` (the two line formats), ``search`` (verification's bulk answers); this module
dispatches on format (Parquet read here) and groups an object's records by user, as the index stores them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, NamedTuple

from lakepurge.records.csv_records import read_csv
from lakepurge.records.gc_pause import collector_paused
from lakepurge.records.ids import (
    EXACT,
    IdFieldError,
    IdRules,
    Record,
    Unindexable,
    extract_ids,
    parse_paths,
    resolve_top,
)
from lakepurge.records.jsonl_records import bulk_ids, jsonl_items, read_jsonl, single_field
from lakepurge.records.lines import (
    DEFAULT_INFLATION,
    ByteSource,
    Inflation,
    TruncatedObject,
    iter_line_batches,
    open_decompressed,
)
from lakepurge.records.record_map import RecordMapBuilder


class Grouped(NamedTuple):
    """An object's records grouped by user: what the index stores."""

    lines_by_user: dict[str, list[int]]
    records: int
    unindexable: list[Unindexable]


def group_records(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
    record_map: RecordMapBuilder | None = None,
    rules: IdRules = EXACT,
) -> Grouped:
    """read_records, grouped by user id. The same answer as grouping read_records' items; for JSON Lines with one
    top-level id field, chunks of well-formed lines take a path without a Python step per line (the indexer's
    throughput is per line). record_map, when given, collects where records start as the bytes go by."""
    lines_by_user: dict[str, list[int]] = defaultdict(list)
    unindexable: list[Unindexable] = []
    records = 0
    paths = parse_paths(id_fields)
    # (typed fields: the bulk path only for one top-level field, whose values are then made index forms)
    typed = rules.typing.single_field() if rules.typing is not None else None
    field = single_field(paths) if fmt == "jsonl" and (rules.typing is None or typed is not None) else None

    def add(items: Iterable[Record | Unindexable]) -> None:
        nonlocal records
        for item in items:
            if type(item) is Record:
                records += 1
                for user in item.user_ids:
                    lines_by_user[user].append(item.line)
            else:
                unindexable.append(item)  # type: ignore[arg-type]

    if field is None:
        add(read_records(raw, key, fmt, id_fields, max_bytes, inflation, record_map, rules))
        return Grouped(dict(lines_by_user), records, unindexable)
    # Thousands of new lists and, per line, a parsed record that is freed at once: none can form a cycle, and the
    # cyclic collector would otherwise run every few hundred lines (a fifth of the time).
    with collector_paused():
        try:
            stream: ByteSource = open_decompressed(raw, key, inflation)
            if record_map is not None:
                stream = record_map.watch(stream)
            for first, lines in iter_line_batches(stream, max_bytes):
                ids = bulk_ids(lines, field, rules.folded)
                if ids is not None and typed is not None:
                    ids = typed.forms(ids, f"id field '{field}'")
                if ids is None:
                    add(jsonl_items(first, lines, paths, max_bytes, rules))
                    continue
                records += len(ids)
                for number, user in enumerate(ids, first):
                    lines_by_user[user].append(number)
        except TruncatedObject as exc:
            unindexable.append(_truncated(exc))
    return Grouped(dict(lines_by_user), records, unindexable)


def read_parquet(
    source: IO[bytes], paths: tuple[tuple[str, ...], ...], batch_rows: int = 65536, rules: IdRules = EXACT
) -> Iterator[Record | Unindexable]:
    """Parquet rows by index, reading only the columns that hold ids, one batch at a time. Names matched
    case-insensitively, each id field is resolved against the file's columns once: a field that matches two
    makes every row unindexable, naming them."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
    if rules.folded:
        try:
            paths = resolve_top(paths, parquet.schema_arrow.names)
        except IdFieldError as exc:
            for row in range(parquet.metadata.num_rows):
                yield Unindexable(row, str(exc))
            return
    names = set(parquet.schema_arrow.names)
    top = sorted({p[0] for p in paths if p[0] in names})
    if not top:
        for row in range(parquet.metadata.num_rows):
            yield Unindexable(row, f"id column {', '.join(repr('.'.join(p)) for p in paths)} not in schema")
        return
    row = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=top):
        for record in batch.to_pylist():
            try:
                yield Record(row, extract_ids(record, paths, rules))
            except IdFieldError as exc:
                yield Unindexable(row, str(exc))
            row += 1


def read_records(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
    record_map: RecordMapBuilder | None = None,
    rules: IdRules = EXACT,
) -> Iterator[Record | Unindexable]:
    """Dispatch on format and compression. A truncated or corrupt gzip stream ends the iteration with an
    Unindexable at the line where the readable data stopped (the rest of the object cannot be located). record_map,
    when given, collects where the records of a JSON Lines or CSV object start."""
    paths = parse_paths(id_fields)
    if fmt == "parquet":
        yield from read_parquet(raw, paths, rules=rules)
        return
    stream: ByteSource = open_decompressed(raw, key, inflation)
    spans = None
    if record_map is not None:
        stream, spans = record_map.watch(stream), record_map.spans
    items: Iterable[Record | Unindexable] = (
        read_jsonl(stream, paths, max_bytes, rules)  # type: ignore[arg-type]
        if fmt == "jsonl"
        else read_csv(stream, id_fields, max_bytes, spans, rules)  # type: ignore[arg-type]
    )
    try:
        yield from items
    except TruncatedObject as exc:
        yield _truncated(exc)


# The reason of an unindexable line that stands for the rest of its object: a stream broken at that line.
UNREAD_FROM_HERE = "the object could not be read from this line on"


def _truncated(exc: TruncatedObject) -> Unindexable:
    return Unindexable(exc.line, f"{exc.reason}: {UNREAD_FROM_HERE}")
