"""The IndexStore contract: PostgreSQL, DynamoDB and the in-memory store give the same answers to the same sequence
of operations."""

from __future__ import annotations

import hashlib
import hmac
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from lakepurge.index.base import (
    WHOLE_OBJECT,
    Beside,
    Coverage,
    DatasetProblems,
    IndexStatus,
    IndexStore,
    Location,
    NewVersion,
    NoncurrentVersion,
    ObjectIndex,
    UnindexableLine,
    UnindexableObject,
)
from tests.support.index import dump_noncurrent

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
A = "s3://lake/events/a.jsonl"
B = "s3://lake/events/b.jsonl"
C = "s3://lake/owners/carol.bin"
KEY = b"contract-test-key"


def keyed(user: str) -> str:
    """A keyed hash of a user id, as the suppression list holds them (never the raw id)."""
    return hmac.new(KEY, user.encode(), hashlib.sha256).hexdigest()


def version(
    path: str,
    etag: str,
    last_modified: datetime,
    users: dict[str, list[int]],
    unindexable: list[UnindexableLine] | None = None,
    version_id: str | None = None,
    returning_users: int = 0,
) -> ObjectIndex:
    return ObjectIndex(
        s3path=path,
        dataset="events",
        etag=etag,
        version_id=version_id,
        last_modified=last_modified,
        lines_by_user=users,
        records=sum(len(lines) for lines in users.values()) + len(unindexable or []),
        unindexable=unindexable or [],
        returning_users=returning_users,
    )


@pytest.fixture(params=["postgres", "dynamodb", "memory"])
def store(request: pytest.FixtureRequest):
    index: IndexStore
    if request.param == "postgres":
        from lakepurge.index.postgres import PostgresIndexStore

        index = PostgresIndexStore(request.getfixturevalue("pg_dsn"))
    elif request.param == "memory":  # no server: the reference the unit tier's rules are tested against
        from lakepurge.index.in_memory import MemoryIndexStore

        index = MemoryIndexStore()
    else:
        from lakepurge.index.dynamodb import DynamoIndexStore

        request.getfixturevalue("aws")
        index = DynamoIndexStore("lakepurge-index-test")
    index.ensure_schema()
    index.ensure_schema()  # safe at every start
    yield index
    index.close()


def test_given_a_fresh_index_when_replacing_objects_then_lookup_rows_status_and_dump_agree(store):
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0)
    assert store.replace_objects([]) == 0
    written = store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [3, 0, 1], "bob": [2], "nobody": []}, [UnindexableLine(4, "no user id")]),
            version(B, '"b1"', T0, {"alice": [0]}, version_id="v-1"),
            version(C, '"c1"', T0, {"carol": [WHOLE_OBJECT]}),
        ]
    )
    assert written == 3
    assert store.lookup(["alice", "bob", "carol", "nobody", "stranger"]) == {
        "alice": [Location(A, '"a1"', (0, 1, 3)), Location(B, '"b1"', (0,))],
        "bob": [Location(A, '"a1"', (2,))],
        "carol": [Location(C, '"c1"', (WHOLE_OBJECT,))],
    }
    assert store.lookup([]) == {}
    assert store.object_rows(A) == {"alice": [0, 1, 3], "bob": [2]}
    assert store.object_rows("s3://lake/unknown") == {}
    assert store.indexed_objects() == {A: '"a1"', B: '"b1"', C: '"c1"'}
    assert store.status() == IndexStatus(
        objects=3, records=7, users=3, rows=6, unindexable_lines=1, objects_with_unindexable=1
    )
    assert store.unindexable() == [(A, UnindexableLine(4, "no user id"))]
    assert store.dump() == {
        ("alice", A, 0),
        ("alice", A, 1),
        ("alice", A, 3),
        ("bob", A, 2),
        ("alice", B, 0),
        ("carol", C, WHOLE_OBJECT),
    }


def test_given_versions_in_any_order_when_replacing_then_only_the_newest_is_kept(store):
    assert store.replace_objects([version(A, '"a1"', T0, {"alice": [0], "bob": [1]})]) == 1
    # A newer version replaces every row, users that left included.
    assert store.replace_objects([version(A, '"a2"', T0 + timedelta(seconds=1), {"alice": [5], "dave": [6]})]) == 1
    # Stale (older) versions are refused, forced or not; the time zone of the timestamp does not matter.
    paris = timezone(timedelta(hours=1))
    stale = T0.astimezone(paris) + timedelta(microseconds=999_999)  # still before T0 + 1 s
    assert store.replace_objects([version(A, '"a0"', stale, {"bob": [9]})]) == 0
    assert store.replace_objects([version(A, '"a0"', T0, {"bob": [9]})], force=True) == 0
    # The same ETag again is a no-op, unless forced.
    assert store.replace_objects([version(A, '"a2"', T0 + timedelta(seconds=1), {"mallory": [1]})]) == 0
    assert store.lookup(["alice", "bob", "dave", "mallory"]) == {
        "alice": [Location(A, '"a2"', (5,))],
        "dave": [Location(A, '"a2"', (6,))],
    }
    assert store.replace_objects([version(A, '"a2"', T0 + timedelta(seconds=1), {"alice": [5, 7]})], force=True) == 1
    assert store.object_rows(A) == {"alice": [5, 7]}
    # A different ETag with the same last-modified time wins (a copy in place within the same second).
    assert store.replace_objects([version(A, '"a3"', T0 + timedelta(seconds=1), {"erin": [0]})]) == 1
    # One batch: new objects and refused ones are counted apart.
    batch = [
        version(A, '"a4"', T0 - timedelta(days=1), {"bob": [1]}),
        version(B, '"b1"', T0, {"bob": [2]}),
    ]
    assert store.replace_objects(batch) == 1
    assert store.dump() == {("erin", A, 0), ("bob", B, 2)}
    assert store.indexed_objects() == {A: '"a3"', B: '"b1"'}
    assert store.status() == IndexStatus(
        objects=2, records=2, users=2, rows=2, unindexable_lines=0, objects_with_unindexable=0
    )


