"""Line-exact rewriting of a byte stream: only the chosen lines change, every other byte passes through.

Chunks that hold no target line are passed on untouched (a bytes.count per chunk), so the cost of a purge is
close to a plain copy of the object, not a parse of every line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

# Decides what becomes of a target line: the replacement bytes (without the line's terminator), DROP to remove
# the line with its terminator, or None to leave it as it is. The line is given without its '\n' and '\r'.
Decide = Callable[[int, bytes], bytes | None]

DROP = b"\x00drop"  # a sentinel no JSON or CSV line can be (NUL is not valid in either)


def splice_lines(chunks: Iterable[bytes], targets: Iterable[int], decide: Decide) -> Iterator[bytes]:
    """Yield the stream with each target line (0-based) replaced as decide says.

    Line terminators are preserved exactly ('\\n', '\\r\\n', or none on the last line). A line split across chunk
    boundaries is reassembled before decide sees it.
    """
    pending = iter(sorted(set(targets)))
    target = next(pending, None)
    line = 0  # the line that starts at the current position
    partial: list[bytes] = []  # a target line's start, when it runs past a chunk boundary
    for chunk in chunks:
        if target is None and not partial:
            yield chunk
            continue
        position, size = 0, len(chunk)
        remaining = chunk.count(b"\n")  # newlines at or after position
        while position < size:
            if partial:
                end = chunk.find(b"\n", position)
                if end < 0:
                    partial.append(chunk[position:])
                    break
                partial.append(chunk[position:end])
                yield _decided(b"".join(partial), line, decide, b"\n")
                partial.clear()
                remaining -= 1
            elif target is None:
                yield chunk[position:]
                break
            else:
                if line + remaining < target:  # the target is in a later chunk
                    yield chunk[position:]
                    line += remaining
                    break
                start = position
                while line < target:
                    position = chunk.index(b"\n", position) + 1
                    line += 1
                    remaining -= 1
                if position > start:
                    yield chunk[start:position]
                end = chunk.find(b"\n", position)
                if end < 0:
                    partial.append(chunk[position:])
                    break
                yield _decided(chunk[position:end], line, decide, b"\n")
                remaining -= 1
            position = end + 1
            line += 1
            target = next(pending, None)
    last = b"".join(partial)
    if last:  # the last line had no terminator (an empty remainder is no line at all)
        yield _decided(last, line, decide, b"")


def _decided(content: bytes, line: int, decide: Decide, terminator: bytes) -> bytes:
    carriage = content.endswith(b"\r")
    body = content[:-1] if carriage else content
    replacement = decide(line, body)
    if replacement is None:
        return content + terminator
    if replacement is DROP:
        return b""
    return replacement + (b"\r" if carriage else b"") + terminator
