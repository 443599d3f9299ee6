"""PostgreSQL adapter specifics the backend-neutral contract does not reach: big lookups (their own query path) and
the upgrade of an index created before object ids."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from lakepurge.index import postgres
from lakepurge.index.base import WHOLE_OBJECT, Hits, Location, ObjectIndex, hits_from_locations
from lakepurge.index.postgres import _BIG_LOOKUP, PostgresIndexStore

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def fresh_db(postgres_server: object) -> Iterator[str]:
    """A database of its own (the shared one already has the current schema)."""
    base: str = postgres_server.dsn  # type: ignore[attr-defined]
    name = f"upgrade_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield base.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def obj(path: str, etag: str, users: dict[str, list[int]], last_modified: datetime = T0) -> ObjectIndex:
    return ObjectIndex(
        s3path=path,
        dataset="events",
        etag=etag,
        version_id=None,
        last_modified=last_modified,
        lines_by_user=users,
        records=sum(len(lines) for lines in users.values()),
    )


def expected_lookup(objects: list[ObjectIndex], users: list[str]) -> dict[str, list[Location]]:
    found: dict[str, list[Location]] = {}
    for o in sorted(objects, key=lambda o: o.s3path):
        for user in dict.fromkeys(users):
            if o.lines_by_user.get(user):
                found.setdefault(user, []).append(Location(o.s3path, o.etag, tuple(sorted(o.lines_by_user[user]))))
    return found


@pytest.mark.parametrize(
    ("pipelined", "objects_estimate"),
    [(False, None), (True, float("inf")), (True, 0.0)],
    ids=["one-statement", "two-backends", "two-backends-objects-read-whole"],
)
def test_given_more_ids_than_the_big_lookup_threshold_when_looking_up_then_answers_equal_the_small_path(
    pg_dsn, monkeypatch, pipelined, objects_estimate
):
    # The two-backend path normally starts at 20,000 ids; here it takes every big lookup (or none). Whether it
    # reads the objects table whole depends on the planner's estimate of it, fixed here.
    monkeypatch.setattr(postgres, "_PIPELINED_LOOKUP", _BIG_LOOKUP if pipelined else 10**9)
    if objects_estimate is not None:
        monkeypatch.setattr(PostgresIndexStore, "_objects_estimate", lambda self: objects_estimate)
    store = PostgresIndexStore(pg_dsn)
    store.ensure_schema()
    rng = random.Random(7)
    pool = [f"user-{n:05d}" for n in range(3 * _BIG_LOOKUP)] + ["with\nnewline", "", "ünïcode-ид-🙂", "tab\tid"]
    objects = []
    for n in range(60):
        users: dict[str, list[int]] = {}
        for line in range(80):
            users.setdefault(rng.choice(pool), []).append(line)
        if n % 7 == 0:
            users["shared"] = [WHOLE_OBJECT]
        objects.append(obj(f"s3://lake/events/dt=2026-03-{n % 28 + 1:02d}/part-{n:03d}.jsonl", f'"e{n}"', users))
    assert store.replace_objects(objects) == 60
    # Duplicates, an unknown id, an empty one, one holding the newline the split path separates ids with.
    asked = [*rng.sample(pool, 2 * _BIG_LOOKUP), "shared", "stranger", "shared", "", "with\nnewline", "tab\tid"]
    without_newline = [user for user in asked if "\n" not in user]
    try:
        for users in (asked, without_newline, ["", *without_newline]):  # the array path, the split path
            assert len(users) >= _BIG_LOOKUP
            expected = expected_lookup(objects, users)
            assert store.lookup(users) == expected
            assert store.lookup_objects(users) == hits_from_locations(expected)
            # The same answers, id by id, through the one-statement path of small lists.
            small = {user: store.lookup([user]).get(user) for user in dict.fromkeys(users)}
            assert {user: found for user, found in small.items() if found} == expected
        assert store.lookup_objects(["stranger"] * _BIG_LOOKUP) == Hits({}, 0)
        assert store.lookup(["stranger"] * _BIG_LOOKUP) == {}
        # No transaction is left open (it would hold back vacuum and pin a snapshot), and writes still work.
        connections = [store._conn, *([store._side] if store._side is not None else [])]
        assert len(connections) == (2 if pipelined else 1)
        assert all(c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE for c in connections)
        assert store.remove_object(objects[0].s3path) is True
        assert "shared" in store.lookup(without_newline)
    finally:
        store.close()


def test_given_an_analyzed_index_when_estimating_objects_then_the_planner_count_is_used(fresh_db):
    store = PostgresIndexStore(fresh_db)
    try:
        store.ensure_schema()
        assert store._objects_estimate() == float("inf")  # never analyzed: unknown, so never read whole
        store.replace_objects([obj(f"s3://lake/events/part-{n}.jsonl", f'"e{n}"', {"u": [0]}) for n in range(30)])
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            conn.execute("ANALYZE indexed_objects")
        assert store._objects_estimate() == 30
    finally:
        store.close()