def test_given_indexed_objects_when_removing_one_then_only_its_rows_go_and_removing_again_reports_absent(store):
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, [UnindexableLine(2, "not valid JSON")]),
            version(B, '"b1"', T0, {"alice": [4]}),
        ]
    )
    assert store.remove_object(A) is True
    assert store.remove_object(A) is False
    assert store.remove_object("s3://lake/never-indexed") is False
    assert store.lookup(["alice", "bob"]) == {"alice": [Location(B, '"b1"', (4,))]}
    assert store.object_rows(A) == {}
    assert store.unindexable() == []
    assert store.status() == IndexStatus(
        objects=1, records=1, users=1, rows=1, unindexable_lines=0, objects_with_unindexable=0
    )
    # A removed object can be indexed again, even with an older version (it is a new object now).
    assert store.replace_objects([version(A, '"a0"', T0 - timedelta(days=1), {"bob": [3]})]) == 1
    assert store.dump() == {("alice", B, 4), ("bob", A, 3)}


def test_given_unindexable_lines_in_several_objects_when_listing_then_they_come_by_path_then_line_up_to_limit(store):
    store.replace_objects(
        [
            version(B, '"b1"', T0, {}, [UnindexableLine(9, "record too large"), UnindexableLine(1, "no user id")]),
            version(A, '"a1"', T0, {"alice": [0]}, [UnindexableLine(WHOLE_OBJECT, "sidecar missing")]),
        ]
    )
    assert store.unindexable(limit=2) == [
        (A, UnindexableLine(WHOLE_OBJECT, "sidecar missing")),
        (B, UnindexableLine(1, "no user id")),
    ]
    assert store.unindexable() == [
        (A, UnindexableLine(WHOLE_OBJECT, "sidecar missing")),
        (B, UnindexableLine(1, "no user id")),
        (B, UnindexableLine(9, "record too large")),
    ]
    assert store.status() == IndexStatus(
        objects=2, records=4, users=1, rows=1, unindexable_lines=3, objects_with_unindexable=2
    )


def test_given_many_users_and_objects_when_looking_up_then_every_location_is_found(store):
    objects = [
        version(
            f"s3://lake/events/part-{n:03d}.jsonl",
            f'"e{n}"',
            T0,
            {f"user-{u:03d}": [u, n] for u in range(n % 7, 140, 7)},
        )
        for n in range(56)
    ]
    assert store.replace_objects(objects) == 56
    found = store.lookup([f"user-{u:03d}" for u in range(150)])  # more than one batch of 100 keys
    assert set(found) == {f"user-{u:03d}" for u in range(140)}
    assert found["user-010"][0] == Location("s3://lake/events/part-003.jsonl", '"e3"', (3, 10))
    assert all(len(locations) == 8 for locations in found.values())
    assert store.status().rows == sum(o.row_count for o in objects)


def test_given_indexed_objects_when_getting_one_then_its_version_rows_counts_and_unindexable_lines_come_back(store):
    stamp = T0 + timedelta(seconds=1, microseconds=500)
    clicks = ObjectIndex(
        s3path=B,
        dataset="clicks",
        etag='"b1"',
        version_id=None,
        last_modified=T0,
        lines_by_user={"alice": [0]},
        records=10,
    )
    store.replace_objects(
        [
            version(
                A,
                '"a1"',
                stamp,
                {"alice": [3, 0], "bob": [1], "nobody": []},
                [UnindexableLine(9, "record too large"), UnindexableLine(2, "no user id")],
                version_id="v-7",
            ),
            clicks,
        ]
    )
    assert store.get_object(A) == ObjectIndex(
        s3path=A,
        dataset="events",
        etag='"a1"',
        version_id="v-7",
        last_modified=stamp,
        lines_by_user={"alice": [0, 3], "bob": [1]},
        records=5,
        unindexable=[UnindexableLine(2, "no user id"), UnindexableLine(9, "record too large")],
    )
    assert store.get_object(B) == clicks
    assert store.get_object("s3://lake/never-indexed") is None
    assert store.dataset_records() == {"events": 5, "clicks": 10}
    assert store.object_records([B, "s3://lake/never-indexed", B]) == {B: 10}
    store.remove_object(B)
    assert store.get_object(B) is None
    assert store.dataset_records() == {"events": 5}


