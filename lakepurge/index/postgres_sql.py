"""The PostgreSQL index's schema and its statements: the tables, indexes and the ``user_objects`` view created on
first use, the claim that replaces objects, the erasure's update, and the lookups (with the settings a big one runs
with). lakepurge.index.postgres runs them; docs/ARCHITECTURE.md, "PostgreSQL", says why the schema is so.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from lakepurge.index.base import Beside

# Schema, created on first use. Index rows carry an integer object id instead of the object's path: a row is about
# half as wide, the userid index is covering (lookups read no heap page once the table is vacuumed), and ids compare
# byte-wise (COLLATE "C": equality is the same, only the sort order of ids is byte order). The design's
# user_objects(userid, s3path, recordline) is a view over the rows and indexed_objects, for tools written against it.
SCHEMA = """
CREATE TABLE IF NOT EXISTS indexed_objects (
    s3path        TEXT PRIMARY KEY,
    dataset       TEXT        NOT NULL,
    etag          TEXT        NOT NULL,
    version_id    TEXT,
    last_modified TIMESTAMPTZ NOT NULL,
    records       INTEGER     NOT NULL,
    unindexable   INTEGER     NOT NULL,
    reappeared    INTEGER     NOT NULL DEFAULT 0,   -- returning users (erased users found again) in this object;
                                                    -- the column keeps its first name for existing indexes
    indexed_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    object_id     BIGINT      NOT NULL GENERATED ALWAYS AS IDENTITY   -- kept while the object stays indexed
);
-- One row per (user, line). The version the line numbers belong to is the object's, in indexed_objects, so erasing
-- lines from an object touches only those rows. Integers first: no alignment padding.
CREATE TABLE IF NOT EXISTS user_rows (
    object_id  BIGINT  NOT NULL,   -- indexed_objects.object_id
    recordline INTEGER NOT NULL,   -- 0-based line (row for Parquet); -1: the whole object is the user's
    userid     TEXT COLLATE "C" NOT NULL
);
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
-- Versioned buckets: whose records the noncurrent versions of an object still hold (an overwritten object's old
-- version, a deleted object's last one). No line numbers: a noncurrent version is immutable and is deleted whole.
CREATE TABLE IF NOT EXISTS noncurrent_versions (
    userid     TEXT COLLATE "C" NOT NULL,
    s3path     TEXT NOT NULL,
    version_id TEXT NOT NULL,
    dataset    TEXT NOT NULL,
    PRIMARY KEY (userid, s3path, version_id)
);
CREATE INDEX IF NOT EXISTS noncurrent_versions_object ON noncurrent_versions (s3path, version_id);
-- The last full listing of each dataset (backfill or reconciliation): what lakepurge.indexing.coverage decides from.
CREATE TABLE IF NOT EXISTS dataset_coverage (
    dataset     TEXT PRIMARY KEY,
    location    TEXT        NOT NULL,
    method      TEXT        NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ NOT NULL,
    objects     INTEGER     NOT NULL,
    versions    INTEGER     NOT NULL,
    failed      INTEGER     NOT NULL,
    drift       INTEGER     NOT NULL
);
ALTER TABLE dataset_coverage ADD COLUMN IF NOT EXISTS id_forms TEXT NOT NULL DEFAULT '';
-- Where the records of an object's last version read start (lakepurge.records.record_map): a purge splices a large
-- object at these offsets. The map names its version itself.
CREATE TABLE IF NOT EXISTS record_maps (
    s3path TEXT PRIMARY KEY,
    map    BYTEA NOT NULL
);
"""

SET_RECORD_MAP = (
    "INSERT INTO record_maps (s3path, map) VALUES (%s, %s) ON CONFLICT (s3path) DO UPDATE SET map = EXCLUDED.map"
)

# What ensure_schema creates and check_schema looks for (a reader creates nothing).
SCHEMA_RELATIONS = (
    "indexed_objects",
    "user_rows",
    "unindexable_lines",
    "erased_users",
    "noncurrent_versions",
    "dataset_coverage",
    "user_objects",
    "record_maps",
)

# Keeps the users of object versions that stop being current (object id, path, version id, dataset per version).
KEEP_AS_NONCURRENT = """
INSERT INTO noncurrent_versions (userid, s3path, version_id, dataset)
SELECT DISTINCT r.userid, v.s3path, v.version_id, v.dataset
FROM user_rows r
JOIN unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) AS v(object_id, s3path, version_id, dataset)
    USING (object_id)
