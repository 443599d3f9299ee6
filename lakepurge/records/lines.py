"""An object's bytes as lines, in bounded memory: gzip inflated a step at a time within its limits (a decompression
bomb is refused), then split into lines from 1 MiB chunks. A stream that breaks (truncated or corrupt gzip, an
inflation limit) ends with TruncatedObject at the line where the readable data stopped: every line before it was
read, and the break is reported, never taken for the object's end.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator
from typing import IO, Any, NamedTuple, Protocol, cast

CHUNK_BYTES = 1 << 20


class Inflation(NamedTuple):
    """How far a compressed object may inflate before it is refused as a decompression bomb."""

    max_bytes: int
    max_ratio: float


# A bomb is told from a well-compressible object by its ratio, but only once enough has come out to judge it.
RATIO_JUDGED_AFTER = 64 * 1024 * 1024
DEFAULT_INFLATION = Inflation(64 * 1024**3, 200.0)


class InflationLimitExceeded(EOFError):
    """The object inflates past the configured size or ratio: read no further (memory and time stay bounded)."""


class ByteSource(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class TruncatedObject(Exception):
    """The object's stream broke at a line (truncated or corrupt gzip); the lines before it were read."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"{reason} at line {line}")
        self.line = line
        self.reason = reason


def broken_at(exc: EOFError | zlib.error, line: int) -> TruncatedObject:
    """What a stream's read error means, as the line where the object broke."""
    if isinstance(exc, InflationLimitExceeded):
        kind = str(exc)
    elif isinstance(exc, EOFError):
        kind = "truncated gzip stream"
    else:
        kind = f"corrupt gzip stream ({exc})"
    return TruncatedObject(line, kind)


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
            raise broken_at(exc, number) from None
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


def too_long(max_bytes: int) -> str:
    return f"line longer than max_record_bytes ({max_bytes} bytes)"


def read_up_to(stream: ByteSource, limit: int) -> bytes:
    """The stream's first `limit` bytes, or all of it if shorter. A raw reader (GzipReader) returns what it has at
    each read, so one read is not enough: a single read once took a gzip CSV object for its first MiB."""
    pieces = []
    size = 0
    while size < limit:
        piece = stream.read(limit - size)
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class GzipReader(io.RawIOBase):
    """Streaming gzip decompression that hands out every byte decoded before a truncation or corruption.

    (gzip.GzipFile discards the data of the read call that hits the break.) Concatenated members are read as
    one stream, as gunzip does. Each step inflates at most CHUNK_BYTES (``decompress(max_length)``; the rest of the
    input waits in ``unconsumed_tail``), so memory stays a few chunks whatever the object inflates to, and time
    stays linear: output is handed out from an offset, never re-sliced. Past the ``inflation`` limits the stream
    ends with InflationLimitExceeded.
    """

    def __init__(self, raw: IO[bytes], inflation: Inflation = DEFAULT_INFLATION) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(wbits=31)
        self._input = b""  # compressed bytes not yet inflated
        self._pending = b""
        self._offset = 0
        self.broken_at: str | None = None
        self._done = False
        self._inflation = inflation
        self._read_in = 0
        self._given_out = 0
        # (compressed offset, decompressed offset) where each gzip member starts: where an object of several members
        # can be spliced (lakepurge.records.record_map), found at no cost while reading.
        self.members: list[tuple[int, int]] = [(0, 0)]

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        """As readinto hands them out; a read that asks for at least the whole step inflated is given zlib's bytes
        as they are (no copy into a buffer and out again: the rewrite reads 8 MiB at a time)."""
        if size is not None and size > 0:
            while self._offset >= len(self._pending) and not self._done:
                self._fill()
            if self._offset == 0 and 0 < len(self._pending) <= size:
                self._offset = len(self._pending)
                return self._pending
        return super().read(-1 if size is None else size)

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending) and not self._done:
            self._fill()
        available = len(self._pending) - self._offset
        if available <= 0:
            if self.broken_at is not None:
                raise EOFError(self.broken_at)
            return 0
        size = min(len(buffer), available)
        buffer[:size] = memoryview(self._pending)[self._offset : self._offset + size]
        self._offset += size
        return size

    def _read_raw(self) -> bytes:
        data = self._raw.read(CHUNK_BYTES)
        self._read_in += len(data)
        return data

    def _fill(self) -> None:
        if self._inflate.eof:
            following = self._inflate.unused_data or self._read_raw()
            if not following:
                self._done = True
                return
            self._inflate = zlib.decompressobj(wbits=31)  # the next member of a concatenated stream
            self._input = following
            self.members.append((self._read_in - len(following), self._given_out))
        if not self._input:
            self._input = self._read_raw()
            if not self._input:
                self._done = True
                self.broken_at = "compressed stream ended before its end marker"
                return
        try:
            self._pending = self._inflate.decompress(self._input, CHUNK_BYTES)
        except zlib.error as exc:
            self._done = True
            self.broken_at = str(exc)
            raise zlib.error(self.broken_at) from None
        self._input = self._inflate.unconsumed_tail
        self._offset = 0
        self._given_out += len(self._pending)
        self._check_inflation()

    def _check_inflation(self) -> None:
        limit = self._inflation
        problem = None
        if self._given_out > limit.max_bytes:
            problem = f"inflates past indexing.max_decompressed_bytes ({limit.max_bytes} bytes)"
        elif self._given_out > RATIO_JUDGED_AFTER and self._given_out > limit.max_ratio * max(self._read_in, 1):
            problem = (
                f"inflates more than indexing.max_compression_ratio ({limit.max_ratio:g}x) times its compressed"
                " size: refused as a decompression bomb"
            )
        if problem is not None:
            self._done = True
            self.broken_at = problem
            self._pending, self._offset = b"", 0
            raise InflationLimitExceeded(problem)


def open_decompressed(raw: IO[bytes], key: str, inflation: Inflation = DEFAULT_INFLATION) -> IO[bytes]:
    if key.endswith(".gz"):
        # A raw reader: short reads keep the data before a break.
        return GzipReader(raw, inflation)  # type: ignore[return-value]
    return raw