def test_given_erased_users_recorded_when_asking_which_are_erased_then_exactly_the_recorded_ones_come_back(store):
    assert store.erased_among([]) == set()
    store.record_erased([], "req-0")  # nothing to record is fine
    erased = [keyed(f"user-{n:03d}") for n in range(0, 300, 2)]  # 150: more than one BatchGetItem of 100 keys
    others = [keyed(f"user-{n:03d}") for n in range(1, 300, 2)]
    assert store.erased_among(erased + others) == set()
    store.record_erased(erased[:120], "req-1")
    store.record_erased(erased[100:] + erased[:3], "req-2")  # overlapping and repeated: idempotent
    store.record_erased(erased[:120], "req-1")  # the same request again (a retry)
    asked = others[:70] + erased + others[70:] + erased[:5]  # mixed, more than 100 distinct, with duplicates
    assert store.erased_among(asked) == set(erased)
    assert store.erased_among(others) == set()
    assert store.erased_among([erased[7], others[7]]) == {erased[7]}


def test_given_objects_with_returning_users_when_reading_then_counts_round_trip_and_status_counts_the_objects(store):
    stamp = T0 + timedelta(seconds=1)
    with_two = version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, returning_users=2)
    store.replace_objects([with_two, version(B, '"b1"', T0, {"alice": [0]}), version(C, '"c1"', T0, {"carol": [0]})])
    assert store.get_object(A) == with_two
    got = store.get_object(B)
    assert got is not None and got.returning_users == 0
    assert store.status().objects_with_returning_users == 1
    # A newer version carries its own count: it replaces the old one, up or down.
    store.replace_objects([version(A, '"a2"', stamp, {"alice": [0]}, returning_users=0)])
    store.replace_objects([version(B, '"b2"', stamp, {"alice": [0]}, returning_users=1)])
    store.replace_objects([version(C, '"c2"', stamp, {"carol": [0]}, returning_users=3)])
    assert [store.get_object(path).returning_users for path in (A, B, C)] == [0, 1, 3]  # type: ignore[union-attr]
    assert store.status() == IndexStatus(
        objects=3,
        records=3,
        users=2,
        rows=3,
        unindexable_lines=0,
        objects_with_unindexable=0,
        objects_with_returning_users=2,
    )
    store.remove_object(C)
    assert store.status().objects_with_returning_users == 1


def test_given_erased_users_back_in_objects_when_listing_them_then_flagged_paths_and_erasing_requests_come_back(store):
    assert store.returning_user_objects() == []
    assert store.erased_requests([]) == {}
    store.record_erased([keyed("alice"), keyed("bob")], "req-1")
    store.record_erased([keyed("bob"), keyed("carol")], "req-2")  # bob keeps the request that erased him first
    store.replace_objects(
        [
            version(B, '"b1"', T0, {"alice": [0], "dave": [1]}, returning_users=1),
            version(A, '"a1"', T0, {"bob": [0]}, returning_users=1),
            version(C, '"c1"', T0, {"erin": [WHOLE_OBJECT]}),
        ]
    )
    assert store.returning_user_objects() == [A, B]  # in path order; C has no erased user
    assert store.returning_user_objects(limit=1) == [A]
    assert store.returning_user_objects(limit=0) == []
    asked = [keyed("alice"), keyed("bob"), keyed("carol"), keyed("dave"), keyed("alice")]
    assert store.erased_requests(asked) == {keyed("alice"): "req-1", keyed("bob"): "req-1", keyed("carol"): "req-2"}
    assert store.erased_requests([keyed("dave")]) == {}
    # A count corrected after a purge, only at the version the index holds.
    assert store.set_returning_users(A, '"a1"', 0) is True
    assert store.set_returning_users(B, '"b0"', 0) is False  # another version than the one indexed: unchanged
    assert store.set_returning_users("s3://lake/unknown", '"x"', 0) is False
    assert store.returning_user_objects() == [B]
    assert store.get_object(A).returning_users == 0  # type: ignore[union-attr]
    assert store.status().objects_with_returning_users == 1
    assert store.indexed_objects() == {A: '"a1"', B: '"b1"', C: '"c1"'}  # no object written by the correction
    store.remove_object(B)
    assert store.returning_user_objects() == []


def test_given_a_suppression_list_when_reading_the_index_then_its_entries_never_show_up_as_rows_or_objects(store):
    store.record_erased([keyed("alice"), keyed("zed")], "req-1")
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0, 0)
    assert store.dump() == set()
    assert store.indexed_objects() == {}
    assert store.dataset_records() == {}
    assert store.unindexable() == []
    store.replace_objects([version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, returning_users=1)])
    store.record_erased([keyed("bob")], "req-2")
    assert store.dump() == {("alice", A, 0), ("bob", A, 1)}
    assert store.indexed_objects() == {A: '"a1"'}
    assert store.dataset_records() == {"events": 2}
    assert store.status() == IndexStatus(
        objects=1,
        records=2,
        users=2,
        rows=2,
        unindexable_lines=0,
        objects_with_unindexable=0,
        objects_with_returning_users=1,
    )
    assert store.lookup(["alice", keyed("alice"), keyed("zed")]) == {"alice": [Location(A, '"a1"', (0,))]}
    assert store.object_rows(A) == {"alice": [0], "bob": [1]}
    # Removing the object leaves the suppression list alone.
    assert store.remove_object(A) is True
    assert store.erased_among([keyed("alice"), keyed("bob"), keyed("zed"), keyed("carol")]) == {
        keyed("alice"),
        keyed("bob"),
        keyed("zed"),
    }