ON CONFLICT DO NOTHING
"""

INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS indexed_objects_object_id ON indexed_objects (object_id);
-- Covering: a lookup is an index-only scan.
CREATE INDEX IF NOT EXISTS user_rows_userid ON user_rows (userid) INCLUDE (object_id, recordline);
-- (object, line): erasing 500 lines of an object finds exactly those rows instead of filtering all of its rows.
CREATE INDEX IF NOT EXISTS user_rows_object_line ON user_rows (object_id, recordline);
-- The few objects holding erased users again (`lakepurge status` lists them): found without reading the others.
CREATE INDEX IF NOT EXISTS indexed_objects_reappeared ON indexed_objects (s3path) WHERE reappeared > 0;
-- The objects holding unindexable lines, per dataset (what coverage reads for every request): only those are read.
CREATE INDEX IF NOT EXISTS indexed_objects_unindexable ON indexed_objects (dataset, s3path) WHERE unindexable > 0;
"""

VIEW = """
CREATE OR REPLACE VIEW user_objects AS
    SELECT r.userid, o.s3path, r.recordline FROM user_rows r JOIN indexed_objects o USING (object_id)
"""

# The indexed version an erasure rewrote becomes the version written, without the erased lines' rows; {only} narrows
# the versions it applies to. Answers the object's id, or nothing when that version is not the one indexed.
APPLY_ERASURE = (
    "WITH updated AS (UPDATE indexed_objects SET etag = %(etag)s, version_id = %(version)s,"
    " last_modified = %(modified)s, records = greatest(records - %(erased)s, 0),"
    " indexed_at = now() WHERE s3path = %(s3path)s AND etag = %(before)s{only} RETURNING object_id),"
    " erased AS (DELETE FROM user_rows WHERE object_id IN (SELECT object_id FROM updated)"
    " AND recordline = ANY(%(lines)s::int[]))"
    " SELECT object_id FROM updated"
)
# The same when the erased lines were dropped (Parquet rows): the later rows move up by the erased lines before them,
# counted by width_bucket's binary search in the sorted array (a row left is never one of them), on the server: the
# object's rows never travel to the client and back.
APPLY_ROW_DROP = APPLY_ERASURE.replace(
    " SELECT object_id FROM updated",
    ", moved AS (UPDATE user_rows SET recordline = recordline - width_bucket(recordline, %(lines)s::int[])"
    " WHERE object_id IN (SELECT object_id FROM updated) AND recordline > (%(lines)s::int[])[1]"
    " AND recordline <> ALL(%(lines)s::int[])),"
    " unindexable AS (UPDATE unindexable_lines SET recordline = recordline - width_bucket(recordline, %(lines)s::int[])"
    " WHERE s3path = %(s3path)s AND recordline > (%(lines)s::int[])[1] AND EXISTS (SELECT 1 FROM updated))"
    " SELECT object_id FROM updated",
)

