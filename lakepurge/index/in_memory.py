"""An index held in this process's memory: the whole :class:`IndexStore` contract with no server.

For tests and for trying rules out on a laptop (it passes the same contract tests as the PostgreSQL and DynamoDB
adapters). Nothing is persisted and nothing is shared between processes: it is not a configurable backend.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

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


@dataclass(slots=True)
class _Held:
    """One indexed object: its version, counts and rows (user -> lines, never an empty list)."""

    dataset: str
    etag: str
    version_id: str | None
    last_modified: datetime
    records: int
    returning_users: int
    rows: dict[str, list[int]]
    unindexable: list[UnindexableLine]


def _utc(stamp: datetime) -> datetime:
    return stamp.astimezone(UTC)


class MemoryIndexStore:
    """Thread-safe (one lock around every operation); every answer is a copy, never the store's own objects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, _Held] = {}
        # (s3path, version id) -> (dataset, users)
        self._noncurrent: dict[tuple[str, str], tuple[str, set[str]]] = {}
        self._coverage: dict[str, Coverage] = {}
        self._erased: dict[str, str] = {}  # keyed hash -> the first request that erased it
        self._record_maps: dict[str, bytes] = {}

    def ensure_schema(self) -> None:
        """Nothing to create."""

    def check_schema(self) -> None:
        """Always there."""

    # -- writes ---------------------------------------------------------------------------------------------------

    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        written = 0
        with self._lock:
            # In the order given: the same object twice in one batch is applied twice, as in turn.
            for obj in objects:
                held = self._objects.get(obj.s3path)
                if held is not None and (
                    held.last_modified > obj.last_modified or (held.etag == obj.etag and not force)
                ):
                    continue
                if held is not None:
                    self._keep_as_noncurrent(obj.s3path, held, obj.version_id)
                self._objects[obj.s3path] = _Held(
                    dataset=obj.dataset,
                    etag=obj.etag,
                    version_id=obj.version_id,
                    last_modified=_utc(obj.last_modified),
                    records=obj.records,
                    returning_users=obj.returning_users,
                    rows={user: list(lines) for user, lines in obj.lines_by_user.items() if lines},
                    unindexable=sorted(obj.unindexable, key=lambda u: u.line),
                )
                written += 1
        return written

    def _keep_as_noncurrent(self, s3path: str, held: _Held, new_version_id: str | None) -> None:
        """The held version stops being current: in a versioned bucket it still exists, with its users."""
        if held.version_id is None or held.version_id == new_version_id:
            return
        self._add_noncurrent(NoncurrentVersion(s3path, held.dataset, held.version_id, tuple(held.rows)))

    def _add_noncurrent(self, version: NoncurrentVersion) -> None:
        if not version.users:
            return
        key = (version.s3path, version.version_id)
        _, users = self._noncurrent.setdefault(key, (version.dataset, set()))
        users.update(version.users)

    def apply_erasure(
        self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int], dropped: bool = False
    ) -> bool:
        erased = set(erased_lines)
        order = sorted(erased) if dropped else []
        with self._lock:
            held = self._objects.get(s3path)
            if held is None or held.etag != before_etag:
                return False
            self._keep_as_noncurrent(s3path, held, after.version_id)
            held.etag = after.etag
            held.version_id = after.version_id
            held.last_modified = _utc(after.last_modified)
            held.records = max(held.records - len(erased), 0)
            held.rows = rows_without(held.rows, erased, order)
            held.unindexable = [UnindexableLine(moved_up(u.line, order), u.reason) for u in held.unindexable]
        return True

    def copy_rewritten(self, before: str, before_etag: str, after: ObjectIndex, dropped: Sequence[int]) -> bool:
        return copy_rewritten_by_reading(self, before, before_etag, after, dropped)

    def remove_object(self, s3path: str) -> bool:
        with self._lock:
            held = self._objects.pop(s3path, None)
            if held is None:
                return False
            self._keep_as_noncurrent(s3path, held, None)  # behind a delete marker, the version still exists
            return True

    def record_erased(self, user_hashes: Sequence[str], request_id: str) -> None:
        with self._lock:
            for user_hash in user_hashes:
                self._erased.setdefault(user_hash, request_id)

    def set_returning_users(self, s3path: str, etag: str, returning_users: int) -> bool:
        with self._lock:
            held = self._objects.get(s3path)
            if held is None or held.etag != etag:
                return False
            held.returning_users = returning_users
            return True

    def record_noncurrent(self, versions: Sequence[NoncurrentVersion]) -> None:
        with self._lock:
            for version in versions:
                self._add_noncurrent(version)

    def forget_noncurrent(self, s3path: str, version_ids: Sequence[str]) -> None:
        with self._lock:
            for version_id in version_ids:
                self._noncurrent.pop((s3path, version_id), None)

    def record_coverage(self, coverage: Coverage) -> None:
        with self._lock:
            self._coverage[coverage.dataset] = replace(
                coverage, started_at=_utc(coverage.started_at), finished_at=_utc(coverage.finished_at)
            )

    def set_record_maps(self, maps: Sequence[tuple[str, bytes]]) -> None:
        with self._lock:
            self._record_maps.update(maps)

    def truncate(self) -> None:
        with self._lock:
            self._objects.clear()
            self._noncurrent.clear()
            self._coverage.clear()
            self._erased.clear()
            self._record_maps.clear()

    # -- reads ----------------------------------------------------------------------------------------------------

    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        wanted = set(user_ids)
        found: dict[str, list[Location]] = {}
        if not wanted:
            return found
        with self._lock:
            for s3path in sorted(self._objects):
                held = self._objects[s3path]
                for user in wanted.intersection(held.rows):
                    found.setdefault(user, []).append(Location(s3path, held.etag, tuple(sorted(held.rows[user]))))
        return found

    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        return hits_from_locations(self.lookup(user_ids))

    def object_rows(self, s3path: str) -> dict[str, list[int]]:
        with self._lock:
            held = self._objects.get(s3path)
            return {} if held is None else {user: sorted(lines) for user, lines in held.rows.items()}

    def ids_beside(self, forms: Sequence[str]) -> list[Beside]:
        found = self.lookup(forms)
        paths = {location.s3path for locations in found.values() for location in locations}
        return beside_in_objects(found, {path: self.get_object(path) for path in paths})

    def get_object(self, s3path: str) -> ObjectIndex | None:
        with self._lock:
            held = self._objects.get(s3path)
            if held is None:
                return None
            return ObjectIndex(
                s3path=s3path,
                dataset=held.dataset,
                etag=held.etag,
                version_id=held.version_id,
                last_modified=held.last_modified,
                lines_by_user={user: sorted(lines) for user, lines in held.rows.items()},
                records=held.records,
                unindexable=list(held.unindexable),
                returning_users=held.returning_users,
            )

    def object_records(self, s3paths: Sequence[str]) -> dict[str, int]:
        with self._lock:
            return {path: self._objects[path].records for path in s3paths if path in self._objects}

    def dataset_records(self) -> dict[str, int]:
        totals: dict[str, int] = defaultdict(int)
        with self._lock:
            for held in self._objects.values():
                totals[held.dataset] += held.records
        return dict(totals)

    def indexed_objects(self) -> dict[str, str]:
        with self._lock:
            return {s3path: held.etag for s3path, held in self._objects.items()}

    def unindexable(self, limit: int = 100) -> list[tuple[str, UnindexableLine]]:
        with self._lock:
            every = [(s3path, line) for s3path in sorted(self._objects) for line in self._objects[s3path].unindexable]
        return every[:limit]

    def problems(self) -> dict[str, DatasetProblems]:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        with self._lock:
            for held in self._objects.values():
                if not held.unindexable:
                    continue
                counts = totals[held.dataset]
                whole = any(u.line == WHOLE_OBJECT for u in held.unindexable)
                counts[0] += 1
                counts[1] += len(held.unindexable)
                counts[2] += held.etag == ""
                counts[3] += whole and held.etag != ""
        return {name: DatasetProblems(name, *counts) for name, counts in totals.items()}

    def problem_objects(self, dataset: str, limit: int, lines: int = 100) -> list[UnindexableObject]:
        with self._lock:
            found = [
                UnindexableObject(
                    s3path,
                    dataset,
                    held.etag,
                    held.version_id,
                    held.last_modified,
                    len(held.unindexable),
                    tuple(held.unindexable[: max(lines, 0)]),
                )
                for s3path, held in sorted(self._objects.items())
                if held.dataset == dataset and held.unindexable
            ]
        return found[: max(limit, 0)]

    def object_owners(self, dataset: str) -> dict[str, frozenset[str]]:
        with self._lock:
            return {
                s3path: frozenset(user for user, lines in held.rows.items() if WHOLE_OBJECT in lines)
                for s3path, held in self._objects.items()
                if held.dataset == dataset
            }

    def erased_among(self, user_hashes: Sequence[str]) -> set[str]:
        with self._lock:
            return {user_hash for user_hash in user_hashes if user_hash in self._erased}

    def erased_requests(self, user_hashes: Sequence[str]) -> dict[str, str]:
        with self._lock:
            return {user_hash: self._erased[user_hash] for user_hash in user_hashes if user_hash in self._erased}

    def returning_user_objects(self, limit: int = 100) -> list[str]:
        with self._lock:
            return sorted(s3path for s3path, held in self._objects.items() if held.returning_users > 0)[: max(limit, 0)]

    def noncurrent_of(self, user_ids: Sequence[str]) -> dict[str, set[str]]:
        wanted = set(user_ids)
        found: dict[str, set[str]] = defaultdict(set)
        with self._lock:
            for (s3path, version_id), (_, users) in self._noncurrent.items():
                if not wanted.isdisjoint(users):
                    found[s3path].add(version_id)
        return dict(found)

    def coverage(self) -> dict[str, Coverage]:
        with self._lock:
            return dict(self._coverage)

    def record_map(self, s3path: str) -> bytes | None:
        with self._lock:
            return self._record_maps.get(s3path)

    def with_record_maps(self, s3paths: Sequence[str]) -> set[str]:
        with self._lock:
            return {path for path in s3paths if path in self._record_maps}

    def status(self) -> IndexStatus:
        with self._lock:
            held = list(self._objects.values())
            users = {user for obj in held for user in obj.rows}
            return IndexStatus(
                objects=len(held),
                records=sum(obj.records for obj in held),
                users=len(users),
                rows=sum(len(lines) for obj in held for lines in obj.rows.values()),
                unindexable_lines=sum(len(obj.unindexable) for obj in held),
                objects_with_unindexable=sum(1 for obj in held if obj.unindexable),
                objects_with_returning_users=sum(1 for obj in held if obj.returning_users > 0),
            )

    def dump(self) -> set[tuple[str, str, int]]:
        with self._lock:
            return {
                (user, s3path, line)
                for s3path, held in self._objects.items()
                for user, lines in held.rows.items()
                for line in lines
            }

    def close(self) -> None:
        """Nothing to release."""