class Model:
    """The contract in a few lines of Python: what every backend must answer."""

    def __init__(self) -> None:
        self.objects: dict[str, ObjectIndex] = {}

    def replace_objects(self, objects: list[ObjectIndex], force: bool) -> int:
        written = 0
        for obj in objects:
            held = self.objects.get(obj.s3path)
            if held is None or (held.last_modified <= obj.last_modified and (force or held.etag != obj.etag)):
                self.objects[obj.s3path] = obj
                written += 1
        return written

    def remove_object(self, s3path: str) -> bool:
        return self.objects.pop(s3path, None) is not None

    def dump(self) -> set[tuple[str, str, int]]:
        return {(user, obj.s3path, line) for obj in self.objects.values() for user, line in obj.rows()}

    def lookup(self, users: list[str]) -> dict[str, list[Location]]:
        found: dict[str, list[Location]] = {}
        for path in sorted(self.objects):
            obj = self.objects[path]
            for user in dict.fromkeys(users):
                if obj.lines_by_user.get(user):
                    found.setdefault(user, []).append(Location(path, obj.etag, tuple(sorted(obj.lines_by_user[user]))))
        return found

    def status(self) -> IndexStatus:
        objs = list(self.objects.values())
        return IndexStatus(
            objects=len(objs),
            records=sum(o.records for o in objs),
            users=len({user for o in objs for user, lines in o.lines_by_user.items() if lines}),
            rows=sum(o.row_count for o in objs),
            unindexable_lines=sum(len(o.unindexable) for o in objs),
            objects_with_unindexable=sum(1 for o in objs if o.unindexable),
            objects_with_returning_users=sum(1 for o in objs if o.returning_users > 0),
        )


def test_given_a_random_sequence_of_operations_when_replayed_then_the_backend_answers_like_the_model(store):
    rng = random.Random(20260301)
    model = Model()
    paths = [f"s3://lake/events/{name}.jsonl" for name in "abcd"]
    users = [f"user-{n}" for n in range(6)]
    for step in range(60):
        if rng.random() < 0.15:
            path = rng.choice(paths)
            assert store.remove_object(path) == model.remove_object(path), step
            continue
        batch = [
            version(
                path,
                f'"{rng.choice("xyz")}"',
                T0 + timedelta(seconds=rng.randrange(4)),
                {user: rng.sample(range(10), rng.randrange(4)) for user in rng.sample(users, rng.randrange(4))},
                [UnindexableLine(line, "no user id") for line in rng.sample(range(10, 20), rng.randrange(2))],
                returning_users=rng.choice((0, 0, 1, 2)),
            )
            for path in rng.sample(paths, rng.randrange(1, 4))
        ]
        force = rng.random() < 0.2
        assert store.replace_objects(batch, force=force) == model.replace_objects(batch, force), step
        assert store.dump() == model.dump(), step
    assert store.lookup(users) == model.lookup(users)
    assert store.indexed_objects() == {path: obj.etag for path, obj in model.objects.items()}
    assert store.status() == model.status()
    for path in paths:
        held = model.objects.get(path)
        expected = {u: sorted(lines) for u, lines in held.lines_by_user.items() if lines} if held else {}
        assert store.object_rows(path) == expected
        got = store.get_object(path)
        if held is None:
            assert got is None
        else:
            assert got is not None
            assert (got.etag, got.last_modified, got.records, got.lines_by_user, got.returning_users) == (
                held.etag,
                held.last_modified,
                held.records,
                expected,
                held.returning_users,
            )
            assert got.unindexable == sorted(held.unindexable, key=lambda u: u.line)
    assert store.dataset_records() == ({"events": model.status().records} if model.objects else {})


def test_given_users_across_objects_when_looking_up_by_object_then_their_lines_are_merged(store):
    from lakepurge.index.base import Hits, ObjectHits, hits_from_locations

    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [3, 0], "bob": [0, 2], "zoe": [5]}),  # alice and bob share line 0
            version(B, '"b1"', T0, {"alice": [1]}),
            version(C, '"c1"', T0, {"carol": [WHOLE_OBJECT]}),
        ]
    )
    asked = ["alice", "bob", "carol", "stranger"]
    hits = store.lookup_objects(asked)
    assert hits == Hits(
        {
            A: ObjectHits(A, '"a1"', (0, 2, 3)),
            B: ObjectHits(B, '"b1"', (1,)),
            C: ObjectHits(C, '"c1"', (WHOLE_OBJECT,)),
        },
        3,
    )
    assert hits == hits_from_locations(store.lookup(asked))
    assert store.lookup_objects([]) == Hits({}, 0)
    assert store.lookup_objects(["stranger"]) == Hits({}, 0)


# -- versioned buckets: noncurrent versions -------------------------------------------------------------------------


