"""Check tags (lakepurge.core.check_tags): the tag of an id is one function, computed per id by the launcher and in one
Arrow pass by the executors, and the two agree bit for bit; an id is hashed only when its tag is a requested one, and
its hash alone decides whether it is one of the users (an id sharing a requested id's tag is never reported)."""

from __future__ import annotations

import base64
import hashlib

import orjson
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakepurge.core.check_tags import HEAD_BYTES, TAG_BITS, CheckTags, TagKey, covering, tag_key
from lakepurge.core.privacy import HashedUsers, Pseudonymizer

pytestmark = pytest.mark.unit

HASH_KEY = b"a test key of 32 bytes, not secret"
HASHER = Pseudonymizer(HASH_KEY)

# Ids of every length around the words the tag reads (the first 32 bytes, a longer id's last 8), NULs, non-ASCII.
id_bytes = st.one_of(
    st.binary(max_size=100),
    st.text(max_size=60).map(str.encode),
    st.builds(lambda n, c: c * n, st.integers(0, 48), st.sampled_from([b"\0", b"a", "é".encode(), b"\xff"])),
    st.sampled_from([b"", b"\0", b"\0" * 32, b"\0" * 33, b"x" * 31, b"x" * 32, b"x" * 33, b"x" * 40, b"x" * 41]),
)


class CountingPseudonymizer(Pseudonymizer):
    """The keyed hash, counting the ids it hashes."""

    hashed = 0

    def of_utf8(self, user_id: bytes) -> str:
        self.hashed += 1
        return super().of_utf8(user_id)


@settings(max_examples=300, deadline=None)
@given(
    key=st.binary(min_size=1, max_size=64),
    ids=st.lists(id_bytes, max_size=40),
    large=st.booleans(),
    cut=st.integers(0, 3),
)
@example(key=b"k", ids=[b"", b"a" * 33, "東京👍".encode() * 9, b"\0" * 41], large=False, cut=1)
@example(key=b"k", ids=[b"u0000001", b"", b"\0\0", "é".encode()], large=True, cut=0)  # rows of 8 bytes
@example(key=b"k", ids=[b"u0000001", b"0123456789abcdef", b"\0" * 9], large=False, cut=2)  # rows of 16 bytes
def test_given_any_ids_when_tagged_one_by_one_or_in_one_arrow_pass_then_the_tags_are_the_same(
    key, ids, large, cut
) -> None:
    function = TagKey(key)
    array = pa.array(ids, pa.large_binary() if large else pa.binary())
    expected = [function.tag(i) for i in ids]

    assert function.tags(array).to_pylist() == expected
    assert function.tags(array.slice(cut)).to_pylist() == expected[cut:]  # an array read part-way (its offset)
    assert all(0 <= tag < 1 << TAG_BITS for tag in expected)


def test_given_ids_differing_anywhere_they_are_read_when_tagged_then_their_tags_differ() -> None:
    # The words the tag reads: the first 32 bytes, the length, a longer id's last 8 bytes. Ids that differ there
    # (and only there) get tags that differ, but for a chance of about 2 in 2**24.
    function = TagKey(tag_key(HASH_KEY, "req-1"))
    base = bytes(range(48))
    changed = [base[:at] + bytes([base[at] ^ 1]) + base[at + 1 :] for at in [*range(HEAD_BYTES), *range(40, 48)]]
    tags = {function.tag(i) for i in [base, base[:47], base + b"\0", *changed]}

    assert len(tags) == len(changed) + 3


def colliding_pair(function: TagKey) -> tuple[bytes, bytes]:
    """Two different ids with one tag: among 20,000 ids of random-looking letters about a dozen pairs share a tag
    (24-bit tags, the birthday bound), found here in one Arrow pass."""
    ids = [hashlib.sha256(b"%d" % n).hexdigest()[:20].encode() for n in range(20_000)]
    first: dict[int, bytes] = {}
    for user, tag in zip(ids, function.tags(pa.array(ids, pa.large_binary())).to_pylist(), strict=True):
        if tag in first:
            return first[tag], user
        first[tag] = user
    raise AssertionError("no two ids share a tag")


def test_given_a_lake_id_sharing_a_requested_ids_tag_when_checked_then_its_hash_decides_and_it_is_not_reported() -> (
    None
):
    key = tag_key(HASH_KEY, "req-collide")
    requested, colliding = colliding_pair(TagKey(key))
    hashes = [HASHER(requested.decode())]
    tags = CheckTags.for_request(HASH_KEY, "req-collide", [requested.decode()], hashes, HASHER)
    assert tags is not None and tags.tags == (TagKey(key).tag(colliding),)
    counting = CountingPseudonymizer(HASH_KEY)
    users = HashedUsers(hashes, counting, tags=tags)
    others = [f"other-{n}".encode() for n in range(500)]

    assert users.none_of([*others, colliding])  # the shared tag costs one hash, and finds nobody
    assert counting.hashed <= 2  # (another id's first bits may share the table's entry: hashed too)
    assert not users.none_of(pa.array([*others, colliding, requested], pa.large_binary()))
    batch = [u.decode() for u in [*others, colliding, requested]] * 3
    assert users.each_contained(batch) == [u == requested.decode() for u in batch]


