"""The pieces a server-side splice is built of, each against an independent answer: the record map against the bytes
it maps, the CRC64NVME combination against awscrt, the part plan against S3's part rules, the Thrift codec against
pyarrow's footers."""

from __future__ import annotations

import gzip
import io
import itertools
import os
import random
import struct

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from awscrt import checksums
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.purge.crc_combine import crc64nvme_combine, crc64nvme_of_parts
from lakepurge.purge.server_splice import windows_of, worth_splicing
from lakepurge.purge.spliced_write import (
    MIN_PART_BYTES,
    CopyPart,
    Fresh,
    Kept,
    NotWorthSplicing,
    UploadPart,
    plan_parts,
)
from lakepurge.purge.streams import Staged
from lakepurge.purge.thrift_compact import read_struct, write_struct
from lakepurge.records.formats import group_records
from lakepurge.records.record_map import RecordMap, RecordMapBuilder

pytestmark = pytest.mark.unit

MiB = 1 << 20


def jsonl(count: int, seed: int = 1) -> bytes:
    rnd = random.Random(seed)
    return b"".join(
        orjson.dumps({"user_id": f"u{rnd.randrange(1000)}", "n": n, "pad": rnd.randbytes(rnd.randrange(5, 200)).hex()})
        + b"\n"
        for n in range(count)
    )


def mapped(data: bytes, key: str, fmt: str = "jsonl") -> RecordMap:
    builder = RecordMapBuilder(len(data))
    group_records(io.BytesIO(data), key, fmt, ["user_id"], 16 * MiB, record_map=builder)
    return builder.build('"etag"', None)


def line_starts(plain: bytes) -> dict[int, int]:
    """offset -> line number of every line start of the bytes."""
    starts, offset = {0: 0}, 0
    for line, piece in enumerate(plain.split(b"\n")[:-1], 1):
        offset += len(piece) + 1
        starts[offset] = line
    return starts


def test_given_plain_json_lines_when_mapped_then_every_checkpoint_is_a_line_start_about_a_granule_apart():
    data = jsonl(40_000)  # ~9 MB
    found = mapped(data, "a.jsonl")
    starts = line_starts(data)

    assert found.lines[0] == 0 and found.offsets[0] == 0 and not found.gzip
    assert len(found.offsets) >= len(data) // MiB
    for line, offset in zip(found.lines, found.offsets, strict=True):
        assert starts[offset] == line
    assert all(b - a >= MiB for a, b in itertools.pairwise(found.offsets))
    assert RecordMap.decode(found.encode()) == found


