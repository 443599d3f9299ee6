"""Record readers: JSON Lines (plain or gzip), CSV with a header row, Parquet.

Each reader streams an object and yields, per record, its position (0-based line number of the decompressed
object; row index for Parquet) and the user ids in it. Blank records (`{}`, empty lines) are skipped. A record
that cannot be indexed is yielded as :class:`Unindexable` with a reason that names the line and never quotes its
content: such a line may hold personal data we cannot locate, so it must be reported, not dropped.
"""

from __future__ import annotations

import codecs
import csv
import io
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import IO, Any, NamedTuple, Protocol, cast

import orjson

from lakepurge.memory import collector_paused

CHUNK_BYTES = 1 << 20


class ByteSource(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


# Named tuples, not dataclasses: one is made per record, and a tuple is the cheapest object to make.
class Unindexable(NamedTuple):
    line: int
    reason: str


class Record(NamedTuple):
    line: int
    user_ids: tuple[str, ...]


class IdFieldError(ValueError):
    pass


class TruncatedObject(Exception):
    """The object's stream broke at a line (truncated or corrupt gzip); the lines before it were read."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"{reason} at line {line}")
        self.line = line
        self.reason = reason


def parse_paths(id_fields: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(field.split(".")) for field in id_fields)


def _add_id(value: Any, field: str, out: list[str]) -> None:
    if isinstance(value, str):
        if not value:
            raise IdFieldError(f"id field '{field}' is empty")
        out.append(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        out.append(str(value))
    elif value is None:
        return
    else:
        raise IdFieldError(f"id field '{field}' holds a {type(value).__name__}, not a string or integer")


def _collect(value: Any, path: tuple[str, ...], depth: int, field: str, out: list[str]) -> None:
    if depth == len(path):
        if isinstance(value, list):
            for item in value:
                _add_id(item, field, out)
        else:
            _add_id(value, field, out)
        return
    if isinstance(value, dict):
        child = value.get(path[depth])
        if child is not None:
            _collect(child, path, depth + 1, field, out)
    elif isinstance(value, list):
        # ids inside arrays of objects: "orders.buyer" finds the buyer of every order.
        for item in value:
            _collect(item, path, depth, field, out)


def extract_ids(record: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """All user ids a record names through the dataset's id fields, without duplicates.

    Raises IdFieldError when no id field is present or a field holds something that is not an id.
    """
    if len(paths) == 1 and len(paths[0]) == 1:  # the common case, one top-level field holding a string: no walk
        value = record.get(paths[0][0])
        if type(value) is str and value:
            return (value,)
    found: list[str] = []
    for path in paths:
        _collect(record, path, 0, ".".join(path), found)
    if not found:
        names = ", ".join(repr(".".join(p)) for p in paths)
        raise IdFieldError(f"id field {names} missing" if len(paths) == 1 else f"id fields {names} all missing")
    return tuple(dict.fromkeys(found)) if len(found) > 1 else (found[0],)


def iter_line_batches(stream: ByteSource, max_bytes: int) -> Iterator[tuple[int, list[bytes | None]]]:
    """Yield (number of the first line, the lines) for each chunk read, in bounded memory; a line is given
    without its '\\n', and as None when it is longer than max_bytes.

    A final line without a trailing newline is still a line; a trailing '\\r' is kept (JSON treats it as
    whitespace, and the purge must give back every byte unchanged).
    """
    number = 0
    carry = b""
    skipping = False  # inside a line that already exceeded max_bytes: discard until its newline
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except (EOFError, zlib.error) as exc:
            kind = "truncated gzip stream" if isinstance(exc, EOFError) else f"corrupt gzip stream ({exc})"
            raise TruncatedObject(number, kind) from None
        if not chunk:
            break
        parts = chunk.split(b"\n")
        if not skipping:
            parts[0] = carry + parts[0]
        elif len(parts) == 1:
            continue
        carry = parts.pop()
        lines = cast("list[bytes | None]", parts)
        if max(map(len, parts), default=0) > max_bytes:
            lines = [line if len(line) <= max_bytes else None for line in parts]
        if skipping:  # the first one is the end of a line already too long
            lines[0] = None
            skipping = False
        if lines:
            yield number, lines
            number += len(lines)
        if len(carry) > max_bytes:
            carry = b""
            skipping = True
    if skipping:
        yield number, [None]
    elif carry:
        yield number, [carry]


def iter_lines(stream: ByteSource, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """Yield (line number, line) one line at a time: iter_line_batches, flattened."""
    for first, lines in iter_line_batches(stream, max_bytes):
        yield from enumerate(lines, first)


def _too_long(max_bytes: int) -> str:
    return f"line longer than max_record_bytes ({max_bytes} bytes)"


def _json_reason(exc: orjson.JSONDecodeError) -> str:
    # orjson's messages give positions, never the record's content.
    return "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"


def read_jsonl(stream: IO[bytes], paths: tuple[tuple[str, ...], ...], max_bytes: int) -> Iterator[Record | Unindexable]:
    for first, lines in iter_line_batches(stream, max_bytes):
        yield from _jsonl_items(first, lines, paths, max_bytes)


def _jsonl_items(
    first: int, lines: list[bytes | None], paths: tuple[tuple[str, ...], ...], max_bytes: int
) -> Iterator[Record | Unindexable]:
    """Each line's record or the reason it cannot be indexed; blank lines and `{}` give nothing."""
    loads = orjson.loads
    for number, line in enumerate(lines, first):
        if line is None:
            yield Unindexable(number, _too_long(max_bytes))
            continue
        if len(line) <= 3 and line.strip() in (b"", b"{}"):
            continue
        try:
            record = loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue
            yield Unindexable(number, _json_reason(exc))
            continue
        if type(record) is not dict:
            yield Unindexable(number, f"not a JSON object (a {type(record).__name__})")
            continue
        if not record:
            continue
        try:
            yield Record(number, extract_ids(record, paths))
        except IdFieldError as exc:
            yield Unindexable(number, str(exc))


def _single_field(paths: tuple[tuple[str, ...], ...]) -> str | None:
    """The id field when it is one top-level field (the case group_records reads a chunk at a time)."""
    return paths[0][0] if len(paths) == 1 and len(paths[0]) == 1 else None


def _plain_ids(lines: list[bytes | None], field: str) -> list[str] | None:
    """The ids of a chunk of lines when every line is a JSON object whose `field` holds a non-empty string (the
    bulk of any lake), found without a Python step per line; None as soon as any line is anything else (blank,
    `{}`, too long, malformed, another shape), and then the chunk goes through _jsonl_items line by line."""
    if None in lines:
        return None
    try:
        # itemgetter fails on anything but an object holding the field (KeyError; TypeError for arrays, strings,
        # numbers); each record is freed as soon as its id is out.
        ids = list(map(itemgetter(field), map(orjson.loads, lines)))  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if set(map(type, ids)) != {str} or "" in ids:
        return None
    return ids


class Grouped(NamedTuple):
    """An object's records grouped by user: what the index stores."""

    lines_by_user: dict[str, list[int]]
    records: int
    unindexable: list[Unindexable]


def group_records(raw: IO[bytes], key: str, fmt: str, id_fields: Sequence[str], max_bytes: int) -> Grouped:
    """read_records, grouped by user id. The same answer as grouping read_records' items; for JSON Lines with one
    top-level id field, chunks of well-formed lines take a path without a Python step per line (the indexer's
    throughput is per line)."""
    lines_by_user: dict[str, list[int]] = defaultdict(list)
    unindexable: list[Unindexable] = []
    records = 0
    paths = parse_paths(id_fields)
    field = _single_field(paths) if fmt == "jsonl" else None

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
        add(read_records(raw, key, fmt, id_fields, max_bytes))
        return Grouped(dict(lines_by_user), records, unindexable)
    # Thousands of new lists and, per line, a parsed record that is freed at once: none can form a cycle, and the
    # cyclic collector would otherwise run every few hundred lines (a fifth of the time).
    with collector_paused():
        try:
            for first, lines in iter_line_batches(open_decompressed(raw, key), max_bytes):
                ids = _plain_ids(lines, field)
                if ids is None:
                    add(_jsonl_items(first, lines, paths, max_bytes))
                    continue
                records += len(ids)
                for number, user in enumerate(ids, first):
                    lines_by_user[user].append(number)
        except TruncatedObject as exc:
            unindexable.append(_truncated(exc))
    return Grouped(dict(lines_by_user), records, unindexable)


def read_csv(stream: IO[bytes], columns: Sequence[str], max_bytes: int) -> Iterator[Record | Unindexable]:
    """CSV with a header row (line 0). A record's position is the line it starts on (quoted fields may span
    lines). Invalid UTF-8 outside the id columns does not stop a row from being indexed."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    oversize: list[int] = []

    def text_lines() -> Iterator[str]:
        for number, line in iter_lines(stream, max_bytes):
            if line is None:
                oversize.append(number)
                yield "\n"
            else:
                yield decoder.decode(line, final=True) + "\n"

    reader = csv.reader(text_lines())
    try:
        header = next(reader)
    except StopIteration:
        return
    if oversize:
        yield Unindexable(0, "header " + _too_long(max_bytes))
        return
    positions: list[tuple[str, int | None]] = [(c, header.index(c) if c in header else None) for c in columns]
    start = reader.line_num
    for row in reader:
        line = start
        start = reader.line_num
        if oversize and oversize[-1] == line:
            yield Unindexable(line, _too_long(max_bytes))
            continue
        if not any(row):
            continue
        ids: list[str] = []
        problem = None
        for column, index in positions:
            value = row[index] if index is not None and index < len(row) else ""
            if not value:
                continue
            if any("\udc80" <= ch <= "\udcff" for ch in value):
                problem = f"invalid UTF-8 in id field '{column}'"
                break
            ids.append(value)
        if problem is None and not ids:
            missing = [c for c, i in positions if i is None]
            problem = (
                f"id column {', '.join(repr(c) for c in missing)} not in header"
                if missing and len(missing) == len(positions)
                else f"id field {', '.join(repr(c) for c in columns)} missing"
            )
        if problem is not None:
            yield Unindexable(line, problem)
        else:
            yield Record(line, tuple(dict.fromkeys(ids)))


def read_parquet(
    source: IO[bytes], paths: tuple[tuple[str, ...], ...], batch_rows: int = 65536
) -> Iterator[Record | Unindexable]:
    """Parquet rows by index, reading only the columns that hold ids, one batch at a time."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
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
                yield Record(row, extract_ids(record, paths))
            except IdFieldError as exc:
                yield Unindexable(row, str(exc))
            row += 1


class GzipReader(io.RawIOBase):
    """Streaming gzip decompression that hands out every byte decoded before a truncation or corruption.

    (gzip.GzipFile discards the data of the read call that hits the break.) Concatenated members are read as
    one stream, as gunzip does.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(wbits=31)
        self._pending = b""
        self._broken: str | None = None
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and not self._done:
            self._fill()
        if not self._pending:
            if self._broken is not None:
                raise EOFError(self._broken)
            return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _fill(self) -> None:
        compressed = self._inflate.unused_data if self._inflate.eof else b""
        if self._inflate.eof:
            if not compressed:
                compressed = self._raw.read(CHUNK_BYTES)
                if not compressed:
                    self._done = True
                    return
            self._inflate = zlib.decompressobj(wbits=31)
        else:
            compressed = self._raw.read(CHUNK_BYTES)
            if not compressed:
                self._done = True
                self._broken = "compressed stream ended before its end marker"
                return
        try:
            self._pending = self._inflate.decompress(compressed)
        except zlib.error as exc:
            self._done = True
            self._broken = str(exc)
            raise zlib.error(self._broken) from None


def open_decompressed(raw: IO[bytes], key: str) -> IO[bytes]:
    if key.endswith(".gz"):
        return GzipReader(raw)  # type: ignore[return-value]  # a raw reader: short reads keep data before a break
    return raw


def read_records(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
) -> Iterator[Record | Unindexable]:
    """Dispatch on format and compression. A truncated or corrupt gzip stream ends the iteration with an
    Unindexable at the line where the readable data stopped (the rest of the object cannot be located)."""
    paths = parse_paths(id_fields)
    if fmt == "parquet":
        yield from read_parquet(raw, paths)
        return
    stream = open_decompressed(raw, key)
    items: Iterable[Record | Unindexable] = (
        read_jsonl(stream, paths, max_bytes) if fmt == "jsonl" else read_csv(stream, id_fields, max_bytes)
    )
    try:
        yield from items
    except TruncatedObject as exc:
        yield _truncated(exc)


def _truncated(exc: TruncatedObject) -> Unindexable:
    return Unindexable(exc.line, f"{exc.reason}: the object could not be read from this line on")
