"""DynamoDB index: one table holding every user's index rows, one meta item per indexed object, the users of
noncurrent object versions, each dataset's coverage and the suppression list (one item per erased user).

Items
-----
Row item: one per user, object version and chunk of that user's lines in the object.

* ``userid`` (partition key, S): the user id.
* ``location`` (sort key, S): ``"<s3path>\\x1f<etag>\\x1f<chunk>"``. The ETag is part of the key, so the rows of a new
  version never overwrite the rows of the version the index currently serves. When that would exceed DynamoDB's
  1,024-byte sort key limit (S3 keys may be 1,024 bytes long), ``"#sha256:<hex of s3path>"`` stands for the path.
* ``s3path``, ``etag``: ``s3path`` is the partition key of the ``by_object`` GSI, which finds an object's rows.
* ``lines``: the user's line numbers in this chunk (L of N, sorted; -1 = the user owns the whole object). A user's
  list is split into chunks of at most 20,000 lines to stay well under DynamoDB's 400 KB item limit.
* ``chunk``, ``chunks``: this chunk's number and how many chunks the user has in this object version (readers use
  it to tell a complete row set from one still being written).
* ``n`` (number of lines) and ``written_at`` (epoch seconds).

Object meta item: one per indexed object, the item that says which version of the object the index serves.

* ``userid`` = ``"#object#" + s3path``, ``location`` = ``"#meta"``, ``kind`` = ``"object"``.
* ``s3path``, ``dataset``, ``etag``, ``version_id`` (absent when None), ``last_modified`` (ISO-8601 UTC with
  microseconds: compares as a string), ``records``, ``row_items``, ``rows``, ``unindexable`` (count),
  ``unindexable_lines`` (the first 100 as maps ``{line, reason}``), ``reappeared`` (how many of the object's users
  are on the suppression list), ``indexed_at``, ``owners`` (SS, the users owning the whole object, when any: what a
  reconciliation compares an object's owner tag with).

Suppression item: one per erased user (``record_erased``), never a raw user id.

* ``userid`` = ``"#erased#" + keyed hash`` (hex), ``location`` = ``"#erased"``, ``kind`` = ``"erased"``.
* ``request_id`` (the erasure request that recorded it first) and ``erased_at`` (ISO-8601 UTC).

It has no ``s3path``, so it is not in the ``by_object`` GSI; ``erased_among`` reads it by key (BatchGetItem).

Noncurrent pointer item: one per user and noncurrent object version (a versioned bucket's overwritten or deleted
version, which still holds the user's records).

* ``userid`` = ``"#nc#" + user id``: a partition of its own, so reading a user's rows never reads their pointers
  and ``noncurrent_of`` reads only pointers (one Query per user).
* ``location`` = ``"#nc\\x1f<s3path>\\x1f<version id>"``; ``"#sha256:<hex>"`` stands for the path, then for the
  version id too, when the key would exceed 1,024 bytes.
* ``kind`` = ``"noncurrent"``, ``object_s3path`` (the object's path), ``version_id``, ``dataset``, ``recorded_at``.
* ``s3path`` = ``"#nc#<s3path>\\x1f<version id>"`` (``"#nc##sha256:<hex of both>"`` beyond 2,048 bytes): each
  version has its own ``by_object`` GSI partition, never an object's (paths start with ``s3://``), so
  ``forget_noncurrent`` reads exactly the pointers it deletes.

Coverage item: one per dataset (``record_coverage`` replaces it), all in one partition so ``coverage()`` is one
Query, never a scan of the table.

* ``userid`` = ``"#coverage"``, ``location`` = ``"#dataset#" + dataset``, ``kind`` = ``"coverage"``.
* ``dataset``, ``dataset_location`` (the Coverage's location: ``location`` is the sort key), ``method``,
  ``started_at`` and ``finished_at`` (ISO-8601 UTC, read back tz-aware), ``objects``, ``versions``, ``failed``,
  ``drift``. No ``s3path``: not in the GSI.

Unindexable marker item: one per object version that holds unindexable lines, all in one partition, so what coverage
reads for every request (``problems()``, ``problem_objects()``) is one Query of the objects with problems, never a
scan of the table.

* ``userid`` = ``"#unindexable"``, ``location`` = ``"#dataset#<dataset>\\x1f<s3path>\\x1f<etag>"`` (``"#sha256:<hex>"``
  for the path when the key would exceed 1,024 bytes), ``kind`` = ``"unindexable"``.
* ``object_s3path``, ``dataset``, ``etag``, ``unindexable`` (count), ``whole`` (BOOL: nothing of the object is
  located), ``written_at``. No ``s3path``: not in the GSI.

A marker counts only while its ETag is the one in the object's meta item (readers check it): it is written with the
version's rows, before the flip, and deleted after the flip like superseded rows (the replaced version's at once,
other ETags' after an hour), or at once when the new version has no unindexable line.

Reserved namespaces: partition keys starting with ``"#object#"`` hold meta items, ``"#erased#"`` suppression items,
``"#nc#"`` noncurrent pointers, ``"#coverage"`` is the coverage partition and ``"#unindexable"`` the markers'. A user
id that happens to start with one of them still works (a row's sort key always starts with an ``s3://`` path or
``#sha256:`` and holds ``\\x1f``, the others' sort keys are ``"#meta"``, ``"#erased"``, ``"#nc\\x1f..."`` and
``"#dataset#..."``, so they never collide; every item that is not a row has a ``kind``, which every reader of rows
excludes, and the scans of meta items filter on ``kind = "object"``), but such ids should not be fed to the index.

Replacing an object (atomic per object without transactions)
------------------------------------------------------------
1. A consistent read of the meta item skips objects whose indexed version is newer, or is this same ETag
   (unless forced).
2. The new version's row items are written (BatchWriteItem). Their keys hold the new ETag, so nothing the index
   serves changes yet.
3. The meta item is flipped with a conditional PutItem: ``attribute_not_exists(userid) OR (last_modified <= :lm
   AND etag <> :etag)`` (without the ETag test when forced), the PostgreSQL adapter's claim. If the condition
   fails, the rows just written are deleted, unless the current ETag is the one just written (then they are the
   current rows).
4. Superseded rows of the object are deleted (found through the GSI): those of the version the flip replaced,
   those of the current ETag that this write did not produce, and those of any other ETag older than an hour
   (left by a writer that died between steps 2 and 3). Younger rows of other ETags may belong to a concurrent
   writer still in step 2 and are left to it.

Keeping noncurrent versions: when the meta item read in step 1 has a version id other than the new version's, that
version's users (the user ids of its rows, read through the GSI until it holds the meta item's ``row_items``) are
written as noncurrent pointers before step 2: S3 already holds the newer version, so the old one is noncurrent
whatever happens to this write, and a writer dying at any later step has lost nothing (a redelivery rewrites the
same pointers). Reading them before step 2 also keeps a forced re-index of the same ETag under a new version id
exact (step 2 rewrites those rows in place). If the flip returns another version than the one read (a concurrent
writer flipped in between), that version's pointers are written after the flip, before step 4 deletes its rows.
``remove_object`` does the same: pointers for the version a consistent read finds, then the meta item's deletion
(and pointers for the version it returns, if another), then the rows. ``apply_erasure`` goes through the replace
path, so the rewritten version keeps all its users, the erased ones included.

Readers return only rows whose ETag is the one in the object's meta item, so they never see a half-replaced
object. ``lookup`` also re-reads users whose rows disagree with the meta items read after them (an object replaced
while the user was being read), until each user's rows are consistent with one state of the meta items.

Differences from the PostgreSQL adapter: only the first 100 unindexable lines of each object are kept, so
``unindexable()`` and ``get_object()`` list at most 100 per object (the counts in ``status()`` stay exact); a naive
``last_modified`` is taken as UTC; a forced re-index of the same ETag rewrites its rows in place, so a reader may
briefly see a mix of the old and new rows of that ETag; ``remove_object`` running concurrently with a writer of
the same object is not ordered against it; ``forget_noncurrent`` finds pointers through the GSI, so one recorded
a moment before may be missed (versions are deleted, then forgotten, long after they were recorded); a version
made noncurrent by a concurrent writer of the same object with the same ETag may be kept with the users of both.
Nothing here logs user ids or object paths (a key may name a user).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.logs import get_logger
from lakepurge.index.base import (
    WHOLE_OBJECT,
    Coverage,
    DatasetProblems,
    Hits,
    IndexStatus,
    Location,
    NewVersion,
    NoncurrentVersion,
    ObjectIndex,
    UnindexableLine,
    UnindexableObject,
    hits_from_locations,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = get_logger()

META_PREFIX = "#object#"
META_SORT_KEY = "#meta"
ERASED_PREFIX = "#erased#"
ERASED_SORT_KEY = "#erased"
NONCURRENT_PREFIX = "#nc#"
NONCURRENT_SORT_PREFIX = "#nc\x1f"
COVERAGE_PARTITION = "#coverage"
COVERAGE_SORT_PREFIX = "#dataset#"
PROBLEM_PARTITION = "#unindexable"
PROBLEM_SORT_PREFIX = "#dataset#"
# Sort keys of items that are not index rows (a row's sort key always holds SEPARATOR).
RESERVED_SORT_KEYS = frozenset({META_SORT_KEY, ERASED_SORT_KEY})
SEPARATOR = "\x1f"
MAX_SORT_KEY_BYTES = 1024
MAX_PARTITION_KEY_BYTES = 2048
GSI_NAME = "by_object"
CHUNK_LINES = 20_000
UNINDEXABLE_KEPT = 100
BATCH_WRITE_ITEMS = 25
BATCH_GET_KEYS = 100
THREADS = 16
# A row of an ETag that is neither current nor the one just replaced is deleted only when it is older than this:
# younger ones may belong to a concurrent writer that has not flipped the meta item yet.
ORPHAN_GRACE_SECONDS = 3600
# Unprocessed batch items are retried with exponential backoff and jitter, this many times at most.
BATCH_ATTEMPTS = 12
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 5.0
# How many times lookup re-reads users whose rows changed under it, and object_rows waits for the GSI.
READ_ROUNDS = 5

Item = dict[str, Any]
T = TypeVar("T")
R = TypeVar("R")

# Every attribute is referred to through a placeholder: LOCATION, LINES and others are DynamoDB reserved words.
_NAMES = {
    "#u": "userid",
    "#l": "location",
    "#p": "s3path",
    "#e": "etag",
    "#k": "kind",
}


# Scan filter for the items status() and dump() read: rows (no kind) and object meta items, never suppression items.
_ROWS_AND_METAS = "attribute_not_exists(#k) OR #k = :object"


class DynamoBatchError(RuntimeError):
    """DynamoDB kept returning unprocessed items or keys after every retry."""


class IndexSchemaError(RuntimeError):
    """The table exists but does not have the layout this adapter needs."""


@dataclass(frozen=True, slots=True)
class _Meta:
    s3path: str
    etag: str
    last_modified: str
    row_items: int
    version_id: str | None = None  # None also when the read did not project it
    dataset: str = ""
    unindexable: int = 0  # 0 also when the read did not project it


@dataclass(frozen=True, slots=True)
class _Row:
    userid: str
    s3path: str
    etag: str
    chunk: int
    chunks: int
    lines: list[int]


@dataclass(frozen=True, slots=True)
class _RowKey:
    userid: str
    location: str
    etag: str
    written_at: int


def _timestamp(value: datetime) -> str:
    """ISO-8601 in UTC with a fixed width, so string order is time order."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _meta_key(s3path: str) -> Item:
    return {"userid": {"S": META_PREFIX + s3path}, "location": {"S": META_SORT_KEY}}


