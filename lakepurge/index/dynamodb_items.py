"""The DynamoDB index's item layout: the keys and attributes of each kind of item (index rows, object meta items,
noncurrent pointers, suppression, coverage and unindexable markers), how an index entry is written as items and read
back. docs/ARCHITECTURE.md, "DynamoDB", describes the layout and why it is so.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from lakepurge.index.base import (
    WHOLE_OBJECT,
    Coverage,
    NoncurrentVersion,
    ObjectIndex,
)

META_PREFIX = "#object#"
META_SORT_KEY = "#meta"
ERASED_PREFIX = "#erased#"
ERASED_SORT_KEY = "#erased"
NONCURRENT_PREFIX = "#nc#"
NONCURRENT_SORT_PREFIX = "#nc\x1f"
COVERAGE_PARTITION = "#coverage"
COVERAGE_SORT_PREFIX = "#dataset#"
PROBLEM_PARTITION = "#unindexable"
RECORD_MAP_PREFIX = "#map#"
RECORD_MAP_SORT_KEY = "#map"
PROBLEM_SORT_PREFIX = "#dataset#"
# Sort keys of items that are not index rows (a row's sort key always holds SEPARATOR).
RESERVED_SORT_KEYS = frozenset({META_SORT_KEY, ERASED_SORT_KEY, RECORD_MAP_SORT_KEY})
SEPARATOR = "\x1f"
MAX_SORT_KEY_BYTES = 1024
MAX_PARTITION_KEY_BYTES = 2048
GSI_NAME = "by_object"
CHUNK_LINES = 20_000
UNINDEXABLE_KEPT = 100

Item = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    s3path: str
    etag: str
    last_modified: str
    row_items: int
    version_id: str | None = None  # None also when the read did not project it
    dataset: str = ""
    unindexable: int = 0  # 0 also when the read did not project it


@dataclass(frozen=True, slots=True)
class RowItem:
    userid: str
    s3path: str
    etag: str
    chunk: int
    chunks: int
    lines: list[int]


@dataclass(frozen=True, slots=True)
class RowKey:
    userid: str
    location: str
    etag: str
    written_at: int


def timestamp(value: datetime) -> str:
    """ISO-8601 in UTC with a fixed width, so string order is time order."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def meta_key(s3path: str) -> Item:
    return {"userid": {"S": META_PREFIX + s3path}, "location": {"S": META_SORT_KEY}}


def item_key(userid: str, location: str) -> Item:
    return {"userid": {"S": userid}, "location": {"S": location}}


def erased_key(user_hash: str) -> Item:
    return item_key(ERASED_PREFIX + user_hash, ERASED_SORT_KEY)


def is_row(item: Item) -> bool:
    """Whether an item is an index row (not a meta or suppression item)."""
    return item["location"]["S"] not in RESERVED_SORT_KEYS and "kind" not in item


def parse_meta(item: Item) -> ObjectMeta:
    return ObjectMeta(
        s3path=item["s3path"]["S"],
        etag=item["etag"]["S"],
        last_modified=item["last_modified"]["S"],
        row_items=int(item.get("row_items", {"N": "0"})["N"]),
        version_id=item["version_id"]["S"] if "version_id" in item else None,
        dataset=item["dataset"]["S"] if "dataset" in item else "",
        unindexable=int(item["unindexable"]["N"]) if "unindexable" in item else 0,
    )


def kept_as_noncurrent(meta: ObjectMeta | None, new_version_id: str | None) -> TypeGuard[ObjectMeta]:
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


def noncurrent_partition(s3path: str, version_id: str) -> str:
    """The by_object GSI partition of one noncurrent version's pointers (never an object's: paths start s3://)."""
    key = f"{NONCURRENT_PREFIX}{s3path}{SEPARATOR}{version_id}"
    if len(key.encode()) > MAX_PARTITION_KEY_BYTES:
        key = f"{NONCURRENT_PREFIX}#sha256:{_sha256(s3path + SEPARATOR + version_id)}"
    return key


def noncurrent_items(version: NoncurrentVersion, recorded_at: str) -> list[Item]:
    sort_key = {"S": _noncurrent_sort_key(version.s3path, version.version_id)}
    common: Item = {
        "location": sort_key,
        "kind": {"S": "noncurrent"},
        "s3path": {"S": noncurrent_partition(version.s3path, version.version_id)},
        "object_s3path": {"S": version.s3path},
        "version_id": {"S": version.version_id},
        "dataset": {"S": version.dataset},
        "recorded_at": {"S": recorded_at},
    }
    return [{"userid": {"S": NONCURRENT_PREFIX + user}, **common} for user in dict.fromkeys(version.users)]


def _coverage_key(dataset: str) -> Item:
    return item_key(COVERAGE_PARTITION, COVERAGE_SORT_PREFIX + dataset)


