"""The DynamoDB index on the moto server: per-object replacement, chunked line lists, batch limits and retries."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from lakepurge.core.aws import client as aws_client
from lakepurge.index import dynamodb_table
from lakepurge.index.base import (
    WHOLE_OBJECT,
    Coverage,
    IndexStatus,
    Location,
    NoncurrentVersion,
    ObjectIndex,
    UnindexableLine,
)
from lakepurge.index.dynamodb import DynamoIndexStore
from lakepurge.index.dynamodb_table import DynamoBatchError
from tests.support.index import dump_noncurrent

pytestmark = pytest.mark.integration

TABLE = "lakepurge-index-test"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def version(
    path: str,
    etag: str,
    minute: int = 0,
    users: dict[str, list[int]] | None = None,
    records: int | None = None,
    unindexable: list[UnindexableLine] | None = None,
) -> ObjectIndex:
    users = users or {}
    return ObjectIndex(
        s3path=path,
        dataset="events",
        etag=etag,
        version_id=None,
        last_modified=T0 + timedelta(minutes=minute),
        lines_by_user=users,
        records=records if records is not None else sum(len(lines) for lines in users.values()),
        unindexable=unindexable or [],
    )


def raw_items() -> list[dict]:
    """Every item of the table as stored (read with the real client, not through the store)."""
    client = aws_client("dynamodb")
    items: list[dict] = []
    kwargs: dict = {"TableName": TABLE, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def row_items() -> list[dict]:
    return [item for item in raw_items() if item["location"]["S"] != "#meta"]


class Proxy:
    """Delegates every call to the real moto-backed client; subclasses change what one call does."""

    def __init__(self, real) -> None:
        self._real = real
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._real, name)


class HalfUnprocessedOnce(Proxy):
    """The first BatchWriteItem and the first BatchGetItem send only half their items to DynamoDB and hand the
    other half back as unprocessed, as DynamoDB does under throttling."""

    def __init__(self, real) -> None:
        super().__init__(real)
        self.withheld_writes = 0
        self.withheld_keys = 0
        self.write_calls = 0
        self.get_calls = 0

    def batch_write_item(self, RequestItems, **kwargs):
        with self._lock:
            self.write_calls += 1
            first = self.withheld_writes == 0
            ((table, requests),) = RequestItems.items()
            keep = requests[: len(requests) - len(requests) // 2] if first else requests
            withheld = requests[len(keep) :]
            if first:
                self.withheld_writes = len(withheld)
        response = self._real.batch_write_item(RequestItems={table: keep}, **kwargs)
        if withheld:
            unprocessed = response.setdefault("UnprocessedItems", {})
            unprocessed.setdefault(table, []).extend(withheld)
        return response

    def batch_get_item(self, RequestItems, **kwargs):
        with self._lock:
            self.get_calls += 1
            first = self.withheld_keys == 0
            ((table, request),) = RequestItems.items()
            keys = request["Keys"]
            keep = keys[: len(keys) - len(keys) // 2] if first else keys
            withheld = keys[len(keep) :]
            if first:
                self.withheld_keys = len(withheld)
        response = self._real.batch_get_item(RequestItems={table: {**request, "Keys": keep}}, **kwargs)
        if withheld:
            response.setdefault("UnprocessedKeys", {})[table] = {**request, "Keys": withheld}
        return response


class NeverProcesses(Proxy):
    """DynamoDB throttling forever: every BatchWriteItem comes back entirely unprocessed."""

    def batch_write_item(self, RequestItems, **kwargs):
        return {"UnprocessedItems": RequestItems}


class CountingBatchGets(Proxy):
    def __init__(self, real) -> None:
        super().__init__(real)
        self.key_counts: list[int] = []

    def batch_get_item(self, RequestItems, **kwargs):
        with self._lock:
            self.key_counts.extend(len(request["Keys"]) for request in RequestItems.values())
        return self._real.batch_get_item(RequestItems=RequestItems, **kwargs)


@pytest.fixture
def store(aws):
    index = DynamoIndexStore(TABLE)
    index.ensure_schema()
    yield index
    index.close()


def store_with(proxy_class, **kwargs):
    proxy = proxy_class(aws_client("dynamodb"), **kwargs)
    return DynamoIndexStore(TABLE, client=proxy), proxy


# -- schema -------------------------------------------------------------------------------------------------------


def test_given_no_table_when_ensuring_schema_then_table_with_keys_and_by_object_index_is_created_once(aws):
    index = DynamoIndexStore(TABLE)
    index.ensure_schema()
    index.ensure_schema()  # a second start finds it and changes nothing
    table = aws_client("dynamodb").describe_table(TableName=TABLE)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]} == {
        ("userid", "HASH"),
        ("location", "RANGE"),
    }
    (gsi,) = table["GlobalSecondaryIndexes"]
    assert gsi["IndexName"] == "by_object"
    assert gsi["KeySchema"] == [{"AttributeName": "s3path", "KeyType": "HASH"}]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_given_table_without_by_object_index_when_ensuring_schema_then_it_refuses(aws):
    aws_client("dynamodb").create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "userid", "AttributeType": "S"},
            {"AttributeName": "location", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "userid", "KeyType": "HASH"},
            {"AttributeName": "location", "KeyType": "RANGE"},
        ],
    )
    with pytest.raises(dynamodb_table.IndexSchemaError, match="by_object"):
        DynamoIndexStore(TABLE).ensure_schema()


# -- replacing objects --------------------------------------------------------------------------------------------


def test_given_replaced_objects_when_looking_up_then_each_user_gets_sorted_lines_per_object_sorted_by_path(store):
    written = store.replace_objects(
        [
            version("s3://lake/b.jsonl", '"e1"', users={"alice": [4, 0, 2], "bob": [1]}),
            version("s3://lake/a.jsonl", '"e2"', users={"alice": [7]}),
            version("s3://lake/owner.bin", '"e3"', users={"carol": [WHOLE_OBJECT]}),
        ]
    )
    assert written == 3
    found = store.lookup(["alice", "bob", "carol", "nobody", "alice"])
    assert found == {
        "alice": [Location("s3://lake/a.jsonl", '"e2"', (7,)), Location("s3://lake/b.jsonl", '"e1"', (0, 2, 4))],
        "bob": [Location("s3://lake/b.jsonl", '"e1"', (1,))],
        "carol": [Location("s3://lake/owner.bin", '"e3"', (WHOLE_OBJECT,))],
    }
    assert found["carol"][0].whole_object
    assert store.object_rows("s3://lake/b.jsonl") == {"alice": [0, 2, 4], "bob": [1]}
    assert store.object_rows("s3://lake/missing.jsonl") == {}
    assert store.indexed_objects() == {
        "s3://lake/a.jsonl": '"e2"',
        "s3://lake/b.jsonl": '"e1"',
        "s3://lake/owner.bin": '"e3"',
    }
    assert store.lookup([]) == {}


def test_given_new_etag_when_replacing_then_old_rows_are_deleted_including_users_no_longer_present(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"v1"', 0, {"alice": [0, 1], "bob": [2], "gone": [3]})])
    assert store.replace_objects([version(path, '"v2"', 5, {"alice": [0], "bob": [1, 2], "new": [3]})]) == 1
    assert store.lookup(["alice", "bob", "gone", "new"]) == {
        "alice": [Location(path, '"v2"', (0,))],
        "bob": [Location(path, '"v2"', (1, 2))],
        "new": [Location(path, '"v2"', (3,))],
    }
    assert store.dump() == {("alice", path, 0), ("bob", path, 1), ("bob", path, 2), ("new", path, 3)}
    # Not merely hidden: the old version's items are gone from the table.
    assert {item["etag"]["S"] for item in row_items()} == {'"v2"'}
    assert {item["userid"]["S"] for item in row_items()} == {"alice", "bob", "new"}


def test_given_newer_version_indexed_when_replacing_with_older_last_modified_then_it_is_refused(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"new"', 10, {"alice": [0]})])
    assert store.replace_objects([version(path, '"old"', 5, {"alice": [9], "bob": [1]})]) == 0
    assert store.replace_objects([version(path, '"old"', 5, {"bob": [1]})], force=True) == 0  # force is not time travel
    assert store.lookup(["alice", "bob"]) == {"alice": [Location(path, '"new"', (0,))]}
    assert {item["etag"]["S"] for item in row_items()} == {'"new"'}


def test_given_same_last_modified_and_new_etag_when_replacing_then_it_is_written(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"a"', 3, {"alice": [0]})])
    assert store.replace_objects([version(path, '"b"', 3, {"alice": [1]})]) == 1
    assert store.lookup(["alice"]) == {"alice": [Location(path, '"b"', (1,))]}


def test_given_same_etag_twice_when_replacing_then_second_is_noop(store):
    path = "s3://lake/x.jsonl"
    first = version(path, '"e"', 0, {"alice": [0, 1]})
    assert store.replace_objects([first]) == 1
    before = raw_items()
    # Same ETag, even with different content or a later time: a re-delivery, nothing is written.
    assert store.replace_objects([version(path, '"e"', 9, {"mallory": [5]})]) == 0
    assert store.replace_objects([first]) == 0
    assert raw_items() == before
    assert store.lookup(["alice", "mallory"]) == {"alice": [Location(path, '"e"', (0, 1))]}


def test_given_same_etag_when_forcing_then_rows_are_rewritten_and_stale_users_and_chunks_removed(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"e"', 0, {"alice": list(range(45_000)), "bob": [3]})])
    assert store.replace_objects([version(path, '"e"', 0, {"alice": [1, 2], "carol": [4]})], force=True) == 1
    assert store.lookup(["alice", "bob", "carol"]) == {
        "alice": [Location(path, '"e"', (1, 2))],
        "carol": [Location(path, '"e"', (4,))],
    }
    assert sorted((item["userid"]["S"], item["chunk"]["N"]) for item in row_items()) == [("alice", "0"), ("carol", "0")]
    assert store.status().rows == 3


def test_given_indexed_object_when_removing_then_its_rows_are_gone_and_second_remove_reports_absent(store):
    store.replace_objects(
        [
            version("s3://lake/x.jsonl", '"e"', 0, {"alice": [0], "bob": list(range(25_000))}),
            version("s3://lake/y.jsonl", '"f"', 0, {"alice": [1]}),
        ]
    )
    assert store.remove_object("s3://lake/x.jsonl") is True
    assert store.remove_object("s3://lake/x.jsonl") is False
    assert store.remove_object("s3://lake/never.jsonl") is False
    assert store.lookup(["alice", "bob"]) == {"alice": [Location("s3://lake/y.jsonl", '"f"', (1,))]}
    assert store.indexed_objects() == {"s3://lake/y.jsonl": '"f"'}
    assert {item["s3path"]["S"] for item in raw_items()} == {"s3://lake/y.jsonl"}


def test_given_the_same_object_twice_in_one_batch_when_replacing_then_the_versions_apply_in_order(store):
    path = "s3://lake/x.jsonl"
    written = store.replace_objects(
        [
            version(path, '"v1"', 0, {"alice": [0]}),
            version("s3://lake/y.jsonl", '"y"', 0, {"bob": [0]}),
            version(path, '"v2"', 1, {"carol": [0]}),
        ]
    )
    assert written == 3
    assert store.dump() == {("carol", path, 0), ("bob", "s3://lake/y.jsonl", 0)}
    assert {item["etag"]["S"] for item in row_items() if item["s3path"]["S"] == path} == {'"v2"'}


# -- large lists and many keys ------------------------------------------------------------------------------------


def test_given_user_with_45000_lines_in_one_object_when_reading_then_lines_round_trip_exactly_in_chunks(store):
    path = "s3://lake/big.jsonl"
    lines = list(range(0, 90_000, 2))
    shuffled = lines[1::2] + lines[::2]
    store.replace_objects([version(path, '"big"', 0, {"heavy": shuffled, "light": [1]})])
    chunks = sorted(
        (int(item["chunk"]["N"]), len(item["lines"]["L"])) for item in row_items() if item["userid"]["S"] == "heavy"
    )
    assert chunks == [(0, 20_000), (1, 20_000), (2, 5_000)]
    assert store.lookup(["heavy"]) == {"heavy": [Location(path, '"big"', tuple(lines))]}
    assert store.object_rows(path) == {"heavy": lines, "light": [1]}
    assert store.status().rows == 45_001
    assert len(store.dump()) == 45_001
    # A new version with fewer lines leaves none of the old chunks behind.
    store.replace_objects([version(path, '"small"', 1, {"heavy": [5]})])
    assert [(item["userid"]["S"], item["chunk"]["N"]) for item in row_items()] == [("heavy", "0")]
    assert store.lookup(["heavy", "light"]) == {"heavy": [Location(path, '"small"', (5,))]}


def test_given_250_users_across_150_objects_when_looking_up_all_then_batch_gets_respect_100_keys(store):
    objects = []
    expected: dict[str, list[Location]] = {}
    for n in range(150):
        path = f"s3://lake/part-{n:03d}.jsonl"
        users = {f"user-{u:03d}": [n, n + 1000] for u in range(250) if u % 150 == n or (u * 7) % 150 == n}
        objects.append(version(path, f'"e{n}"', 0, users))
        for user, lines in users.items():
            expected.setdefault(user, []).append(Location(path, f'"e{n}"', tuple(lines)))
    assert store.replace_objects(objects) == 150
    index, proxy = store_with(CountingBatchGets)
    found = index.lookup([f"user-{u:03d}" for u in range(250)] + ["absent"])
    assert found == {user: sorted(locations, key=lambda loc: loc.s3path) for user, locations in expected.items()}
    assert len(found) == 250
    assert sum(proxy.key_counts) == 150  # each object's meta item read once
    assert max(proxy.key_counts) <= 100
    assert len(proxy.key_counts) >= 2


# -- unindexable lines and status ---------------------------------------------------------------------------------


def test_given_unindexable_lines_when_reading_status_then_counts_and_first_lines_are_reported(store):
    many = [UnindexableLine(line, "not valid JSON") for line in range(150)]
    store.replace_objects(
        [
            version(
                "s3://lake/b.jsonl",
                '"b"',
                0,
                {"alice": [0, 1], "bob": [2]},
                records=3,
                unindexable=[UnindexableLine(7, "record too large"), UnindexableLine(3, "no user id")],
            ),
            version("s3://lake/a.jsonl", '"a"', 0, {"alice": [0]}, records=4, unindexable=many),
            version("s3://lake/c.jsonl", '"c"', 0, {}, records=0),
        ]
    )
    assert store.status() == IndexStatus(
        objects=3, records=7, users=2, rows=4, unindexable_lines=152, objects_with_unindexable=2
    )
    assert store.unindexable(limit=3) == [
        ("s3://lake/a.jsonl", UnindexableLine(0, "not valid JSON")),
        ("s3://lake/a.jsonl", UnindexableLine(1, "not valid JSON")),
        ("s3://lake/a.jsonl", UnindexableLine(2, "not valid JSON")),
    ]
    everything = store.unindexable(limit=1000)
    # The meta item keeps the first 100 of an object's unindexable lines; the count stays exact.
    assert len(everything) == 102
    assert everything[-2:] == [
        ("s3://lake/b.jsonl", UnindexableLine(3, "no user id")),
        ("s3://lake/b.jsonl", UnindexableLine(7, "record too large")),
    ]
    assert store.unindexable(limit=0) == []


def test_given_empty_index_when_reading_status_then_everything_is_zero(store):
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0)
    assert store.dump() == set()
    assert store.indexed_objects() == {}
    assert store.unindexable() == []


def test_given_rows_when_truncating_then_table_is_empty(store):
    store.replace_objects([version("s3://lake/x.jsonl", '"e"', 0, {f"u{n}": [n] for n in range(60)})])
    store.truncate()
    assert raw_items() == []
    assert store.status() == IndexStatus(0, 0, 0, 0, 0, 0)


# -- retries, crashes and concurrent writers ----------------------------------------------------------------------


def test_given_dynamodb_returns_half_unprocessed_when_writing_and_reading_then_retries_complete_the_work(store):
    index, proxy = store_with(HalfUnprocessedOnce)
    # 110 objects: their meta items take two BatchGetItem calls (100 keys at most); 4 users in each make 440 row
    # items, written in many BatchWriteItem calls of 25 on several threads. More users only make more such calls.
    users = {f"user-{n:03d}": [n] for n in range(4)}
    objects = [version(f"s3://lake/p{n:03d}.jsonl", f'"e{n}"', 0, users) for n in range(110)]
    assert index.replace_objects(objects) == 110
    assert proxy.withheld_writes > 0
    assert proxy.withheld_keys > 0  # the meta items read before writing
    reader, proxy = store_with(HalfUnprocessedOnce)
    found = reader.lookup(list(users))
    assert proxy.withheld_keys > 0
    assert len(found) == len(users) == 4
    assert all(len(locations) == 110 for locations in found.values())
    assert store.dump() == {(user, obj.s3path, lines[0]) for obj in objects for user, lines in users.items()}
    assert len(row_items()) == 4 * 110


def test_given_dynamodb_never_processes_a_batch_when_writing_then_it_gives_up_with_an_error(store, monkeypatch):
    monkeypatch.setattr(dynamodb_table, "BACKOFF_BASE_SECONDS", 0.0)
    index, _ = store_with(NeverProcesses)
    with pytest.raises(DynamoBatchError, match="unprocessed"):
        index.replace_objects([version("s3://lake/x.jsonl", '"e"', 0, {"alice": [0]})])


class CrashBeforeFlip(Proxy):
    """The writer dies after writing its rows and before flipping the meta item."""

    def put_item(self, **kwargs):
        raise ConnectionError("writer died")


def test_given_writer_died_before_flipping_when_reading_then_old_version_is_served_and_a_retry_converges(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"v1"', 0, {"alice": [0], "bob": [1]})])
    crashing, _ = store_with(CrashBeforeFlip)
    with pytest.raises(ConnectionError):
        crashing.replace_objects([version(path, '"v2"', 1, {"alice": [5], "carol": [6]})])
    assert {item["etag"]["S"] for item in row_items()} == {'"v1"', '"v2"'}  # half-written version is stored...
    assert store.lookup(["alice", "bob", "carol"]) == {  # ...but nobody sees it
        "alice": [Location(path, '"v1"', (0,))],
        "bob": [Location(path, '"v1"', (1,))],
    }
    assert store.object_rows(path) == {"alice": [0], "bob": [1]}
    assert store.dump() == {("alice", path, 0), ("bob", path, 1)}
    assert store.status().users == 2
    assert store.replace_objects([version(path, '"v2"', 1, {"alice": [5], "carol": [6]})]) == 1  # the redelivery
    assert store.dump() == {("alice", path, 5), ("carol", path, 6)}
    assert {item["etag"]["S"] for item in row_items()} == {'"v2"'}


class NewerVersionLandsDuringWrite(Proxy):
    """While this writer writes its rows, another writer indexes a newer version of the object."""

    def __init__(self, real, newer: ObjectIndex) -> None:
        super().__init__(real)
        self.newer: ObjectIndex | None = newer

    def batch_write_item(self, RequestItems, **kwargs):
        response = self._real.batch_write_item(RequestItems=RequestItems, **kwargs)
        with self._lock:
            newer, self.newer = self.newer, None
        if newer is not None:
            assert DynamoIndexStore(TABLE).replace_objects([newer]) == 1
        return response


def test_given_newer_version_flipped_while_writing_when_flip_fails_then_own_rows_are_removed(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"v1"', 0, {"alice": [0]})])
    newer = version(path, '"v3"', 10, {"carol": [2]})
    slow, _ = store_with(NewerVersionLandsDuringWrite, newer=newer)
    assert slow.replace_objects([version(path, '"v2"', 5, {"bob": [1]})]) == 0
    assert store.dump() == {("carol", path, 2)}
    assert {item["etag"]["S"] for item in row_items()} == {'"v3"'}


class ReplacedDuringQuery(Proxy):
    """The object is replaced by a new version right after the user's rows were read, before its meta item is."""

    def __init__(self, real, newer: ObjectIndex) -> None:
        super().__init__(real)
        self.newer: ObjectIndex | None = newer
        self.queries = 0

    def query(self, **kwargs):
        response = self._real.query(**kwargs)
        with self._lock:
            self.queries += 1
            newer, self.newer = self.newer, None
        if newer is not None:
            DynamoIndexStore(TABLE).replace_objects([newer])
        return response