def test_given_noncurrent_versions_recorded_when_asking_for_users_then_each_finds_the_versions_that_hold_them(store):
    assert store.noncurrent_of([]) == {}
    assert store.noncurrent_of(["alice"]) == {}
    assert dump_noncurrent(store) == set()
    store.record_noncurrent([])  # nothing to record is fine
    crowd = tuple(f"user-{n:03d}" for n in range(60))  # more than one BatchWriteItem of 25
    store.record_noncurrent(
        [
            NoncurrentVersion(A, "events", "va1", ("alice", "bob")),
            NoncurrentVersion(A, "events", "va2", ("alice",)),
            NoncurrentVersion(B, "events", "vb1", ("bob", "carol", *crowd)),
        ]
    )
    # Recording a version again adds its new users and keeps the known ones (idempotent, duplicates included).
    store.record_noncurrent(
        [NoncurrentVersion(A, "events", "va1", ("dave", "alice", "dave")), NoncurrentVersion(A, "events", "va2", ())]
    )
    assert store.noncurrent_of(["alice"]) == {A: {"va1", "va2"}}
    assert store.noncurrent_of(["bob", "carol", "stranger", "bob"]) == {A: {"va1"}, B: {"vb1"}}
    assert store.noncurrent_of(["stranger"]) == {}
    assert store.noncurrent_of(["user-059"]) == {B: {"vb1"}}
    assert dump_noncurrent(store) == {
        ("alice", A, "va1"),
        ("bob", A, "va1"),
        ("dave", A, "va1"),
        ("alice", A, "va2"),
        ("bob", B, "vb1"),
        ("carol", B, "vb1"),
        *((user, B, "vb1") for user in crowd),
    }
    # Noncurrent versions are not index rows: current-version readers never see them.
    assert store.lookup(["alice", "bob"]) == {}
    assert store.dump() == set()
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0, 0)
    assert store.indexed_objects() == {}
    assert store.dataset_records() == {}
    assert store.object_rows(A) == {}
    # A deleted version is forgotten whole (every user), and only that version of that object.
    store.forget_noncurrent(A, ["va1"])
    assert store.noncurrent_of(["alice", "bob", "dave"]) == {A: {"va2"}, B: {"vb1"}}
    store.forget_noncurrent(B, ["va2"])  # a version id of another object: nothing of B's goes
    store.forget_noncurrent(A, [])
    store.forget_noncurrent(A, ["never-known"])
    assert store.noncurrent_of(["alice", "bob"]) == {A: {"va2"}, B: {"vb1"}}
    store.forget_noncurrent(B, ["vb1", "vb1"])
    store.forget_noncurrent(A, ["va2"])
    assert store.noncurrent_of(["alice", "bob", "carol", *crowd]) == {}
    assert dump_noncurrent(store) == set()


def test_given_a_versioned_object_when_replacing_it_then_the_replaced_version_keeps_its_users_as_noncurrent(store):
    t1, t2, t3 = (T0 + timedelta(seconds=n) for n in (1, 2, 3))
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0], "bob": [1, 2]}, version_id="va1"),
            version(B, '"b1"', T0, {"carol": [0]}),  # written before the bucket was versioned: no version id
        ]
    )
    assert dump_noncurrent(store) == set()  # nothing was replaced
    assert (
        store.replace_objects(
            [
                version(A, '"a2"', t1, {"alice": [3], "erin": [4]}, version_id="va2"),
                version(B, '"b2"', t1, {"carol": [1]}, version_id="vb2"),
            ]
        )
        == 2
    )
    # A's previous version holds alice and bob still; B's had no version id (not versioned then): nothing kept.
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1")}
    assert store.noncurrent_of(["bob", "carol", "erin"]) == {A: {"va1"}}
    assert store.lookup(["alice", "bob"]) == {"alice": [Location(A, '"a2"', (3,))]}  # rows stay current-only
    # Nothing is replaced by a refused version, a re-delivery or a forced re-index of the same version.
    assert store.replace_objects([version(A, '"a0"', T0 - timedelta(days=1), {"zed": [0]}, version_id="va0")]) == 0
    assert store.replace_objects([version(A, '"a2"', t1, {"alice": [3], "erin": [4]}, version_id="va2")]) == 0
    assert store.replace_objects([version(A, '"a2"', t1, {"alice": [3, 5]}, version_id="va2")], force=True) == 1
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1")}
    # The next version keeps the users of the one it replaced as the index last held it (erin no longer).
    assert store.replace_objects([version(A, '"a3"', t2, {"dave": [0]}, version_id="va3")]) == 1
    # The same content under a new version id (a copy in place), forced: the old version id keeps the old users.
    assert store.replace_objects([version(A, '"a3"', t3, {"frank": [0]}, version_id="va4")], force=True) == 1
    # A versioned object replaced by one without a version id (versioning suspended) still leaves its version.
    assert store.replace_objects([version(B, '"b3"', t2, {"gina": [0]})]) == 1
    assert dump_noncurrent(store) == {
        ("alice", A, "va1"),
        ("bob", A, "va1"),
        ("alice", A, "va2"),
        ("dave", A, "va3"),
        ("carol", B, "vb2"),
    }
    assert store.noncurrent_of(["alice", "frank", "gina"]) == {A: {"va1", "va2"}}
    assert store.dump() == {("frank", A, 0), ("gina", B, 0)}


def test_given_versioned_objects_when_removing_them_then_the_removed_version_keeps_its_users(store):
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, version_id="va1"),
            version(B, '"b1"', T0, {"alice": [2]}),
            version(C, '"c1"', T0, {}, version_id="vc1"),  # a versioned object with no users
        ]
    )
    assert store.remove_object(A) is True
    assert store.remove_object(B) is True  # no version id: nothing left behind
    assert store.remove_object(C) is True
    assert store.remove_object(A) is False
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1")}
    assert store.noncurrent_of(["alice"]) == {A: {"va1"}}
    assert store.lookup(["alice", "bob"]) == {}
    # The path indexed again (the delete marker removed, or a new object): the old version stays known.
    assert store.replace_objects([version(A, '"a2"', T0, {"carol": [0]}, version_id="va2")]) == 1
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1")}
    store.forget_noncurrent(A, ["va1"])
    assert dump_noncurrent(store) == set()


