"""PostgreSQL adapter specifics the backend-neutral contract does not reach: big lookups (their own query path) and
the upgrade of an index created before object ids."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from lakepurge.index import postgres
from lakepurge.index.base import WHOLE_OBJECT, Hits, IndexStatus, Location, ObjectIndex, hits_from_locations
from lakepurge.index.postgres import _BIG_LOOKUP, PostgresIndexStore

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# The schema as lakepurge created it before object ids (commit d442c46): user_objects was the table of rows.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS user_objects (
    userid     TEXT    NOT NULL,
    s3path     TEXT    NOT NULL,
    recordline INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS user_objects_userid ON user_objects (userid);
CREATE INDEX IF NOT EXISTS user_objects_s3path_line ON user_objects (s3path, recordline);
CREATE TABLE IF NOT EXISTS indexed_objects (
    s3path        TEXT PRIMARY KEY,
    dataset       TEXT        NOT NULL,
    etag          TEXT        NOT NULL,
    version_id    TEXT,
    last_modified TIMESTAMPTZ NOT NULL,
    records       INTEGER     NOT NULL,
    unindexable   INTEGER     NOT NULL,
    reappeared    INTEGER     NOT NULL DEFAULT 0,
    indexed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS unindexable_lines (
    s3path     TEXT    NOT NULL,
    recordline INTEGER NOT NULL,
    reason     TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS unindexable_lines_s3path ON unindexable_lines (s3path);
CREATE TABLE IF NOT EXISTS erased_users (
    user_hash  TEXT PRIMARY KEY,
    request_id TEXT        NOT NULL,
    erased_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""


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


def test_given_an_index_created_before_object_ids_when_starting_then_it_is_upgraded_in_place(fresh_db):
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute(OLD_SCHEMA)
        conn.execute(
            "INSERT INTO indexed_objects (s3path, dataset, etag, last_modified, records, unindexable) VALUES"
            " ('s3://lake/a.jsonl', 'events', '\"a1\"', %s, 4, 1), ('s3://lake/b.jsonl', 'events', '\"b1\"', %s, 1, 0)",
            (T0, T0),
        )
        conn.execute(
            "INSERT INTO user_objects VALUES ('alice', 's3://lake/a.jsonl', 3), ('alice', 's3://lake/a.jsonl', 0),"
            " ('bob', 's3://lake/a.jsonl', 1), ('alice', 's3://lake/b.jsonl', 0),"
            " ('ghost', 's3://lake/never-indexed.jsonl', 0)"  # a row of no indexed object: no lookup ever saw it
        )
        conn.execute("INSERT INTO unindexable_lines VALUES ('s3://lake/a.jsonl', 2, 'no user id')")
        conn.execute("INSERT INTO erased_users (user_hash, request_id) VALUES ('h1', 'req-1')")
    store = PostgresIndexStore(fresh_db)
    try:
        store.ensure_schema()
        store.ensure_schema()  # and again: nothing left to do
        a, b = "s3://lake/a.jsonl", "s3://lake/b.jsonl"
        assert store.lookup(["alice", "bob", "ghost"]) == {
            "alice": [Location(a, '"a1"', (0, 3)), Location(b, '"b1"', (0,))],
            "bob": [Location(a, '"a1"', (1,))],
        }
        assert store.dump() == {("alice", a, 0), ("alice", a, 3), ("bob", a, 1), ("alice", b, 0)}
        assert store.status() == IndexStatus(
            objects=2, records=5, users=2, rows=4, unindexable_lines=1, objects_with_unindexable=1
        )
        assert store.erased_among(["h1", "h2"]) == {"h1"}
        # The design's table is still there to read, now a view.
        with psycopg.connect(fresh_db, autocommit=True) as conn:
            rows = conn.execute("SELECT userid, s3path, recordline FROM user_objects ORDER BY 1, 2, 3").fetchall()
            kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'user_objects'::regclass").fetchone()
        assert rows == [("alice", a, 0), ("alice", a, 3), ("alice", b, 0), ("bob", a, 1)]
        assert kind == ("v",)
        # Writes work on the upgraded index, and new objects get ids of their own.
        assert store.replace_objects([obj(a, '"a2"', {"carol": [0]}, T0 + timedelta(seconds=1))]) == 1
        assert store.replace_objects([obj("s3://lake/c.jsonl", '"c1"', {"alice": [7]})]) == 1
        assert store.lookup(["alice", "carol"]) == {
            "alice": [Location(b, '"b1"', (0,)), Location("s3://lake/c.jsonl", '"c1"', (7,))],
            "carol": [Location(a, '"a2"', (0,))],
        }
        assert store.remove_object(b) is True
        assert store.lookup(["alice"]) == {"alice": [Location("s3://lake/c.jsonl", '"c1"', (7,))]}
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
