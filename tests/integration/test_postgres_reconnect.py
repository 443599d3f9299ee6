"""A warm process's PostgreSQL index after a server restart (or failover): the next call reconnects, once, instead
of every later call failing (AdminShutdown, then "the connection is closed") until the process is recycled."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lakepurge.core.config import IndexConfig
from lakepurge.index import open_store
from lakepurge.index.base import Location, ObjectIndex
from lakepurge.index.postgres import _PIPELINED_LOOKUP

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def indexed(path: str, etag: str, users: dict[str, list[int]]) -> ObjectIndex:
    return ObjectIndex(path, "events", etag, None, T0, users, records=sum(map(len, users.values())))


def test_given_a_warm_store_when_postgresql_restarts_between_calls_then_later_calls_reconnect_and_answer(
    postgres_server, pg_dsn
):
    store = open_store(IndexConfig(backend="postgres", dsn=pg_dsn))
    many = [f"nobody-{n}" for n in range(_PIPELINED_LOOKUP)]  # a lookup big enough to use a second connection
    store.replace_objects([indexed("s3://lake/a.jsonl", '"a1"', {"alice": [0, 2], "bob": [1]})])
    assert store.lookup([*many, "alice"]) == {"alice": [Location("s3://lake/a.jsonl", '"a1"', (0, 2))]}

    postgres_server.restart()  # both of the store's connections are ended by the server

    assert store.lookup([*many, "alice"]) == {"alice": [Location("s3://lake/a.jsonl", '"a1"', (0, 2))]}
    assert store.replace_objects([indexed("s3://lake/b.jsonl", '"b1"', {"alice": [4]})]) == 1
    assert store.lookup(["alice", "bob"]) == {
        "alice": [Location("s3://lake/a.jsonl", '"a1"', (0, 2)), Location("s3://lake/b.jsonl", '"b1"', (4,))],
        "bob": [Location("s3://lake/a.jsonl", '"a1"', (1,))],
    }
    store.close()
