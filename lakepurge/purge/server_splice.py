"""Server-side splice of a JSON Lines or CSV object (plain, or gzip of several members): only the windows that hold
the target lines go through the purge; the rest is copied inside S3 (lakepurge.purge.spliced_write).

A window runs from one checkpoint of the object's record map (lakepurge.records.record_map: record starts the indexer
noted, or this purge's own read of the version) to a later one, so it starts and ends on a record boundary: it is
fetched with one ranged GET of the pinned version and rewritten by the same rewriter as a whole object
(lakepurge.purge.rewrite), so every byte comes out as a whole-object rewrite would give it. A CSV window is rewritten
behind the object's header (the rewriter reads the id column from it), which is then cut off again. A gzip window is
a run of whole members: inflated, rewritten, deflated again as one member (the object stays a valid gzip stream of
several members; its inflated bytes are those of a whole-object rewrite).

Every rewritten window is read for the users with the indexer's grammar before anything is written (the check the
whole rewrite makes on the whole object); what proves the copied ranges is described in docs/ARCHITECTURE.md,
"Server-side splice".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, cast

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.s3io import ObjectHead, open_range
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl
from lakepurge.purge.spliced_write import MIN_PART_BYTES, Fresh, Kept, NotWorthSplicing, Segment
from lakepurge.purge.streams import LinesLost, Staged, gzip_chunks
from lakepurge.records.csv_records import csv_records
from lakepurge.records.lines import GzipReader
from lakepurge.records.record_map import Move, RecordMap

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# The lines of produced bytes (not compressed) that still hold one of the users: the engine's check before a write.
Holding = Callable[[Staged, str], list[int]]


@dataclass(slots=True)
class Spliced:
    """A splice's new object as segments, and what its windows erased (line numbers of the version read)."""

    segments: list[Segment]
    erased: list[int] = field(default_factory=list)
    not_matching: int = 0
    lines_of: dict[int, int] = field(default_factory=dict)  # physical lines of each erased record spanning several
    holding: list[int] = field(default_factory=list)  # lines of rewritten windows that still hold a user
    moves: list[Move] = field(default_factory=list)  # each window: (start, end, new length, lines removed)
    windows: int = 0
    read_bytes: int = 0  # window bytes (and a CSV header) read through the purge

    def close(self) -> None:
        for segment in self.segments:
            if isinstance(segment, Fresh):
                segment.staged.close()


def windows_of(record_map: RecordMap, lines: list[int]) -> list[tuple[int, int]]:
    """The checkpoint intervals holding the target lines, adjacent ones joined: (first, last) interval of each."""
    dirty = sorted({record_map.interval_of(line) for line in lines})
    windows: list[tuple[int, int]] = []
    for interval in dirty:
        if windows and windows[-1][1] + 1 == interval:
            windows[-1] = (windows[-1][0], interval)
        else:
            windows.append((interval, interval))
    return windows


# Windows that would move more than this share of an object through the purge (each at least one 5 MiB part, read
# and sent) save little on a whole rewrite, which reads it in one GET, and cost a request each (100 lines scattered
# over a 1 GiB object: bench/README.md, "Server-side splice"): the object is rewritten whole.
MAX_WINDOW_SHARE = 0.75


def worth_splicing(record_map: RecordMap, windows: list[tuple[int, int]]) -> bool:
    """Whether the windows (windows_of), each widened to S3's smallest part as the part plan widens them
    (spliced_write.plan_parts), move at most MAX_WINDOW_SHARE of the object's stored bytes."""
    moved, reach = 0, 0  # bytes moved so far, and the end of the last widened window
    for first, last in windows:
        start = max(record_map.offsets[first], reach)
        end = min(max(record_map.end_of(last), record_map.offsets[first] + MIN_PART_BYTES), record_map.size)
        moved += max(end - start, 0)
        reach = max(reach, end)
    return moved <= MAX_WINDOW_SHARE * record_map.size