def test_given_object_replaced_while_looking_up_when_rows_disagree_with_meta_then_user_is_read_again(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([version(path, '"v1"', 0, {"alice": [0, 1]})])
    reader, proxy = store_with(ReplacedDuringQuery, newer=version(path, '"v2"', 1, {"alice": [7]}))
    # Without the re-read alice would vanish: her v1 rows are no longer current and v2 was not read.
    assert reader.lookup(["alice"]) == {"alice": [Location(path, '"v2"', (7,))]}
    assert proxy.queries == 2


def test_given_s3_key_of_1024_bytes_when_replacing_then_rows_fit_the_sort_key_limit_and_round_trip(store):
    path = "s3://lake/" + "k" * 1024
    store.replace_objects([version(path, '"v1"', 0, {"alice": [0, 1]})])
    store.replace_objects([version(path, '"v2"', 1, {"alice": [2]})])
    assert store.lookup(["alice"]) == {"alice": [Location(path, '"v2"', (2,))]}
    assert store.object_rows(path) == {"alice": [2]}
    assert all(len(item["location"]["S"].encode()) <= 1024 for item in row_items())
    assert len(row_items()) == 1
    assert store.remove_object(path) is True
    assert raw_items() == []


def test_given_user_id_in_the_reserved_object_namespace_when_indexing_then_meta_items_are_never_taken_for_rows(store):
    path = "s3://lake/x.jsonl"
    odd = "#object#" + path  # the partition key of the object's meta item
    store.replace_objects([version(path, '"e"', 0, {odd: [3], "alice": [1]})])
    assert store.lookup([odd]) == {odd: [Location(path, '"e"', (3,))]}
    assert store.object_rows(path) == {odd: [3], "alice": [1]}
    assert store.status() == IndexStatus(
        objects=1, records=2, users=2, rows=2, unindexable_lines=0, objects_with_unindexable=0
    )
    assert store.remove_object(path) is True
    assert store.lookup([odd]) == {}


# -- suppression list ---------------------------------------------------------------------------------------------


def keyed(user: str) -> str:
    return hashlib.sha256(b"test-key" + user.encode()).hexdigest()


def test_given_erased_users_when_recording_then_one_suppression_item_each_holds_the_hash_and_first_request(store):
    store.record_erased([keyed("alice"), keyed("bob"), keyed("alice")], "req-1")
    store.record_erased([keyed("bob"), keyed("carol")], "req-2")
    items = {item["userid"]["S"]: item for item in raw_items()}
    assert set(items) == {"#erased#" + keyed(user) for user in ("alice", "bob", "carol")}
    for item in items.values():
        assert item["location"] == {"S": "#erased"}
        assert item["kind"] == {"S": "erased"}
        assert "s3path" not in item  # not in the by_object GSI
        assert datetime.fromisoformat(item["erased_at"]["S"]).tzinfo is not None
    # A hash already on the list keeps the request that recorded it first.
    assert {user: items["#erased#" + keyed(user)]["request_id"]["S"] for user in ("alice", "bob", "carol")} == {
        "alice": "req-1",
        "bob": "req-1",
        "carol": "req-2",
    }
    assert not any("alice" in str(item) or "bob" in str(item) for item in raw_items())  # never the raw ids


def test_given_250_hashes_when_asking_which_are_erased_then_batch_gets_respect_100_keys(store):
    hashes = [keyed(f"user-{n}") for n in range(250)]
    store.record_erased(hashes[::2], "req-1")
    reader, proxy = store_with(CountingBatchGets)
    assert reader.erased_among(hashes) == set(hashes[::2])
    assert sorted(proxy.key_counts) == [50, 100, 100]


def test_given_dynamodb_returns_half_unprocessed_when_recording_and_asking_then_retries_complete_the_work(store):
    hashes = [keyed(f"user-{n}") for n in range(60)]
    writer, proxy = store_with(HalfUnprocessedOnce)
    writer.record_erased(hashes, "req-1")
    assert proxy.withheld_keys > 0  # the lookup of hashes already on the list
    assert proxy.withheld_writes > 0
    assert len(raw_items()) == 60
    reader, proxy = store_with(HalfUnprocessedOnce)
    assert reader.erased_among([*hashes, keyed("stranger")]) == set(hashes)
    assert proxy.withheld_keys > 0


def test_given_user_id_in_the_reserved_erased_namespace_when_indexing_then_suppression_items_are_never_rows(store):
    path = "s3://lake/x.jsonl"
    odd = "#erased#" + keyed("alice")  # the partition key of alice's suppression item
    store.record_erased([keyed("alice")], "req-1")
    store.replace_objects([version(path, '"e"', 0, {odd: [3], "alice": [1]})])
    assert store.lookup([odd]) == {odd: [Location(path, '"e"', (3,))]}
    assert store.object_rows(path) == {odd: [3], "alice": [1]}
    assert store.dump() == {(odd, path, 3), ("alice", path, 1)}
    assert store.status() == IndexStatus(
        objects=1, records=2, users=2, rows=2, unindexable_lines=0, objects_with_unindexable=0
    )
    assert store.remove_object(path) is True
    assert store.lookup([odd]) == {}
    assert store.erased_among([keyed("alice")]) == {keyed("alice")}


def test_given_returning_users_when_replacing_then_the_meta_item_holds_the_count(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([replace(version(path, '"e"', 0, {"alice": [0]}), returning_users=4)])
    (meta,) = [item for item in raw_items() if item["location"]["S"] == "#meta"]
    assert meta["reappeared"] == {"N": "4"}
    assert store.status().objects_with_returning_users == 1


def test_given_a_suppression_list_when_truncating_then_it_is_emptied_too(store):
    store.record_erased([keyed("alice")], "req-1")
    store.truncate()
    assert raw_items() == []
    assert store.erased_among([keyed("alice")]) == set()


# -- noncurrent versions and coverage ------------------------------------------------------------------------------


def versioned(path: str, etag: str, minute: int, users: dict[str, list[int]], version_id: str | None) -> ObjectIndex:
    return replace(version(path, etag, minute, users), version_id=version_id)


def test_given_a_replaced_versioned_object_when_reading_the_table_then_pointers_live_in_their_own_partitions(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([versioned(path, '"e1"', 0, {"alice": [0], "bob": [1]}, "v1")])
    store.replace_objects([versioned(path, '"e2"', 1, {"alice": [2]}, "v2")])
    pointers = [item for item in raw_items() if item.get("kind") == {"S": "noncurrent"}]
    assert sorted(item["userid"]["S"] for item in pointers) == ["#nc#alice", "#nc#bob"]
    for item in pointers:
        assert item["location"]["S"] == f"#nc\x1f{path}\x1fv1"
        assert item["s3path"]["S"] == f"#nc#{path}\x1fv1"  # the version's GSI partition, never the object's
        assert (item["object_s3path"]["S"], item["version_id"]["S"], item["dataset"]["S"]) == (path, "v1", "events")
    # The object's own GSI partition and each user's rows hold rows only.
    assert store.object_rows(path) == {"alice": [2]}
    assert {item["etag"]["S"] for item in row_items() if "etag" in item and "kind" not in item} == {'"e2"'}
    assert store.status() == IndexStatus(
        objects=1, records=1, users=1, rows=1, unindexable_lines=0, objects_with_unindexable=0
    )
    store.forget_noncurrent(path, ["v1"])
    assert not [item for item in raw_items() if item.get("kind") == {"S": "noncurrent"}]


def test_given_s3_key_and_version_id_too_long_for_the_keys_when_keeping_noncurrent_then_hashes_stand_for_them(store):
    path = "s3://lake/" + "k" * 1024
    long_version = "v" * 1500
    store.replace_objects([versioned(path, '"e1"', 0, {"alice": [0]}, "v1")])
    store.remove_object(path)
    store.record_noncurrent([NoncurrentVersion(path, "events", long_version, ("alice",))])
    pointers = [item for item in raw_items() if item.get("kind") == {"S": "noncurrent"}]
    assert len(pointers) == 2
    assert all(len(item["location"]["S"].encode()) <= 1024 for item in pointers)
    assert all(len(item["s3path"]["S"].encode()) <= 2048 for item in pointers)
    assert store.noncurrent_of(["alice"]) == {path: {"v1", long_version}}
    assert dump_noncurrent(store) == {("alice", path, "v1"), ("alice", path, long_version)}
    store.forget_noncurrent(path, [long_version])
    assert dump_noncurrent(store) == {("alice", path, "v1")}
    store.forget_noncurrent(path, ["v1"])
    assert raw_items() == []


def test_given_writer_died_at_the_flip_when_replacing_a_versioned_object_then_the_old_users_are_already_kept(store):
    path = "s3://lake/x.jsonl"
    store.replace_objects([versioned(path, '"e1"', 0, {"alice": [0], "bob": [1]}, "v1")])
    crashing, _ = store_with(CrashBeforeFlip)
    with pytest.raises(ConnectionError):
        crashing.replace_objects([versioned(path, '"e2"', 1, {"carol": [0]}, "v2")])
    # S3 already holds v2, so v1 is noncurrent there: its users were recorded before anything else was written.
    assert dump_noncurrent(store) == {("alice", path, "v1"), ("bob", path, "v1")}
    assert store.dump() == {("alice", path, 0), ("bob", path, 1)}
    assert store.replace_objects([versioned(path, '"e2"', 1, {"carol": [0]}, "v2")]) == 1  # the redelivery
    assert dump_noncurrent(store) == {("alice", path, "v1"), ("bob", path, "v1")}
    assert store.dump() == {("carol", path, 0)}


def test_given_user_ids_in_the_reserved_noncurrent_and_coverage_namespaces_when_indexing_then_nothing_mixes(store):
    path = "s3://lake/x.jsonl"
    odd = "#nc#alice"  # the partition key of alice's noncurrent pointers
    store.record_coverage(Coverage("events", "s3://lake/", "backfill", T0, T0, 1, 0, 0))
    store.replace_objects([versioned(path, '"e1"', 0, {odd: [3], "alice": [1], "#coverage": [2]}, "v1")])
    store.replace_objects([versioned(path, '"e2"', 1, {odd: [4], "#coverage": [5]}, "v2")])
    assert store.lookup([odd, "alice", "#coverage"]) == {
        odd: [Location(path, '"e2"', (4,))],
        "#coverage": [Location(path, '"e2"', (5,))],
    }
    assert store.noncurrent_of(["alice"]) == {path: {"v1"}}
    assert dump_noncurrent(store) == {(odd, path, "v1"), ("alice", path, "v1"), ("#coverage", path, "v1")}
    assert store.dump() == {(odd, path, 4), ("#coverage", path, 5)}
    assert set(store.coverage()) == {"events"}
    assert store.status().users == 2


def test_given_dynamodb_returns_half_unprocessed_when_recording_noncurrent_versions_then_retries_complete(store):
    writer, proxy = store_with(HalfUnprocessedOnce)
    users = tuple(f"user-{n:03d}" for n in range(60))
    writer.record_noncurrent([NoncurrentVersion("s3://lake/x.jsonl", "events", "v1", users)])
    assert proxy.withheld_writes > 0
    assert dump_noncurrent(store) == {(user, "s3://lake/x.jsonl", "v1") for user in users}
    forgetter, proxy = store_with(HalfUnprocessedOnce)
    forgetter.forget_noncurrent("s3://lake/x.jsonl", ["v1"])
    assert proxy.withheld_writes > 0
    assert raw_items() == []


def test_given_coverage_recorded_when_reading_the_table_then_one_item_per_dataset_in_one_partition(store):
    store.record_coverage(Coverage("events", "s3://lake/events/", "backfill", T0, T0, 3, 0, 0))
    store.record_coverage(Coverage("events", "s3://lake/events/", "reconcile", T0, T0, 4, 0, 0))
    store.record_coverage(Coverage("clicks", "s3://lake/clicks/", "backfill", T0, T0, 1, 0, 0))
    items = raw_items()
    assert sorted((item["userid"]["S"], item["location"]["S"]) for item in items) == [
        ("#coverage", "#dataset#clicks"),
        ("#coverage", "#dataset#events"),
    ]
    assert all(item["kind"] == {"S": "coverage"} and "s3path" not in item for item in items)
    assert store.coverage()["events"].method == "reconcile"