def test_given_a_versioned_object_when_a_purge_rewrites_it_then_the_rewritten_version_keeps_every_user(store):
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0, 2], "bob": [1], "carol": [3]}, version_id="va1"),
            version(B, '"b1"', T0, {"alice": [0], "dave": [1]}),
        ]
    )
    after = NewVersion('"a2"', "va2", T0 + timedelta(seconds=5))
    assert store.apply_erasure(A, '"a0"', after, [1]) is False  # not the indexed version: nothing changes
    assert dump_noncurrent(store) == set()
    assert store.apply_erasure(A, '"a1"', after, [0, 2]) is True
    # The version rewritten still holds every user, the erased one included, until the purge deletes it.
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1"), ("carol", A, "va1")}
    assert store.noncurrent_of(["alice"]) == {A: {"va1"}}
    assert store.lookup(["alice", "bob"]) == {
        "alice": [Location(B, '"b1"', (0,))],
        "bob": [Location(A, '"a2"', (1,))],
    }
    # An unversioned object rewritten leaves no version behind.
    assert store.apply_erasure(B, '"b1"', NewVersion('"b2"', None, T0 + timedelta(seconds=5)), [0]) is True
    assert store.noncurrent_of(["alice", "dave"]) == {A: {"va1"}}
    # The purge deleted the rewritten version: it is forgotten, the current rows stay.
    store.forget_noncurrent(A, ["va1"])
    assert dump_noncurrent(store) == set()
    assert store.dump() == {("bob", A, 1), ("carol", A, 3), ("dave", B, 1)}


# A purge moves the index from the version it read (a1) to the one it wrote (p); S3 stamps whole seconds, so another
# writer's version (w) written in the same second carries the same LastModified as both.
PURGED = NewVersion('"p"', "vp", T0)
NEWER = version(A, '"w"', T0, {"bob": [0], "erin": [1]}, version_id="vw")


def _purge_race_start(store: IndexStore) -> None:
    store.replace_objects([version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, version_id="va1")])


def _assert_newer_kept(store: IndexStore) -> None:
    assert store.dump() == {("bob", A, 0), ("erin", A, 1)}
    assert store.lookup(["alice", "bob"]) == {"bob": [Location(A, '"w"', (0,))]}
    # Only the version the newer one replaced is noncurrent; the current one is never recorded as such.
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1")}


def test_given_an_object_when_a_purge_drops_rows_then_its_later_rows_and_unindexable_lines_move_up(store):
    # Parquet rows dropped (issue 34): rows 1 and 5 go; 0 stays; 2, 3, 4 move up by one; 6, 7, 8 by two.
    rows = {"alice": [1, 5], "bob": [0, 2, 6], "carol": [3, 7]}
    bad = [UnindexableLine(4, "not valid JSON"), UnindexableLine(8, "no user id")]
    store.replace_objects(
        [version(A, '"a1"', T0, rows, bad, version_id="va1"), version(B, '"b1"', T0, {"alice": [0], "bob": [3]})]
    )
    after = NewVersion('"a2"', "va2", T0 + timedelta(seconds=5))
    assert store.apply_erasure(A, '"a0"', after, [5, 1], dropped=True) is False  # not the indexed version
    assert store.object_rows(A) == rows
    assert store.apply_erasure(A, '"a1"', after, [5, 1], dropped=True) is True
    assert store.object_rows(A) == {"bob": [0, 1, 4], "carol": [2, 5]}
    held = store.get_object(A)
    assert held is not None
    assert (held.etag, held.version_id, held.records) == ('"a2"', "va2", 7)
    assert held.unindexable == [UnindexableLine(3, "not valid JSON"), UnindexableLine(6, "no user id")]
    assert store.lookup(["alice", "bob"]) == {
        "alice": [Location(B, '"b1"', (0,))],
        "bob": [Location(A, '"a2"', (0, 1, 4)), Location(B, '"b1"', (3,))],
    }
    # The version rewritten still holds every user until the purge deletes it; the other object is untouched.
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("bob", A, "va1"), ("carol", A, "va1")}
    assert store.object_rows(B) == {"alice": [0], "bob": [3]}


