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
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any, NamedTuple, Protocol

import orjson

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
    found: list[str] = []
    for path in paths:
        _collect(record, path, 0, ".".join(path), found)
    if not found:
        names = ", ".join(repr(".".join(p)) for p in paths)
        raise IdFieldError(f"id field {names} missing" if len(paths) == 1 else f"id fields {names} all missing")
    return tuple(dict.fromkeys(found)) if len(found) > 1 else (found[0],)


def iter_lines(stream: ByteSource, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """Yield (line number, line without its '\\n') in bounded memory; None for a line longer than max_bytes.

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
        if skipping:
            if len(parts) == 1:
                continue
            yield number, None
            number += 1
            skipping = False
            parts = parts[1:]
        else:
            parts[0] = carry + parts[0]
        carry = parts.pop()
        for line in parts:
            yield number, (line if len(line) <= max_bytes else None)
            number += 1
        if len(carry) > max_bytes:
            carry = b""
            skipping = True
    if skipping:
        yield number, None
    elif carry:
        yield number, carry


def _too_long(max_bytes: int) -> str:
    return f"line longer than max_record_bytes ({max_bytes} bytes)"


def _json_reason(exc: orjson.JSONDecodeError) -> str:
    # orjson's messages give positions, never the record's content.
    return "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"


def read_jsonl(stream: IO[bytes], paths: tuple[tuple[str, ...], ...], max_bytes: int) -> Iterator[Record | Unindexable]:
    loads = orjson.loads
    single = paths[0][0] if len(paths) == 1 and len(paths[0]) == 1 else None
    for number, line in iter_lines(stream, max_bytes):
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
        if single is not None:  # the common case, one top-level field holding a string, without the general walk
            value = record.get(single)
            if type(value) is str and value:
                yield Record(number, (value,))
                continue
        try:
            yield Record(number, extract_ids(record, paths))
        except IdFieldError as exc:
            yield Unindexable(number, str(exc))


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
        yield Unindexable(exc.line, f"{exc.reason}: the object could not be read from this line on")
