"""DynamoDB index: one table holding every user's index rows, one meta item per indexed object, the users of
noncurrent object versions, each dataset's coverage and the suppression list (one item per erased user).

The layout (``lakepurge.index.dynamodb_items``) and how an object is replaced atomically without transactions, what a
reader may see meanwhile, and how this adapter differs from the PostgreSQL one: docs/ARCHITECTURE.md, "DynamoDB".
The table's own operations (schema, paging, batches with retries) are ``lakepurge.index.dynamodb_table``. Nothing
here logs user ids or object paths (a key may name a user).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from botocore.exceptions import ClientError

from lakepurge.core.logs import get_logger
from lakepurge.index.base import (
    WHOLE_OBJECT,
    Beside,
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
    beside_in_objects,
    copy_rewritten_by_reading,
    hits_from_locations,
    moved_up,
    rows_without,
)
from lakepurge.index.dynamodb_items import (
    COVERAGE_PARTITION,
    COVERAGE_SORT_PREFIX,
    ERASED_PREFIX,
    META_PREFIX,
    PROBLEM_PARTITION,
    PROBLEM_SORT_PREFIX,
    SEPARATOR,
    Item,
    ObjectMeta,
    coverage_item,
    erased_key,
    is_row,
    item_key,
    kept_as_noncurrent,
    meta_item,
    meta_key,
    noncurrent_items,
    noncurrent_partition,
    parse_coverage,
    parse_meta,
    parse_row,
    problem_item,
    problem_prefix,
    record_map_item,
    record_map_key,
    row_items_of,
    rows_by_path,
    settled,
    timestamp,
)
from lakepurge.index.dynamodb_table import READ_ROUNDS, DynamoTable, parallel

log = get_logger()

# A row of an ETag that is neither current nor the one just replaced is deleted only when it is older than this:
# younger ones may belong to a concurrent writer that has not flipped the meta item yet.
ORPHAN_GRACE_SECONDS = 3600

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


class DynamoIndexStore(DynamoTable):
    """The IndexStore on one DynamoDB table (DynamoTable: the table's schema, batches and item reads)."""

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
        replaced = [meta for obj in todo if kept_as_noncurrent(meta := current.get(obj.s3path), obj.version_id)]
        self._keep_noncurrent(replaced)
        written_at = int(time.time())
        rows = {obj.s3path: row_items_of(obj, written_at) for obj in todo}
        # An object's unindexable marker goes with its rows: it counts only once the flip makes its ETag current.
        markers = [problem_item(obj, written_at) for obj in todo if obj.unindexable]
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
                mine_marker = [item_key(PROBLEM_PARTITION, problem_prefix(obj.dataset, obj.s3path) + obj.etag)]
                return False, [item_key(user, location) for user, location in written] + (
                    mine_marker if obj.unindexable else []
                )
            read = current.get(obj.s3path)
            if kept_as_noncurrent(meta, obj.version_id) and (
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
                    stale.append(item_key(key.userid, key.location))
            if obj.unindexable or (meta is not None and meta.unindexable):
                stale += self._stale_markers(obj, meta, horizon)
            return True, stale

        outcomes = parallel(settle, todo)
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

    def _stale_markers(self, obj: ObjectIndex, replaced: ObjectMeta | None, horizon: int) -> list[Item]:
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
                stale.append(item_key(PROBLEM_PARTITION, item["location"]["S"]))
        return stale

    @staticmethod
    def _superseded(meta: ObjectMeta | None, obj: ObjectIndex, force: bool) -> bool:
        if meta is None:
            return False
        return meta.last_modified > timestamp(obj.last_modified) or (meta.etag == obj.etag and not force)

    def _flip(
        self, obj: ObjectIndex, row_items: int, force: bool, moving_from: str | None = None
    ) -> tuple[bool, ObjectMeta | None]:
        """Make obj the indexed version if the index holds no newer one (or, ``moving_from`` given, if it still holds
        exactly that ETag: a version indexed meanwhile in the same second is newer, whatever LastModified says);
        returns (claimed, the meta item before)."""
        names: dict[str, str]
        values: Item
        if moving_from is not None:
            condition, names, values = "#e = :from", {"#e": "etag"}, {":from": {"S": moving_from}}
        elif force:
            condition = "attribute_not_exists(#u) OR #m <= :lm"
            names, values = {"#u": "userid", "#m": "last_modified"}, {":lm": {"S": timestamp(obj.last_modified)}}
        else:
            condition = "attribute_not_exists(#u) OR (#m <= :lm AND #e <> :etag)"
            names = {"#u": "userid", "#m": "last_modified", "#e": "etag"}
            values = {":lm": {"S": timestamp(obj.last_modified)}, ":etag": {"S": obj.etag}}
        try:
            response = self._client.put_item(
                TableName=self._table,
                Item=meta_item(obj, row_items),
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
            return False, parse_meta(item) if item else self._get_meta(obj.s3path)
        old = response.get("Attributes")
        return True, parse_meta(old) if old else None

    def remove_object(self, s3path: str) -> bool:
        # A versioned object's current version stays behind a delete marker: its users are kept first.
        read = self._get_meta(s3path)
        if kept_as_noncurrent(read, None):
            self._keep_noncurrent([read])
        response = self._client.delete_item(TableName=self._table, Key=meta_key(s3path), ReturnValues="ALL_OLD")
        old = response.get("Attributes")
        existed = bool(old)
        if old:
            meta = parse_meta(old)
            if kept_as_noncurrent(meta, None) and (
                read is None or (read.etag, read.version_id) != (meta.etag, meta.version_id)
            ):
                self._keep_noncurrent([meta])  # replaced between the read and the delete
        keys = [item_key(k.userid, k.location) for k in self._object_keys(s3path)]
        datasets = {meta.dataset for meta in (read, parse_meta(old) if old else None) if meta is not None}
        keys += [item_key(PROBLEM_PARTITION, item["location"]["S"]) for item in self._object_markers(s3path, datasets)]
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

    def apply_erasure(
        self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int], dropped: bool = False
    ) -> bool:
        # Rows are keyed by the object's version here, so the new version's rows are written whole, and the flip to
        # them is conditional on the version read: a version indexed in between (S3's LastModified has whole
        # seconds, so it may not look newer) keeps its rows.
        base = self.get_object(s3path)
        if base is None or base.etag != before_etag:
            return False
        erased = set(erased_lines)
        order = sorted(erased) if dropped else []
        rows = rows_without(base.lines_by_user, erased, order)
        unindexable = [UnindexableLine(moved_up(u.line, order), u.reason) for u in base.unindexable]
        new = replace(
            base,
            etag=after.etag,
            version_id=after.version_id,
            last_modified=after.last_modified,
            lines_by_user=rows,
            records=max(base.records - len(erased), 0),
            unindexable=unindexable,
        )
        return self._replace_round([new], force=True, moving_from=before_etag) == 1

    def copy_rewritten(self, before: str, before_etag: str, after: ObjectIndex, dropped: Sequence[int]) -> bool:
        return copy_rewritten_by_reading(self, before, before_etag, after, dropped)

    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        return hits_from_locations(self.lookup(user_ids))

    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        users = list(dict.fromkeys(user_ids))
        if not users:
            return {}
        rows = dict(zip(users, parallel(self._user_rows, users), strict=True))
        metas = self._get_metas(sorted({row.s3path for user_rows in rows.values() for row in user_rows}))
        # The meta items each user's rows are read against (users re-read later get a later view).
        view: dict[str, dict[str, ObjectMeta]] = dict.fromkeys(users, metas)
        unsettled = [
            user
            for user in users
            if not all(settled(group, metas.get(path)) for path, group in rows_by_path(rows[user]).items())
        ]
        for _ in range(READ_ROUNDS):
            if not unsettled:
                break
            # An object was replaced while these users were read: read them again, then the meta items again.
            before = metas
            fresh = dict(zip(unsettled, parallel(self._user_rows, unsettled), strict=True))
            paths = {row.s3path for user in unsettled for row in (*rows[user], *fresh[user])}
            after = self._get_metas(sorted(paths))
            metas = {path: meta for path, meta in metas.items() if path not in paths} | after
            still: list[str] = []
            for user in unsettled:
                rows[user] = fresh[user]
                view[user] = after
                for path, group in rows_by_path(fresh[user]).items():
                    meta = after.get(path)
                    earlier = before.get(path)
                    # Consistent rows, or a version that stayed current all through the re-read.
                    if settled(group, meta) or (meta is not None and earlier is not None and earlier.etag == meta.etag):
                        continue
                    still.append(user)
                    break
            unsettled = still
        if unsettled:
            log.warning("index rows kept changing during lookup", extra={"users": len(unsettled)})
        found: dict[str, list[Location]] = {}
        for user in sorted(users):
            locations: list[Location] = []
            for path, group in rows_by_path(rows[user]).items():
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

    def ids_beside(self, forms: Sequence[str]) -> list[Beside]:
        # The objects' rows (no item names two ids at once): one read per object the forms are in.
        found = self.lookup(forms)
        paths = sorted({location.s3path for locations in found.values() for location in locations})
        return beside_in_objects(found, dict(zip(paths, parallel(self.get_object, paths), strict=True)))

    def get_object(self, s3path: str) -> ObjectIndex | None:
        item = self._client.get_item(TableName=self._table, Key=meta_key(s3path), ConsistentRead=True).get("Item")
        if not item:
            return None
        meta = parse_meta(item)
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
            returning_users=int(item["reappeared"]["N"]),
        )

    def object_records(self, s3paths: Sequence[str]) -> dict[str, int]:
        items = self._batch_get(
            [meta_key(path) for path in dict.fromkeys(s3paths)],
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

    def _keep_noncurrent(self, metas: Sequence[ObjectMeta]) -> None:
        """Record the users of the versions these meta items name as noncurrent versions (before their rows go)."""

        def version(meta: ObjectMeta) -> NoncurrentVersion:
            users = tuple(sorted({key.userid for key in self._version_keys(meta)}))
            return NoncurrentVersion(meta.s3path, meta.dataset, meta.version_id or "", users)

        self.record_noncurrent(parallel(version, metas))

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
                meta = parse_meta(item)
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
        erased_at = {"S": timestamp(datetime.now(UTC))}
        requests = [
            {
                "PutRequest": {
                    "Item": {
                        **erased_key(user_hash),
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
            [erased_key(user_hash) for user_hash in unique],
            ProjectionExpression="#u",
            ExpressionAttributeNames={"#u": "userid"},
        )
        return {item["userid"]["S"].removeprefix(ERASED_PREFIX) for item in items}

    def erased_requests(self, user_hashes: Sequence[str]) -> dict[str, str]:
        unique = list(dict.fromkeys(user_hashes))
        if not unique:
            return {}
        items = self._batch_get(
            [erased_key(user_hash) for user_hash in unique],
            ProjectionExpression="#u, #q",
            ExpressionAttributeNames={"#u": "userid", "#q": "request_id"},
        )
        return {item["userid"]["S"].removeprefix(ERASED_PREFIX): item["request_id"]["S"] for item in items}

    def returning_user_objects(self, limit: int = 100) -> list[str]:
        """The meta items counting erased users found again: the filtered Scan of meta items status() also reads
        (the table has no index by that count)."""
        items = self._scan(
            FilterExpression="#k = :object AND #a > :zero",
            ProjectionExpression="#p",
            ExpressionAttributeNames={"#k": "kind", "#a": "reappeared", "#p": "s3path"},
            ExpressionAttributeValues={":object": {"S": "object"}, ":zero": {"N": "0"}},
        )
        return sorted(item["s3path"]["S"] for item in items)[: max(limit, 0)]

    def set_returning_users(self, s3path: str, etag: str, returning_users: int) -> bool:
        try:
            self._client.update_item(
                TableName=self._table,
                Key=meta_key(s3path),
                UpdateExpression="SET #a = :a",
                ConditionExpression="#e = :etag",
                ExpressionAttributeNames={"#a": "reappeared", "#e": "etag"},
                ExpressionAttributeValues={":a": {"N": str(returning_users)}, ":etag": {"S": etag}},
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return True

    # -- noncurrent versions and coverage --------------------------------------------------------------------------

    def record_noncurrent(self, versions: Sequence[NoncurrentVersion]) -> None:
        """Put one pointer item per user and version (BatchWriteItem); a pointer already there is rewritten."""
        recorded_at = timestamp(datetime.now(UTC))
        items: dict[tuple[str, str], Item] = {}  # one request per key: BatchWriteItem refuses duplicates
        for version in versions:
            for item in noncurrent_items(version, recorded_at):
                items[(item["userid"]["S"], item["location"]["S"])] = item
        self._batch_write([{"PutRequest": {"Item": item}} for item in items.values()])
        log.debug("noncurrent versions recorded", extra={"versions": len(versions), "pointers": len(items)})

    def noncurrent_of(self, user_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = defaultdict(set)
        for items in parallel(self._noncurrent_pointers, list(dict.fromkeys(user_ids))):
            for item in items:
                found[item["object_s3path"]["S"]].add(item["version_id"]["S"])
        return dict(found)

    def forget_noncurrent(self, s3path: str, version_ids: Sequence[str]) -> None:
        """Delete every pointer of those versions, found through the by_object GSI (eventually consistent: a
        pointer recorded a moment before may be missed; versions are forgotten long after they were recorded)."""

        def keys(version_id: str) -> list[Item]:
            items = self._by_object(noncurrent_partition(s3path, version_id))
            return [item_key(item["userid"]["S"], item["location"]["S"]) for item in items]

        doomed = [key for found in parallel(keys, list(dict.fromkeys(version_ids))) for key in found]
        self._batch_write([{"DeleteRequest": {"Key": key}} for key in doomed])
        log.debug("noncurrent versions forgotten", extra={"versions": len(version_ids), "pointers": len(doomed)})

    def record_coverage(self, coverage: Coverage) -> None:
        self._client.put_item(TableName=self._table, Item=coverage_item(coverage))

    def set_record_maps(self, maps: Sequence[tuple[str, bytes]]) -> None:
        self._batch_write([{"PutRequest": {"Item": record_map_item(s3path, blob)}} for s3path, blob in maps])

    def record_map(self, s3path: str) -> bytes | None:
        item = self._client.get_item(TableName=self._table, Key=record_map_key(s3path), ConsistentRead=True)
        return bytes(item["Item"]["map"]["B"]) if "Item" in item else None

    def with_record_maps(self, s3paths: Sequence[str]) -> set[str]:
        # A long path's item is named by its hash (record_map_key): found items are named back by their key.
        paths = {record_map_key(path)["userid"]["S"]: path for path in s3paths}
        keys = [record_map_key(path) for path in paths.values()]
        found = self._batch_get(keys, ProjectionExpression="#u", ExpressionAttributeNames={"#u": "userid"})
        return {paths[item["userid"]["S"]] for item in found}

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
                coverage = parse_coverage(item)
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
            if not is_row(item) or "etag" not in item:
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
            objects_with_returning_users=sum(1 for meta in metas.values() if int(meta["reappeared"]["N"]) > 0),
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
            if not is_row(item) or "lines" not in item:
                continue
            row = parse_row(item)
            if current.get(row.s3path) == row.etag:
                found.update((row.userid, row.s3path, line) for line in row.lines)
        return found

    def close(self) -> None:
        """Nothing to release: the boto3 client is shared by the process."""