def test_given_a_table_file_rewritten_under_a_new_name_when_copied_then_the_new_file_has_the_rows_left_moved_up(store):
    # A table's erasure writes file N without rows 1 and 5 of file A (alice's, and a row a deletion vector hid,
    # which the index never held): N gets A's other rows, moved up; A stays until the table's commit removes it.
    rows = {"alice": [1], "bob": [0, 2, 6], "carol": [3, 7]}
    bad = [UnindexableLine(4, "no user id"), UnindexableLine(5, "no user id"), UnindexableLine(8, "no user id")]
    N = "s3://lake/events/n.parquet"
    store.replace_objects([version(A, '"a1"', T0, rows, bad, version_id="va1")])
    new = ObjectIndex(N, "events", '"n1"', "vn1", T0 + timedelta(seconds=5))
    assert store.copy_rewritten(A, '"a0"', new, [5, 1]) is False  # not the version indexed
    assert store.get_object(N) is None

    assert store.copy_rewritten(A, '"a1"', new, [5, 1]) is True

    assert store.object_rows(N) == {"bob": [0, 1, 4], "carol": [2, 5]}
    held = store.get_object(N)
    assert held is not None
    assert (held.dataset, held.etag, held.version_id, held.records) == ("events", '"n1"', "vn1", 7)
    assert held.unindexable == [UnindexableLine(3, "no user id"), UnindexableLine(6, "no user id")]
    assert store.lookup(["alice", "carol"]) == {
        "alice": [Location(A, '"a1"', (1,))],
        "carol": [Location(A, '"a1"', (3, 7)), Location(N, '"n1"', (2, 5))],
    }
    assert store.object_rows(A) == rows
    assert store.copy_rewritten(A, '"a1"', new, [1]) is False  # N is indexed already: nothing changes
    assert store.object_rows(N) == {"bob": [0, 1, 4], "carol": [2, 5]}
    # Nothing dropped (a file rewritten for a deletion vector's rows the index never held): the rows as they are.
    assert store.copy_rewritten(A, '"a1"', ObjectIndex(B, "events", '"b1"', None, T0), []) is True
    assert store.object_rows(B) == rows


def test_given_a_newer_version_indexed_in_the_same_second_when_a_purge_moves_the_index_then_the_newer_stays(store):
    _purge_race_start(store)
    store.replace_objects([NEWER])

    assert store.apply_erasure(A, '"a1"', PURGED, [0]) is False

    _assert_newer_kept(store)


@pytest.mark.parametrize("store", ["dynamodb"], indirect=True)
def test_given_a_newer_version_indexed_between_the_dynamodb_read_and_write_when_moving_the_index_then_it_stays(
    store, monkeypatch
):
    # DynamoDB reads the object's rows, then writes the new version's: an indexer may index another writer's version
    # in between. The write must be conditional on the version read (PostgreSQL's one statement compares the ETag;
    # the memory store holds its lock), or the newer version's rows are replaced by stale ones.
    _purge_race_start(store)
    read = store.get_object

    def read_then_another_indexer_writes(s3path: str) -> ObjectIndex | None:
        held = read(s3path)
        store.replace_objects([NEWER])
        return held

    monkeypatch.setattr(store, "get_object", read_then_another_indexer_writes)

    assert store.apply_erasure(A, '"a1"', PURGED, [0]) is False

    monkeypatch.undo()
    _assert_newer_kept(store)


# -- coverage -------------------------------------------------------------------------------------------------------


def test_given_datasets_fully_listed_when_recording_coverage_then_the_last_listing_of_each_comes_back(store):
    assert store.coverage() == {}
    paris = timezone(timedelta(hours=1))
    backfill = Coverage(
        dataset="events",
        location="s3://lake/events/",
        method="backfill",
        started_at=T0.astimezone(paris) + timedelta(microseconds=250),  # any time zone: compares as the instant
        finished_at=T0 + timedelta(hours=2, microseconds=1),
        objects=120,
        versions=0,
        failed=2,
    )
    clicks = Coverage("clicks", "s3://lake/clicks/", "reconcile", T0, T0 + timedelta(minutes=3), 7, 12, 0, drift=1)
    store.record_coverage(backfill)
    store.record_coverage(clicks)
    got = store.coverage()
    assert got == {"events": backfill, "clicks": clicks}
    for coverage in got.values():
        for stamp in (coverage.started_at, coverage.finished_at):
            assert stamp.tzinfo is not None and stamp.utcoffset() == timedelta(0)
    # A new listing of a dataset replaces its previous record, whatever it held.
    reconcile = Coverage("events", "s3://lake/events-v2/", "reconcile", T0 + timedelta(days=1), T0, 0, 3, 0, drift=4)
    store.record_coverage(reconcile)
    assert store.coverage() == {"events": reconcile, "clicks": clicks}
    # Coverage records are not index rows or objects.
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0, 0)
    assert store.dump() == set()
    assert dump_noncurrent(store) == set()
    assert store.indexed_objects() == {}
    assert store.dataset_records() == {}
    assert store.unindexable() == []


def test_given_rows_noncurrent_versions_coverage_and_erased_users_when_truncating_then_all_are_emptied(store):
    store.replace_objects([version(A, '"a1"', T0, {"alice": [0]}, version_id="va1")])
    store.replace_objects([version(A, '"a2"', T0 + timedelta(seconds=1), {"bob": [0]}, version_id="va2")])
    store.record_noncurrent([NoncurrentVersion(B, "events", "vb1", ("carol",))])
    store.record_coverage(Coverage("events", "s3://lake/events/", "backfill", T0, T0, 2, 1, 0))
    store.record_erased([keyed("alice")], "req-1")
    assert dump_noncurrent(store) == {("alice", A, "va1"), ("carol", B, "vb1")}
    store.truncate()
    assert store.dump() == set()
    assert dump_noncurrent(store) == set()
    assert store.noncurrent_of(["alice", "carol"]) == {}
    assert store.coverage() == {}
    assert store.erased_among([keyed("alice")]) == set()
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0, 0)