def coverage_item(coverage: Coverage) -> Item:
    return {
        **_coverage_key(coverage.dataset),
        "kind": {"S": "coverage"},
        "dataset": {"S": coverage.dataset},
        "dataset_location": {"S": coverage.location},
        "method": {"S": coverage.method},
        "started_at": {"S": timestamp(coverage.started_at)},
        "finished_at": {"S": timestamp(coverage.finished_at)},
        "objects": {"N": str(coverage.objects)},
        "versions": {"N": str(coverage.versions)},
        "failed": {"N": str(coverage.failed)},
        "drift": {"N": str(coverage.drift)},
        "id_forms": {"S": coverage.id_forms},
    }


def parse_coverage(item: Item) -> Coverage:
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
        id_forms=item.get("id_forms", {"S": ""})["S"],  # an older item: untyped
    )


def record_map_key(s3path: str) -> Item:
    """An object's record map item (lakepurge.records.record_map): a partition of its own, never read with rows."""
    userid = RECORD_MAP_PREFIX + s3path
    if len(userid.encode()) > MAX_PARTITION_KEY_BYTES:
        userid = f"{RECORD_MAP_PREFIX}#sha256:{_sha256(s3path)}"
    return item_key(userid, RECORD_MAP_SORT_KEY)


def record_map_item(s3path: str, blob: bytes) -> Item:
    return {**record_map_key(s3path), "kind": {"S": "record_map"}, "map": {"B": blob}}


def problem_prefix(dataset: str, s3path: str) -> str:
    """The sort key of an object's unindexable markers up to the ETag (the path hashed when it would be too long)."""
    prefix = f"{PROBLEM_SORT_PREFIX}{dataset}{SEPARATOR}{s3path}{SEPARATOR}"
    if len(prefix.encode()) + 100 > MAX_SORT_KEY_BYTES:  # room for an ETag
        prefix = f"{PROBLEM_SORT_PREFIX}{dataset}{SEPARATOR}#sha256:{_sha256(s3path)}{SEPARATOR}"
    return prefix


def problem_item(obj: ObjectIndex, written_at: int) -> Item:
    return {
        "userid": {"S": PROBLEM_PARTITION},
        "location": {"S": problem_prefix(obj.dataset, obj.s3path) + obj.etag},
        "kind": {"S": "unindexable"},
        "object_s3path": {"S": obj.s3path},
        "dataset": {"S": obj.dataset},
        "etag": {"S": obj.etag},
        "unindexable": {"N": str(len(obj.unindexable))},
        "whole": {"BOOL": any(u.line == WHOLE_OBJECT for u in obj.unindexable)},
        "written_at": {"N": str(written_at)},
    }


def parse_row(item: Item) -> RowItem:
    return RowItem(
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


def row_items_of(obj: ObjectIndex, written_at: int) -> list[Item]:
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


def meta_item(obj: ObjectIndex, row_items: int) -> Item:
    item: Item = {
        **meta_key(obj.s3path),
        "kind": {"S": "object"},
        "s3path": {"S": obj.s3path},
        "dataset": {"S": obj.dataset},
        "etag": {"S": obj.etag},
        "last_modified": {"S": timestamp(obj.last_modified)},
        "records": {"N": str(obj.records)},
        "row_items": {"N": str(row_items)},
        "rows": {"N": str(obj.row_count)},
        "unindexable": {"N": str(len(obj.unindexable))},
        "reappeared": {"N": str(obj.returning_users)},
        "unindexable_lines": {
            "L": [
                {"M": {"line": {"N": str(u.line)}, "reason": {"S": u.reason}}}
                for u in obj.unindexable[:UNINDEXABLE_KEPT]
            ]
        },
        "indexed_at": {"S": timestamp(datetime.now(UTC))},
    }
    if obj.version_id is not None:
        item["version_id"] = {"S": obj.version_id}
    owners = [user for user, lines in obj.lines_by_user.items() if WHOLE_OBJECT in lines]
    if owners:
        item["owners"] = {"SS": owners}
    return item


def settled(rows: list[RowItem], meta: ObjectMeta | None) -> bool:
    """Whether one user's rows of one object are exactly the rows of the version the meta item names."""
    if meta is None:
        return True  # not indexed (removed, or never flipped): there is nothing to return
    if any(row.etag != meta.etag for row in rows):
        return False
    return len({row.chunk for row in rows}) == rows[0].chunks


def rows_by_path(rows: list[RowItem]) -> dict[str, list[RowItem]]:
    """One user's rows grouped by object."""
    grouped: dict[str, list[RowItem]] = defaultdict(list)
    for row in rows:
        grouped[row.s3path].append(row)
    return grouped
