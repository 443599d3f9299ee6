"""The format rewriters: one object's bytes with the users' records blanked or dropped, every other byte kept.

JSON Lines and CSV stream (gzip in, gzip out) through splice_lines, and each target line is checked by Ownership
(lakepurge.purge.ownership) before it is touched; Parquet is rewritten row group by row group, dropping the named rows
whose ids name one of the users (owned_rows). The result is a Staged object: its bytes and their CRC64NVME, ready to
be verified and written.
"""

from __future__ import annotations

import bisect
import io
import itertools
import operator
from collections.abc import Container, Iterable, Iterator
from typing import IO, Any

from lakepurge.core.config import DatasetConfig
from lakepurge.core.config_identity import id_rules
from lakepurge.purge.ownership import Ownership, owned_rows
from lakepurge.purge.splice import DROP, skip_lines, splice_batches
from lakepurge.purge.streams import LastByte, LinesLost, Staged, gzip_staged, read_chunks, to_the_end
from lakepurge.records.csv_records import (
    UNTERMINATED_AT_END,
    CsvRecord,
    csv_records,
    one_width_column,
    unquoted_line,
    unquoted_row,
)
from lakepurge.records.ids import parse_paths
from lakepurge.records.limits import IN_MEMORY_BYTES
from lakepurge.records.lines import DEFAULT_INFLATION, GzipReader, Inflation, read_up_to

BLANK = b"{}"


