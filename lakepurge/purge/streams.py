"""Stream plumbing shared by the purge and the vacuum: reading in chunks, gzip output, staging a rewritten object."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

from lakepurge.formats import CHUNK_BYTES, ByteSource


def read_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_BYTES):
        yield chunk


def gzip_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
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


def stage(chunks: Iterable[bytes]) -> IO[bytes]:
    """Hold the rewritten object (in memory up to 64 MiB, then on disk) until we know a write is needed."""
    staged = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115 - closed by the caller
    for chunk in chunks:
        staged.write(chunk)
    staged.seek(0)
    return staged


def file_chunks(handle: IO[bytes]) -> Iterator[bytes]:
    try:
        while chunk := handle.read(PART_READ):
            yield chunk
    finally:
        handle.close()


PART_READ = 8 * 1024 * 1024
