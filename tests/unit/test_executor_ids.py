"""The ids sealed for a Spark purge's executors (lakepurge.core.executor_ids): they open only under the hash key and
for the request they were sealed for, unchanged; anything else reads as no ids (the executors then hash every id)."""

from __future__ import annotations

import pytest

from lakepurge.core import executor_ids
from lakepurge.core.executor_ids import binding, covering, seal, sealing_key, unseal, unseal_bound, users_of
from lakepurge.core.privacy import Pseudonymizer

HASH_KEY = b"executor-ids-unit-hash-key-0123456789"
IDS = ["alice@example.com", "bob@example.com", "çé-ü"]


def test_given_sealed_ids_when_opened_with_the_hash_key_for_their_request_then_they_are_the_ids_sorted() -> None:
    body = seal(HASH_KEY, "req-1", [IDS[2], *IDS, "alice@example.com"])

    assert unseal(body, HASH_KEY, "req-1") == tuple(IDS)  # each once, sorted
    for user in IDS:
        assert user.encode() not in body


def test_given_sealed_ids_when_opened_for_another_request_or_key_or_changed_then_they_are_not_ids() -> None:
    body = seal(HASH_KEY, "req-2", IDS)
    flipped = bytearray(body)
    flipped[-1] ^= 1

    assert unseal(body, HASH_KEY, "req-3") is None  # the request id is the associated data, and in the key
    assert unseal(body, b"another hash key of enough bytes!", "req-2") is None
    assert unseal(bytes(flipped), HASH_KEY, "req-2") is None
    assert unseal(b"\x03" + body[1:], HASH_KEY, "req-2") is None  # another version of the document
    assert unseal(body[:45], HASH_KEY, "req-2") is None  # version, binding, nonce
    assert unseal(b"", HASH_KEY, "req-2") is None


def test_given_one_request_sealed_twice_when_compared_then_nonces_differ_and_keys_are_per_request() -> None:
    first, second = seal(HASH_KEY, "req-4", IDS), seal(HASH_KEY, "req-4", IDS)

    assert first[33:45] != second[33:45] and first != second  # (after the version and binding)
    assert unseal(first, HASH_KEY, "req-4") == unseal(second, HASH_KEY, "req-4") == tuple(IDS)
    assert len(sealing_key(HASH_KEY, "req-4")) == 32  # AES-256
    assert sealing_key(HASH_KEY, "req-4") != sealing_key(HASH_KEY, "req-5")


class _CountingPseudonymizer(Pseudonymizer):
    """The real keyed hash, counting the ids it hashes."""

    hashed = 0

    def of_utf8(self, user_id: bytes) -> str:
        type(self).hashed += 1
        return super().of_utf8(user_id)


def _hashes(ids: list[str]) -> frozenset[str]:
    return frozenset(Pseudonymizer(HASH_KEY).each(ids))


def test_given_ids_sealed_when_opened_for_exactly_their_hashes_then_users_are_built_without_hashing_an_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened = unseal_bound(seal(HASH_KEY, "req-6", IDS), HASH_KEY, "req-6")
    assert opened is not None and opened.ids == tuple(IDS) and opened.bound_to == binding(_hashes(IDS))
    monkeypatch.setattr(executor_ids, "Pseudonymizer", _CountingPseudonymizer)
    _CountingPseudonymizer.hashed = 0

    users = users_of(opened, _hashes(list(reversed(IDS))), HASH_KEY)

    assert _CountingPseudonymizer.hashed == 0
    assert users.ids_held() is not None and all(user in users for user in IDS)
    assert "mallory@example.com" not in users and _CountingPseudonymizer.hashed == 0  # answered by lookup


def test_given_hashes_sorted_as_a_report_gives_them_or_in_any_order_or_repeated_when_opened_then_the_users_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A report's hashes (sorted, each once) are bound as they come; any other order, or a hash given twice, after
    # they are sorted and made distinct: the same users, no id hashed either way.
    opened = unseal_bound(seal(HASH_KEY, "req-9", IDS), HASH_KEY, "req-9")
    assert opened is not None
    reported = sorted(_hashes(IDS))
    monkeypatch.setattr(executor_ids, "Pseudonymizer", _CountingPseudonymizer)
    mallory = "mallory@example.com"

    for given in (reported, reported[::-1], [*reported, reported[0]]):
        _CountingPseudonymizer.hashed = 0
        users = users_of(opened, given, HASH_KEY)
        assert _CountingPseudonymizer.hashed == 0
        assert users.ids_held() is not None and len(users) == len(IDS) and repr(users).startswith("HashedUsers(3 ")
        assert all(user in users for user in IDS) and mallory not in users
        widened = users.including(_hashes([mallory]))  # (the set of their hashes, made when first asked for)
        assert mallory in widened and all(user in widened for user in IDS) and len(widened) == len(IDS) + 1


def test_given_ids_sealed_for_other_hashes_when_opened_then_an_id_that_is_not_a_users_is_never_one() -> None:
    mallory = "mallory@example.com"
    more = unseal_bound(seal(HASH_KEY, "req-7", [*IDS, mallory]), HASH_KEY, "req-7")
    fewer = unseal_bound(seal(HASH_KEY, "req-7", IDS[:1]), HASH_KEY, "req-7")
    assert more is not None and fewer is not None

    with_mallory = users_of(more, _hashes(IDS), HASH_KEY)  # sealed with an id that is not one of these hashes'
    assert mallory not in with_mallory and all(user in with_mallory for user in IDS)
    assert with_mallory.ids_held() is not None and with_mallory.each_contained([mallory, IDS[0]]) == [False, True]
    short = users_of(fewer, _hashes(IDS), HASH_KEY)  # hashes no sealed id stands for: checked by their hashes
    assert short.ids_held() is None and all(user in short for user in IDS) and mallory not in short


def test_given_a_sealed_binding_changed_when_opened_then_the_document_does_not_open() -> None:
    body = bytearray(seal(HASH_KEY, "req-8", IDS))
    body[5] ^= 1  # a byte of the binding, which is associated data: no one can bind the ids to other hashes

    assert unseal_bound(bytes(body), HASH_KEY, "req-8") is None


def test_given_ids_and_a_reports_hashes_when_a_starter_picks_the_ids_to_seal_then_only_the_reports_users_are() -> None:
    picked = covering(HASH_KEY, _hashes(IDS[:2]), ["mallory@example.com", IDS[1], "\udc80", IDS[0], IDS[1]])

    assert picked == [IDS[1], IDS[0]]