def splice_lines(
    s3: S3Client,
    head: ObjectHead,
    dataset: DatasetConfig,
    settings: Settings,
    record_map: RecordMap,
    lines: list[int],
    users: Container[str],
    holding: Holding,
) -> Spliced:
    """The spliced object's segments, every target window rewritten and checked (see the module docstring)."""
    gz = head.key.endswith(".gz")
    if gz != record_map.gzip:
        raise NotWorthSplicing("the record map was made for another compression")
    windows = windows_of(record_map, lines)
    if not worth_splicing(record_map, windows):
        raise NotWorthSplicing(f"{len(windows)} windows would move most of the object")
    spliced = Spliced(segments=[])
    plain_key = head.key[:-3] if gz else head.key
    header = b""
    if dataset.format == "csv" and any(first > 0 for first, _ in windows):
        header = _csv_header(s3, head, record_map, gz, settings.indexing.max_record_bytes, spliced)
    position = 0
    try:
        for first, last in windows:
            start, end = record_map.offsets[first], record_map.end_of(last)
            first_line = record_map.lines[first]
            next_line = record_map.lines[last + 1] if last + 1 < len(record_map.lines) else None
            targets = [t for t in lines if t >= first_line and (next_line is None or t < next_line)]
            if position < start:
                spliced.segments.append(Kept(position, start))
            prefix = header if first > 0 else b""
            fresh = _rewrite_window(s3, head, dataset, settings, (start, end), first_line, targets, prefix, users)
            spliced.read_bytes += end - start
            erased_here, owner = fresh.erased, fresh.owner
            spliced.erased.extend(erased_here)
            spliced.not_matching += owner.not_matching
            spliced.lines_of.update(fresh.lines_of)
            spliced.holding.extend(fresh.line_of(n) for n in holding(fresh.staged, plain_key))
            body = fresh.staged
            if prefix:
                body = _without_prefix(fresh.staged, prefix)
                fresh.staged.close()
            if gz:
                packed = Staged.of(gzip_chunks(body.parts(1 << 20)))
                body.close()
                body = packed
            removed = sum(spliced.lines_of.get(n, 1) for n in erased_here) if dataset.erase == "drop" else 0
            spliced.moves.append((start, end, body.size, removed))
            spliced.segments.append(Fresh(body))
            spliced.windows += 1
            position = end
        if position < record_map.size:
            spliced.segments.append(Kept(position, record_map.size))
    except BaseException:
        spliced.close()
        raise
    spliced.erased.sort()
    return spliced


@dataclass(slots=True)
class _Window:
    staged: Staged  # the rewritten window, not compressed, behind the prefix (a CSV header) if any
    owner: Ownership
    shift: int  # add to a line number of the window's stream to get the object's

    def line_of(self, number: int) -> int:
        return number + self.shift

    @property
    def erased(self) -> list[int]:
        return [self.line_of(n) for n in self.owner.erased]

    @property
    def lines_of(self) -> dict[int, int]:
        return {self.line_of(n): count for n, count in self.owner.lines_of.items()}


def _rewrite_window(
    s3: S3Client,
    head: ObjectHead,
    dataset: DatasetConfig,
    settings: Settings,
    span: tuple[int, int],
    first_line: int,
    targets: list[int],
    prefix: bytes,
    users: Container[str],
) -> _Window:
    """One window fetched (ranged GET of the pinned version), inflated if gzip, rewritten behind `prefix`."""
    start, end = span
    raw = _Counted(open_range(s3, head, start, end))
    gz = head.key.endswith(".gz")
    indexing = settings.indexing
    source = cast("IO[bytes]", GzipReader(cast("IO[bytes]", raw), indexing.inflation) if gz else raw)
    prefix_lines = prefix.count(b"\n")
    shift = first_line - prefix_lines
    relative = [t - shift for t in targets]
    owner = Ownership(dataset, users, id_rules(dataset))
    drop = dataset.erase == "drop"
    try:
        if dataset.format == "jsonl":
            staged = rewrite_jsonl(source, False, relative, owner, drop, indexing.inflation)
        else:
            stream = cast("IO[bytes]", _Prefixed(prefix, source)) if prefix else source
            staged = rewrite_csv(stream, False, relative, owner, drop, indexing.max_record_bytes, indexing.inflation)
    finally:
        raw.close()
    if raw.count != end - start:  # a body cut short must never become a shorter object
        staged.close()
        raise LinesLost(f"the window of {end - start} bytes was read as {raw.count}")
    return _Window(staged, owner, shift)


def _without_prefix(staged: Staged, prefix: bytes) -> Staged:
    """The staged bytes without the header they were rewritten behind (the rewriter never touches a header)."""
    reader = staged.reader()
    if reader.read(len(prefix)) != prefix:
        raise LinesLost("the rewritten window does not start with the object's header")
    return Staged.of(iter(lambda: reader.read(1 << 20), b""))


def _csv_header(
    s3: S3Client, head: ObjectHead, record_map: RecordMap, gz: bool, max_bytes: int, spliced: Spliced
) -> bytes:
    """The object's header record, as its bytes (with its line ends): read from the first checkpoint interval, which
    holds it whole (the next checkpoint starts a record after it)."""
    raw = _Counted(open_range(s3, head, 0, record_map.end_of(0)))
    try:
        source = cast("IO[bytes]", GzipReader(cast("IO[bytes]", raw)) if gz else raw)
        record = next(csv_records(source, max_bytes), None)
    finally:
        raw.close()
        spliced.read_bytes += raw.count
    if record is None or record.row is None or None in record.lines:
        raise NotWorthSplicing("the CSV header could not be read")
    return b"".join(line + b"\n" for line in record.lines)  # type: ignore[operator]


class _Counted:
    """A stream that counts the bytes read from it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self.count += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()


class _Prefixed:
    """Some bytes, then a stream."""

    def __init__(self, prefix: bytes, rest: IO[bytes]) -> None:
        self._chunks: Iterator[bytes] = itertools.chain((prefix,), iter(lambda: rest.read(1 << 20), b""))
        self._held = b""

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return self._held + b"".join(self._chunks)
        while not self._held:
            self._held = next(self._chunks, b"")
            if not self._held:
                return b""
        piece, self._held = self._held[:size], self._held[size:]
        return piece