def test_given_gzip_of_several_members_when_mapped_then_the_checkpoints_are_member_starts_that_start_a_line():
    data = jsonl(40_000)
    cuts = [0]
    for target in range(MiB, len(data), MiB):
        cuts.append(data.index(b"\n", target) + 1)
    cuts.append(len(data))
    # one member that begins inside a line (it may not be a checkpoint)
    cuts.insert(3, (cuts[2] + cuts[3]) // 2)
    members = [gzip.compress(data[a:b]) for a, b in itertools.pairwise(cuts)]
    stored = b"".join(members)
    member_starts = {sum(map(len, members[:i])): cuts[i] for i in range(len(members))}
    starts = line_starts(data)

    found = mapped(stored, "a.jsonl.gz")

    assert found.gzip and len(found.offsets) > 3
    for line, offset in zip(found.lines, found.offsets, strict=True):
        plain_offset = member_starts[offset]  # a member's start
        assert starts[plain_offset] == line  # and a line's
    assert sum(map(len, members[:3])) not in found.offsets  # the member starting mid-line


def test_given_gzip_of_one_member_when_mapped_then_only_the_start_is_a_checkpoint():
    found = mapped(gzip.compress(jsonl(20_000)), "a.jsonl.gz")

    assert found.offsets == (0,) and found.gzip


def test_given_csv_with_records_spanning_lines_when_mapped_then_no_checkpoint_falls_inside_one():
    rows = [b"user_id,n,text"]
    for n in range(60_000):
        text = b'"a quoted field\nspanning\n\nlines"' if n % 7 == 0 else b"plain text " * 10
        rows.append(b"u%d,%d,%s" % (n % 97, n, text))
    data = b"\n".join(rows) + b"\n"
    continuation = set()
    line = 0
    for row in rows:
        extra = row.count(b"\n")
        continuation.update(range(line + 1, line + 1 + extra))
        line += 1 + extra

    found = mapped(data, "a.csv", "csv")

    assert len(found.offsets) > 3
    assert not continuation.intersection(found.lines)
    starts = line_starts(data)
    assert all(starts[offset] == line for line, offset in zip(found.lines, found.offsets, strict=True))


def test_given_windows_rewritten_when_the_map_moves_then_it_maps_the_new_bytes():
    data = jsonl(40_000)
    found = mapped(data, "a.jsonl")
    # rewrite intervals 2 and 5 (blank one line in each: lines keep their numbers, bytes shrink)
    moves, new, position = [], [], 0
    for interval in (2, 5):
        start, end = found.offsets[interval], found.end_of(interval)
        window = data[start:end]
        first = window.index(b"\n")
        changed = b"{}" + window[first:]
        new += [data[position:start], changed]
        moves.append((start, end, len(changed), 0))
        position = end
    new.append(data[position:])
    rewritten = b"".join(new)

    shifted = found.shifted('"new"', "v2", len(rewritten), moves)

    starts = line_starts(rewritten)
    assert shifted.describes('"new"', "v2") and shifted.size == len(rewritten)
    assert all(starts[offset] == line for line, offset in zip(shifted.lines, shifted.offsets, strict=True))
    assert len(shifted.offsets) == len(found.offsets)  # windows start and end on checkpoints: none is lost


def test_given_scattered_targets_when_their_windows_would_move_over_half_the_object_then_it_is_rewritten_whole():
    # 64 MiB, a checkpoint every MiB (line n*1000 at n MiB): each window, however small, costs a 5 MiB part
    record_map = RecordMap('"e"', None, 64 * MiB, False, tuple(range(0, 64_000, 1000)), tuple(range(0, 64 * MiB, MiB)))

    def worth(lines: list[int]) -> bool:
        return worth_splicing(record_map, windows_of(record_map, lines))

    assert worth([10]) and worth([n * 6000 + 5 for n in range(9)])  # 9 windows: 45 MiB of 64
    assert not worth([n * 6000 + 5 for n in range(10)])  # 10 windows: 50 MiB, over three quarters
    assert worth([n * 3000 + 5 for n in range(14)])  # 14 windows 3 MiB apart, widened into each other: 44 MiB
    assert worth(list(range(0, 48_000, 7)))  # 48 adjacent intervals are one window of 48 MiB


@given(pieces=st.lists(st.binary(max_size=3000), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_given_any_pieces_when_their_crc64nvme_are_combined_then_it_is_that_of_their_concatenation(pieces):
    combined = crc64nvme_of_parts((checksums.crc64nvme(p), len(p)) for p in pieces)

    assert combined == checksums.crc64nvme(b"".join(pieces))


def test_given_a_long_second_piece_when_combined_then_the_length_is_taken_in_logarithmic_steps():
    first, second = os.urandom(100), os.urandom(3 * MiB)

    assert crc64nvme_combine(checksums.crc64nvme(first), checksums.crc64nvme(second), len(second)) == (
        checksums.crc64nvme(first + second)
    )


def fresh(size: int) -> Fresh:
    return Fresh(Staged.of([b"n" * size]))


def sizes(parts: list) -> list[tuple[str, int]]:
    return [("copy", p.end - p.start) if isinstance(p, CopyPart) else ("upload", p.size) for p in parts]


def test_given_one_small_window_in_the_middle_when_planned_then_it_borrows_from_the_range_after_it():
    parts = plan_parts([Kept(0, 500 * MiB), fresh(MiB), Kept(501 * MiB, 1024 * MiB)])

    assert sizes(parts) == [("copy", 500 * MiB), ("upload", MIN_PART_BYTES), ("copy", 523 * MiB - 4 * MiB)]
    assert parts[1].pieces[1] == Kept(501 * MiB, 505 * MiB)  # type: ignore[union-attr]


def test_given_a_window_first_when_planned_then_the_first_part_still_holds_5_mib():
    parts = plan_parts([fresh(1000), Kept(1000, 100 * MiB)])

    assert sizes(parts)[0] == ("upload", MIN_PART_BYTES)
    assert all(size >= MIN_PART_BYTES for _, size in sizes(parts)[:-1])


def test_given_ranges_too_short_to_copy_between_windows_when_planned_then_they_are_fetched_and_windows_join():
    parts = plan_parts([Kept(0, 50 * MiB), fresh(MiB), Kept(51 * MiB, 53 * MiB), fresh(MiB), Kept(54 * MiB, 90 * MiB)])

    assert [kind for kind, _ in sizes(parts)] == ["copy", "upload", "copy"]
    assert all(size >= MIN_PART_BYTES for _, size in sizes(parts)[:-1])
    upload = parts[1]
    assert isinstance(upload, UploadPart) and Kept(51 * MiB, 53 * MiB) in upload.pieces


def test_given_a_short_range_at_the_end_when_planned_then_it_is_copied_as_the_last_part():
    parts = plan_parts([Kept(0, 20 * MiB), fresh(6 * MiB), Kept(20 * MiB + 10, 20 * MiB + 100)])

    assert sizes(parts) == [("copy", 20 * MiB), ("upload", 6 * MiB), ("copy", 90)]


def test_given_a_plan_that_copies_nothing_when_planned_then_it_is_not_worth_splicing():
    with pytest.raises(NotWorthSplicing):
        plan_parts([Kept(0, 3 * MiB), fresh(MiB), Kept(3 * MiB + 10, 4 * MiB)])


@given(layout=st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=12 * MiB)), min_size=1, max_size=9))
@settings(max_examples=300, deadline=None)
def test_given_any_layout_when_planned_then_s3s_part_rules_hold_and_every_byte_is_placed_once(layout):
    segments, position = [], 0
    for kept, size in layout:
        segments.append(Kept(position, position + size) if kept else Fresh(Staged.of([b"n" * size])))
        position += size
    try:
        parts = plan_parts(segments)
    except NotWorthSplicing:
        return
    assert all(size >= MIN_PART_BYTES for _, size in sizes(parts)[:-1])
    placed = []
    for part in parts:
        placed.extend([Kept(part.start, part.end)] if isinstance(part, CopyPart) else part.pieces)
    # the same bytes in the same order: kept ranges may be cut, never moved
    flat, expected = [], []
    for piece in placed:
        flat.append(("k", piece.start, piece.end) if isinstance(piece, Kept) else ("f", id(piece)))
    for segment in segments:
        expected.append(("k", segment.start, segment.end) if isinstance(segment, Kept) else ("f", id(segment)))
    assert _joined(flat) == _joined(expected)


def _joined(pieces: list[tuple]) -> list[tuple]:
    out: list[tuple] = []
    for piece in pieces:
        if out and piece[0] == "k" and out[-1][0] == "k" and out[-1][2] == piece[1]:
            out[-1] = ("k", out[-1][1], piece[2])
        else:
            out.append(piece)
    return out


def test_given_a_footer_pyarrow_wrote_when_decoded_and_encoded_then_the_bytes_are_the_same():
    table = pa.table({"user_id": ["a", "b"] * 500, "n": list(range(1000)), "l": [[1, 2]] * 1000})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=300, write_page_index=True, write_statistics=True)
    data = sink.getvalue()
    length = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - length : -8]

    fields, end = read_struct(footer)

    assert end == len(footer)
    assert write_struct(fields) == footer
