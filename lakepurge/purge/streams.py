"""Stream plumbing shared by the purge and the vacuum: reading in chunks, gzip output, staging a rewritten object."""

from __future__ import annotations

import base64
import io
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any, TypeVar

from awscrt import checksums

from lakepurge.records.limits import IN_MEMORY_BYTES
from lakepurge.records.lines import ByteSource

# The rewrite reads its source in pieces this big. An object up to this size is one piece: spliced, staged and
# verified without a join, each a copy of the whole object (a 1 MiB piece made a 1.3 MB object cost a third more).
REWRITE_READ_BYTES = 8 * 1024 * 1024


def read_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(REWRITE_READ_BYTES):
        yield chunk


def gzip_chunks(chunks: Iterable[bytes | memoryview]) -> Iterator[bytes]:
    import zlib

    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in chunks:
        if out := deflate.compress(chunk):
            yield out
    yield deflate.flush()


class LastByte(io.RawIOBase):
    """Passes a stream through and remembers its last byte (was the final line terminated?)."""

    def __init__(self, inner: ByteSource) -> None:
        self._inner = inner
        self.last = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        if data:
            self.last = data[-1:]
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


_Piece = TypeVar("_Piece", bytes, bytes | memoryview)


class LinesLost(Exception):
    """A rewrite would not give back every line of the object but those erased: nothing is written."""


def to_the_end(source: ByteSource, pieces: Iterable[_Piece]) -> Iterator[_Piece]:
    """The pieces, then proof that the source was read to its end (LinesLost otherwise): a rewrite that stops
    early would write a shorter object, and verification looks for the users, not for everyone else's lines."""
    yield from pieces
    if source.read(1):
        raise LinesLost("the rewrite stopped before the end of the object")


def crc64nvme_base64(value: int) -> str:
    """A CRC64NVME as S3 states it (ChecksumCRC64NVME: the 8 big-endian bytes, base64)."""
    return base64.b64encode(value.to_bytes(8, "big")).decode()


class Staged:
    """A rewritten object held until it is written: its bytes (in memory up to IN_MEMORY_BYTES, then in a temporary
    file), its size and the CRC64NVME of exactly those bytes (the checksum the write states and S3 must store: see
    docs/ARCHITECTURE.md, "Verification by checksum").

    Pieces may be memoryviews of the source's chunks: in memory they are kept as they are and joined once, and the
    checksum is taken over the joined bytes; a spilled object's is taken as its pieces arrive."""

    def __init__(self) -> None:
        self._pieces: list[bytes | memoryview] = []
        self._joined: bytes | None = None
        self._file: IO[bytes] | None = None
        self._crc: int | None = None
        self.size = 0

    @classmethod
    def of(cls, pieces: Iterable[bytes | memoryview]) -> Staged:
        staged = cls()
        for piece in pieces:
            staged.write(piece)
        return staged

    def write(self, piece: bytes | memoryview) -> None:
        if not piece:
            return
        self.size += len(piece)
        if self._file is None:
            self._pieces.append(piece)
            if self.size > IN_MEMORY_BYTES:
                self._spill()
            return
        self._crc = checksums.crc64nvme(piece, self._crc)
        self._file.write(piece)

    def _spill(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._crc = 0
        for held in self._pieces:
            self._crc = checksums.crc64nvme(held, self._crc)
            self._file.write(held)
        self._pieces.clear()

    @property
    def crc64nvme(self) -> int:
        if self._crc is None:
            self._crc = checksums.crc64nvme(self.body())
        return self._crc

    @property
    def checksum(self) -> str:
        return crc64nvme_base64(self.crc64nvme)

    def body(self) -> bytes:
        """The whole object as bytes (in-memory objects only: the single PutObject)."""
        assert self._file is None, "a spilled object is written in parts"
        if self._joined is None:
            self._joined = b"".join(self._pieces)
            self._pieces = [self._joined]
        return self._joined

    def reader(self) -> IO[bytes]:
        """A fresh reader over the staged bytes, from the start (no copy of an in-memory object)."""
        if self._file is None:
            return io.BytesIO(self.body())
        self._file.flush()
        self._file.seek(0)
        return self._file  # one reader at a time: each call starts it again from the beginning

    def parts(self, part_bytes: int) -> Iterator[bytes]:
        """The bytes in pieces of part_bytes (the last shorter), read one at a time."""
        reader = self.reader()
        while part := reader.read(part_bytes):
            yield part

    def close(self) -> None:
        self._pieces.clear()
        self._joined = None
        if self._file is not None:
            self._file.close()
            self._file = None