def rewrite_jsonl(
    raw: IO[bytes],
    gz: bool,
    lines: Iterable[int],
    owner: Ownership,
    drop: bool,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Staged:
    choices = (None, DROP if drop else BLANK)  # by ownership: False keeps the line, True erases it

    def decide(numbers: list[int], contents: list[bytes]) -> list[bytes | None]:
        return _chosen(choices, owner.json_lines(numbers, contents))

    source: IO[bytes] = GzipReader(raw, inflation) if gz else raw  # type: ignore[assignment]
    pieces = to_the_end(source, splice_batches(read_chunks(source), lines, decide))
    return gzip_staged(pieces) if gz else Staged.of(pieces)


def _chosen(choices: tuple[None, bytes], owned: list[bool]) -> list[bytes | None]:
    """choices[mine] for each decision (all the same when every line is owned: the usual plan, no step per line)."""
    return [choices[1]] * len(owned) if False not in owned else list(map(choices.__getitem__, owned))


_DECODE = operator.methodcaller("decode", "utf-8", "surrogateescape")
_SPLIT_FIELDS = operator.methodcaller("split", ",")


def rewrite_csv(
    raw: IO[bytes],
    gz: bool,
    lines: Iterable[int],
    owner: Ownership,
    drop: bool,
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Staged:
    """CSV, record by record (a quoted field may span lines), with the indexer's record grammar (csv_records): a
    target is erased only if a record starts on its line and holds one of the users. A blanked record keeps its line
    count: its first line becomes empty fields (`,,,`) and its continuation lines become empty lines, so every later
    record's line number still holds. The header (line 0) is never touched; every other byte passes through.

    Where no '"' stands between the last record start known and a target, every line in between is a record of its
    own, so the target's line starts a record: that stretch is counted over, not parsed. Past a quote, records are
    parsed from the last start known up to the target. Objects over IN_MEMORY_BYTES are parsed record by record."""
    source: IO[bytes] = GzipReader(raw, inflation) if gz else raw  # type: ignore[assignment]
    data = read_up_to(source, IN_MEMORY_BYTES + 1)
    if len(data) > IN_MEMORY_BYTES:
        chunks = itertools.chain((data,), read_chunks(source))
        streamed = to_the_end(source, _csv_streamed(chunks, set(lines), owner, drop, max_bytes))
        return gzip_staged(streamed) if gz else Staged.of(streamed)
    pieces = (
        _csv_without_quotes(data, lines, owner, drop, max_bytes)
        if b'"' not in data
        else _csv_in_memory(data, sorted(set(lines)), owner, drop, max_bytes)
    )
    if drop and not data.endswith(b"\n"):
        pieces = _unterminated(pieces)
    pieces = to_the_end(source, pieces)
    return gzip_staged(pieces) if gz else Staged.of(pieces)


def _unterminated(pieces: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """The object had no final newline: neither has the rewritten one when its last line was dropped (the line
    before it loses its '\\n')."""
    last: bytes | memoryview = b""
    for piece in pieces:
        if not piece:
            continue
        if last:
            yield last
        last = piece
    yield last[:-1] if bytes(last[-1:]) == b"\n" else last


def _csv_without_quotes(
    data: bytes, lines: Iterable[int], owner: Ownership, drop: bool, max_bytes: int
) -> Iterator[bytes | memoryview]:
    """An object without a single '"': every line is a record of its own (csv_records' grammar), so the target
    lines are spliced as JSON Lines are, their rows decided together."""
    header = _record_at(memoryview(data), 0, max_bytes)
    owner.csv_header((header.row or []) if header is not None else [])

    without_carriage = b"\r" not in data  # then no line holds a bare '\r' either: each is a plain row
    column = owner.csv_column()

    def decide(numbers: list[int], contents: list[bytes]) -> list[bytes | None]:
        if without_carriage and max(map(len, contents)) <= max_bytes:
            if column is not None:
                fast = _plain_rows_decided(numbers, contents, column, owner, drop)
                if fast is not None:
                    return fast
            rows = list(map(_SPLIT_FIELDS, map(_DECODE, contents)))  # unquoted_row's, for lines without '\r'
            owned = owner.csv_rows(numbers, rows)
            return [
                (DROP if drop else b"," * (len(row) - 1)) if mine else None
                for row, mine in zip(rows, owned, strict=True)
            ]
        plain = [len(c) <= max_bytes and unquoted_line(c) for c in contents]
        if all(plain):
            rows = [unquoted_row(content) for content in contents]
            owned = owner.csv_rows(numbers, rows)
        else:  # a bare '\r' or an overlong line: not a record the indexer read, row by row
            rows = [unquoted_row(c) if p else [] for c, p in zip(contents, plain, strict=True)]
            owned = [p and owner.csv_record(n, r) for n, r, p in zip(numbers, rows, plain, strict=True)]
        return [
            (DROP if drop else b"," * max(len(row) - 1, 0)) if mine else None
            for row, mine in zip(rows, owned, strict=True)
        ]

    return splice_batches((data,), [line for line in lines if line > 0], decide)


def _plain_rows_decided(
    numbers: list[int], contents: list[bytes], column: int, owner: Ownership, drop: bool
) -> list[bytes | None] | None:
    """The decisions on rows without '"' and without '\\r' (each split at every comma, unquoted_row's grammar) when
    all have the same number of fields, more than `column`, and hold plain ASCII ids in it; None otherwise (they are
    then decided row by row). A few C calls over all the rows (one_width_column): no row is split on its own."""
    found = one_width_column(b"\n".join(contents), len(contents), column)
    if found is None:
        return None
    blank, ids = found
    owned = owner.csv_plain_ids(numbers, ids)
    if owned is None:
        return None
    return _chosen((None, DROP if drop else blank), owned)


def _csv_in_memory(
    data: bytes, targets: list[int], owner: Ownership, drop: bool, max_bytes: int
) -> Iterator[bytes | memoryview]:
    view = memoryview(data)
    header = _record_at(view, 0, max_bytes)
    owner.csv_header((header.row or []) if header is not None else [])
    known_line, known_pos = (len(header.lines), _after_lines(data, 0, len(header.lines))) if header else (1, 0)
    parsed: Iterator[CsvRecord] | None = None  # records from a known start, while quotes are about
    ahead: CsvRecord | None = None  # the parsed record read past the last target
    passed = 0
    for target in targets:
        if target < known_line:
            continue  # the header, or inside a record already read
        position, line = skip_lines(data, known_pos, known_line, target)
        if line < target:
            break  # past the end
        if data.find(b'"', known_pos, position) < 0:
            record = _record_at(view, position, max_bytes)
            if record is None:
                break  # an empty remainder is no line
            record = record._replace(line=target) if record.line != target else record
        else:
            if parsed is None or ahead is None or ahead.line > known_line:
                parsed, ahead = _parsed_from(view, known_pos, known_line, max_bytes), None
            while ahead is None or ahead.line < target:
                ahead = next(parsed, None)
                if ahead is None:
                    break
            if ahead is None:
                break
            record = ahead if ahead.line == target else None
            if record is None:  # the target is inside a record: not a record's start, never erased
                known_line, known_pos = ahead.line, _after_lines(data, known_pos, ahead.line - known_line)
                continue
        assert record is not None
        spanned = len(record.lines)
        end = _after_lines(data, position, spanned)
        known_line, known_pos = target + spanned, end
        if record.row is None or not owner.csv_record(target, record.row):
            continue
        if spanned > 1:
            owner.lines_of[target] = spanned
        if drop:
            if passed < position:
                yield view[passed:position]
            passed = end
            continue
        first = record.lines[0] or b""
        carriage = b"\r" if first.endswith(b"\r") else b""
        blank = b"," * max(len(record.row) - 1, 0) + carriage + b"\n" * (spanned - 1)
        if passed < position:
            yield view[passed:position]
        yield blank + (b"\n" if data[end - 1 : end] == b"\n" else b"")
        passed = end
    if passed < len(data):
        yield view[passed:] if passed else data


def _record_at(view: memoryview, position: int, max_bytes: int) -> CsvRecord | None:
    """The record starting at `position`, read through a window that grows while a quoted field runs past it."""
    data = view.obj
    assert isinstance(data, bytes)
    end = data.find(b"\n", position)
    line = data[position : len(data) if end < 0 else end]
    if line and len(line) <= max_bytes and unquoted_line(line):
        return CsvRecord(0, [line], unquoted_row(line), None)
    window = len(data) - position if end < 0 else end + 1 - position  # its first line; more if a quote stays open
    while True:
        stop = min(len(data), position + window)
        record = next(csv_records(_ViewReader(view[:stop], position), max_bytes), None)
        if record is None or record.problem != UNTERMINATED_AT_END or stop == len(data) or window > max_bytes + 1:
            return record
        window = max(window * 4, 65536)


def _parsed_from(view: memoryview, position: int, line: int, max_bytes: int) -> Iterator[CsvRecord]:
    for record in csv_records(_ViewReader(view, position), max_bytes):
        yield record._replace(line=record.line + line)


def _after_lines(data: bytes, position: int, count: int) -> int:
    """The position after `count` more lines from `position` (the end of the data if it has fewer)."""
    for _ in range(count):
        end = data.find(b"\n", position)
        if end < 0:
            return len(data)
        position = end + 1
    return position


class _ViewReader(io.RawIOBase):
    """Reads a memoryview from a position on, copying only what is read."""

    def __init__(self, view: memoryview, position: int) -> None:
        self._view = view
        self._position = position

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), len(self._view) - self._position)
        buffer[:size] = self._view[self._position : self._position + size]
        self._position += size
        return size


def _csv_streamed(
    chunks: Iterable[bytes], targets: set[int], owner: Ownership, drop: bool, max_bytes: int
) -> Iterator[bytes]:
    """Objects too large to hold: every record read with csv_records as the stream goes."""
    source = LastByte(_ChunkReader(chunks))

    def output_lines() -> Iterator[bytes]:
        header = True
        for record in csv_records(source, max_bytes, rows_for=targets | {0}):
            if header:
                owner.csv_header(record.row or [])
                header = False
            elif record.line in targets and record.row is not None and owner.csv_record(record.line, record.row):
                if len(record.lines) > 1:
                    owner.lines_of[record.line] = len(record.lines)
                if not drop:
                    first = record.lines[0] or b""
                    carriage = b"\r" if first.endswith(b"\r") else b""
                    yield b"," * max(len(record.row) - 1, 0) + carriage
                    yield from (b"" for _ in record.lines[1:])
                continue
            for number, line in enumerate(record.lines, record.line):
                if line is None:
                    raise ValueError(f"line {number} is longer than max_record_bytes; cannot rewrite it safely")
                yield line

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


class _ChunkReader(io.RawIOBase):
    """A stream over an iterator of chunks."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._held = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._held:
            self._held = next(self._chunks, b"")
            if not self._held:
                return 0
        size = min(len(buffer), len(self._held))
        buffer[:size] = self._held[:size]
        self._held = self._held[size:]
        return size


def rewrite_parquet(
    source: IO[bytes],
    lines: Iterable[int],
    users: Container[str],
    dataset: DatasetConfig,
    hidden: Container[int] = (),
) -> tuple[Staged, list[int]]:
    """Drop the users' rows among the given ones (row numbers across the file), keeping the schema, physical types,
    compression and row-group layout. Each named row is checked to hold one of the users; the rows erased are
    returned. Hidden rows (a table's deletion vector: no longer the table's) are dropped too, unchecked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert dataset.id_fields is not None
    paths, rules = parse_paths(dataset.id_fields), id_rules(dataset)
    parquet = pq.ParquetFile(source)
    metadata = parquet.metadata
    physical = parquet.schema
    int96 = any(physical.column(i).physical_type == "INT96" for i in range(len(physical)))
    compression: dict[str, str] = {}
    if metadata.num_row_groups:
        group = metadata.row_group(0)
        for i in range(group.num_columns):
            codec = group.column(i).compression.lower()
            # the metadata says UNCOMPRESSED where the writer takes "none"
            compression[group.column(i).path_in_schema] = "none" if codec == "uncompressed" else codec
    staged = Staged()
    writer = pq.ParquetWriter(
        _StagedFile(staged),
        parquet.schema_arrow,
        compression=compression or "snappy",
        use_deprecated_int96_timestamps=int96,
        version=metadata.format_version if metadata.format_version in ("1.0", "2.4", "2.6") else "2.6",
    )
    targets = sorted(set(lines))
    erased: list[int] = []
    first_row = written = hidden_dropped = 0
    schema = parquet.schema_arrow
    plain = without_views(schema)
    for index in range(metadata.num_row_groups):
        table = parquet.read_row_group(index)
        if plain is not None:  # Arrow's take and filter have no kernels for view types: work on their plain forms
            table = table.cast(plain)
        rows = table.num_rows
        low, high = bisect.bisect_left(targets, first_row), bisect.bisect_left(targets, first_row + rows)
        named = [t - first_row for t in targets[low:high]]
        gone = {row for row in range(rows) if first_row + row in hidden} if hidden else set()
        if named or gone:
            taken = table.take(pa.array(named, type=pa.int64())) if named else None
            owned = owned_rows(taken, paths, users, rules) if taken is not None else []
            dropped = [row for row, mine in zip(named, owned, strict=True) if mine]
            hidden_dropped += len(gone)
            erased.extend(first_row + row for row in dropped if row not in gone)
            dropped = sorted(set(dropped) | gone) if gone else dropped
            if dropped:
                keep = [True] * rows
                for row in dropped:
                    keep[row] = False
                table = table.filter(pa.array(keep, type=pa.bool_()))
        if table.num_rows:
            if plain is not None:
                table = table.cast(schema)  # the file's own types again (delta-rs writes strings as views)
            writer.write_table(table, row_group_size=table.num_rows)  # one output group per input group
            written += table.num_rows
        first_row += rows
    writer.close()
    # every row but those dropped (verification looks for the users)
    expected = metadata.num_rows - len(erased) - hidden_dropped
    if written != expected:
        staged.close()
        raise LinesLost(f"the rewritten object has {written} rows where {expected} were expected")
    return staged, erased


def without_views(schema: Any) -> Any:
    """The schema with every string_view/binary_view (at any depth) as string/binary, or None if it has none."""
    import pyarrow as pa

    def plain(kind: Any) -> Any:
        if pa.types.is_string_view(kind):
            return pa.large_string()
        if pa.types.is_binary_view(kind):
            return pa.large_binary()
        if pa.types.is_struct(kind):
            return pa.struct([field.with_type(plain(field.type)) for field in kind])
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            value = kind.value_field.with_type(plain(kind.value_type))
            return pa.list_(value) if pa.types.is_list(kind) else pa.large_list(value)
        if pa.types.is_map(kind):
            return pa.map_(
                kind.key_field.with_type(plain(kind.key_type)), kind.item_field.with_type(plain(kind.item_type))
            )
        return kind

    fields = [field.with_type(plain(field.type)) for field in schema]
    if all(f.type == g.type for f, g in zip(fields, schema, strict=True)):
        return None
    return pa.schema(fields, metadata=schema.metadata)


class _StagedFile(io.RawIOBase):
    """The file-like Parquet writer writes into a Staged (so the checksum is computed as the bytes come)."""

    def __init__(self, staged: Staged) -> None:
        self._staged = staged

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        piece = bytes(data)
        self._staged.write(piece)
        return len(piece)

    def tell(self) -> int:
        return self._staged.size