def _key(userid: str, location: str) -> Item:
    return {"userid": {"S": userid}, "location": {"S": location}}


def _erased_key(user_hash: str) -> Item:
    return _key(ERASED_PREFIX + user_hash, ERASED_SORT_KEY)


def _is_row(item: Item) -> bool:
    """Whether an item is an index row (not a meta or suppression item)."""
    return item["location"]["S"] not in RESERVED_SORT_KEYS and "kind" not in item


def _parse_meta(item: Item) -> _Meta:
    return _Meta(
        s3path=item["s3path"]["S"],
        etag=item["etag"]["S"],
        last_modified=item["last_modified"]["S"],
        row_items=int(item.get("row_items", {"N": "0"})["N"]),
        version_id=item["version_id"]["S"] if "version_id" in item else None,
        dataset=item["dataset"]["S"] if "dataset" in item else "",
        unindexable=int(item["unindexable"]["N"]) if "unindexable" in item else 0,
    )


def _kept_as_noncurrent(meta: _Meta | None, new_version_id: str | None) -> TypeGuard[_Meta]:
    """Whether replacing or removing the version a meta item names leaves it in S3 as a noncurrent version whose
    users the index must keep (it has a version id, and the new version is another one)."""
    return meta is not None and meta.version_id is not None and meta.version_id != new_version_id


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _noncurrent_sort_key(s3path: str, version_id: str) -> str:
    """A noncurrent pointer's sort key: the path (or its hash) and the version id (or its hash), within 1,024 bytes."""
    key = f"{NONCURRENT_SORT_PREFIX}{s3path}{SEPARATOR}{version_id}"
    if len(key.encode()) > MAX_SORT_KEY_BYTES:
        key = f"{NONCURRENT_SORT_PREFIX}#sha256:{_sha256(s3path)}{SEPARATOR}{version_id}"
    if len(key.encode()) > MAX_SORT_KEY_BYTES:
        key = f"{NONCURRENT_SORT_PREFIX}#sha256:{_sha256(s3path)}{SEPARATOR}#sha256:{_sha256(version_id)}"
    return key


def _noncurrent_partition(s3path: str, version_id: str) -> str:
    """The by_object GSI partition of one noncurrent version's pointers (never an object's: paths start s3://)."""
    key = f"{NONCURRENT_PREFIX}{s3path}{SEPARATOR}{version_id}"
    if len(key.encode()) > MAX_PARTITION_KEY_BYTES:
        key = f"{NONCURRENT_PREFIX}#sha256:{_sha256(s3path + SEPARATOR + version_id)}"
    return key


