"""PostgreSQL index: ``user_objects(userid, s3path, recordline)`` as in the design this follows, plus the
indexed ETag per row and an ``indexed_objects`` table that makes per-object replacement atomic and ordered."""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from lakepurge.index.base import (
    Hits,
    IndexStatus,
    Location,
    NewVersion,
    ObjectHits,
    ObjectIndex,
    UnindexableLine,
)
from lakepurge.logs import get_logger

log = get_logger(__name__)

SCHEMA = """
-- The blog design's table, unchanged: the version its line numbers belong to is the object's, in indexed_objects,
-- so erasing lines from an object touches only those rows, not every row of the object.
CREATE TABLE IF NOT EXISTS user_objects (
    userid     TEXT    NOT NULL,
    s3path     TEXT    NOT NULL,
    recordline INTEGER NOT NULL    -- 0-based line (row for Parquet); -1: the whole object is the user's
);
CREATE INDEX IF NOT EXISTS user_objects_userid ON user_objects (userid);
-- (s3path, recordline): erasing 500 lines of an object finds exactly those rows instead of filtering all of its rows.
DROP INDEX IF EXISTS user_objects_s3path;
CREATE INDEX IF NOT EXISTS user_objects_s3path_line ON user_objects (s3path, recordline);
CREATE TABLE IF NOT EXISTS indexed_objects (
    s3path        TEXT PRIMARY KEY,
    dataset       TEXT        NOT NULL,
    etag          TEXT        NOT NULL,
    version_id    TEXT,
    last_modified TIMESTAMPTZ NOT NULL,
    records       INTEGER     NOT NULL,
    unindexable   INTEGER     NOT NULL,
    reappeared    INTEGER     NOT NULL DEFAULT 0,   -- erased users found again in this object
    indexed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
ALTER TABLE indexed_objects ADD COLUMN IF NOT EXISTS reappeared INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS unindexable_lines (
    s3path     TEXT    NOT NULL,
    recordline INTEGER NOT NULL,
    reason     TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS unindexable_lines_s3path ON unindexable_lines (s3path);
CREATE TABLE IF NOT EXISTS erased_users (   -- the suppression list: keyed hashes, never raw ids
    user_hash  TEXT PRIMARY KEY,
    request_id TEXT        NOT NULL,
    erased_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""

# Claims the object row for this version; returns nothing when a newer or identical version is already indexed.
_CLAIM = """
INSERT INTO indexed_objects
    (s3path, dataset, etag, version_id, last_modified, records, unindexable, reappeared, indexed_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now())
ON CONFLICT (s3path) DO UPDATE SET
    dataset = EXCLUDED.dataset, etag = EXCLUDED.etag, version_id = EXCLUDED.version_id,
    last_modified = EXCLUDED.last_modified, records = EXCLUDED.records,
    unindexable = EXCLUDED.unindexable, reappeared = EXCLUDED.reappeared, indexed_at = now()
WHERE indexed_objects.last_modified <= EXCLUDED.last_modified
  AND (%s OR indexed_objects.etag <> EXCLUDED.etag)
RETURNING s3path
"""

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _copy_text(value: str) -> str:
    """Escape a value for COPY's text format (only when needed: ids and paths rarely hold these)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_COPY_ESCAPES)
    return value