# A file rewritten under a new name without the dropped lines (a table's erasure): the new object gets the old one's
# rows but those, every later row moved up as in APPLY_ROW_DROP, on the server; the old object stays as it is.
COPY_REWRITTEN = (
    "WITH held AS (SELECT object_id, dataset, records, reappeared FROM indexed_objects"
    " WHERE s3path = %(before)s AND etag = %(before_etag)s),"
    " gone AS (SELECT (SELECT count(*) FROM user_rows WHERE object_id = (SELECT object_id FROM held)"
    " AND recordline = ANY(%(lines)s::int[])) + (SELECT count(*) FROM unindexable_lines"
    " WHERE s3path = %(before)s AND recordline = ANY(%(lines)s::int[])) AS n),"
    " bad AS (SELECT recordline - width_bucket(recordline, %(lines)s::int[]) AS recordline, reason"
    " FROM unindexable_lines WHERE s3path = %(before)s AND recordline <> ALL(%(lines)s::int[])),"
    " created AS (INSERT INTO indexed_objects"
    " (s3path, dataset, etag, version_id, last_modified, records, unindexable, reappeared)"
    " SELECT %(after)s, held.dataset, %(etag)s, %(version)s, %(modified)s, greatest(held.records - gone.n, 0),"
    " (SELECT count(*) FROM bad), held.reappeared FROM held, gone"
    " ON CONFLICT (s3path) DO NOTHING RETURNING object_id),"
    " copied AS (INSERT INTO user_rows (object_id, recordline, userid)"
    " SELECT created.object_id, recordline - width_bucket(recordline, %(lines)s::int[]), userid"
    " FROM user_rows, created WHERE user_rows.object_id = (SELECT object_id FROM held)"
    " AND recordline <> ALL(%(lines)s::int[])),"
    " copied_bad AS (INSERT INTO unindexable_lines (s3path, recordline, reason)"
    " SELECT %(after)s, recordline, reason FROM bad WHERE EXISTS (SELECT 1 FROM created))"
    " SELECT object_id FROM created"
)

# Claims the objects of a batch, in path order (two batches touching the same objects cannot deadlock); returns the
# claimed ones, not those of which a newer or identical version is already indexed.
CLAIM = """
INSERT INTO indexed_objects
    (s3path, dataset, etag, version_id, last_modified, records, unindexable, reappeared, indexed_at)
SELECT *, now() FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::int[], %s::int[],
                            %s::int[]) AS batch
ORDER BY 1
ON CONFLICT (s3path) DO UPDATE SET
    dataset = EXCLUDED.dataset, etag = EXCLUDED.etag, version_id = EXCLUDED.version_id,
    last_modified = EXCLUDED.last_modified, records = EXCLUDED.records,
    unindexable = EXCLUDED.unindexable, reappeared = EXCLUDED.reappeared, indexed_at = now()
WHERE indexed_objects.last_modified <= EXCLUDED.last_modified
  AND (%s OR indexed_objects.etag <> EXCLUDED.etag)
RETURNING s3path, object_id
"""

# Lookups name the wanted ids as {ids}: an array parameter, or for long lists one newline-separated string split by
# the server (sending 100,000 strings as an array costs the client ~0.1 s of CPU; one string, almost nothing).
IDS_ARRAY = "%(ids)s::text[]"
IDS_SPLIT = "string_to_array(%(ids)s, E'\\n')"

# A big lookup reads its index entries at random, from cache: without random_page_cost near seq_page_cost the planner
# prefers a sequential scan of every row (twice as slow at 100,000 users of 5,000,000 rows). JIT compiling costs more
# than it saves here; the hash tables need more than the stock 4 MB of work_mem.
BIG_LOOKUP_SETTINGS = (
    "SELECT set_config('random_page_cost', '1.1', true), set_config('jit', 'off', true),"
    " set_config('work_mem', '256MB', true)"
)

# Per user (in index order, so the grouping streams), the objects and lines of its rows; then the path and ETag of
# each object found, once (lines NULL, the path in the first column). One statement: one snapshot, so lines and
# ETags always belong together.
USER_ROWS = """
SELECT userid, array_agg(object_id) AS objects, array_agg(recordline) AS lines, NULL AS etag FROM user_rows
WHERE userid = ANY({ids}) GROUP BY userid
"""
LOOKUP = f"""
WITH hits AS MATERIALIZED ({USER_ROWS})
SELECT userid, objects, lines, etag FROM hits
UNION ALL
SELECT s3path, ARRAY[object_id], NULL, etag FROM indexed_objects WHERE object_id IN (SELECT unnest(objects) FROM hits)
"""

