"""The check before a gzip object's write reads the plaintext its deflater was fed (no second inflate) and ties it to
the member to be written by the gzip trailer (CRC-32 and size): a member that does not hold exactly the bytes checked
is refused, and a user the index missed is still found in what would be written."""

from __future__ import annotations

import contextlib
import gzip
import io
import weakref
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.core.config import DatasetConfig, IndexingConfig
from lakepurge.purge import streams
from lakepurge.purge.engine import still_holding
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl
from lakepurge.purge.streams import NotTheCheckedBytes, Staged, gzip_staged, tie_to_member
from lakepurge.records import lines as records_lines

pytestmark = pytest.mark.unit

REVIEWS = DatasetConfig(name="reviews", location="s3://lake/reviews/", format="jsonl", id_fields=("user_id",))
PROFILES = DatasetConfig(name="profiles", location="s3://lake/profiles/", format="csv", id_fields=("customer_id",))
INDEXING = IndexingConfig()
ALICE = {"alice"}


def reviews(count: int = 40) -> bytes:
    users = [b"alice", b"bob", b"carol", b"dave"]
    line = b'{"user_id": "%s", "text": "review %d\\n caf\\u00e9"}\n'
    return b"".join(line % (users[n % 4], n) for n in range(count))


def rewritten(plain: bytes, lines: list[int], users: set[str] = ALICE) -> Staged:
    return rewrite_jsonl(io.BytesIO(gzip.compress(plain)), True, lines, Ownership(REVIEWS, users), drop=False)


def test_given_a_stale_plan_that_missed_a_users_line_when_a_gzip_rewrite_is_checked_then_the_line_is_found() -> None:
    plain = reviews()
    alices = [n for n in range(40) if n % 4 == 0]
    staged = rewritten(plain, alices[:-1])  # the index missed alice's last line
    try:
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == [alices[-1]]
        # What would be written holds it too: the plaintext checked is the member's.
        assert b'"alice"' in gzip.decompress(staged.body()).splitlines()[alices[-1]]
    finally:
        staged.close()


def test_given_a_source_of_several_members_when_rewritten_and_checked_then_one_member_holds_the_checked_lines() -> None:
    plain = reviews()
    cut = plain.index(b"\n", len(plain) // 2) + 1
    source = gzip.compress(plain[:cut]) + gzip.compress(plain[cut:])
    alices = [n for n in range(40) if n % 4 == 0]
    staged = rewrite_jsonl(io.BytesIO(source), True, alices[1:], Ownership(REVIEWS, ALICE), drop=False)
    try:
        checked = staged.plaintext.joined()  # type: ignore[union-attr]
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == [0]
        inflate = zlib.decompressobj(wbits=31)
        assert inflate.decompress(staged.body()) == checked
        assert inflate.eof and inflate.unused_data == b""  # one member, nothing after it
    finally:
        staged.close()


def test_given_a_gzip_rewrite_when_checked_then_the_member_is_not_inflated_again(monkeypatch) -> None:
    inflated: list[int] = []

    class CountingGzipReader(records_lines.GzipReader):
        def __init__(self, *args, **kwargs) -> None:
            inflated.append(1)
            super().__init__(*args, **kwargs)

    staged = rewritten(reviews(), [n for n in range(40) if n % 4 == 0])
    monkeypatch.setattr(records_lines, "GzipReader", CountingGzipReader)
    try:
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == []
    finally:
        staged.close()
    assert inflated == []


def test_given_a_gzip_csv_rewrite_that_missed_a_record_when_checked_then_the_record_is_found() -> None:
    rows = (b"%s,Name %d\n" % (b"alice" if n % 3 == 0 else b"bob", n) for n in range(30))
    body = b"customer_id,name\n" + b"".join(rows)
    owner = Ownership(PROFILES, ALICE)
    staged = rewrite_csv(io.BytesIO(gzip.compress(body)), True, [1, 4], owner, False, 4096)
    try:
        left = still_holding(staged, "p/x.csv.gz", PROFILES, INDEXING, ALICE)
    finally:
        staged.close()
    assert left == list(range(7, 31, 3))


def test_given_a_member_that_is_not_the_checked_plaintext_when_checked_then_the_object_is_refused() -> None:
    # The seam: the bytes to be written are replaced after the rewrite (here by a member still holding alice's
    # line), while the plaintext kept for the check is the clean one.
    clean = rewritten(reviews(), [n for n in range(40) if n % 4 == 0])
    written = Staged.of([gzip.compress(reviews())])
    written.plaintext = clean.plaintext
    try:
        assert clean.plaintext is not None and b'"alice"' not in clean.plaintext.joined()
        with pytest.raises(NotTheCheckedBytes):
            still_holding(written, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE)
    finally:
        written.close()
        clean.close()


mutations = st.one_of(
    # a burst of up to 4 bytes changed (CRC-32 detects every burst of 32 bits or fewer)
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 64)),
)


def mutated(data: bytes, mutation: tuple) -> bytes:
    kind, at, what = mutation
    if kind == "insert":
        at %= len(data) + 1
        return data[:at] + what + data[at:]
    if kind == "delete":
        at %= len(data)
        return data[:at] + data[at + what :]
    at %= len(data)
    burst = bytes(a ^ (b or 1) for a, b in zip(data[at : at + len(what)], what, strict=False))
    return data[:at] + burst + data[at + len(burst) :]


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=300), max_size=6).filter(any),
    mutation=mutations,
)
def test_given_a_member_and_any_other_plaintext_when_tied_then_only_the_fed_plaintext_passes(pieces, mutation) -> None:
    staged = gzip_staged(pieces)
    try:
        fed = b"".join(pieces)
        assert staged.plaintext is not None and staged.plaintext.joined() == fed
        tie_to_member(staged, fed)
        other = mutated(fed, mutation)
        if other != fed:
            with pytest.raises(NotTheCheckedBytes):
                tie_to_member(staged, other)
        assert gzip.decompress(staged.body()) == fed
    finally:
        staged.close()