class PostgresIndexStore:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn = psycopg.connect(dsn, autocommit=True)

    def ensure_schema(self) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            # Concurrent first starts (several Lambdas, several executors) must not race on CREATE.
            cur.execute("SELECT pg_advisory_xact_lock(7411)")
            cur.execute(SCHEMA)

    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        if not objects:
            return 0
        # One version per object and batch: the latest (the last given, on equal times), as applying them in turn
        # would leave it.
        latest: dict[str, ObjectIndex] = {}
        for obj in objects:
            if obj.s3path not in latest or latest[obj.s3path].last_modified <= obj.last_modified:
                latest[obj.s3path] = obj
        with self._conn.transaction(), self._conn.cursor() as cur:
            claimed: list[ObjectIndex] = []
            # Lock order by path so two batches touching the same objects cannot deadlock.
            for obj in sorted(latest.values(), key=lambda o: o.s3path):
                cur.execute(
                    _CLAIM,
                    (
                        obj.s3path,
                        obj.dataset,
                        obj.etag,
                        obj.version_id,
                        obj.last_modified,
                        obj.records,
                        len(obj.unindexable),
                        obj.reappeared,
                        force,
                    ),
                )
                if cur.fetchone() is not None:
                    claimed.append(obj)
            if not claimed:
                return 0
            paths = [o.s3path for o in claimed]
            cur.execute("DELETE FROM user_objects WHERE s3path = ANY(%s)", (paths,))
            cur.execute("DELETE FROM unindexable_lines WHERE s3path = ANY(%s)", (paths,))
            with cur.copy("COPY user_objects (userid, s3path, recordline) FROM STDIN") as copy:
                buffer: list[str] = []
                for obj in claimed:
                    suffix = f"\t{_copy_text(obj.s3path)}\t"
                    for user, lines in obj.lines_by_user.items():
                        prefix = _copy_text(user) + suffix
                        buffer.extend(f"{prefix}{line}\n" for line in lines)
                    if len(buffer) > 50_000:
                        copy.write("".join(buffer))
                        buffer.clear()
                if buffer:
                    copy.write("".join(buffer))
            bad = [(o.s3path, u.line, u.reason) for o in claimed for u in o.unindexable]
            if bad:
                cur.executemany("INSERT INTO unindexable_lines (s3path, recordline, reason) VALUES (%s, %s, %s)", bad)
        return len(claimed)

    def apply_erasure(self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int]) -> bool:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "UPDATE indexed_objects SET etag = %s, version_id = %s, last_modified = %s,"
                " records = greatest(records - %s, 0), indexed_at = now()"
                " WHERE s3path = %s AND etag = %s RETURNING s3path",
                (after.etag, after.version_id, after.last_modified, len(erased_lines), s3path, before_etag),
            )
            if cur.fetchone() is None:
                return False
            cur.execute(
                "DELETE FROM user_objects WHERE s3path = %s AND recordline = ANY(%s)", (s3path, list(erased_lines))
            )
        return True

    def remove_object(self, s3path: str) -> bool:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute("DELETE FROM indexed_objects WHERE s3path = %s RETURNING s3path", (s3path,))
            existed = cur.fetchone() is not None
            cur.execute("DELETE FROM user_objects WHERE s3path = %s", (s3path,))
            cur.execute("DELETE FROM unindexable_lines WHERE s3path = %s", (s3path,))
        return existed

    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        if not user_ids:
            return {}
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT u.userid, u.s3path, o.etag, u.lines FROM ("
                "  SELECT userid, s3path, array_agg(recordline ORDER BY recordline) AS lines FROM user_objects"
                "  WHERE userid = ANY(%s) GROUP BY userid, s3path) u"
                " JOIN indexed_objects o USING (s3path) ORDER BY u.userid, u.s3path",
                (list(user_ids),),
            )
            # Hundreds of thousands of small objects at once: the cyclic garbage collector would scan them over and
            # over (half of the time at 100,000 users); none of them can form a cycle.
            with _collector_paused():
                rows = cur.fetchall()
                found: dict[str, list[Location]] = defaultdict(list)
                for user, s3path, etag, lines in rows:
                    found[user].append(Location(s3path, etag, tuple(lines)))
        return dict(found)

    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        if not user_ids:
            return Hits({}, 0)
        # One probe of the index for both answers; grouped by object, the result stays small at 100,000 users.
        # No DISTINCT per object (it sorts half a million rows): two users sharing a line are merged here.
        with self._conn.cursor() as cur:
            cur.execute(
                "WITH hits AS (SELECT userid, s3path, recordline FROM user_objects WHERE userid = ANY(%s::text[]))"
                " SELECT h.s3path, o.etag, h.lines, NULL::bigint FROM ("
                "  SELECT s3path, array_agg(recordline) AS lines FROM hits GROUP BY s3path) h"
                " JOIN indexed_objects o USING (s3path)"
                " UNION ALL SELECT NULL, NULL, NULL, count(*) FROM (SELECT DISTINCT userid FROM hits) found",
                (list(user_ids),),
            )
            rows = cur.fetchall()
        found = 0
        objects: dict[str, ObjectHits] = {}
        for s3path, etag, lines, users in rows:
            if s3path is None:
                found = users
            else:
                objects[s3path] = ObjectHits(s3path, etag, tuple(sorted(set(lines))))
        return Hits(objects, found)

    def object_rows(self, s3path: str) -> dict[str, list[int]]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT userid, array_agg(recordline ORDER BY recordline) FROM user_objects"
                " WHERE s3path = %s GROUP BY userid",
                (s3path,),
            )
            rows = cur.fetchall()
        return {user: list(lines) for user, lines in rows}

    def get_object(self, s3path: str) -> ObjectIndex | None:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT dataset, etag, version_id, last_modified, records, reappeared FROM indexed_objects"
                " WHERE s3path = %s",
                (s3path,),
            )
            meta = cur.fetchone()
            if meta is None:
                return None
            cur.execute(
                "SELECT recordline, reason FROM unindexable_lines WHERE s3path = %s ORDER BY recordline", (s3path,)
            )
            unindexable = [UnindexableLine(line, reason) for line, reason in cur.fetchall()]
        dataset, etag, version_id, last_modified, records, reappeared = meta
        return ObjectIndex(
            s3path=s3path,
            dataset=dataset,
            etag=etag,
            version_id=version_id,
            last_modified=last_modified,
            lines_by_user=self.object_rows(s3path),
            records=records,
            unindexable=unindexable,
            reappeared=reappeared,
        )

    def dataset_records(self) -> dict[str, int]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT dataset, sum(records) FROM indexed_objects GROUP BY dataset")
            return {dataset: int(total) for dataset, total in cur.fetchall()}

    def indexed_objects(self) -> dict[str, str]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT s3path, etag FROM indexed_objects")
            rows = cur.fetchall()
        return dict(rows)

    def unindexable(self, limit: int = 100) -> list[tuple[str, UnindexableLine]]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT s3path, recordline, reason FROM unindexable_lines ORDER BY s3path, recordline LIMIT %s",
                (limit,),
            )
            rows = cur.fetchall()
        return [(path, UnindexableLine(line, reason)) for path, line, reason in rows]

    def status(self) -> IndexStatus:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT count(*), coalesce(sum(records), 0), coalesce(sum(unindexable), 0),"
                " count(*) FILTER (WHERE unindexable > 0), count(*) FILTER (WHERE reappeared > 0)"
                " FROM indexed_objects"
            )
            objects, records, unindexable, with_unindexable, with_erased = cur.fetchone() or (0, 0, 0, 0, 0)
            cur.execute("SELECT count(DISTINCT userid), count(*) FROM user_objects")
            users, rows = cur.fetchone() or (0, 0)
        return IndexStatus(objects, int(records), users, rows, int(unindexable), with_unindexable, with_erased)

    def record_erased(self, user_hashes: Sequence[str], request_id: str) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO erased_users (user_hash, request_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [(h, request_id) for h in user_hashes],
            )

    def erased_among(self, user_hashes: Sequence[str]) -> set[str]:
        if not user_hashes:
            return set()
        with self._conn.cursor() as cur:
            cur.execute("SELECT user_hash FROM erased_users WHERE user_hash = ANY(%s)", (list(user_hashes),))
            return {row[0] for row in cur.fetchall()}

    def dump(self) -> set[tuple[str, str, int]]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT userid, s3path, recordline FROM user_objects")
            rows = cur.fetchall()
        return {(u, p, line) for u, p, line in rows}

    def truncate(self) -> None:
        """Empty the index (tests and benchmarks start from nothing)."""
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute("TRUNCATE user_objects, indexed_objects, unindexable_lines, erased_users")

    def close(self) -> None:
        self._conn.close()
