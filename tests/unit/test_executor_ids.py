"""The ids sealed for a Spark purge's executors (lakepurge.core.executor_ids): they open only under the hash key and
for the request they were sealed for, unchanged; anything else reads as no ids (the executors then hash every id)."""

from __future__ import annotations

from lakepurge.core.executor_ids import seal, sealing_key, unseal

HASH_KEY = b"executor-ids-unit-hash-key-0123456789"
IDS = ["alice@example.com", "bob@example.com", "çé-ü"]


def test_given_sealed_ids_when_opened_with_the_hash_key_for_their_request_then_they_are_the_ids_in_order() -> None:
    body = seal(HASH_KEY, "req-1", [*IDS, "alice@example.com"])

    assert unseal(body, HASH_KEY, "req-1") == tuple(IDS)  # each once
    for user in IDS:
        assert user.encode() not in body


def test_given_sealed_ids_when_opened_for_another_request_or_key_or_changed_then_they_are_not_ids() -> None:
    body = seal(HASH_KEY, "req-2", IDS)
    flipped = bytearray(body)
    flipped[-1] ^= 1

    assert unseal(body, HASH_KEY, "req-3") is None  # the request id is the associated data, and in the key
    assert unseal(body, b"another hash key of enough bytes!", "req-2") is None
    assert unseal(bytes(flipped), HASH_KEY, "req-2") is None
    assert unseal(b"\x02" + body[1:], HASH_KEY, "req-2") is None  # another version of the document
    assert unseal(body[:13], HASH_KEY, "req-2") is None
    assert unseal(b"", HASH_KEY, "req-2") is None


def test_given_one_request_sealed_twice_when_compared_then_nonces_differ_and_keys_are_per_request() -> None:
    first, second = seal(HASH_KEY, "req-4", IDS), seal(HASH_KEY, "req-4", IDS)

    assert first[1:13] != second[1:13] and first != second
    assert unseal(first, HASH_KEY, "req-4") == unseal(second, HASH_KEY, "req-4") == tuple(IDS)
    assert len(sealing_key(HASH_KEY, "req-4")) == 32  # AES-256
    assert sealing_key(HASH_KEY, "req-4") != sealing_key(HASH_KEY, "req-5")