def test_given_an_empty_gzip_rewrite_when_tied_then_it_holds_the_empty_plaintext() -> None:
    staged = gzip_staged([])
    try:
        assert staged.plaintext is not None and staged.plaintext.joined() == b""
        tie_to_member(staged, b"")
        with pytest.raises(NotTheCheckedBytes):
            tie_to_member(staged, b"\n")
    finally:
        staged.close()


def test_given_a_plaintext_past_the_memory_bound_when_checked_then_the_member_as_written_is_inflated_and_read(
    monkeypatch,
) -> None:
    # Past IN_MEMORY_BYTES the plaintext is not kept (nor spooled: /tmp holds the compressed objects only); both the
    # member and the plaintext are then past the bound here, so the member is read from disk and inflated.
    monkeypatch.setattr(streams, "IN_MEMORY_BYTES", 512)
    plain = reviews(400)
    alices = [n for n in range(400) if n % 4 == 0]
    staged = rewritten(plain, alices[1:])  # the index missed alice's first line
    try:
        assert staged.plaintext is not None and not staged.plaintext.kept
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == [0]
    finally:
        staged.close()


def test_given_a_staged_object_in_memory_or_on_disk_when_its_last_bytes_are_asked_then_they_are_its_tail(
    monkeypatch,
) -> None:
    data = bytes(range(256)) * 9
    pieces = [data[:5], data[5:6], data[6:1000], data[1000:]]
    in_memory = Staged.of(pieces)
    monkeypatch.setattr(streams, "IN_MEMORY_BYTES", 100)
    on_disk = Staged.of(pieces)
    try:
        for staged in (in_memory, on_disk):
            for count in (0, 1, 8, 1300, len(data), len(data) + 10):
                assert staged.last_bytes(count) == data[len(data) - min(count, len(data)) :]
    finally:
        in_memory.close()
        on_disk.close()


def test_given_a_gzip_rewrite_when_staged_then_its_trailer_is_zlibs_crc_and_size_of_the_output() -> None:
    staged = rewritten(reviews(), [0, 4])
    try:
        out = gzip.decompress(staged.body())
        assert staged.last_bytes(8) == zlib.crc32(out).to_bytes(4, "little") + len(out).to_bytes(4, "little")
    finally:
        staged.close()


def test_given_a_drop_that_keeps_a_little_of_each_large_chunk_when_staged_then_the_chunks_are_not_held_past_the_bound(
    monkeypatch,
) -> None:
    # Each kept piece views a chunk of the source: the memory held is the chunks', not the pieces' few bytes.
    monkeypatch.setattr(streams, "IN_MEMORY_BYTES", 10_000)
    chunks = [bytes(4_000) for _ in range(4)]
    staged = gzip_staged(memoryview(chunk)[:10] for chunk in chunks)
    try:
        assert staged.plaintext is not None and not staged.plaintext.kept
        assert gzip.decompress(staged.body()) == bytes(40)
    finally:
        staged.close()
    within = gzip_staged(memoryview(chunk)[:10] for chunk in chunks[:2])
    try:
        assert within.plaintext is not None and within.plaintext.joined() == bytes(20)
    finally:
        within.close()


@pytest.mark.parametrize("size", [61, 1000, records_lines.CHUNK_BYTES, 8 * records_lines.CHUNK_BYTES])
def test_given_reads_of_any_size_when_inflating_then_every_byte_comes_once_and_a_break_after_them(size) -> None:
    # Reads of a whole step are handed zlib's own bytes: the same stream, byte for byte, as reads into a buffer.
    plain = bytes(range(256)) * 9000 + reviews(2000)
    whole = gzip.compress(plain[:500_000]) + gzip.compress(plain[500_000:])
    for data, expected in ((whole, plain), (whole[: len(whole) - 20], None)):
        reader = records_lines.GzipReader(io.BytesIO(data))
        out = bytearray()
        with pytest.raises(EOFError) if expected is None else contextlib.nullcontext():
            while piece := reader.read(size):
                out += piece
        assert bytes(out) == (expected if expected is not None else plain[: len(out)])
        assert expected is not None or len(out) > 500_000


def test_given_a_gzip_rewrite_when_checked_then_its_plaintext_is_not_held_through_the_write() -> None:
    staged = rewritten(reviews(), [n for n in range(40) if n % 4 == 0])
    try:
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == []
        assert staged.plaintext is not None and not staged.plaintext.kept
        # Checked again (nothing does today), the member as written is inflated and read.
        assert still_holding(staged, "r/x.jsonl.gz", REVIEWS, INDEXING, ALICE) == []
    finally:
        staged.close()


def test_given_pieces_viewing_one_chunk_when_the_plaintext_is_released_then_the_chunk_is_not_held() -> None:
    # A gzip CSV of a few MiB is kept as views of its whole inflated body: released, nothing may keep that body alive
    # through the write.
    class Chunk(bytearray):
        pass

    chunk = Chunk(b"a,b\n" * 1000)
    alive = weakref.ref(chunk)
    plaintext = streams.Plaintext()
    plaintext.add(memoryview(chunk)[:8])
    plaintext.add(memoryview(chunk)[12:40])

    plaintext.release()
    del chunk

    assert alive() is None
