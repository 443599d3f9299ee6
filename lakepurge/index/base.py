"""The index: which lines of which objects hold each user's records.

Both adapters keep the same per-object contract: an object's rows are replaced as one unit, keyed by the object's
ETag and last-modified time, so re-delivered, duplicated or out-of-order events leave the index right.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Protocol

# The line number stored for a user who owns a whole object (id from the key, a sidecar or a tag).
WHOLE_OBJECT = -1


def moved_up(line: int, dropped: Sequence[int]) -> int:
    """A line's number once the `dropped` lines (sorted, one row each) are removed from its object; a whole-object
    row (WHOLE_OBJECT) keeps its mark."""
    return line if line < 0 else line - bisect.bisect_left(dropped, line)


def rows_without(lines_by_user: dict[str, list[int]], erased: Set[int], dropped: Sequence[int]) -> dict[str, list[int]]:
    """The rows (user -> lines) but those at the erased lines, every other line moved up past the `dropped` ones
    (sorted; empty when the erased lines were blanked in place); a user left with no line is gone."""
    return {
        user: kept
        for user, lines in lines_by_user.items()
        if (kept := [moved_up(n, dropped) for n in lines if n not in erased])
    }


@dataclass(frozen=True, slots=True)
class UnindexableLine:
    line: int
    reason: str


@dataclass(slots=True)
class ObjectIndex:
    """Everything the index holds about one version of one object."""

    s3path: str
    dataset: str
    etag: str
    version_id: str | None
    last_modified: datetime
    lines_by_user: dict[str, list[int]] = field(default_factory=dict)
    records: int = 0
    unindexable: list[UnindexableLine] = field(default_factory=list)
    # Users of this object who were erased before (on the suppression list): a restored backup or a replayed
    # pipeline brought them back.
    returning_users: int = 0
    # Where the records of this version start (lakepurge.records.record_map, encoded), read with it for objects a
    # purge would splice: stored with set_record_maps once the rows are written, not by replace_objects.
    record_map: bytes | None = None

    def rows(self) -> Iterable[tuple[str, int]]:
        for user, lines in self.lines_by_user.items():
            for line in lines:
                yield user, line

    @property
    def row_count(self) -> int:
        return sum(len(lines) for lines in self.lines_by_user.values())


def rewritten_copy(held: ObjectIndex, after: ObjectIndex, dropped: Sequence[int]) -> ObjectIndex:
    """`after` (a new object: path and version) holding `held`'s rows but those at the dropped lines (sorted, one
    row each), every later line moved up (moved_up), unindexable lines too; records less the rows and lines dropped."""
    gone = set(dropped)
    rows = rows_without(held.lines_by_user, gone, dropped)
    copy = ObjectIndex(after.s3path, held.dataset, after.etag, after.version_id, after.last_modified, rows)
    copy.unindexable = [
        UnindexableLine(moved_up(u.line, dropped), u.reason) for u in held.unindexable if u.line not in gone
    ]
    dropped_records = held.row_count - copy.row_count + len(held.unindexable) - len(copy.unindexable)
    copy.records = max(held.records - dropped_records, 0)
    copy.returning_users = held.returning_users
    return copy


def copy_rewritten_by_reading(
    store: IndexStore, before: str, before_etag: str, after: ObjectIndex, dropped: Sequence[int]
) -> bool:
    """IndexStore.copy_rewritten for a store that cannot compute on its server: the rows read, moved, written."""
    held = store.get_object(before)
    if held is None or held.etag != before_etag:
        return False
    return store.replace_objects([rewritten_copy(held, after, sorted(set(dropped)))]) == 1


class Location(NamedTuple):
    """Where one user's records are in one object, at the version the index saw.

    A named tuple rather than a frozen dataclass: a 100,000-user lookup builds ~500,000 of them, and a tuple is made
    in half the time."""

    s3path: str
    etag: str
    lines: tuple[int, ...]

    @property
    def whole_object(self) -> bool:
        return self.lines == (WHOLE_OBJECT,)


@dataclass(frozen=True, slots=True)
class NewVersion:
    """The version of an object a purge wrote."""

    etag: str
    version_id: str | None
    last_modified: datetime


@dataclass(frozen=True, slots=True)
class ObjectHits:
    """The lines of one object that hold any of a set of users."""

    s3path: str
    etag: str
    lines: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Hits:
    """Where a set of users is, object by object: what a purge plan needs, without one entry per user."""

    objects: dict[str, ObjectHits]
    users_found: int


def hits_from_locations(found: dict[str, list[Location]]) -> Hits:
    lines: dict[str, set[int]] = {}
    etags: dict[str, str] = {}
    for locations in found.values():
        for location in locations:
            lines.setdefault(location.s3path, set()).update(location.lines)
            etags[location.s3path] = location.etag
    objects = {path: ObjectHits(path, etags[path], tuple(sorted(lines[path]))) for path in lines}
    return Hits(objects, len(found))


class Beside(NamedTuple):
    """An index form found on a line that also holds a known one (a record holding two ids: an order's email and
    customer id), and the dataset of that record: the links resolution follows (lakepurge.indexing.resolution)."""

    form: str  # the known form
    other: str  # the other form on the same (object, line)
    dataset: str


def beside_in_objects(found: dict[str, list[Location]], objects: dict[str, ObjectIndex | None]) -> list[Beside]:
    """The Beside rows of the known forms' locations, read from the rows of their objects (as indexed now: an object
    replaced since the lookup is read at its new version, whose lines are the ones a purge would plan on)."""
    beside: set[Beside] = set()
    for form, locations in found.items():
        for location in locations:
            held = objects.get(location.s3path)
            if held is None or location.whole_object:
                continue
            lines = set(location.lines)
            for other, other_lines in held.lines_by_user.items():
                if other != form and not lines.isdisjoint(other_lines):
                    beside.add(Beside(form, other, held.dataset))
    return sorted(beside)


@dataclass(frozen=True, slots=True)
class NoncurrentVersion:
    """A noncurrent version of an object in a versioned bucket, and the users whose records it holds.

    S3 keeps the previous version of an overwritten object and the last version of a deleted one (behind a delete
    marker): they still hold personal data, so the index remembers whose, until the version is deleted."""

    s3path: str
    dataset: str
    version_id: str
    users: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Coverage:
    """What the index knows about how completely one dataset is indexed: the last full listing of the dataset
    (a backfill or a reconciliation) and what it left undone. A request may only be certified for a dataset whose
    coverage is complete (lakepurge.indexing.coverage decides)."""

    dataset: str
    location: str  # the dataset's location when it was listed: a moved dataset is not covered
    method: str  # "backfill" or "reconcile"
    started_at: datetime  # when the listing began: objects written after it are the event stream's
    finished_at: datetime
    objects: int  # current objects listed
    versions: int  # noncurrent versions listed (0 in an unversioned bucket)
    failed: int  # objects that could not be indexed by that run
    drift: int = 0  # differences between the listing and the index that were found and not fixed
    # The identifier forms the dataset's objects were indexed in (records.identifiers.id_forms): "" untyped, which an
    # older record reads as. Another than the configuration's: the index names no id as a request now makes it.
    id_forms: str = ""


@dataclass(frozen=True, slots=True)
class DatasetProblems:
    """What one dataset's current objects hold that the index could not locate, from the objects' own records (never
    by reading every row): the facts coverage decides from besides the last listing."""

    dataset: str
    objects: int  # objects with at least one unindexable line
    lines: int  # unindexable lines (an object that could not be attributed at all counts one)
    failed: int  # objects that could not be read (failed_object: no record of them is indexed)
    unowned: int  # objects read whose owner is unknown (a one-user dataset's missing sidecar or tag, an invalid id)


@dataclass(frozen=True, slots=True)
class UnindexableObject:
    """An object holding unindexable lines, at the version indexed, with the first of those lines."""

    s3path: str
    dataset: str
    etag: str  # "" for an object that could not be read
    version_id: str | None
    last_modified: datetime
    count: int  # unindexable lines recorded
    lines: tuple[UnindexableLine, ...]  # in line order, the first ones (up to what was asked; DynamoDB keeps 100)

    @property
    def whole(self) -> bool:
        """Nothing of it is located: it could not be read, or (one-user datasets) its owner is unknown."""
        return any(u.line == WHOLE_OBJECT for u in self.lines)


@dataclass(frozen=True, slots=True)
class IndexStatus:
    objects: int
    records: int
    users: int
    rows: int
    unindexable_lines: int
    objects_with_unindexable: int
    objects_with_returning_users: int = 0


class IndexMissing(Exception):
    """The index was never built where [index] points (a new table name, an empty database): commands that only
    read it create nothing and say so; `lakepurge index backfill` or `reconcile` builds it."""


class IndexStore(Protocol):
    """What the rest of lakepurge needs from an index backend."""

    def ensure_schema(self) -> None:
        """Create tables/indexes if they do not exist (safe to call at every start)."""

    def check_schema(self) -> None:
        """The index exists as ensure_schema leaves it, or IndexMissing naming what is missing. Creates nothing:
        readers (lookup, status, the reports, the operations view) may hold read-only credentials."""

    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        """Replace each object's rows with the given ones, atomically per object.

        An object is skipped when the index already holds a newer version (later last-modified) or this same
        ETag (idempotent re-delivery) unless force is set. Returns how many objects were written. When the version
        replaced had a version id other than the new one's (a versioned bucket), its users are kept as a
        noncurrent version (record_noncurrent), in the same step.
        """

    def apply_erasure(
        self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int], dropped: bool = False
    ) -> bool:
        """The purge rewrote an object by blanking lines: move its index from before_etag to the new version and
        drop the erased lines' rows, in one step (every other line kept its number). dropped: the erased lines were
        removed, one row each (Parquet rows), so every later line, unindexable ones included, moves up by the
        erased lines before it (moved_up). Returns False, changing nothing, when the index no longer holds
        before_etag. The version rewritten (when it has a version id) keeps all of its users, the erased ones
        included, as a noncurrent version until the purge deletes it."""

    def copy_rewritten(self, before: str, before_etag: str, after: ObjectIndex, dropped: Sequence[int]) -> bool:
        """A file rewritten under a new name without some rows (a table's erasure: the users' rows and rows a
        deletion vector hid, one row each): index `after` (its path and version; rows and counts are ignored) with
        the rows the index holds for `before` at before_etag but those at the dropped lines, every later line moved
        up (moved_up), unindexable lines likewise (rewritten_copy), in the index itself: the rows are not read,
        hashed or sent again. `before` is left as it is. Returns False, writing nothing, when the index does not
        hold before_etag of `before`, or holds `after` already."""

    def remove_object(self, s3path: str) -> bool:
        """Drop every row of an object that no longer exists. Returns whether it was indexed. When the version
        removed had a version id (a delete marker hides it: it still exists), its users are kept as a noncurrent
        version."""

    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        """Every location of every given user; users with no rows are absent from the result."""

    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        """Where any of the users is, grouped by object (the batch lookup a purge plan is built from)."""

    def object_rows(self, s3path: str) -> dict[str, list[int]]:
        """The index rows of one object (user id -> sorted lines)."""

    def ids_beside(self, forms: Sequence[str]) -> list[Beside]:
        """The other ids on the same (object, line) as each of these, with the dataset of that line, each once, in
        order: the links in records that resolution follows. Lines of whole objects (-1) are no records."""

    def get_object(self, s3path: str) -> ObjectIndex | None:
        """Everything indexed for one object (rows, version, counts, unindexable lines), or None."""

    def dataset_records(self) -> dict[str, int]:
        """Records indexed per dataset (the denominators of the purge's safety limits)."""

    def object_records(self, s3paths: Sequence[str]) -> dict[str, int]:
        """Records indexed in each of the given objects that the index knows (the object safety limit's
        denominators), read together."""

    def indexed_objects(self) -> dict[str, str]:
        """s3path -> indexed ETag for every object the index knows."""

    def unindexable(self, limit: int = 100) -> list[tuple[str, UnindexableLine]]:
        """Reported unindexable lines, object by object (up to limit)."""

    def problems(self) -> dict[str, DatasetProblems]:
        """Per dataset, the current objects holding unindexable lines (datasets without any are absent): read from
        the objects' records, at a cost that grows with the objects that have problems, not with the index."""

    def problem_objects(self, dataset: str, limit: int, lines: int = 100) -> list[UnindexableObject]:
        """The current objects of a dataset that hold unindexable lines, in path order, up to limit, each with its
        first `lines` unindexable lines."""

    def object_owners(self, dataset: str) -> dict[str, frozenset[str]]:
        """s3path -> the users indexed as owning the whole object, for every indexed object of the dataset (an
        object with none: empty). What a reconciliation compares a tag-owned dataset's tags with: tagging an object
        keeps its ETag."""

    def record_erased(self, user_hashes: Sequence[str], request_id: str) -> None:
        """Add erased users (keyed hashes only) to the suppression list."""

    def erased_among(self, user_hashes: Sequence[str]) -> set[str]:
        """Which of these keyed hashes are on the suppression list."""

    def erased_requests(self, user_hashes: Sequence[str]) -> dict[str, str]:
        """Keyed hash -> the request that (first) erased it, for those of these hashes on the suppression list."""

    def returning_user_objects(self, limit: int = 100) -> list[str]:
        """The paths of the objects holding erased users again (returning_users > 0), in path order, up to limit; read
        from the objects' own records, never by scanning every row."""

    def set_returning_users(self, s3path: str, etag: str, returning_users: int) -> bool:
        """Correct an object's count of erased users found again (a purge erased them once more). Only while the
        index holds that ETag of the object: returns False, changing nothing, otherwise."""

    def record_noncurrent(self, versions: Sequence[NoncurrentVersion]) -> None:
        """Remember whose records noncurrent versions hold (adds to what is known of each version; idempotent)."""

    def noncurrent_of(self, user_ids: Sequence[str]) -> dict[str, set[str]]:
        """s3path -> the ids of the noncurrent versions of that object that hold any of the users."""

    def forget_noncurrent(self, s3path: str, version_ids: Sequence[str]) -> None:
        """Those versions were deleted: drop everything known of them (every user's entry)."""

    def record_coverage(self, coverage: Coverage) -> None:
        """Store the outcome of a dataset's full listing, replacing the previous one for that dataset."""

    def coverage(self) -> dict[str, Coverage]:
        """The recorded coverage of every dataset ever fully listed, by dataset name."""

    def set_record_maps(self, maps: Sequence[tuple[str, bytes]]) -> None:
        """Store each object's record map (s3path, lakepurge.records.record_map.RecordMap's bytes), replacing the one
        held: where the records of its last version read start, for a server-side splice. Each map names its version
        itself, so a map left behind by a later version is never taken for that version's."""

    def record_map(self, s3path: str) -> bytes | None:
        """The record map last stored for the object, or None."""

    def with_record_maps(self, s3paths: Sequence[str]) -> set[str]:
        """The objects among these that have a record map stored, asked together (a purge task asks once for all
        its objects instead of once an object)."""

    def status(self) -> IndexStatus: ...

    def dump(self) -> set[tuple[str, str, int]]:
        """Every (user, s3path, line) row: for tests and verification on small indexes."""

    def truncate(self) -> None:
        """Empty the index, the noncurrent versions, the coverage records and the suppression list (tests,
        benchmarks)."""

    def close(self) -> None: ...
