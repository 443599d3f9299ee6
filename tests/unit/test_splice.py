"""splice_lines against a naive line-by-line rewrite, over random data and random chunkings."""

from __future__ import annotations

import itertools
import random
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakepurge.purge import splice
from lakepurge.purge.splice import DROP, splice_lines
from lakepurge.records.arrow_scan import LineStarts
from lakepurge.records.lines import CHUNK_BYTES

pytestmark = pytest.mark.unit


def naive(data: bytes, targets: set[int]) -> bytes:
    lines = data.split(b"\n")
    out = []
    for number, line in enumerate(lines):
        if number in targets and not (number == len(lines) - 1 and line == b""):
            out.append(b"{}" + (b"\r" if line.endswith(b"\r") else b""))
        else:
            out.append(line)
    return b"\n".join(out)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


line_strategy = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"x"))


@given(
    lines=st.lists(st.tuples(line_strategy, st.sampled_from([b"\n", b"\r\n"])), max_size=40),
    final=st.booleans(),
    targets=st.sets(st.integers(min_value=0, max_value=45)),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
@settings(max_examples=400, deadline=None)
def test_given_any_bytes_and_chunking_when_splicing_then_only_target_lines_change(lines, final, targets, cuts):
    data = b"".join(content + end for content, end in lines)
    if final:
        data += b"last line without newline"
    out = b"".join(splice_lines(chunked(data, cuts), targets, lambda n, line: b"{}"))
    assert out == naive(data, targets)


def test_given_a_decider_that_keeps_a_line_when_splicing_then_it_is_byte_identical():
    data = b'{"u":"a"}\r\n{"u":"b"}\n{"u":"a"}'
    seen = []

    def decide(number, line):
        seen.append((number, line))
        return b"{}" if b'"a"' in line else None

    out = b"".join(splice_lines([data[:5], data[5:14], data[14:]], [0, 1, 2, 7], decide))
    assert out == b'{}\r\n{"u":"b"}\n{}'
    assert seen == [(0, b'{"u":"a"}'), (1, b'{"u":"b"}'), (2, b'{"u":"a"}')]


def test_given_drop_when_splicing_then_the_line_and_its_terminator_go():
    from lakepurge.purge.splice import DROP

    data = b"a\r\nb\nc\nd"
    out = b"".join(splice_lines([data], [1, 3], lambda n, line: DROP))
    assert out == b"a\r\nc\n"


@pytest.mark.parametrize("skips", ["counted", "by line starts", "by line starts, located at once"])
@given(
    lines=st.lists(st.tuples(line_strategy, st.sampled_from([b"\n", b"\r\n"])), max_size=80),
    final=st.booleans(),
    decisions=st.dictionaries(st.integers(min_value=0, max_value=85), st.sampled_from(["blank", "keep", "drop"])),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
)
# Skips of more than a few lines (what takes the line starts path): within a chunk, and to a line that starts at
# the end of one chunk and goes on in the next.
@example(lines=[(b"x", b"\n")] * 40, final=False, decisions={20: "blank", 35: "drop"}, cuts=[])
@example(lines=[(b"xy", b"\r\n")] * 30, final=True, decisions={9: "blank", 14: "keep", 29: "drop"}, cuts=[37, 90])
@settings(max_examples=400, deadline=None)
def test_given_blank_keep_and_drop_decisions_over_any_chunking_when_splicing_then_each_line_gets_its_own(
    skips, lines, final, decisions, cuts
):
    # In a lake only skips of 128 KiB or more find the chunk's line starts with Arrow; "by line starts" sends every
    # skip that way (and "located at once" every target the line starts reach, as from 16 of them).
    data = b"".join(content + end for content, end in lines)
    if final:
        data += b"last line without newline"
    answers = {"blank": b"{}", "keep": None, "drop": DROP}
    threshold = 0 if skips.startswith("by line starts") else splice._INDEXED_SKIP_BYTES
    at_once = 1 if skips == "by line starts, located at once" else 10**9
    with (
        mock.patch.object(splice, "_INDEXED_SKIP_BYTES", threshold),
        mock.patch.object(splice, "_LOCATED_AT_ONCE", at_once),
    ):
        out = b"".join(splice_lines(chunked(data, cuts), decisions, lambda n, line: answers[decisions[n]]))
        # (a chunk's pieces handed on joined, as past _JOINED_PIECES of them)
        with mock.patch.object(splice, "_JOINED_PIECES", 0):
            joined = b"".join(splice_lines(chunked(data, cuts), decisions, lambda n, line: answers[decisions[n]]))
    assert out == joined == expected_after(data, decisions)


def expected_after(data: bytes, decisions: dict[int, str]) -> bytes:
    expected = []
    physical = data.split(b"\n")
    for number, line in enumerate(physical):
        last = number == len(physical) - 1
        if last and line == b"":
            break  # data ended with a newline: no line after it
        choice = decisions.get(number, "keep")
        carriage = b"\r" if line.endswith(b"\r") else b""
        content = {"blank": b"{}" + carriage, "keep": line, "drop": None}[choice]
        if content is not None:
            expected.append(content + (b"" if last else b"\n"))
    return b"".join(expected)


@given(
    count=st.integers(min_value=200, max_value=600),
    every=st.integers(min_value=1, max_value=40),
    seed=st.randoms(use_true_random=False),
    cuts=st.lists(st.integers(min_value=0, max_value=30000), max_size=6),
)
@settings(max_examples=60, deadline=None)
def test_given_dense_and_sparse_targets_in_big_chunks_when_splicing_then_each_line_gets_its_own(
    count, every, seed, cuts
):
    # Chunks of several KiB with a target every few lines take the split-and-join path; sparse ones the counting
    # path; both must give what a line-by-line rewrite gives. (The lines' bytes come from a generator the seed
    # seeds: drawn one by one from strategies, 200-600 of them cost ~30 ms an example, most of make unit's slowest
    # test.)
    rng, ends = random.Random(seed.getrandbits(64)), (b"\n", b"\r\n")
    data = b"".join(
        rng.randbytes(rng.randrange(31)).replace(b"\n", b"x") + ends[rng.randrange(2)] for _ in range(count)
    )
    decisions = {n: seed.choice(["blank", "keep", "drop"]) for n in range(0, count + 2, every)}
    answers = {"blank": b"{}", "keep": None, "drop": DROP}
    out = b"".join(splice_lines(chunked(data, cuts), decisions, lambda n, line: answers[decisions[n]]))
    assert out == expected_after(data, decisions)


def test_given_an_object_of_several_mib_with_sparse_targets_when_spliced_in_1_mib_chunks_then_each_line_gets_its_own():
    # Object-sized skips (the line starts path) across 1 MiB chunks, targets on both sides of each chunk boundary.
    rng = random.Random(16)
    data = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * rng.randrange(200)) for n in range(30_000))
    boundaries = [data.count(b"\n", 0, end) for end in range(CHUNK_BYTES, len(data), CHUNK_BYTES)]
    targets = {0, 29_999, *rng.sample(range(30_000), 12)}
    targets |= {line + step for line in boundaries for step in (-1, 0, 1)}
    decisions = {line: rng.choice(["blank", "drop"]) for line in targets}
    answers = {"blank": b"{}", "drop": DROP}
    chunks = [data[start : start + CHUNK_BYTES] for start in range(0, len(data), CHUNK_BYTES)]
    out = b"".join(splice_lines(chunks, decisions, lambda n, line: answers[decisions[n]]))
    assert out == expected_after(data, decisions)


