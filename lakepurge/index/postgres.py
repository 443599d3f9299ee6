"""PostgreSQL index: ``user_objects(userid, s3path, recordline)`` as in the design this follows, plus the
indexed ETag per row and an ``indexed_objects`` table that makes per-object replacement atomic and ordered. The schema
and the statements are lakepurge.index.postgres_sql; this module runs them (one connection, reconnecting once when
it broke; big lookups on two)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from functools import wraps
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from lakepurge.core.logs import get_logger
from lakepurge.index.base import (
    Beside,
    Coverage,
    DatasetProblems,
    Hits,
    IndexMissing,
    IndexStatus,
    Location,
    NewVersion,
    NoncurrentVersion,
    ObjectHits,
    ObjectIndex,
    UnindexableLine,
    UnindexableObject,
)
from lakepurge.index.postgres_locations import BY_PATH, add_locations
from lakepurge.index.postgres_sql import (
    ALL_OBJECTS,
    APPLY_ERASURE,
    APPLY_ROW_DROP,
    BIG_LOOKUP_SETTINGS,
    CLAIM,
    COPY_REWRITTEN,
    COVERAGE_UPSERT,
    IDS_ARRAY,
    IDS_SPLIT,
    INDEXES,
    KEEP_AS_NONCURRENT,
    LOOKUP,
    LOOKUP_OBJECTS,
    SCHEMA,
    SCHEMA_RELATIONS,
    SET_RECORD_MAP,
    SMALL_LOOKUP,
    USER_ROWS,
    VERSION_REWRITTEN,
    VIEW,
    beside_rows,
    copy_text,
    needs_copy_escape,
)
from lakepurge.records.gc_pause import collector_paused

log = get_logger()

# From this many ids on, a lookup runs with settings for a big batch (see _run_lookup).
_BIG_LOOKUP = 1000
_SMALL = 10  # users up to which lookup uses SMALL_LOOKUP
# From this many ids on, a lookup splits the work over two backends (below, the hand-offs cost more than they save).
# lookup cuts it in many slices, so that building Locations starts early and overlaps the server's work;
# lookup_objects has little to build and pays per slice for grouping by object, so it cuts one slice per backend.
_PIPELINED_LOOKUP = 20_000
_LOOKUP_SLICES = 10
_LOOKUP_OBJECTS_SLICES = 2


def _splittable(user_ids: Sequence[str]) -> list[str] | None:
    """The distinct ids, or None if one holds the newline that a pipelined lookup separates ids with."""
    distinct = list(dict.fromkeys(user_ids))
    return distinct if "\n".join(distinct).count("\n") == len(distinct) - 1 else None


Method = TypeVar("Method", bound=Callable[..., Any])


def _reconnecting(method: Method) -> Method:
    """Run the call again, once, on a new connection when the store's connection broke under it (a server restart
    or failover: AdminShutdown, then "the connection is closed" on every later call of a warm process). Every call
    is one statement or one transaction, and the server rolls back the one the break interrupted; a commit whose
    answer was lost is safe to repeat too (each write is conditional or idempotent)."""

    @wraps(method)
    def call(self: PostgresIndexStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except psycopg.OperationalError as exc:
            if not self._broken():
                raise  # the server answered (a timeout, a cancel): not a lost connection
            log.warning("index connection lost; reconnecting", extra={"error": type(exc).__name__})
            self._reconnect()
        return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


class PostgresIndexStore:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._side: psycopg.Connection | None = None  # opened by the first pipelined lookup

    def _broken(self) -> bool:
        return self._conn.closed or (self._side is not None and self._side.closed)

    def _reconnect(self) -> None:
        for conn in (self._conn, self._side):
            if conn is not None:
                conn.close()
        self._side = None
        self._conn = psycopg.connect(self._dsn, autocommit=True)

    @_reconnecting
    def ensure_schema(self) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            # Concurrent first starts (several Lambdas, several executors) must not race on CREATE.
            cur.execute("SELECT pg_advisory_xact_lock(7411)")
            cur.execute(SCHEMA)
            cur.execute(INDEXES)
            cur.execute(VIEW)

    @_reconnecting
    def check_schema(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NULL", (list(SCHEMA_RELATIONS),)
            )
            missing = [name for (name,) in cur.fetchall()]
        if missing:
            raise IndexMissing(f"the PostgreSQL index has no {', '.join(missing)} (an empty database, or another one)")

    @_reconnecting
    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        if not objects:
            return 0
        # One version per object and batch: the latest (the last given, on equal times), as applying them in turn
        # would leave it.
        latest: dict[str, ObjectIndex] = {}
        for obj in objects:
            if obj.s3path not in latest or latest[obj.s3path].last_modified <= obj.last_modified:
                latest[obj.s3path] = obj
        batch = list(latest.values())
        with self._conn.transaction(), self._conn.cursor() as cur:
            # The versions about to be replaced (locked, in the claim's path order): in a versioned bucket they
            # still exist as noncurrent versions, and so does their users' data.
            cur.execute(
                "SELECT s3path, object_id, version_id, dataset FROM indexed_objects"
                " WHERE s3path = ANY(%s) AND version_id IS NOT NULL ORDER BY s3path FOR UPDATE",
                ([o.s3path for o in batch],),
            )
            previous = {row[0]: row[1:] for row in cur.fetchall()}
            cur.execute(
                CLAIM,
                (
                    [o.s3path for o in batch],
                    [o.dataset for o in batch],
                    [o.etag for o in batch],
                    [o.version_id for o in batch],
                    [o.last_modified for o in batch],
                    [o.records for o in batch],
                    [len(o.unindexable) for o in batch],
                    [o.returning_users for o in batch],
                    force,
                ),
            )
            ids: dict[str, int] = dict(cur.fetchall())
            if not ids:
                return 0
            claimed = [o for o in batch if o.s3path in ids]
            superseded = [
                (path, *previous[path])
                for path in ids
                if path in previous and previous[path][1] != latest[path].version_id
            ]
            self._keep_as_noncurrent(cur, superseded)
            cur.execute("DELETE FROM user_rows WHERE object_id = ANY(%s::bigint[])", (list(ids.values()),))
            cur.execute("DELETE FROM unindexable_lines WHERE s3path = ANY(%s)", (list(ids),))
            with cur.copy("COPY user_rows (object_id, recordline, userid) FROM STDIN") as copy:
                buffer: list[str] = []
                for obj in claimed:
                    prefix = f"{ids[obj.s3path]}\t"
                    # Ids needing an escape are rare: one scan of them all decides whether to look at each.
                    escape = needs_copy_escape("".join(obj.lines_by_user))
                    for user, lines in obj.lines_by_user.items():
                        value = copy_text(user) if escape else user
                        if len(lines) == 1:  # most users have one record in an object
                            buffer.append(f"{prefix}{lines[0]}\t{value}\n")
                        else:
                            suffix = f"\t{value}\n"
                            buffer.extend(f"{prefix}{line}{suffix}" for line in lines)
                    if len(buffer) > 50_000:
                        copy.write("".join(buffer))
                        buffer.clear()
                if buffer:
                    copy.write("".join(buffer))
            bad = [(o.s3path, u.line, u.reason) for o in claimed for u in o.unindexable]
            if bad:
                cur.executemany("INSERT INTO unindexable_lines (s3path, recordline, reason) VALUES (%s, %s, %s)", bad)
        return len(claimed)

    @staticmethod
    def _keep_as_noncurrent(cur: psycopg.Cursor, versions: Sequence[tuple[str, int, str, str]]) -> None:
        """(s3path, object id, version id, dataset) of versions that stopped being current: keep their users."""
        if versions:
            cur.execute(
                KEEP_AS_NONCURRENT,
                [list(column) for column in zip(*((v[1], v[0], v[2], v[3]) for v in versions), strict=True)],
            )

    @_reconnecting
    def apply_erasure(
        self, s3path: str, before_etag: str, after: NewVersion, erased_lines: Sequence[int], dropped: bool = False
    ) -> bool:
        statement = APPLY_ROW_DROP if dropped and erased_lines else APPLY_ERASURE
        values = {
            "s3path": s3path,
            "before": before_etag,
            "etag": after.etag,
            "version": after.version_id,
            "modified": after.last_modified,
            "lines": sorted(set(erased_lines)),
            "erased": len(set(erased_lines)),
        }
        # An object indexed without a version id (its bucket unversioned then) leaves no version to keep: one
        # statement, one round trip.
        if self._conn.execute(statement.format(only=" AND version_id IS NULL"), values).fetchone() is not None:
            return True
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(VERSION_REWRITTEN, (s3path, before_etag, after.version_id))
            rewritten = cur.fetchone()
            if rewritten is not None:
                self._keep_as_noncurrent(cur, [(s3path, rewritten[0], rewritten[1], rewritten[2])])
            cur.execute(statement.format(only=""), values)
            return cur.fetchone() is not None

    @_reconnecting
    def copy_rewritten(self, before: str, before_etag: str, after: ObjectIndex, dropped: Sequence[int]) -> bool:
        values: dict[str, Any] = {"before": before, "before_etag": before_etag, "after": after.s3path}
        values |= {"etag": after.etag, "version": after.version_id, "modified": after.last_modified}
        values["lines"] = sorted(set(dropped))
        return self._conn.execute(COPY_REWRITTEN, values).fetchone() is not None

    @_reconnecting
    def remove_object(self, s3path: str) -> bool:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "DELETE FROM indexed_objects WHERE s3path = %s RETURNING object_id, version_id, dataset", (s3path,)
            )
            found = cur.fetchone()
            if found is not None:
                if found[1] is not None:  # behind a delete marker, the version still exists
                    self._keep_as_noncurrent(cur, [(s3path, found[0], found[1], found[2])])
                cur.execute("DELETE FROM user_rows WHERE object_id = %s", (found[0],))
            cur.execute("DELETE FROM unindexable_lines WHERE s3path = %s", (s3path,))
        return found is not None

    def _run_lookup(self, query: str, user_ids: Sequence[str]) -> list[tuple]:
        """Run a lookup query, {ids} standing for the wanted ids, and fetch its rows (binary: no text parsing)."""
        if len(user_ids) < _BIG_LOOKUP:  # one statement, one round trip: what one-user latency needs
            with self._conn.cursor(binary=True) as cur:
                cur.execute(query.replace("{ids}", IDS_ARRAY), {"ids": list(user_ids)})
                return cur.fetchall()
        joined = "\n".join(user_ids)
        ids: str | list[str] = joined
        if joined.count("\n") == len(user_ids) - 1:  # no id holds a newline itself
            query = query.replace("{ids}", IDS_SPLIT)
        else:
            query, ids = query.replace("{ids}", IDS_ARRAY), list(user_ids)
        with self._conn.transaction(), self._conn.cursor(binary=True) as cur:
            cur.execute(BIG_LOOKUP_SETTINGS)  # local to this transaction
            cur.execute(query, {"ids": ids})
            return cur.fetchall()

    @_reconnecting
    def lookup(self, user_ids: Sequence[str]) -> dict[str, list[Location]]:
        if not user_ids:
            return {}
        if len(user_ids) <= _SMALL:
            with self._conn.cursor(binary=True) as cur:
                cur.execute(SMALL_LOOKUP, {"ids": list(user_ids)})
                found_few: dict[str, list[Location]] = defaultdict(list)
                for user, s3path, etag, lines in cur.fetchall():
                    found_few[user].append(Location(s3path, etag, tuple(lines)))
            return {user: sorted(locations, key=BY_PATH) for user, locations in found_few.items()}
        found: dict[str, list[Location]] = {}
        objects: dict[int, tuple[str, str]] = {}
        # Hundreds of thousands of small objects at once: the cyclic garbage collector would scan them over and
        # over (half of the time at 100,000 users); none of them can form a cycle.
        with collector_paused():
            distinct = _splittable(user_ids) if len(user_ids) >= _PIPELINED_LOOKUP else None
            if distinct is None:
                add_locations(self._run_lookup(LOOKUP, user_ids), objects, found)
            elif self._objects_estimate() <= len(distinct):
                # Fewer objects in the index than users asked for: read the objects table once (as object rows)
                # instead of each slice joining the objects it touches, most of them again.
                for rows in self._pipelined(USER_ROWS, distinct, _LOOKUP_SLICES, prelude=ALL_OBJECTS):
                    add_locations(rows, objects, found)
            else:
                for rows in self._pipelined(LOOKUP, distinct, _LOOKUP_SLICES):
                    add_locations(rows, objects, found)
        return found

    def _objects_estimate(self) -> float:
        """The planner's estimate of the indexed objects; infinite while unknown (the table never analyzed)."""
        estimate = self._conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'indexed_objects'::regclass")
        row = estimate.fetchone()
        return float("inf") if row is None or row[0] < 0 else row[0]

    def _pipelined(
        self, lookup: str, user_ids: list[str], slices: int, prelude: str | None = None
    ) -> Iterator[list[tuple]]:
        """The rows of prelude (a statement without parameters), then of a lookup query for `slices` successive
        slices of user_ids (distinct ids, none holding a newline), computed by two backends (this connection and a
        second one) while the caller handles the parts already received: the server's work runs on two cores and
        overlaps the client's. Both backends read one exported snapshot, so the answer is as consistent as one
        statement's."""
        size = -(-len(user_ids) // slices)
        query = lookup.replace("{ids}", IDS_SPLIT)
        statements: list[tuple[str, dict[str, str] | None]] = [] if prelude is None else [(prelude, None)]
        statements += [(query, {"ids": "\n".join(user_ids[i : i + size])}) for i in range(0, len(user_ids), size)]
        pending: list[Future[list[tuple]]] = [Future() for _ in statements]
        failures: list[BaseException] = []
        stop = threading.Event()

        def run(conn: psycopg.Connection, mine: range) -> None:
            with conn.cursor(binary=True) as cur:
                for index in mine:
                    if stop.is_set():
                        pending[index].cancel()
                        continue
                    try:
                        cur.execute(*statements[index])
                        pending[index].set_result(cur.fetchall())
                    except BaseException as exc:  # handed to the caller, which re-raises it
                        failures.append(exc)
                        pending[index].set_exception(exc)
                        stop.set()

        side = self._side_connection()
        with self._conn.transaction(), side.transaction():
            self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            exported = self._conn.execute("SELECT pg_export_snapshot()").fetchone()
            assert exported is not None
            side.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            side.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported[0])))
            for conn in (self._conn, side):
                conn.execute(BIG_LOOKUP_SETTINGS)
            workers = [
                threading.Thread(target=run, args=(conn, range(first, len(statements), 2)), daemon=True)
                for first, conn in enumerate((self._conn, side))
            ]
            for worker in workers:
                worker.start()
            try:
                for future in pending:
                    try:
                        rows = future.result()
                    except CancelledError:  # the other backend failed first: report its error
                        raise failures[0] from None
                    yield rows
            finally:
                stop.set()
                for worker in workers:  # both connections idle again before their transactions end
                    worker.join()

    def _side_connection(self) -> psycopg.Connection:
        if self._side is None or self._side.closed:
            self._side = psycopg.connect(self._dsn, autocommit=True)
        return self._side

    @_reconnecting
    def lookup_objects(self, user_ids: Sequence[str]) -> Hits:
        if not user_ids:
            return Hits({}, 0)
        distinct = _splittable(user_ids) if len(user_ids) >= _PIPELINED_LOOKUP else None
        if distinct is None:
            parts = [self._run_lookup(LOOKUP_OBJECTS, user_ids)]
        else:
            parts = list(self._pipelined(LOOKUP_OBJECTS, distinct, _LOOKUP_OBJECTS_SLICES))
        found = 0
        etags: dict[str, str] = {}
        lines: dict[str, set[int]] = defaultdict(set)
        for rows in parts:
            for s3path, etag, object_lines, users in rows:
                if s3path is None:
                    found += users  # the slices' users are disjoint
                else:
                    # Two users sharing a line (a record naming both) give the line twice.
                    etags[s3path] = etag
                    lines[s3path].update(object_lines)
        objects = {path: ObjectHits(path, etag, tuple(sorted(lines[path]))) for path, etag in etags.items()}
        return Hits(objects, found)

    @_reconnecting
    def object_rows(self, s3path: str) -> dict[str, list[int]]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT r.userid, array_agg(r.recordline ORDER BY r.recordline) FROM user_rows r"
                " JOIN indexed_objects o USING (object_id) WHERE o.s3path = %s GROUP BY r.userid",
                (s3path,),
            )
            rows = cur.fetchall()
        return {user: list(lines) for user, lines in rows}

    @_reconnecting
    def ids_beside(self, forms: Sequence[str]) -> list[Beside]:
        return beside_rows(self._conn, forms)

    @_reconnecting
    def object_records(self, s3paths: Sequence[str]) -> dict[str, int]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT s3path, records FROM indexed_objects WHERE s3path = ANY(%s)", (list(s3paths),))
            return dict(cur.fetchall())

    @_reconnecting
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
        dataset, etag, version_id, last_modified, records, returning_users = meta
        return ObjectIndex(
            s3path=s3path,
            dataset=dataset,
            etag=etag,
            version_id=version_id,
            last_modified=last_modified,
            lines_by_user=self.object_rows(s3path),
            records=records,
            unindexable=unindexable,
            returning_users=returning_users,
        )

    @_reconnecting
    def dataset_records(self) -> dict[str, int]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT dataset, sum(records) FROM indexed_objects GROUP BY dataset")
            return {dataset: int(total) for dataset, total in cur.fetchall()}

    @_reconnecting
    def indexed_objects(self) -> dict[str, str]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT s3path, etag FROM indexed_objects")
            rows = cur.fetchall()
        return dict(rows)

    @_reconnecting
    def unindexable(self, limit: int = 100) -> list[tuple[str, UnindexableLine]]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT s3path, recordline, reason FROM unindexable_lines ORDER BY s3path, recordline LIMIT %s",
                (limit,),
            )
            rows = cur.fetchall()
        return [(path, UnindexableLine(line, reason)) for path, line, reason in rows]

    @_reconnecting
    def status(self) -> IndexStatus:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT count(*), coalesce(sum(records), 0), coalesce(sum(unindexable), 0),"
                " count(*) FILTER (WHERE unindexable > 0), count(*) FILTER (WHERE reappeared > 0)"
                " FROM indexed_objects"
            )
            objects, records, unindexable, with_unindexable, with_erased = cur.fetchone() or (0, 0, 0, 0, 0)
            cur.execute("SELECT count(DISTINCT userid), count(*) FROM user_rows")
            users, rows = cur.fetchone() or (0, 0)
        return IndexStatus(objects, int(records), users, rows, int(unindexable), with_unindexable, with_erased)

    @_reconnecting
    def problems(self) -> dict[str, DatasetProblems]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT o.dataset, count(*), sum(o.unindexable), count(*) FILTER (WHERE o.etag = ''),"
                " count(*) FILTER (WHERE o.etag <> '' AND EXISTS (SELECT 1 FROM unindexable_lines u"
                " WHERE u.s3path = o.s3path AND u.recordline = -1))"
                " FROM indexed_objects o WHERE o.unindexable > 0 GROUP BY o.dataset"
            )
            return {row[0]: DatasetProblems(row[0], row[1], int(row[2]), row[3], row[4]) for row in cur.fetchall()}

    @_reconnecting
    def problem_objects(self, dataset: str, limit: int, lines: int = 100) -> list[UnindexableObject]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT s3path, etag, version_id, last_modified, unindexable FROM indexed_objects"
                " WHERE dataset = %s AND unindexable > 0 ORDER BY s3path LIMIT %s",
                (dataset, max(limit, 0)),
            )
            objects = cur.fetchall()
            cur.execute(
                "SELECT p.s3path, l.recordline, l.reason FROM unnest(%s::text[]) AS p(s3path) CROSS JOIN LATERAL"
                " (SELECT recordline, reason FROM unindexable_lines u WHERE u.s3path = p.s3path"
                " ORDER BY recordline LIMIT %s) l",
                ([row[0] for row in objects], max(lines, 0)),
            )
            found: dict[str, list[UnindexableLine]] = defaultdict(list)
            for path, line, reason in cur.fetchall():
                found[path].append(UnindexableLine(line, reason))
        return [
            UnindexableObject(path, dataset, etag, version_id, modified, count, tuple(found[path]))
            for path, etag, version_id, modified, count in objects
        ]

    @_reconnecting
    def object_owners(self, dataset: str) -> dict[str, frozenset[str]]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT o.s3path, array_remove(array_agg(r.userid), NULL) FROM indexed_objects o"
                " LEFT JOIN user_rows r ON r.object_id = o.object_id AND r.recordline = -1"
                " WHERE o.dataset = %s GROUP BY o.s3path",
                (dataset,),
            )
            return {path: frozenset(owners) for path, owners in cur.fetchall()}

    @_reconnecting
    def record_erased(self, user_hashes: Sequence[str], request_id: str) -> None:
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO erased_users (user_hash, request_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [(h, request_id) for h in user_hashes],
            )

    @_reconnecting
    def erased_among(self, user_hashes: Sequence[str]) -> set[str]:
        if not user_hashes:
            return set()
        with self._conn.cursor() as cur:
            cur.execute("SELECT user_hash FROM erased_users WHERE user_hash = ANY(%s)", (list(user_hashes),))
            return {row[0] for row in cur.fetchall()}

    @_reconnecting
    def erased_requests(self, user_hashes: Sequence[str]) -> dict[str, str]:
        if not user_hashes:
            return {}
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT user_hash, request_id FROM erased_users WHERE user_hash = ANY(%s)", (list(user_hashes),)
            )
            return dict(cur.fetchall())

    @_reconnecting
    def returning_user_objects(self, limit: int = 100) -> list[str]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT s3path FROM indexed_objects WHERE reappeared > 0 ORDER BY s3path LIMIT %s", (max(limit, 0),)
            )
            return [row[0] for row in cur.fetchall()]

    @_reconnecting
    def set_returning_users(self, s3path: str, etag: str, returning_users: int) -> bool:
        changed = self._conn.execute(
            "UPDATE indexed_objects SET reappeared = %s WHERE s3path = %s AND etag = %s",
            (returning_users, s3path, etag),
        )
        return changed.rowcount == 1

    @_reconnecting
    def record_noncurrent(self, versions: Sequence[NoncurrentVersion]) -> None:
        rows = [(user, v.s3path, v.version_id, v.dataset) for v in versions for user in v.users]
        if not rows:
            return
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "INSERT INTO noncurrent_versions (userid, s3path, version_id, dataset)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) ON CONFLICT DO NOTHING",
                [list(column) for column in zip(*rows, strict=True)],
            )

    @_reconnecting
    def noncurrent_of(self, user_ids: Sequence[str]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = defaultdict(set)
        if not user_ids:
            return found
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT DISTINCT s3path, version_id FROM noncurrent_versions WHERE userid = ANY(%s::text[])",
                (list(user_ids),),
            )
            for s3path, version_id in cur.fetchall():
                found[s3path].add(version_id)
        return dict(found)

    @_reconnecting
    def forget_noncurrent(self, s3path: str, version_ids: Sequence[str]) -> None:
        if version_ids:
            self._conn.execute(
                "DELETE FROM noncurrent_versions WHERE s3path = %s AND version_id = ANY(%s::text[])",
                (s3path, list(version_ids)),
            )

    @_reconnecting
    def record_coverage(self, coverage: Coverage) -> None:
        self._conn.execute(
            COVERAGE_UPSERT,
            (
                coverage.dataset,
                coverage.location,
                coverage.method,
                coverage.started_at,
                coverage.finished_at,
                coverage.objects,
                coverage.versions,
                coverage.failed,
                coverage.drift,
                coverage.id_forms,
            ),
        )

    @_reconnecting
    def set_record_maps(self, maps: Sequence[tuple[str, bytes]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(SET_RECORD_MAP, list(maps))

    @_reconnecting
    def record_map(self, s3path: str) -> bytes | None:
        row = self._conn.execute("SELECT map FROM record_maps WHERE s3path = %s", (s3path,)).fetchone()
        return bytes(row[0]) if row else None

    @_reconnecting
    def with_record_maps(self, s3paths: Sequence[str]) -> set[str]:
        if not s3paths:
            return set()
        rows = self._conn.execute("SELECT s3path FROM record_maps WHERE s3path = ANY(%s)", (list(s3paths),))
        return {row[0] for row in rows.fetchall()}

    @_reconnecting
    def coverage(self) -> dict[str, Coverage]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT dataset, location, method, started_at, finished_at, objects, versions, failed, drift,"
                " id_forms FROM dataset_coverage"
            )
            return {row[0]: Coverage(*row) for row in cur.fetchall()}

    @_reconnecting
    @_reconnecting
    def dump(self) -> set[tuple[str, str, int]]:
        with self._conn.cursor() as cur:
            cur.execute("SELECT userid, s3path, recordline FROM user_objects")
            rows = cur.fetchall()
        return {(u, p, line) for u, p, line in rows}

    @_reconnecting
    def truncate(self) -> None:
        """Empty the index (tests and benchmarks start from nothing)."""
        with self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                "TRUNCATE user_rows, indexed_objects, unindexable_lines, erased_users, noncurrent_versions,"
                " dataset_coverage, record_maps"
            )

    def close(self) -> None:
        if self._side is not None:
            self._side.close()
        self._conn.close()