def _noncurrent_items(version: NoncurrentVersion, recorded_at: str) -> list[Item]:
    sort_key = {"S": _noncurrent_sort_key(version.s3path, version.version_id)}
    common: Item = {
        "location": sort_key,
        "kind": {"S": "noncurrent"},
        "s3path": {"S": _noncurrent_partition(version.s3path, version.version_id)},
        "object_s3path": {"S": version.s3path},
        "version_id": {"S": version.version_id},
        "dataset": {"S": version.dataset},
        "recorded_at": {"S": recorded_at},
    }
    return [{"userid": {"S": NONCURRENT_PREFIX + user}, **common} for user in dict.fromkeys(version.users)]


def _coverage_key(dataset: str) -> Item:
    return _key(COVERAGE_PARTITION, COVERAGE_SORT_PREFIX + dataset)


def _coverage_item(coverage: Coverage) -> Item:
    return {
        **_coverage_key(coverage.dataset),
        "kind": {"S": "coverage"},
        "dataset": {"S": coverage.dataset},
        "dataset_location": {"S": coverage.location},
        "method": {"S": coverage.method},
        "started_at": {"S": _timestamp(coverage.started_at)},
        "finished_at": {"S": _timestamp(coverage.finished_at)},
        "objects": {"N": str(coverage.objects)},
        "versions": {"N": str(coverage.versions)},
        "failed": {"N": str(coverage.failed)},
        "drift": {"N": str(coverage.drift)},
    }


def _parse_coverage(item: Item) -> Coverage:
    return Coverage(
        dataset=item["dataset"]["S"],
        location=item["dataset_location"]["S"],
        method=item["method"]["S"],
        started_at=datetime.fromisoformat(item["started_at"]["S"]),
        finished_at=datetime.fromisoformat(item["finished_at"]["S"]),
        objects=int(item["objects"]["N"]),
        versions=int(item["versions"]["N"]),
        failed=int(item["failed"]["N"]),
        drift=int(item["drift"]["N"]),
    )


def _problem_prefix(dataset: str, s3path: str) -> str:
    """The sort key of an object's unindexable markers up to the ETag (the path hashed when it would be too long)."""
    prefix = f"{PROBLEM_SORT_PREFIX}{dataset}{SEPARATOR}{s3path}{SEPARATOR}"
    if len(prefix.encode()) + 100 > MAX_SORT_KEY_BYTES:  # room for an ETag
        prefix = f"{PROBLEM_SORT_PREFIX}{dataset}{SEPARATOR}#sha256:{_sha256(s3path)}{SEPARATOR}"
    return prefix


def _problem_item(obj: ObjectIndex, written_at: int) -> Item:
    return {
        "userid": {"S": PROBLEM_PARTITION},
        "location": {"S": _problem_prefix(obj.dataset, obj.s3path) + obj.etag},
        "kind": {"S": "unindexable"},
        "object_s3path": {"S": obj.s3path},
        "dataset": {"S": obj.dataset},
        "etag": {"S": obj.etag},
        "unindexable": {"N": str(len(obj.unindexable))},
        "whole": {"BOOL": any(u.line == WHOLE_OBJECT for u in obj.unindexable)},
        "written_at": {"N": str(written_at)},
    }


def _parse_row(item: Item) -> _Row:
    return _Row(
        userid=item["userid"]["S"],
        s3path=item["s3path"]["S"],
        etag=item["etag"]["S"],
        chunk=int(item["chunk"]["N"]),
        chunks=int(item["chunks"]["N"]),
        lines=[int(value["N"]) for value in item["lines"]["L"]],
    )


def _location_prefix(s3path: str, etag: str) -> str:
    """The sort key up to the chunk number: the path itself, or its hash when the key would be too long."""
    prefix = f"{s3path}{SEPARATOR}{etag}{SEPARATOR}"
    if len(prefix.encode()) + 10 > MAX_SORT_KEY_BYTES:
        prefix = f"#sha256:{hashlib.sha256(s3path.encode()).hexdigest()}{SEPARATOR}{etag}{SEPARATOR}"
    return prefix


def _row_items(obj: ObjectIndex, written_at: int) -> list[Item]:
    items: list[Item] = []
    prefix = _location_prefix(obj.s3path, obj.etag)
    path = {"S": obj.s3path}
    etag = {"S": obj.etag}
    stamp = {"N": str(written_at)}
    for user, lines in obj.lines_by_user.items():
        if not lines:
            continue
        ordered = sorted(lines)
        chunks = (len(ordered) + CHUNK_LINES - 1) // CHUNK_LINES
        for chunk in range(chunks):
            part = ordered[chunk * CHUNK_LINES : (chunk + 1) * CHUNK_LINES]
            items.append(
                {
                    "userid": {"S": user},
                    "location": {"S": f"{prefix}{chunk}"},
                    "s3path": path,
                    "etag": etag,
                    "chunk": {"N": str(chunk)},
                    "chunks": {"N": str(chunks)},
                    "lines": {"L": [{"N": str(line)} for line in part]},
                    "n": {"N": str(len(part))},
                    "written_at": stamp,
                }
            )
    return items


def _meta_item(obj: ObjectIndex, row_items: int) -> Item:
    item: Item = {
        **_meta_key(obj.s3path),
        "kind": {"S": "object"},
        "s3path": {"S": obj.s3path},
        "dataset": {"S": obj.dataset},
        "etag": {"S": obj.etag},
        "last_modified": {"S": _timestamp(obj.last_modified)},
        "records": {"N": str(obj.records)},
        "row_items": {"N": str(row_items)},
        "rows": {"N": str(obj.row_count)},
        "unindexable": {"N": str(len(obj.unindexable))},
        "reappeared": {"N": str(obj.reappeared)},
        "unindexable_lines": {
            "L": [
                {"M": {"line": {"N": str(u.line)}, "reason": {"S": u.reason}}}
                for u in obj.unindexable[:UNINDEXABLE_KEPT]
            ]
        },
        "indexed_at": {"S": _timestamp(datetime.now(UTC))},
    }
    if obj.version_id is not None:
        item["version_id"] = {"S": obj.version_id}
    owners = [user for user, lines in obj.lines_by_user.items() if WHOLE_OBJECT in lines]
    if owners:
        item["owners"] = {"SS": owners}
    return item


def _settled(rows: list[_Row], meta: _Meta | None) -> bool:
    """Whether one user's rows of one object are exactly the rows of the version the meta item names."""
    if meta is None:
        return True  # not indexed (removed, or never flipped): there is nothing to return
    if any(row.etag != meta.etag for row in rows):
        return False
    return len({row.chunk for row in rows}) == rows[0].chunks


def _by_path(rows: list[_Row]) -> dict[str, list[_Row]]:
    grouped: dict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        grouped[row.s3path].append(row)
    return grouped


def _backoff(attempt: int) -> None:
    delay = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
    time.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not cryptography