def test_given_a_negative_line_when_splicing_then_it_is_refused():
    with pytest.raises(ValueError, match="line numbers start at 0"):
        list(splice_lines([b"a\nb\n"], [-1, 0], lambda n, line: b"{}"))


def test_given_a_chunk_with_many_targets_when_spliced_then_it_goes_on_as_one_piece_its_rest_included():
    # Staging an object of one piece takes it as it is; two pieces (the joined targets and the chunk's rest) cost it
    # a second copy of the whole object.
    # (a target every 20 lines over 400 KB: the chunk's line starts path, each target located at once)
    data = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * 180) for n in range(2_000))
    targets = range(5, 1_990, 20)
    pieces = list(splice_lines([data], targets, lambda n, line: b"{}"))
    assert len(pieces) == 1
    assert pieces[0] == expected_after(data, dict.fromkeys(targets, "blank"))


@given(st.binary(max_size=200).map(lambda b: b.replace(b"\x0b", b"\n")), st.integers(0, 200))
@settings(max_examples=100, deadline=None)
def test_given_any_bytes_when_their_line_starts_are_found_in_one_pass_then_each_is_a_newline_counted_by_hand(data, at):
    # LineStarts finds them by RE2's split (binary read as Latin-1: no byte, valid UTF-8 or not, hides a '\n')
    start = min(at, len(data))
    found = LineStarts(data, start)
    by_hand = [start] + [position + 1 for position in range(start, len(data)) if data[position] == ord("\n")]
    assert found.newlines == len(by_hand) - 1
    assert [found.start_of(lines_on) for lines_on in range(found.newlines + 1)] == by_hand
    starts, ends = found.spans(list(range(found.newlines)))
    assert starts == by_hand[:-1]
    assert ends == [each - 1 for each in by_hand[1:]]
