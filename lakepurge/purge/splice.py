"""Line-exact rewriting of a byte stream: only the chosen lines change, every other byte passes through.

The bytes between target lines are never split into lines: the splice counts newlines in bulk (``bytes.count``) to
reach the next target, or, when a chunk's skips are long, finds its line starts with Arrow outside the interpreter
lock; it passes the untouched stretch on as a memoryview of the chunk it came in, so no byte of a line that is not
a target is copied or looked at by Python code. A purge therefore costs about what reading and writing the object
costs, plus the decision on each target line.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, compress, filterfalse, repeat
from typing import cast

from lakepurge.records.arrow_scan import LineStarts

# Decides what becomes of a target line: the replacement bytes (without the line's terminator), DROP to remove
# the line with its terminator, or None to leave it as it is. The line is given without its '\n' and its '\r'.
Decide = Callable[[int, bytes], bytes | None]
DecideMany = Callable[[list[int], list[bytes]], list[bytes | None]]  # the same for several lines at once

DROP = b"\x00drop"  # a sentinel no JSON or CSV line can be (NUL is not valid in either)
_IS_DROP = functools.partial(operator.is_, DROP)

_FEW_LINES = 8  # a gap this short is walked with find; a longer one is counted over in bulk
# When the skips to a chunk's targets add up to at least this many bytes (estimated), the chunk's line starts are
# found with Arrow instead of counting newlines: more CPU, but without the interpreter lock
# (lakepurge.records.arrow_scan), so the purge's other threads go on meanwhile.
_INDEXED_SKIP_BYTES = 128 * 1024
_DENSE_EVERY = 16  # a target at least every this many lines: the chunk is split into lines instead
_JOINED_PIECES = 64  # a chunk's pieces past this many are handed on joined
_LOCATED_AT_ONCE = 16  # from this many targets on the line starts reach, they are located by kernels, not steps
_DENSE_MIN_BYTES = 4096
_ENDS_WITH_CARRIAGE = operator.methodcaller("endswith", b"\r")
_IS_DECIDED = functools.partial(operator.is_not, None)


def splice_lines(chunks: Iterable[bytes], targets: Iterable[int], decide: Decide) -> Iterator[bytes | memoryview]:
    """Yield the stream with each target line (0-based) replaced as decide says (one line at a time)."""

    def one_by_one(lines: list[int], contents: list[bytes]) -> list[bytes | None]:
        return [decide(line, content) for line, content in zip(lines, contents, strict=True)]

    return splice_batches(chunks, targets, one_by_one)


def splice_batches(chunks: Iterable[bytes], targets: Iterable[int], decide: DecideMany) -> Iterator[bytes | memoryview]:
    """Yield the stream with each target line (0-based) replaced as decide says, deciding the target lines of a
    chunk together (so a decision can be made for all of them in C: parse, hash, look up).

    Line terminators are preserved exactly ('\\n', '\\r\\n', or none on the last line). A target line split
    across chunk boundaries is reassembled before decide sees it.
    """
    ordered = sorted(set(targets))
    if ordered and ordered[0] < 0:
        raise ValueError(f"line numbers start at 0, not {ordered[0]}")
    pending = iter(ordered)
    target = next(pending, None)
    done = 0  # targets before ordered[done] are decided
    line = 0  # the line that starts at `pos` (or that the chunk's first bytes continue)
    held: list[bytes] = []  # the start of a target line that runs past a chunk boundary
    held_line = -1  # that target line; -1 when none is held
    average = 256.0  # bytes a line, as last measured: how far a bulk count may go
    for chunk in chunks:
        if target is None and held_line < 0:
            yield chunk
            continue
        view = memoryview(chunk)
        size = len(chunk)
        pos = passed = 0  # bytes of this chunk before `passed` are yielded already
        if held_line >= 0:
            end = chunk.find(b"\n")
            if end < 0:
                held.append(chunk)
                continue
            content = b"".join((*held, chunk[:end]))
            held.clear()
            (replacement,) = _decided(decide, [held_line], [content])
            if replacement is not DROP:
                yield (content if replacement is None else replacement) + b"\n"
            passed = pos = end + 1
            line += 1
            held_line = -1
            target = next(pending, None)
            done += 1
        if target is not None and size - pos > _DENSE_MIN_BYTES:
            lines_left = (size - pos) / average
            if (bisect.bisect_left(ordered, line + lines_left, lo=done) - done) * _DENSE_EVERY >= lines_left:
                # Targets every few lines: split the rest of the chunk into lines in C and join it again.
                parts = (chunk[pos:] if pos else chunk).split(b"\n")
                complete = len(parts) - 1  # the last part goes on in the next chunk (or is empty)
                stop = bisect.bisect_left(ordered, line + complete, lo=done)
                tail = parts[-1]
                yield _dense(parts, ordered[done:stop], line, decide)
                average = (size - pos) / complete if complete else average
                line += complete
                pending = iter(ordered[stop:])
                target = next(pending, None)
                done = stop
                if target is not None and target == line:
                    held_line = target
                    held.append(tail)
                elif tail:
                    yield tail
                continue
        starts: list[int] = []
        ends: list[int] = []
        numbers: list[int] = []
        find = chunk.find
        indexed: LineStarts | None = None  # the rest of the chunk's line starts, when its skips are long
        indexed_line = line  # the line where `indexed` begins
        while target is not None and pos < size:
            gap = target - line
            if gap > _FEW_LINES:
                if (
                    indexed is None
                    and _skips_ahead(ordered, done, line, (size - pos) / average) * average >= _INDEXED_SKIP_BYTES
                ):
                    indexed, indexed_line = LineStarts(chunk, pos), line
                    average = (size - pos) / indexed.newlines if indexed.newlines else average
                    # Every target on a complete line of the rest of the chunk, located at once when they are many
                    # (a few kernel calls, not a step each); a target on its last line, or past it, and a few
                    # targets are left to the steps below.
                    stop = bisect.bisect_left(ordered, indexed_line + indexed.newlines, lo=done)
                    if stop - done >= _LOCATED_AT_ONCE:
                        located = ordered[done:stop]
                        found_starts, found_ends = indexed.spans([each - indexed_line for each in located])
                        numbers += located
                        starts += found_starts
                        ends += found_ends
                        pos, line = found_ends[-1] + 1, located[-1] + 1
                        pending = iter(ordered[stop:])
                        target = next(pending, None)
                        done = stop
                        continue
                if indexed is not None:
                    ahead = target - indexed_line
                    if ahead > indexed.newlines:
                        pos, line = size, indexed_line + indexed.newlines
                        break  # the target starts in a later chunk
                    pos, line = indexed.start_of(ahead), target
                else:
                    before, before_line = pos, line
                    pos, line = skip_lines(chunk, pos, line, target, average)
                    average = (pos - before) / (line - before_line) if line - before_line > _FEW_LINES else average
                    if line < target:
                        break  # the target starts in a later chunk
            else:  # a few lines on (dense targets): found here, without a call per target
                while gap:
                    end = find(b"\n", pos)
                    if end < 0:
                        break
                    pos = end + 1
                    gap -= 1
                line = target - gap
                if gap:
                    pos = size
                    break
            end = find(b"\n", pos)
            if end < 0:
                held_line = target  # it goes on in the next chunk
                break
            numbers.append(target)
            starts.append(pos)
            ends.append(end)
            pos = end + 1
            line += 1
            target = next(pending, None)
            done += 1
        out: list[bytes | memoryview] = []
        if numbers:
            contents = list(map(chunk.__getitem__, map(slice, starts, ends)))
            passed = _replaced(out, view, passed, starts, ends, _decided(decide, numbers, contents))
        if held_line >= 0:
            if passed < pos:
                out.append(view[passed:pos])
            held.append(chunk[pos:])
            passed = size
        if passed < size:
            out.append(view[passed:] if passed else chunk)
        # Many pieces go on as one (a copy of what they hold, the chunk's rest included, so that staging an object of
        # one chunk copies it no more): each piece handed on costs its consumer a step (staging, checksum, deflate),
        # about as much as copying a line.
        yield from (b"".join(out),) if len(out) > _JOINED_PIECES else out
    content = b"".join(held)
    if held_line >= 0 and content:  # the last line had no terminator (an empty remainder is no line at all)
        (replacement,) = _decided(decide, [held_line], [content])
        if replacement is None:
            yield content
        elif replacement is not DROP:
            yield replacement


def _replaced(
    out: list[bytes | memoryview],
    view: memoryview,
    passed: int,
    starts: list[int],
    ends: list[int],
    decided: list[bytes | None],
) -> int:
    """Appends to out the chunk's bytes from `passed` to the last target line changed, each changed line (at
    starts[i]:ends[i], its '\\n' at ends[i]) replaced as decided; returns where the bytes not yet handed on start.
    The stretches between the lines are views of the chunk, and the pieces are made by C calls over all the lines
    (no Python step per line)."""
    if None in decided:  # the lines left as they are go on within the stretches
        changed = list(map(_IS_DECIDED, decided))
        starts, ends = list(compress(starts, changed)), list(compress(ends, changed))
        decided = list(compress(decided, changed))
        if not decided:
            return passed
    begins = [passed, *map(operator.add, ends[:-1], repeat(1))]  # each stretch ends where a changed line starts
    stretches = map(view.__getitem__, map(slice, begins, starts))
    changes = cast("list[bytes]", decided)  # (none is None now)
    first = changes[0]
    if all(map(operator.is_, changes, repeat(first))):  # one replacement for every line (the purge's: blank or drop)
        out.extend(stretches if first is DROP else chain.from_iterable(zip(stretches, repeat(first + b"\n"))))
    else:
        lines = (b"" if replacement is DROP else replacement + b"\n" for replacement in changes)
        out.extend(chain.from_iterable(zip(stretches, lines, strict=True)))
    return ends[-1] + 1


def _skips_ahead(ordered: list[int], done: int, line: int, lines_left: float) -> int:
    """How many lines from `line` to the last of the targets (ordered[done:]) the chunk's estimated `lines_left`
    lines hold: what the skips to them add up to."""
    last = bisect.bisect_left(ordered, line + lines_left, lo=done) - 1
    return ordered[max(last, done)] - line


def skip_lines(chunk: bytes, pos: int, line: int, target: int, average: float = 256.0) -> tuple[int, int]:
    """Advance from `pos` (in line `line`) to the start of line `target`: the position reached and its line. Stops
    at the chunk's end when the target is not in it.

    A long way is counted over in bulk: stretches that, at `average` bytes a line (the caller's estimate), end
    short of the target (halved while they do not), then the last few lines are found one by one."""
    gap = target - line
    size = len(chunk)
    while gap > _FEW_LINES:
        span = max(int(average * gap * 0.75), 1)
        if pos + span >= size:
            found = chunk.count(b"\n", pos)
            if found < gap:
                return size, line + found
            span = max((size - pos) * gap * 3 // (4 * found), 1)
        found = chunk.count(b"\n", pos, pos + span)
        while found >= gap:
            span //= 2
            found = chunk.count(b"\n", pos, pos + span)
        pos += span
        line += found
        gap -= found
    find = chunk.find
    while gap > 0:
        end = find(b"\n", pos)
        if end < 0:
            return size, line
        pos = end + 1
        line += 1
        gap -= 1
    return pos, line


def _dense(parts: list[bytes], chosen: list[int], first_line: int, decide: DecideMany) -> bytes:
    """The complete lines of parts (all but the last, which the caller keeps) joined again, each with its '\\n',
    the chosen lines replaced as decided. Every step is one C call over all the lines (no Python step per line)."""
    parts[-1] = b""  # so the join ends with the last complete line's '\n' (no copy to append it)
    if not chosen:
        return b"\n".join(parts)
    places = list(map(operator.sub, chosen, repeat(first_line))) if first_line else chosen
    decided = _decided(decide, chosen, list(map(parts.__getitem__, places)))
    if None in decided:  # some lines stay as they are: only the others go into their places
        changed = list(map(_IS_DECIDED, decided))
        replacements = cast("Iterator[bytes]", compress(decided, changed))
        deque(map(parts.__setitem__, compress(places, changed), replacements), maxlen=0)
    else:
        deque(map(parts.__setitem__, places, cast("list[bytes]", decided)), maxlen=0)
    if any(map(_IS_DROP, decided)):  # DROP marks a line to leave out, with its '\n'
        parts = list(filterfalse(_IS_DROP, parts))
    return b"\n".join(parts) if len(parts) > 1 else b""


def _decided(decide: DecideMany, lines: list[int], contents: list[bytes]) -> list[bytes | None]:
    """The target lines' new contents (without the final '\\n'; a '\\r' before it kept), DROP, or None."""
    if b"\r" not in b"".join(contents) or not any(map(_ENDS_WITH_CARRIAGE, contents)):  # the first in bulk
        return decide(lines, contents)
    carriages = [content.endswith(b"\r") for content in contents]
    contents = [c[:-1] if carried else c for c, carried in zip(contents, carriages, strict=True)]
    replacements = decide(lines, contents)
    return [
        r + b"\r" if carried and r is not None and r is not DROP else r
        for r, carried in zip(replacements, carriages, strict=True)
    ]