def test_given_record_maps_stored_when_read_then_each_object_has_its_last_one_and_rows_are_untouched(store):
    store.replace_objects([version(A, '"a1"', T0, {"alice": [0, 7]})])
    long_path = "s3://lake/events/" + "k" * 1000 + ".jsonl"  # a key near S3's limit still has its map
    store.set_record_maps([(A, b"map of a1"), (long_path, b"\x00binary\xff")])
    store.set_record_maps([(A, b"map of a2")])

    assert store.record_map(A) == b"map of a2"
    assert store.record_map(long_path) == b"\x00binary\xff"
    assert store.record_map(B) is None
    # Asked together, as a purge task asks for all its objects: the long path named back from its hashed key.
    assert store.with_record_maps([A, B, long_path]) == {A, long_path}
    assert store.with_record_maps([]) == set()
    assert store.dump() == {("alice", A, 0), ("alice", A, 7)}  # a map is no row, no object
    assert store.status().objects == 1
    store.truncate()
    assert store.record_map(A) is None
    assert store.with_record_maps([A, long_path]) == set()


def test_given_objects_with_unindexable_lines_when_asked_then_only_their_current_versions_are_counted(store):
    failed = "s3://lake/events/failed.parquet"
    whole = [UnindexableLine(WHOLE_OBJECT, "object could not be indexed: ArrowInvalid")]
    unowned = [UnindexableLine(WHOLE_OBJECT, "object tag 'owner' missing")]
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0]}, [UnindexableLine(1, "invalid JSON"), UnindexableLine(3, "x")]),
            version(B, '"b1"', T0, {"bob": [0]}),
            version(failed, "", T0, {}, whole),
            ObjectIndex(C, "owners", '"c1"', None, T0, {}, 0, unowned),
        ]
    )
    assert store.problems() == {
        "events": DatasetProblems("events", objects=2, lines=3, failed=1, unowned=0),
        "owners": DatasetProblems("owners", objects=1, lines=1, failed=0, unowned=1),
    }
    assert store.problem_objects("events", limit=5, lines=1) == [
        UnindexableObject(A, "events", '"a1"', None, T0, 2, (UnindexableLine(1, "invalid JSON"),)),
        UnindexableObject(failed, "events", "", None, T0, 1, tuple(whole)),
    ]
    assert [o.s3path for o in store.problem_objects("events", limit=1)] == [A]
    assert store.object_owners("owners") == {C: frozenset()}

    # A later clean version of A, the failed object removed, C tagged: nothing of the old versions counts.
    store.replace_objects([version(A, '"a2"', T0 + timedelta(seconds=1), {"alice": [0]})])
    store.remove_object(failed)
    store.replace_objects([ObjectIndex(C, "owners", '"c1"', None, T0, {"carol": [WHOLE_OBJECT]}, 1)], force=True)
    assert store.problems() == {}
    assert store.problem_objects("events", limit=5) == []
    assert store.object_owners("owners") == {C: frozenset({"carol"})}
    assert store.object_owners("events") == {A: frozenset(), B: frozenset()}

    # An older version with problems arriving late changes nothing; a newer one counts again.
    store.replace_objects([version(A, '"a0"', T0, {}, [UnindexableLine(0, "late")])])
    assert store.problems() == {}
    store.replace_objects([version(A, '"a3"', T0 + timedelta(seconds=2), {}, [UnindexableLine(0, "newer")])])
    assert store.problems() == {"events": DatasetProblems("events", 1, 1, 0, 0)}


def test_given_an_object_with_unindexable_lines_when_a_purge_rewrites_it_then_its_lines_still_count(store):
    """Blanking keeps every line number, so the unindexable lines of the version rewritten are the new version's."""
    bad = [UnindexableLine(2, "invalid JSON")]
    store.replace_objects([version(A, '"a1"', T0, {"alice": [0], "bob": [1]}, bad)])
    assert store.apply_erasure(A, '"a1"', NewVersion('"a2"', None, T0 + timedelta(seconds=1)), [0])
    assert store.problems() == {"events": DatasetProblems("events", 1, 1, 0, 0)}
    assert [(o.etag, o.lines) for o in store.problem_objects("events", limit=5)] == [('"a2"', tuple(bad))]


def test_given_records_holding_two_ids_when_asking_ids_beside_then_each_names_the_others_until_its_line_is_erased(
    store,
):
    # line 0 of A: an order with alice's email and customer id; line 1: her device; line 2: bob's order. B repeats
    # the customer id (one answer per dataset); C is a whole object of two owners, no record.
    store.replace_objects(
        [
            version(A, '"a1"', T0, {"alice": [0, 1], "c42": [0], "dev9": [1], "bob": [2], "c7": [2]}),
            version(B, '"b1"', T0, {"alice": [3], "c42": [3]}),
            version(C, '"c1"', T0, {"alice": [WHOLE_OBJECT], "carol": [WHOLE_OBJECT]}),
        ]
    )
    assert store.ids_beside(["alice"]) == [Beside("alice", "c42", "events"), Beside("alice", "dev9", "events")]
    assert store.ids_beside(["alice", "bob", "nobody"])[-1] == Beside("bob", "c7", "events")
    assert store.ids_beside([]) == []
    assert store.apply_erasure(A, '"a1"', NewVersion('"a2"', None, T0 + timedelta(hours=1)), [1])
    assert store.ids_beside(["alice"]) == [Beside("alice", "c42", "events")]  # the device's record is gone
