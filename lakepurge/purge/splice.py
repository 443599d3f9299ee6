"""Line-exact rewriting of a byte stream: only the chosen lines change, every other byte passes through.

Chunks that hold no target line are passed on untouched (a bytes.count per chunk), so the cost of a purge is
close to a plain copy of the object, not a parse of every line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import cast

# Decides what becomes of a target line: the replacement bytes (without the line's terminator), DROP to remove
# the line with its terminator, or None to leave it as it is. The line is given without its '\n' and '\r'.
Decide = Callable[[int, bytes], bytes | None]

DROP = b"\x00drop"  # a sentinel no JSON or CSV line can be (NUL is not valid in either)


def splice_lines(chunks: Iterable[bytes], targets: Iterable[int], decide: Decide) -> Iterator[bytes]:
    """Yield the stream with each target line (0-based) replaced as decide says.

    Line terminators are preserved exactly ('\\n', '\\r\\n', or none on the last line). A line split across chunk
    boundaries is reassembled before decide sees it. A chunk in which a target line starts is split into lines and
    joined again (C, not a Python step per line): a purge erasing many lines of an object costs little more than
    one erasing a few.
    """
    pending = iter(sorted(set(targets)))
    target = next(pending, None)
    if target is not None and target < 0:
        raise ValueError(f"line numbers start at 0, not {target}")
    line = 0  # the line that starts at the current position
    partial: list[bytes] = []  # a target line's start, when it runs past a chunk boundary
    for chunk in chunks:
        if target is None and not partial:
            yield chunk
            continue
        position = 0
        if partial:
            end = chunk.find(b"\n")
            if end < 0:
                partial.append(chunk)
                continue
            partial.append(chunk[:end])
            yield _decided(b"".join(partial), line, decide, b"\n")
            partial.clear()
            line += 1
            target = next(pending, None)
            position = end + 1
        rest = chunk[position:] if position else chunk
        if not rest:
            continue
        if target is None:
            yield rest
            continue
        newlines = rest.count(b"\n")
        if line + newlines < target:  # the next target starts in a later chunk
            yield rest
            line += newlines
            continue
        complete = rest.split(b"\n")
        tail = complete.pop()  # after the last newline: the start of a line that goes on in the next chunk
        pieces = cast("list[bytes | None]", complete)  # None where a line is dropped
        dropped = False
        while target is not None and target < line + newlines:
            index = target - line
            pieces[index] = _replaced(complete[index], target, decide)
            dropped = dropped or pieces[index] is None
            target = next(pending, None)
        kept = [piece for piece in pieces if piece is not None] if dropped else pieces
        if kept:
            yield b"\n".join(kept) + b"\n"  # type: ignore[arg-type]
        line += newlines
        if target == line:
            partial.append(tail)
        elif tail:
            yield tail
    last = b"".join(partial)
    if last:  # the last line had no terminator (an empty remainder is no line at all)
        yield _decided(last, line, decide, b"")


def _replaced(content: bytes, line: int, decide: Decide) -> bytes | None:
    """A target line's new content (without its '\\n'; a '\\r' before it kept), or None when it is dropped."""
    carriage = content.endswith(b"\r")
    body = content[:-1] if carriage else content
    replacement = decide(line, body)
    if replacement is None:
        return content
    if replacement is DROP:
        return None
    return replacement + b"\r" if carriage else replacement


def _decided(content: bytes, line: int, decide: Decide, terminator: bytes) -> bytes:
    replaced = _replaced(content, line, decide)
    return b"" if replaced is None else replaced + terminator