# What a pipelined lookup reads once, instead of each slice joining its objects (the slices then run USER_ROWS),
# when the index has fewer objects than users asked for: every object, in LOOKUP's object-row shape.
ALL_OBJECTS = "SELECT s3path, ARRAY[object_id], NULL::integer[], etag FROM indexed_objects"

# The batch lookup grouped by object: one probe of the index for both answers; the result stays small at 100,000
# users. No DISTINCT per object (it sorts half a million rows): two users sharing a line are merged by the caller.
LOOKUP_OBJECTS = """
WITH hits AS (SELECT userid, object_id, recordline FROM user_rows WHERE userid = ANY({ids}))
SELECT o.s3path, o.etag, h.lines, NULL::bigint FROM (
    SELECT object_id, array_agg(recordline) AS lines FROM hits GROUP BY object_id) h
JOIN indexed_objects o USING (object_id)
UNION ALL SELECT NULL, NULL, NULL, count(*) FROM (SELECT DISTINCT userid FROM hits) found
"""

# A few users: a plain join, which the planner runs as index probes (the CTE form above costs a hash of the
# objects table on each call, ~1 ms on 10,000 objects).
SMALL_LOOKUP = """
SELECT r.userid, o.s3path, o.etag, array_agg(r.recordline ORDER BY r.recordline)
FROM user_rows r JOIN indexed_objects o USING (object_id)
WHERE r.userid = ANY(%(ids)s) GROUP BY r.userid, o.s3path, o.etag
"""

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def needs_copy_escape(value: str) -> bool:
    return "\\" in value or "\t" in value or "\n" in value or "\r" in value


def copy_text(value: str) -> str:
    """Escape a value for COPY's text format (only when needed: ids and paths rarely hold these)."""
    return value.translate(_COPY_ESCAPES) if needs_copy_escape(value) else value


# The other ids on the lines the given ids are on (a record holding two ids: resolution's links in records), by the
# userid index then the (object_id, recordline) one; whole-object rows (-1) are no records.
IDS_BESIDE = """
SELECT DISTINCT a.userid, b.userid, o.dataset
FROM user_rows a
JOIN user_rows b ON b.object_id = a.object_id AND b.recordline = a.recordline AND b.userid <> a.userid
JOIN indexed_objects o ON o.object_id = a.object_id
WHERE a.userid = ANY(%s::text[]) AND a.recordline >= 0
ORDER BY 1, 2, 3
"""


def beside_rows(conn: psycopg.Connection, forms: Sequence[str]) -> list[Beside]:
    return [Beside(*row) for row in conn.execute(IDS_BESIDE, (list(dict.fromkeys(forms)),)).fetchall()]


# A dataset's coverage, replaced whole (one row per dataset).
COVERAGE_UPSERT = (
    "INSERT INTO dataset_coverage (dataset, location, method, started_at, finished_at, objects, versions,"
    " failed, drift, id_forms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (dataset) DO UPDATE SET"
    " location = EXCLUDED.location, method = EXCLUDED.method, started_at = EXCLUDED.started_at,"
    " finished_at = EXCLUDED.finished_at, objects = EXCLUDED.objects, versions = EXCLUDED.versions,"
    " failed = EXCLUDED.failed, drift = EXCLUDED.drift, id_forms = EXCLUDED.id_forms"
)

# The indexed version an erasure rewrote, locked: in a versioned bucket it stays on storage, a noncurrent version.
VERSION_REWRITTEN = (
    "SELECT object_id, version_id, dataset FROM indexed_objects WHERE s3path = %s AND etag = %s"
    " AND version_id IS NOT NULL AND version_id IS DISTINCT FROM %s FOR UPDATE"
)
