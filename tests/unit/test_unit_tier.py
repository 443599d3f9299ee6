"""The unit tier itself: it provably needs no network, and its in-memory index keeps the versioned-bucket rules."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from lakepurge.index.base import Location, NewVersion, ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from tests.support.index import dump_noncurrent
from tests.unit.conftest import NetworkInUnitTest

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, tzinfo=UTC)
A = "s3://lake/reviews/a.jsonl"


def test_given_the_unit_tier_when_a_test_opens_a_connection_then_it_fails_loudly_naming_the_target() -> None:
    with pytest.raises(NetworkInUnitTest, match=r"127\.0\.0\.1"):
        socket.create_connection(("127.0.0.1", 5432), timeout=1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(NetworkInUnitTest, match="tests/integration"):
            sock.connect(("127.0.0.1", 5432))
        with pytest.raises(NetworkInUnitTest):
            sock.connect_ex(("127.0.0.1", 5432))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, pytest.raises(NetworkInUnitTest):
        udp.sendto(b"x", ("127.0.0.1", 53))


def test_given_the_guard_when_a_client_retries_on_oserror_then_the_refusal_is_not_swallowed() -> None:
    # boto3, psycopg and urllib3 retry OSErrors; the guard's error must not look like one.
    assert not issubclass(NetworkInUnitTest, OSError)


def _version(etag: str, seconds: int, users: dict[str, list[int]], version_id: str | None) -> ObjectIndex:
    return ObjectIndex(A, "reviews", etag, version_id, T0 + timedelta(seconds=seconds), users, records=4)


def test_given_a_versioned_object_in_memory_when_overwritten_removed_and_purged_then_old_versions_keep_users() -> None:
    store = MemoryIndexStore()
    assert store.replace_objects([_version('"a1"', 0, {"alice": [0], "bob": [1]}, "v1")]) == 1
    assert store.replace_objects([_version('"a1"', 0, {"mallory": [0]}, "v1")]) == 0  # re-delivery
    assert store.replace_objects([_version('"a2"', 1, {"alice": [2], "carol": [0]}, "v2")]) == 1
    assert dump_noncurrent(store) == {("alice", A, "v1"), ("bob", A, "v1")}
    assert store.apply_erasure(A, '"a2"', NewVersion('"a3"', "v3", T0 + timedelta(seconds=2)), [2]) is True
    assert store.lookup(["alice", "carol"]) == {"carol": [Location(A, '"a3"', (0,))]}
    assert store.noncurrent_of(["alice"]) == {A: {"v1", "v2"}}
    assert store.get_object(A).records == 3  # type: ignore[union-attr]
    assert store.remove_object(A) is True
    assert store.noncurrent_of(["carol"]) == {A: {"v2", "v3"}}