def _parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """fn over items on up to THREADS threads (inline for a single item); results in order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(THREADS, len(items)), thread_name_prefix="lakepurge-dynamodb") as pool:
        return list(pool.map(fn, items))


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class DynamoIndexStore:
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self._table = table_name
        self._client: DynamoDBClient = client if client is not None else aws.client("dynamodb")

    # -- schema ---------------------------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        try:
            self._client.describe_table(TableName=self._table)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            self._create_table()
        self._client.get_waiter("table_exists").wait(
            TableName=self._table, WaiterConfig={"Delay": 2, "MaxAttempts": 150}
        )
        self._check_schema()

    def _create_table(self) -> None:
        try:
            self._client.create_table(
                TableName=self._table,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "userid", "AttributeType": "S"},
                    {"AttributeName": "location", "AttributeType": "S"},
                    {"AttributeName": "s3path", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "userid", "KeyType": "HASH"},
                    {"AttributeName": "location", "KeyType": "RANGE"},
                ],
                GlobalSecondaryIndexes=[
                    {
                        "IndexName": GSI_NAME,
                        "KeySchema": [{"AttributeName": "s3path", "KeyType": "HASH"}],
                        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["etag", "written_at"]},
                    }
                ],
            )
            log.info("index table created", extra={"table": self._table})
        except ClientError as exc:
            # Several processes starting at once: one creates, the others wait for it.
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise

    def _check_schema(self) -> None:
        for _ in range(150):
            table = self._client.describe_table(TableName=self._table)["Table"]
            keys = {(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])}
            if keys != {("userid", "HASH"), ("location", "RANGE")}:
                raise IndexSchemaError(f"table {self._table}: key schema must be userid (HASH), location (RANGE)")
            indexes = {gsi["IndexName"]: gsi for gsi in table.get("GlobalSecondaryIndexes", [])}
            gsi = indexes.get(GSI_NAME)
            if gsi is None:
                raise IndexSchemaError(f"table {self._table}: global secondary index {GSI_NAME} is missing")
            if gsi.get("IndexStatus", "ACTIVE") == "ACTIVE":
                return
            time.sleep(2)
        raise IndexSchemaError(f"table {self._table}: index {GSI_NAME} did not become ACTIVE")

    # -- writes ---------------------------------------------------------------------------------------------------

    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        if not objects:
            return 0
        # The same object twice in one batch: each occurrence in its own round, in the order given.
        rounds: list[list[ObjectIndex]] = []
        seen: dict[str, int] = defaultdict(int)
        for obj in objects:
            occurrence = seen[obj.s3path]
            seen[obj.s3path] += 1
            if occurrence == len(rounds):
                rounds.append([])
            rounds[occurrence].append(obj)
        return sum(self._replace_round(batch, force) for batch in rounds)

    def _replace_round(self, objects: list[ObjectIndex], force: bool, moving_from: str | None = None) -> int:
        """Replace the objects' rows. ``moving_from``: only if the index still holds that ETag of the (one) object,
        checked when read and again by the conditional flip (apply_erasure)."""
        current = self._get_metas([obj.s3path for obj in objects])
        todo = [
            obj
            for obj in objects
            if not self._superseded(meta := current.get(obj.s3path), obj, force)
            and (moving_from is None or (meta is not None and meta.etag == moving_from))
        ]
        if not todo:
            log.debug("objects already indexed", extra={"objects": len(objects)})
            return 0
        # The versions this write turns noncurrent keep their users, recorded before anything else changes: a
        # writer that dies later has lost nothing (S3 already holds the newer version, so they are noncurrent).
        replaced = [meta for obj in todo if _kept_as_noncurrent(meta := current.get(obj.s3path), obj.version_id)]
        self._keep_noncurrent(replaced)
        written_at = int(time.time())
        rows = {obj.s3path: _row_items(obj, written_at) for obj in todo}
        # An object's unindexable marker goes with its rows: it counts only once the flip makes its ETag current.
        markers = [_problem_item(obj, written_at) for obj in todo if obj.unindexable]
        self._batch_write(
            [{"PutRequest": {"Item": item}} for obj in todo for item in rows[obj.s3path]]
            + [{"PutRequest": {"Item": item}} for item in markers]
        )

        def settle(obj: ObjectIndex) -> tuple[bool, list[Item]]:
            """Flip the meta item; returns whether it was claimed and the row keys to delete."""
            mine = rows[obj.s3path]
            claimed, meta = self._flip(obj, len(mine), force, moving_from)
            written = {(item["userid"]["S"], item["location"]["S"]) for item in mine}
            if not claimed:
                if meta is not None and meta.etag == obj.etag:
                    return False, []  # the rows just written are the current ones (written concurrently)
                mine_marker = [_key(PROBLEM_PARTITION, _problem_prefix(obj.dataset, obj.s3path) + obj.etag)]
                return False, [_key(user, location) for user, location in written] + (
                    mine_marker if obj.unindexable else []
                )
            read = current.get(obj.s3path)
            if _kept_as_noncurrent(meta, obj.version_id) and (
                read is None or (read.etag, read.version_id) != (meta.etag, meta.version_id)
            ):
                # Another writer flipped the object between the read and this flip: keep the version it wrote.
                self._keep_noncurrent([meta])
            previous = meta.etag if meta is not None else None
            horizon = written_at - ORPHAN_GRACE_SECONDS
            stale: list[Item] = []
            for key in self._object_keys(obj.s3path):
                if key.etag == obj.etag:
                    superseded = (key.userid, key.location) not in written
                else:
                    superseded = key.etag == previous or key.written_at < horizon
                if superseded:
                    stale.append(_key(key.userid, key.location))
            if obj.unindexable or (meta is not None and meta.unindexable):
                stale += self._stale_markers(obj, meta, horizon)
            return True, stale

        outcomes = _parallel(settle, todo)
        self._batch_write([{"DeleteRequest": {"Key": key}} for _, keys in outcomes for key in keys])
        claimed = sum(1 for was_claimed, _ in outcomes if was_claimed)
        log.debug(
            "objects replaced",
            extra={
                "objects": len(objects),
                "written": claimed,
                "row_items": sum(len(items) for items in rows.values()),
                "deleted_row_items": sum(len(keys) for _, keys in outcomes),
            },
        )
        return claimed

    def _stale_markers(self, obj: ObjectIndex, replaced: _Meta | None, horizon: int) -> list[Item]:
        """The unindexable markers of an object just made current that no longer count: the replaced version's,
        this version's when it has no unindexable line, and other ETags' older than the grace period."""
        stale = []
        for item in self._object_markers(obj.s3path, {obj.dataset, replaced.dataset if replaced else obj.dataset}):
            etag = item["etag"]["S"]
            if etag == obj.etag:
                superseded = not obj.unindexable
            else:
                superseded = (replaced is not None and etag == replaced.etag) or int(item["written_at"]["N"]) < horizon
            if superseded:
                stale.append(_key(PROBLEM_PARTITION, item["location"]["S"]))
        return stale

    def _object_markers(self, s3path: str, datasets: set[str]) -> list[Item]:
        found: list[Item] = []
        for dataset in sorted(d for d in datasets if d):
            found += self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                ExpressionAttributeNames={"#u": "userid", "#l": "location"},
                ExpressionAttributeValues={
                    ":u": {"S": PROBLEM_PARTITION},
                    ":prefix": {"S": _problem_prefix(dataset, s3path)},
                },
                ConsistentRead=True,
            )
        return [item for item in found if item.get("object_s3path", {}).get("S") == s3path]

    @staticmethod
    def _superseded(meta: _Meta | None, obj: ObjectIndex, force: bool) -> bool:
        if meta is None:
            return False
        return meta.last_modified > _timestamp(obj.last_modified) or (meta.etag == obj.etag and not force)

    def _flip(
        self, obj: ObjectIndex, row_items: int, force: bool, moving_from: str | None = None
    ) -> tuple[bool, _Meta | None]:
        """Make obj the indexed version if the index holds no newer one (or, ``moving_from`` given, if it still holds
        exactly that ETag: a version indexed meanwhile in the same second is newer, whatever LastModified says);
        returns (claimed, the meta item before)."""
        names: dict[str, str]
        values: Item
        if moving_from is not None:
            condition, names, values = "#e = :from", {"#e": "etag"}, {":from": {"S": moving_from}}
        elif force:
            condition = "attribute_not_exists(#u) OR #m <= :lm"
            names, values = {"#u": "userid", "#m": "last_modified"}, {":lm": {"S": _timestamp(obj.last_modified)}}
        else:
            condition = "attribute_not_exists(#u) OR (#m <= :lm AND #e <> :etag)"
            names = {"#u": "userid", "#m": "last_modified", "#e": "etag"}
            values = {":lm": {"S": _timestamp(obj.last_modified)}, ":etag": {"S": obj.etag}}
        try:
            response = self._client.put_item(
                TableName=self._table,
                Item=_meta_item(obj, row_items),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            item: Item | None = exc.response.get("Item")  # type: ignore[assignment]
            return False, _parse_meta(item) if item else self._get_meta(obj.s3path)
        old = response.get("Attributes")
        return True, _parse_meta(old) if old else None

    def remove_object(self, s3path: str) -> bool:
        # A versioned object's current version stays behind a delete marker: its users are kept first.
        read = self._get_meta(s3path)
        if _kept_as_noncurrent(read, None):
            self._keep_noncurrent([read])
        response = self._client.delete_item(TableName=self._table, Key=_meta_key(s3path), ReturnValues="ALL_OLD")
        old = response.get("Attributes")
        existed = bool(old)
        if old:
            meta = _parse_meta(old)
            if _kept_as_noncurrent(meta, None) and (
                read is None or (read.etag, read.version_id) != (meta.etag, meta.version_id)
            ):
                self._keep_noncurrent([meta])  # replaced between the read and the delete
        keys = [_key(k.userid, k.location) for k in self._object_keys(s3path)]
        datasets = {meta.dataset for meta in (read, _parse_meta(old) if old else None) if meta is not None}
        keys += [_key(PROBLEM_PARTITION, item["location"]["S"]) for item in self._object_markers(s3path, datasets)]
        self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys])
        log.debug("object removed", extra={"indexed": existed, "row_items": len(keys)})
        return existed

    def truncate(self) -> None:
        """Empty the table: rows, meta items, noncurrent pointers, coverage and suppression items (tests and
        benchmarks start from nothing)."""
        keys = [
            {"userid": item["userid"], "location": item["location"]}
            for item in self._scan(
                ProjectionExpression="#u, #l", ExpressionAttributeNames={"#u": "userid", "#l": "location"}
            )
        ]
        self._batch_write([{"DeleteRequest": {"Key": key}} for key in keys])

    # -- reads ----------------------------------------------------------------------------------------------------

    def apply_erasure(self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int]) -> bool:
        # Rows are keyed by the object's version here, so the new version's rows are written whole, and the flip to
        # them is conditional on the version read: a version indexed in between (S3's LastModified has whole
        # seconds, so it may not look newer) keeps its rows.
        base = self.get_object(s3path)
        if base is None or base.etag != before_etag:
            return False
        erased = set(erased_lines)
        rows = {
            user: kept for user, lines in base.lines_by_user.items() if (kept := [n for n in lines if n not in erased])
        }
        new = replace(
            base,
            etag=after.etag,
            version_id=after.version_id,
            last_modified=after.last_modified,
            lines_by_user=rows,
            records=max(base.records - len(erased), 0),
        )
        return self._replace_round([new], force=True, moving_from=before_etag) == 1

    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        return hits_from_locations(self.lookup(user_ids))

    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        users = list(dict.fromkeys(user_ids))
        if not users:
            return {}
        rows = dict(zip(users, _parallel(self._user_rows, users), strict=True))
        metas = self._get_metas(sorted({row.s3path for user_rows in rows.values() for row in user_rows}))
        # The meta items each user's rows are read against (users re-read later get a later view).
        view: dict[str, dict[str, _Meta]] = dict.fromkeys(users, metas)
        unsettled = [
            user
            for user in users
            if not all(_settled(group, metas.get(path)) for path, group in _by_path(rows[user]).items())
        ]
        for _ in range(READ_ROUNDS):
            if not unsettled:
                break
            # An object was replaced while these users were read: read them again, then the meta items again.
            before = metas
            fresh = dict(zip(unsettled, _parallel(self._user_rows, unsettled), strict=True))
            paths = {row.s3path for user in unsettled for row in (*rows[user], *fresh[user])}
            after = self._get_metas(sorted(paths))
            metas = {path: meta for path, meta in metas.items() if path not in paths} | after
            still: list[str] = []
            for user in unsettled:
                rows[user] = fresh[user]
                view[user] = after
                for path, group in _by_path(fresh[user]).items():
                    meta = after.get(path)
                    earlier = before.get(path)
                    # Consistent rows, or a version that stayed current all through the re-read.
                    if _settled(group, meta) or (
                        meta is not None and earlier is not None and earlier.etag == meta.etag
                    ):
                        continue
                    still.append(user)
                    break
            unsettled = still
        if unsettled:
            log.warning("index rows kept changing during lookup", extra={"users": len(unsettled)})
        found: dict[str, list[Location]] = {}
        for user in sorted(users):
            locations: list[Location] = []
            for path, group in _by_path(rows[user]).items():
                meta = view[user].get(path)
                if meta is None:
                    continue
                lines = sorted(line for row in group if row.etag == meta.etag for line in row.lines)
                if lines:
                    locations.append(Location(path, meta.etag, tuple(lines)))
            if locations:
                found[user] = sorted(locations, key=lambda location: location.s3path)
        return found

    def object_rows(self, s3path: str) -> dict[str, list[int]]:
        meta = self._get_meta(s3path)
        return {} if meta is None else self._current_rows(meta)

    def get_object(self, s3path: str) -> ObjectIndex | None:
        item = self._client.get_item(TableName=self._table, Key=_meta_key(s3path), ConsistentRead=True).get("Item")
        if not item:
            return None
        meta = _parse_meta(item)
        unindexable = [
            UnindexableLine(int(entry["M"]["line"]["N"]), entry["M"]["reason"]["S"])
            for entry in item.get("unindexable_lines", {"L": []})["L"]
        ]
        return ObjectIndex(
            s3path=s3path,
            dataset=item["dataset"]["S"],
            etag=meta.etag,
            version_id=item["version_id"]["S"] if "version_id" in item else None,
            last_modified=datetime.fromisoformat(meta.last_modified),
            lines_by_user=self._current_rows(meta),
            records=int(item["records"]["N"]),
            unindexable=sorted(unindexable, key=lambda entry: entry.line),
            reappeared=int(item["reappeared"]["N"]),
        )

    def object_records(self, s3paths: Sequence[str]) -> dict[str, int]:
        items = self._batch_get(
            [_meta_key(path) for path in dict.fromkeys(s3paths)],
            ProjectionExpression="#u, #r",
            ExpressionAttributeNames={"#u": "userid", "#r": "records"},
        )
        return {item["userid"]["S"].removeprefix(META_PREFIX): int(item["records"]["N"]) for item in items}

    def dataset_records(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        for item in self._scan(
            FilterExpression="#k = :object",
            ProjectionExpression="#d, #r",
            ExpressionAttributeNames={"#k": "kind", "#d": "dataset", "#r": "records"},
            ExpressionAttributeValues={":object": {"S": "object"}},
        ):
            totals[item["dataset"]["S"]] += int(item["records"]["N"])
        return dict(totals)

    def _current_rows(self, meta: _Meta) -> dict[str, list[int]]:
        """The rows of the version a meta item names (user id -> sorted lines)."""
        keys = self._version_keys(meta)
        items = self._batch_get([_key(key.userid, key.location) for key in keys])
        lines: dict[str, list[int]] = defaultdict(list)
        for row in map(_parse_row, items):
            if row.etag == meta.etag:
                lines[row.userid].extend(row.lines)
        return {user: sorted(values) for user, values in lines.items()}

    def _version_keys(self, meta: _Meta) -> list[_RowKey]:
        """The row keys of the version a meta item names, waiting for the GSI to hold all of them."""
        keys: list[_RowKey] = []
        for attempt in range(READ_ROUNDS):
            keys = [key for key in self._object_keys(meta.s3path) if key.etag == meta.etag]
            if len(keys) >= meta.row_items:
                return keys
            _backoff(attempt)  # the GSI is eventually consistent: the newest rows may not be in it yet
        log.warning("index rows of an object missing from the GSI", extra={"missing": meta.row_items - len(keys)})
        return keys

    def _keep_noncurrent(self, metas: Sequence[_Meta]) -> None:
        """Record the users of the versions these meta items name as noncurrent versions (before their rows go)."""

        def version(meta: _Meta) -> NoncurrentVersion:
            users = tuple(sorted({key.userid for key in self._version_keys(meta)}))
            return NoncurrentVersion(meta.s3path, meta.dataset, meta.version_id or "", users)

        self.record_noncurrent(_parallel(version, metas))

    def indexed_objects(self) -> dict[str, str]:
        return {meta.s3path: meta.etag for meta in self._metas()}

    def unindexable(self, limit: int = 100) -> list[tuple[str, UnindexableLine]]:
        found: list[tuple[str, UnindexableLine]] = []
        items = self._scan(
            FilterExpression="#k = :object AND #c > :zero",
            ProjectionExpression="#p, #x",
            ExpressionAttributeNames={"#k": "kind", "#c": "unindexable", "#p": "s3path", "#x": "unindexable_lines"},
            ExpressionAttributeValues={":object": {"S": "object"}, ":zero": {"N": "0"}},
        )
        for item in sorted(items, key=lambda item: item["s3path"]["S"]):
            entries = [
                UnindexableLine(int(entry["M"]["line"]["N"]), entry["M"]["reason"]["S"])
                for entry in item.get("unindexable_lines", {"L": []})["L"]
            ]
            found.extend((item["s3path"]["S"], entry) for entry in sorted(entries, key=lambda entry: entry.line))
            if len(found) >= limit:
                break
        return found[: max(limit, 0)]

    def _current_markers(self, prefix: str) -> list[tuple[Item, Item]]:
        """The unindexable markers under a sort key prefix that count (their ETag is the object's current one), each
        with its object's meta item."""
        markers = list(
            self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                ExpressionAttributeNames={"#u": "userid", "#l": "location"},
                ExpressionAttributeValues={":u": {"S": PROBLEM_PARTITION}, ":prefix": {"S": prefix}},
                ConsistentRead=True,
            )
        )
        metas = {
            item["s3path"]["S"]: item
            for item in self._batch_get(
                [_meta_key(path) for path in dict.fromkeys(m["object_s3path"]["S"] for m in markers)],
                ProjectionExpression="#p, #e, #v, #m, #x",
                ExpressionAttributeNames={
                    "#p": "s3path",
                    "#e": "etag",
                    "#v": "version_id",
                    "#m": "last_modified",
                    "#x": "unindexable_lines",
                },
            )
        }
        counted = []
        for marker in markers:
            meta = metas.get(marker["object_s3path"]["S"])
            if meta is not None and meta["etag"]["S"] == marker["etag"]["S"]:
                counted.append((marker, meta))
        return counted

    def problems(self) -> dict[str, DatasetProblems]:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for marker, _ in self._current_markers(PROBLEM_SORT_PREFIX):
            counts = totals[marker["dataset"]["S"]]
            failed = marker["etag"]["S"] == ""
            counts[0] += 1
            counts[1] += int(marker["unindexable"]["N"])
            counts[2] += failed
            counts[3] += marker["whole"]["BOOL"] and not failed
        return {name: DatasetProblems(name, *counts) for name, counts in totals.items()}

    def problem_objects(self, dataset: str, limit: int, lines: int = 100) -> list[UnindexableObject]:
        found = []
        prefix = f"{PROBLEM_SORT_PREFIX}{dataset}{SEPARATOR}"
        for marker, meta in sorted(self._current_markers(prefix), key=lambda pair: pair[0]["object_s3path"]["S"]):
            entries = sorted(
                (
                    UnindexableLine(int(entry["M"]["line"]["N"]), entry["M"]["reason"]["S"])
                    for entry in meta.get("unindexable_lines", {"L": []})["L"]
                ),
                key=lambda entry: entry.line,
            )
            found.append(
                UnindexableObject(
                    s3path=marker["object_s3path"]["S"],
                    dataset=dataset,
                    etag=meta["etag"]["S"],
                    version_id=meta["version_id"]["S"] if "version_id" in meta else None,
                    last_modified=datetime.fromisoformat(meta["last_modified"]["S"]),
                    count=int(marker["unindexable"]["N"]),
                    lines=tuple(entries[: max(lines, 0)]),
                )
            )
        return found[: max(limit, 0)]

    def object_owners(self, dataset: str) -> dict[str, frozenset[str]]:
        owners: dict[str, frozenset[str]] = {}
        for item in self._scan(
            FilterExpression="#k = :object AND #d = :dataset",
            ProjectionExpression="#p, #e, #m, #r, #o, #n",
            ExpressionAttributeNames={
                "#k": "kind",
                "#d": "dataset",
                "#p": "s3path",
                "#e": "etag",
                "#m": "last_modified",
                "#r": "row_items",
                "#o": "owners",
                "#n": "rows",
            },
            ExpressionAttributeValues={":object": {"S": "object"}, ":dataset": {"S": dataset}},
        ):
            if "owners" in item or int(item.get("rows", {"N": "0"})["N"]) == 0:
                owners[item["s3path"]["S"]] = frozenset(item.get("owners", {"SS": []})["SS"])
            else:  # indexed before meta items named their owners: read its rows
                meta = _parse_meta(item)
                rows = self._current_rows(meta)
                owners[meta.s3path] = frozenset(user for user, lines in rows.items() if WHOLE_OBJECT in lines)
        return owners

    # -- suppression list -----------------------------------------------------------------------------------------

    def record_erased(self, user_hashes: Sequence[str], request_id: str) -> None:
        """Put the hashes not yet on the list (BatchWriteItem); those already there keep their first request.

        Two requests recording the same new hash at once may both write it: the last one's request_id stays.
        """
        unique = list(dict.fromkeys(user_hashes))
        if not unique:
            return
        known = self.erased_among(unique)
        erased_at = {"S": _timestamp(datetime.now(UTC))}
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        **_erased_key(user_hash),
                        "kind": {"S": "erased"},
                        "request_id": {"S": request_id},
                        "erased_at": erased_at,
                    }
                }
            }
            for user_hash in unique
            if user_hash not in known
        ]
        self._batch_write(requests)
        log.debug("erased users recorded", extra={"users": len(unique), "new": len(requests)})

    def erased_among(self, user_hashes: Sequence[str]) -> set[str]:
        unique = list(dict.fromkeys(user_hashes))
        if not unique:
            return set()
        items = self._batch_get(
            [_erased_key(user_hash) for user_hash in unique],
            ProjectionExpression="#u",
            ExpressionAttributeNames={"#u": "userid"},
        )
        return {item["userid"]["S"].removeprefix(ERASED_PREFIX) for item in items}

    def erased_requests(self, user_hashes: Sequence[str]) -> dict[str, str]:
        unique = list(dict.fromkeys(user_hashes))
        if not unique:
            return {}
        items = self._batch_get(
            [_erased_key(user_hash) for user_hash in unique],
            ProjectionExpression="#u, #q",
            ExpressionAttributeNames={"#u": "userid", "#q": "request_id"},
        )
        return {item["userid"]["S"].removeprefix(ERASED_PREFIX): item["request_id"]["S"] for item in items}

    def reappeared_objects(self, limit: int = 100) -> list[str]:
        """The meta items counting erased users found again: the filtered Scan of meta items status() also reads
        (the table has no index by that count)."""
        items = self._scan(
            FilterExpression="#k = :object AND #a > :zero",
            ProjectionExpression="#p",
            ExpressionAttributeNames={"#k": "kind", "#a": "reappeared", "#p": "s3path"},
            ExpressionAttributeValues={":object": {"S": "object"}, ":zero": {"N": "0"}},
        )
        return sorted(item["s3path"]["S"] for item in items)[: max(limit, 0)]

    def set_reappeared(self, s3path: str, etag: str, reappeared: int) -> bool:
        try:
            self._client.update_item(
                TableName=self._table,
                Key=_meta_key(s3path),
                UpdateExpression="SET #a = :a",
                ConditionExpression="#e = :etag",
                ExpressionAttributeNames={"#a": "reappeared", "#e": "etag"},
                ExpressionAttributeValues={":a": {"N": str(reappeared)}, ":etag": {"S": etag}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    # -- noncurrent versions and coverage --------------------------------------------------------------------------

    def record_noncurrent(self, versions: Sequence[NoncurrentVersion]) -> None:
        """Put one pointer item per user and version (BatchWriteItem); a pointer already there is rewritten."""
        recorded_at = _timestamp(datetime.now(UTC))
        items: dict[tuple[str, str], Item] = {}  # one request per key: BatchWriteItem refuses duplicates
        for version in versions:
            for item in _noncurrent_items(version, recorded_at):
                items[(item["userid"]["S"], item["location"]["S"])] = item
        self._batch_write([{"PutRequest": {"Item": item}} for item in items.values()])
        log.debug("noncurrent versions recorded", extra={"versions": len(versions), "pointers": len(items)})

    def noncurrent_of(self, user_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = defaultdict(set)
        for items in _parallel(self._noncurrent_pointers, list(dict.fromkeys(user_ids))):
            for item in items:
                found[item["object_s3path"]["S"]].add(item["version_id"]["S"])
        return dict(found)

    def forget_noncurrent(self, s3path: str, version_ids: Sequence[str]) -> None:
        """Delete every pointer of those versions, found through the by_object GSI (eventually consistent: a
        pointer recorded a moment before may be missed; versions are forgotten long after they were recorded)."""

        def keys(version_id: str) -> list[Item]:
            items = self._by_object(_noncurrent_partition(s3path, version_id))
            return [_key(item["userid"]["S"], item["location"]["S"]) for item in items]

        doomed = [key for found in _parallel(keys, list(dict.fromkeys(version_ids))) for key in found]
        self._batch_write([{"DeleteRequest": {"Key": key}} for key in doomed])
        log.debug("noncurrent versions forgotten", extra={"versions": len(version_ids), "pointers": len(doomed)})

    def record_coverage(self, coverage: Coverage) -> None:
        self._client.put_item(TableName=self._table, Item=_coverage_item(coverage))

    def coverage(self) -> dict[str, Coverage]:
        """Every coverage item: one Query of their partition (never a scan of the table)."""
        found: dict[str, Coverage] = {}
        for item in self._query(
            KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
            ExpressionAttributeNames={"#u": "userid", "#l": "location"},
            ExpressionAttributeValues={":u": {"S": COVERAGE_PARTITION}, ":prefix": {"S": COVERAGE_SORT_PREFIX}},
            ConsistentRead=True,
        ):
            if item.get("kind", {}).get("S") == "coverage":
                coverage = _parse_coverage(item)
                found[coverage.dataset] = coverage
        return found

    def status(self) -> IndexStatus:
        items = list(
            self._scan(
                FilterExpression=_ROWS_AND_METAS,
                ProjectionExpression="#u, #l, #p, #e, #k, #n, #r, #c, #a",
                ExpressionAttributeNames={
                    **_NAMES,
                    "#n": "n",
                    "#r": "records",
                    "#c": "unindexable",
                    "#a": "reappeared",
                },
                ExpressionAttributeValues={":object": {"S": "object"}},
            )
        )
        metas = {item["s3path"]["S"]: item for item in items if item.get("kind", {}).get("S") == "object"}
        users: set[str] = set()
        rows = 0
        for item in items:
            if not _is_row(item) or "etag" not in item:
                continue
            meta = metas.get(item["s3path"]["S"])
            if meta is not None and meta["etag"]["S"] == item["etag"]["S"]:
                users.add(item["userid"]["S"])
                rows += int(item["n"]["N"])
        unindexable = [int(meta["unindexable"]["N"]) for meta in metas.values()]
        return IndexStatus(
            objects=len(metas),
            records=sum(int(meta["records"]["N"]) for meta in metas.values()),
            users=len(users),
            rows=rows,
            unindexable_lines=sum(unindexable),
            objects_with_unindexable=sum(1 for count in unindexable if count > 0),
            objects_with_erased_users=sum(1 for meta in metas.values() if int(meta["reappeared"]["N"]) > 0),
        )

    def dump(self) -> set[tuple[str, str, int]]:
        items = list(
            self._scan(
                FilterExpression=_ROWS_AND_METAS,
                ExpressionAttributeNames={"#k": "kind"},
                ExpressionAttributeValues={":object": {"S": "object"}},
            )
        )
        current = {
            item["s3path"]["S"]: item["etag"]["S"] for item in items if item.get("kind", {}).get("S") == "object"
        }
        found: set[tuple[str, str, int]] = set()
        for item in items:
            if not _is_row(item) or "lines" not in item:
                continue
            row = _parse_row(item)
            if current.get(row.s3path) == row.etag:
                found.update((row.userid, row.s3path, line) for line in row.lines)
        return found

    def close(self) -> None:
        """Nothing to release: the boto3 client is shared by the process."""

    # -- helpers --------------------------------------------------------------------------------------------------

    def _user_rows(self, user: str) -> list[_Row]:
        items = self._query(
            KeyConditionExpression="#u = :u",
            FilterExpression="attribute_not_exists(#k)",  # rows only (meta and other items have a kind)
            ExpressionAttributeNames={"#u": "userid", "#k": "kind"},
            ExpressionAttributeValues={":u": {"S": user}},
            ConsistentRead=True,
        )
        return [_parse_row(item) for item in items if _is_row(item)]

    def _object_keys(self, s3path: str) -> list[_RowKey]:
        """Every row item of an object, any ETag (through the GSI: eventually consistent)."""
        keys: list[_RowKey] = []
        for item in self._by_object(s3path):
            location = item["location"]["S"]
            if location in RESERVED_SORT_KEYS:
                continue
            etag = item["etag"]["S"] if "etag" in item else location.rsplit(SEPARATOR, 2)[1]
            written_at = int(item["written_at"]["N"]) if "written_at" in item else 0
            keys.append(_RowKey(item["userid"]["S"], location, etag, written_at))
        return keys

    def _by_object(self, partition: str) -> Iterator[Item]:
        """Every item of one by_object GSI partition (an object's rows, or a noncurrent version's pointers)."""
        return self._query(
            IndexName=GSI_NAME,
            KeyConditionExpression="#p = :p",
            ExpressionAttributeNames={"#p": "s3path"},
            ExpressionAttributeValues={":p": {"S": partition}},
        )

    def _noncurrent_pointers(self, user: str) -> list[Item]:
        """A user's noncurrent pointer items (their own partition: reading a user's rows never reads them)."""
        return list(
            self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                FilterExpression="#k = :noncurrent",
                ProjectionExpression="#o, #v",
                ExpressionAttributeNames={
                    "#u": "userid",
                    "#l": "location",
                    "#k": "kind",
                    "#o": "object_s3path",
                    "#v": "version_id",
                },
                ExpressionAttributeValues={
                    ":u": {"S": NONCURRENT_PREFIX + user},
                    ":prefix": {"S": NONCURRENT_SORT_PREFIX},
                    ":noncurrent": {"S": "noncurrent"},
                },
                ConsistentRead=True,
            )
        )

    def _get_meta(self, s3path: str) -> _Meta | None:
        item = self._client.get_item(TableName=self._table, Key=_meta_key(s3path), ConsistentRead=True).get("Item")
        return _parse_meta(item) if item else None

    def _get_metas(self, paths: Sequence[str]) -> dict[str, _Meta]:
        unique = list(dict.fromkeys(paths))
        items = self._batch_get(
            [_meta_key(path) for path in unique],
            ProjectionExpression="#p, #e, #m, #r, #v, #d",
            ExpressionAttributeNames={
                "#p": "s3path",
                "#e": "etag",
                "#m": "last_modified",
                "#r": "row_items",
                "#v": "version_id",
                "#d": "dataset",
            },
        )
        return {meta.s3path: meta for meta in map(_parse_meta, items)}

    def _metas(self) -> list[_Meta]:
        items = self._scan(
            FilterExpression="#k = :object",
            ProjectionExpression="#p, #e, #m",
            ExpressionAttributeNames={"#k": "kind", "#p": "s3path", "#e": "etag", "#m": "last_modified"},
            ExpressionAttributeValues={":object": {"S": "object"}},
        )
        return [_parse_meta(item) for item in items]

    def _scan(self, **kwargs: Any) -> Iterator[Item]:
        return self._pages(self._client.scan, ConsistentRead=True, **kwargs)

    def _query(self, **kwargs: Any) -> Iterator[Item]:
        return self._pages(self._client.query, **kwargs)

    def _pages(self, operation: Any, **kwargs: Any) -> Iterator[Item]:
        """Every item of a Query or Scan, following LastEvaluatedKey page by page."""
        start: Item | None = None
        while True:
            extra: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            page = operation(TableName=self._table, **kwargs, **extra)
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def _batch_write(self, requests: Sequence[Item]) -> None:
        """BatchWriteItem in calls of 25, on several threads, retrying unprocessed items with backoff."""

        def send(batch: Sequence[Item]) -> None:
            pending: list[Any] = list(batch)
            for attempt in range(BATCH_ATTEMPTS):
                response = self._client.batch_write_item(RequestItems={self._table: pending})
                pending = list(response.get("UnprocessedItems", {}).get(self._table, []))
                if not pending:
                    return
                _backoff(attempt)
            raise DynamoBatchError(
                f"{len(pending)} items still unprocessed after {BATCH_ATTEMPTS} BatchWriteItem calls"
            )

        _parallel(send, _chunks(requests, BATCH_WRITE_ITEMS))

    def _batch_get(self, keys: Sequence[Item], **options: Any) -> list[Item]:
        """Consistent BatchGetItem in calls of 100 keys, retrying unprocessed keys with backoff."""

        def fetch(batch: Sequence[Item]) -> list[Item]:
            found: list[Item] = []
            request: Any = {"Keys": list(batch), "ConsistentRead": True, **options}
            for attempt in range(BATCH_ATTEMPTS):
                response = self._client.batch_get_item(RequestItems={self._table: request})
                found.extend(response.get("Responses", {}).get(self._table, []))
                request = response.get("UnprocessedKeys", {}).get(self._table)
                if not request or not request.get("Keys"):
                    return found
                _backoff(attempt)
            raise DynamoBatchError(f"keys still unprocessed after {BATCH_ATTEMPTS} BatchGetItem calls")

        return [item for batch in _parallel(fetch, _chunks(keys, BATCH_GET_KEYS)) for item in batch]
