"""Stream plumbing shared by the purge and the vacuum: reading in chunks, gzip output, staging a rewritten object."""

from __future__ import annotations

import base64
import io
import struct
import tempfile
import zlib
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


def gzip_chunks(chunks: Iterable[bytes | memoryview], fed: Plaintext | None = None) -> Iterator[bytes]:
    """One gzip member of the chunks (level 6). fed, if given, is told every chunk as it goes into the deflater."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    for chunk in chunks:
        if fed is not None:
            fed.add(chunk)
        if out := deflate.compress(chunk):
            yield out
    yield deflate.flush()


def gzip_staged(chunks: Iterable[bytes | memoryview]) -> Staged:
    """The chunks staged as one gzip member, with the plaintext fed to its deflater (Staged.plaintext): what the
    check before the write reads instead of inflating the member again (lakepurge.purge.engine.still_holding)."""
    fed = Plaintext()
    staged = Staged.of(gzip_chunks(chunks, fed))
    staged.plaintext = fed
    return staged


class Plaintext:
    """The bytes a gzip rewrite fed its deflater, kept while they hold at most IN_MEMORY_BYTES in memory (the bound
    the check before the write holds them to when it inflates them: past it they are dropped, and the check inflates
    the member as it is written). One zlib pass fewer for every object that fits.

    A piece that is a memoryview keeps the whole chunk it views alive: the memory counted is each chunk's once (a
    drop that removes most of a large object must not pin all of its chunks for a small output)."""

    def __init__(self) -> None:
        self._pieces: list[bytes | memoryview] = []
        self._held = 0
        self._last_chunk: object = None
        self.kept = True

    def add(self, piece: bytes | memoryview) -> None:
        if not self.kept:
            return
        if type(piece) is memoryview:
            if piece.obj is not self._last_chunk:
                self._last_chunk = piece.obj
                self._held += memoryview(piece.obj).nbytes
        else:
            self._held += len(piece)
        self._pieces.append(piece)
        if self._held > IN_MEMORY_BYTES:
            self.release()

    def joined(self) -> bytes:
        """The kept bytes in one piece (joined once: the pieces are memoryviews of the source's chunks)."""
        assert self.kept, "the plaintext was past IN_MEMORY_BYTES and was not kept"
        if len(self._pieces) != 1 or type(self._pieces[0]) is not bytes:
            self._pieces = [b"".join(self._pieces)]
        return self._pieces[0]  # type: ignore[return-value]

    def release(self) -> None:
        """Hold the bytes no longer (a later check inflates the member instead), nor the chunk the last piece viewed."""
        self._pieces.clear()
        self._last_chunk = None
        self.kept = False


class NotTheCheckedBytes(Exception):
    """A gzip member's trailer (CRC-32 and size of what it inflates to) is not that of the plaintext checked: the
    bytes to be written are not those verified, and nothing is written."""


def tie_to_member(staged: Staged, checked: bytes) -> None:
    """Proof that the gzip member staged inflates to exactly the bytes checked, without inflating it: the member's
    trailer states the CRC-32 and the size (mod 2**32) of its plaintext, computed by zlib over what it was fed while
    it deflated; those of the bytes checked must be the same (NotTheCheckedBytes otherwise). Given a deflate stream
    zlib produced (gzip_staged: one member, one compressor), its plaintext is what it was fed, and the CRC64NVME the
    write states binds what S3 stores to the member."""
    trailer = staged.last_bytes(8)
    crc, size = struct.unpack("<II", trailer) if len(trailer) == 8 else (None, None)
    if crc != zlib.crc32(checked) or size != len(checked) & 0xFFFFFFFF:
        raise NotTheCheckedBytes("the gzip member to be written does not hold the bytes checked")


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
        # A gzip member's plaintext as fed to its deflater (gzip_staged), for the check before the write.
        self.plaintext: Plaintext | None = None

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

    def last_bytes(self, count: int) -> bytes:
        """The last count bytes (fewer if there are fewer), without reading the rest."""
        if count <= 0:
            return b""
        if self._file is None:
            tail: list[bytes] = []
            needed = count
            for piece in reversed(self._pieces):
                tail.append(bytes(piece[-needed:]))
                needed -= len(tail[-1])
                if needed <= 0:
                    break
            return b"".join(reversed(tail))
        self._file.flush()
        self._file.seek(-min(count, self.size), io.SEEK_END)
        return self._file.read(count)

    def close(self) -> None:
        if self.plaintext is not None:
            self.plaintext.release()
        self._pieces.clear()
        self._joined = None
        if self._file is not None:
            self._file.close()
            self._file = None