def test_given_tags_when_an_object_holds_thousands_of_other_ids_then_only_ids_flagged_by_their_tag_are_hashed() -> None:
    wanted = [f"wanted-{n}" for n in range(100)]
    counting = CountingPseudonymizer(HASH_KEY)
    hashes = HASHER.many(wanted)
    users = HashedUsers(hashes, counting, tags=CheckTags.for_request(HASH_KEY, "req-2", wanted, hashes, HASHER))
    lake = [f"u{n:07d}@example.org".encode() for n in range(5_000)]

    assert users.none_of(pa.array(lake, pa.large_binary()))
    assert counting.hashed < 100  # about one in 128 ids by the table's first bits; without tags all 5,000
    assert not users.none_of(pa.array([*lake, b"wanted-7"], pa.large_binary()))
    plain = HashedUsers(hashes, CountingPseudonymizer(HASH_KEY))
    assert plain.none_of(pa.array(lake, pa.large_binary())) and plain._pseudonymizer.hashed == 5_000  # type: ignore[attr-defined]


def test_given_ids_that_are_not_utf8_when_checked_with_tags_then_each_reads_as_its_decoding_as_before() -> None:
    # b"caf\xe9" reads as "caf\ufffd" (the decoder's replacement), a requested id here: its bytes have another tag.
    wanted = ["caf\ufffd"]
    hashes = HASHER.many(wanted)
    users = HashedUsers(hashes, HASHER, tags=CheckTags.for_request(HASH_KEY, "req-3", wanted, hashes, HASHER))
    others = [f"o{n}".encode() for n in range(200)]

    assert not users.none_of([*others, b"caf\xe9"])
    assert users.none_of([*others, b"cafe"])


def test_given_tags_of_other_users_than_the_hashes_when_checking_then_they_are_not_used() -> None:
    # Tags stand for the hashes of the ids tagged: users with one more hash (an Iceberg bound's form, a resolved
    # identifier) could be any id, so every id is hashed, as without tags.
    wanted = ["alice"]
    hashes = HASHER.many(wanted)
    tags = CheckTags.for_request(HASH_KEY, "req-4", wanted, hashes, HASHER)
    more = HashedUsers(hashes, HASHER, tags=tags).including(HASHER.many(["bob"]))
    ids = [f"o{n}".encode() for n in range(200)]

    assert not more.none_of([*ids, b"bob"])
    assert "tags" not in repr(more)
    assert "1 tags" in repr(HashedUsers(hashes, HASHER, tags=tags))


def test_given_ids_that_do_not_stand_for_every_hash_of_a_report_when_tagging_then_no_tags_are_made() -> None:
    hashes = HASHER.many(["alice", "bob"])

    assert CheckTags.for_request(HASH_KEY, "r", ["alice"], hashes, HASHER) is None  # bob known by hash only
    assert CheckTags.for_request(HASH_KEY, "r", [], [], HASHER) is None
    made = CheckTags.for_request(HASH_KEY, "r", ["alice", "bob", "carol"], hashes, HASHER)  # carol not in the report
    assert made is not None and len(made.tags) == 2 and made.covers == covering(hashes)


def test_given_a_stored_tags_document_when_read_back_then_it_holds_no_id_and_a_changed_one_is_not_used() -> None:
    users = ["alice.secret@example.com", "bob"]
    hashes = HASHER.many(users)
    made = CheckTags.for_request(HASH_KEY, "req-5", users, hashes, HASHER)
    assert made is not None
    document = made.document()

    read = CheckTags.from_document(document, HASH_KEY, "req-5")

    assert read is not None and (read.tags, read.covers, read.key) == (made.tags, made.covers, made.key)
    assert not any(user.encode() in document for user in users) and made.key not in document
    assert CheckTags.from_document(document, HASH_KEY, "req-6") is None  # sealed under its own request's key
    assert CheckTags.from_document(document, b"another key of 32 bytes, not ours", "req-5") is None
    stored = orjson.loads(document)
    one_tag_less = orjson.dumps({**stored, "tags": base64.b64encode(base64.b64decode(stored["tags"])[4:]).decode()})
    assert CheckTags.from_document(one_tag_less, HASH_KEY, "req-5") is None  # would skip a user's ids: not used
    assert CheckTags.from_document(b"not json", HASH_KEY, "req-5") is None
