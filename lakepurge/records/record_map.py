"""Where records start in a large object's stored bytes: the checkpoints a server-side splice aligns its windows to.

The indexer reads every byte of an object anyway; while it does, it notes, about every ``granule`` stored bytes, a
line that starts a record and the stored offset where it starts. A purge then reads only the windows between two
checkpoints that hold its target lines (a ranged GET each) and copies the rest inside S3
(lakepurge.purge.server_splice). What a checkpoint is:

- plain JSON Lines: the first line start after each granule boundary (every line is a record);
- plain CSV: the same, unless that line is inside a record spanning several lines (a quoted field holding a newline,
  as csv_records reads it): such a line is no record start, and no checkpoint;
- gzip: the start of a gzip member that is also a line start (a line may run across members). A single-member
  object has only the checkpoint at 0: it cannot be spliced. Finding members costs nothing: the gzip reader starts a
  new decompressor at each one (lakepurge.records.lines.GzipReader.members).

A map describes one version (ETag and version id): it is stored in the index beside that version's rows, and never
used for another one.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from lakepurge.records.lines import ByteSource

# A checkpoint about every this many stored bytes, or more apart in very large objects (MAX_CHECKPOINTS): a window is
# at least one granule; S3's 5 MiB parts make the spliced windows larger anyway.
GRANULE_BYTES = 1 << 20
MAX_CHECKPOINTS = 8192

# A window a splice rewrote: (start, end) in the old version's stored bytes, its new length, the lines it lost.
Move = tuple[int, int, int, int]


def granule_for(size: int) -> int:
    """The spacing of checkpoints for an object of `size` stored bytes: at most MAX_CHECKPOINTS of them (the map of a
    5 TB object stays a few tens of KB: the index stores it in one item)."""
    return max(GRANULE_BYTES, -(-size // MAX_CHECKPOINTS))


@dataclass(frozen=True, slots=True)
class RecordMap:
    """Record starts of one object version: lines[i] starts at stored byte offsets[i] (both ascending; the first is
    line 0 at offset 0). For gzip, each offset is a member's start and the line the member's first byte begins."""

    etag: str
    version_id: str | None
    size: int
    gzip: bool
    lines: tuple[int, ...]
    offsets: tuple[int, ...]

    def describes(self, etag: str, version_id: str | None) -> bool:
        return self.etag == etag and self.version_id == version_id

    def interval_of(self, line: int) -> int:
        """The index of the checkpoint interval holding `line` (interval i runs from checkpoint i to i + 1)."""
        return bisect.bisect_right(self.lines, line) - 1

    def end_of(self, interval: int) -> int:
        """The stored offset where interval `interval` ends (the next checkpoint, or the end of the object)."""
        return self.offsets[interval + 1] if interval + 1 < len(self.offsets) else self.size

    def encode(self) -> bytes:
        """Compact bytes for the index (deltas, JSON, zlib): a few bytes per checkpoint."""
        document = {
            "v": 1,
            "etag": self.etag,
            "version_id": self.version_id,
            "size": self.size,
            "gzip": self.gzip,
            "lines": _deltas(self.lines),
            "offsets": _deltas(self.offsets),
        }
        return zlib.compress(orjson.dumps(document), 6)

    @classmethod
    def decode(cls, blob: bytes) -> RecordMap | None:
        """The map in `blob`, or None for bytes this version does not read (another format version, damage)."""
        try:
            document: dict[str, Any] = orjson.loads(zlib.decompress(blob))
            if document.get("v") != 1:
                return None
            lines, offsets = _sums(document["lines"]), _sums(document["offsets"])
            if len(lines) != len(offsets) or not lines or lines[0] != 0 or offsets[0] != 0:
                return None
            return cls(
                str(document["etag"]),
                document["version_id"],
                int(document["size"]),
                bool(document["gzip"]),
                lines,
                offsets,
            )
        except (zlib.error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def shifted(
        self, etag: str, version_id: str | None, size: int, moves: list[tuple[int, int, int, int]]
    ) -> RecordMap:
        """The map of the version a splice wrote from this one. moves: (start, end, new length, lines removed) of
        each rewritten window, in order, in this version's offsets; each window starts and ends at a checkpoint (or
        the object's end). Checkpoints inside a window are dropped (its new bytes were not mapped); every other one
        moves by the bytes and lines the windows before it gained or lost."""
        lines: list[int] = []
        offsets: list[int] = []
        byte_shift = line_shift = 0
        pending = iter(moves)
        window = next(pending, None)
        for line, offset in zip(self.lines, self.offsets, strict=True):
            while window is not None and offset >= window[1]:
                byte_shift += window[2] - (window[1] - window[0])
                line_shift += window[3]
                window = next(pending, None)
            if window is not None and window[0] < offset < window[1]:
                continue
            lines.append(line - line_shift)
            offsets.append(offset + byte_shift)
        return RecordMap(etag, version_id, size, self.gzip, tuple(lines), tuple(offsets))


def _deltas(values: tuple[int, ...]) -> list[int]:
    return [b - a for a, b in zip((0, *values), values, strict=False)]


def _sums(deltas: list[int]) -> tuple[int, ...]:
    total = 0
    out = []
    for delta in deltas:
        total += int(delta)
        out.append(total)
    return tuple(out)


class RecordMapBuilder:
    """Collects a record map while an object is read (the indexer's reading, unchanged): watch() wraps the
    decompressed stream the reader reads; a CSV reader tells the records spanning several lines (spans)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.granule = granule_for(size)
        self.spans: list[tuple[int, int]] = []  # (first line, lines) of each CSV record of more than one line
        self._found: list[tuple[int, int]] = [(0, 0)]  # (line, stored offset) candidates
        self._gzip = False
        self._watched: _Watched | None = None

    def watch(self, stream: ByteSource) -> ByteSource:
        members = getattr(stream, "members", None)
        self._gzip = members is not None
        self._watched = _Watched(stream, self, members)
        return self._watched

    def build(self, etag: str, version_id: str | None) -> RecordMap:
        found = self._found
        if self.spans:
            inside = _InsideSpans(self.spans)
            found = [(line, offset) for line, offset in found if not inside(line)]
        # thinned to one checkpoint per granule of stored bytes (gzip members may be much smaller)
        lines, offsets, last = [0], [0], 0
        for line, offset in found[1:]:
            if offset - last >= self.granule and line > lines[-1] and offset < self.size:
                lines.append(line)
                offsets.append(offset)
                last = offset
        return RecordMap(etag, version_id, self.size, self._gzip, tuple(lines), tuple(offsets))


class _InsideSpans:
    """Whether a line is a continuation line of a record spanning several (not its first line)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self._starts = [start for start, _ in spans]
        self._ends = [start + count for start, count in spans]

    def __call__(self, line: int) -> bool:
        i = bisect.bisect_left(self._starts, line) - 1
        return i >= 0 and line < self._ends[i]


class _Watched:
    """The decompressed stream, passed through; at each read, the record-start candidates in what it gave out."""

    def __init__(self, inner: ByteSource, builder: RecordMapBuilder, members: list[tuple[int, int]] | None) -> None:
        self._inner = inner
        self._builder = builder
        self._members = members  # (stored offset, decompressed offset) of each gzip member's start, as found
        self._members_seen = 1  # the first member (0, 0) is line 0
        self._position = 0  # decompressed bytes given out
        self._lines = 0  # newlines among them
        self._last = b"\n"  # the byte before the next one given out
        self._next_boundary = builder.granule  # plain objects: the next granule boundary to find a line start after

    def read(self, size: int = -1, /) -> bytes:
        data = self._inner.read(size)
        if data:
            for candidate in self._candidates(data):
                self._builder._found.append(candidate)
            self._position += len(data)
            self._lines += data.count(b"\n")
            self._last = data[-1:]
        return data

    def _candidates(self, data: bytes) -> Iterator[tuple[int, int]]:
        start = self._position
        if self._members is not None:
            while self._members_seen < len(self._members):
                stored, at = self._members[self._members_seen]
                if at > start + len(data):
                    break  # its bytes come in a later read
                self._members_seen += 1
                before = self._last if at == start else data[at - start - 1 : at - start]
                if before == b"\n":
                    yield self._lines + data.count(b"\n", 0, at - start), stored
            return
        while self._next_boundary < start + len(data):
            end = data.find(b"\n", max(self._next_boundary - start, 0))
            if end < 0:
                self._next_boundary = start + len(data)  # the line start is in a later read
                return
            line_start = start + end + 1
            yield self._lines + data.count(b"\n", 0, end + 1), line_start
            self._next_boundary = line_start + self._builder.granule
