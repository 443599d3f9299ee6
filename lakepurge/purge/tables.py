"""Erasing users from a table dataset through the table's own transaction, history included, verified by a second
reader. Delta Lake as below; Iceberg through the same steps, its commit and what its history keeps in
lakepurge.purge.iceberg.

For each table the report plans (lakepurge.tables.plan), on the driver:

1. Read the table's newest version. Planned files still live are rewritten; planned files that left the table since
   are history now; files that commits after the plan added are read for the users (by keyed hash) and rewritten too
   when they hold any.
2. Rewrite those files on Spark executors (the Parquet rewriter: schema, types, codecs and row groups kept; rows a
   deletion vector hid are dropped too), each result read for the users before it is written, under a new name
   (If-None-Match), with its CRC64NVME stated.
3. Commit one transaction from the driver with deltalake: remove the old files, add the new ones (statistics:
   the row count only, so no id is in the log), commit metadata naming only the request id; a concurrent writer's
   commit is merged by deltalake's conflict checker (an append) or makes this attempt start again (a conflicting
   change), up to COMMIT_ATTEMPTS. Commits after the plan that brought the users back are erased in the next round.
4. Checkpoint the new version, then read every version of every object under the table's location that may hold
   the users (everything but the live files the index vouches for and the files this erasure wrote) and delete the
   versions that name them: replaced files, files removed earlier, change data, orphans, log entries (commits and
   checkpoints before the new checkpoint). A log entry the current version still needs is never deleted: it is
   reported, and the request is not certified.
5. Verify: DuckDB reads the current version with readers of its own (its extension's log replay lists the live
   files: the same as the log reader's; its Parquet reader reads the files written and those the index does not
   vouch for: the rows expected and none of the users' ids; verify = "full": its extension's scan of every file).
   What step 4 could not delete is reported.

The new files' index rows (the replaced files' rows moved in the index, or what the rewrite read of the new files
where the index did not name every row erased) are written while steps 4 and 5 run; then the index follows the
table to the erasure's commit.

This module runs the steps and keeps the outcome; step 2 is lakepurge.purge.table_rewrite, step 3
lakepurge.purge.table_commit, step 4's deletions lakepurge.purge.table_history and step 5's second reader
lakepurge.purge.table_second_reader.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.executor_ids import SealedIdsRef
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.core.s3io import (
    ObjectChanged,
    ObjectHead,
    error_code,
    head_object,
    object_versions,
    open_seekable,
)
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import job_environment, on_executors
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore, ObjectIndex
from lakepurge.purge import iceberg as iceberg_erasure
from lakepurge.purge.table_commit import CommitConflict, checkpoint, commit_replacement
from lakepurge.purge.table_history import DeleteFailed, delete_versions, delete_written
from lakepurge.purge.table_rewrite import RewriteFailed, RewriteItem, rewrite_partition
from lakepurge.purge.table_second_reader import KeyedUsers, live_files, normal_path, read_files, scan_table
from lakepurge.tables.base import LakeTable, TableError, TableState
from lakepurge.tables.delta import READ_THREADS, DeltaLog, needed_log
from lakepurge.tables.iceberg import IcebergTable
from lakepurge.tables.index import follow_table, indexed_version, open_table
from lakepurge.tables.plan import TablePlan
from lakepurge.tables.scan import contained, data_file_users, object_names, strings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

# Connections the new files' index rows are written on at once.
INDEX_WRITERS = 2
COMMIT_ATTEMPTS = 3


@dataclass
class TableOutcome:
    dataset: str
    status: str  # "erased", "nothing-to-erase", "failed"
    plan_version: int
    version_read: int = -1
    version_committed: int | None = None
    checkpoint_version: int | None = None
    files_replaced: list[dict[str, Any]] = field(default_factory=list)
    objects_deleted: list[dict[str, Any]] = field(default_factory=list)  # {"object", "version_ids", "what"}
    versions_cut: list[int] = field(default_factory=list)
    second_reader: dict[str, Any] = field(default_factory=dict)
    objects_checked: int = 0
    remaining: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    # Iceberg: the snapshot the erasure committed (versions_cut: the snapshots it expired), the manifests it rewrote
    # without the id columns' bounds, the delete files it rewrote or dropped ({"before", "after"}).
    snapshot_id: int | None = None
    manifests_rewritten: int = 0
    delete_files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return self.status != "failed" and not self.remaining and not self.error

    @property
    def rows_erased(self) -> int:
        return sum(int(f["rows_erased"]) for f in self.files_replaced)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verified": self.verified, "rows_erased": self.rows_erased}


def purge_tables(
    spark: Any,
    settings: Settings,
    plans: Iterable[TablePlan],
    key: bytes,
    hashes: tuple[str, ...],
    request_id: str,
    known: tuple[str, ...] = (),
    sealed: SealedIdsRef | None = None,
) -> list[TableOutcome]:
    """Erase the users from every planned table; never raises for one table (a failed table is an outcome).
    known: the users' raw ids when this process holds them (lakepurge.purge.job.in_process_ids): files are then
    checked by lookups instead of a keyed hash of each of their ids; never handed to Spark. sealed: where the ids are
    sealed for the executors (lakepurge.core.executor_ids), which open them; this driver does not."""
    outcomes = []
    for plan in plans:
        try:
            outcomes.append(_TablePurge(spark, settings, plan, key, hashes, request_id, known, sealed).run())
        except Exception as exc:
            log.exception("erasure from a table failed", extra={"dataset": plan.dataset, "error": type(exc).__name__})
            # Messages of these name a table and what to do, never a record.
            error = (
                str(exc)
                if isinstance(exc, (ImportError, TableError, RewriteFailed, DeleteFailed))
                else type(exc).__name__
            )
            outcomes.append(TableOutcome(plan.dataset, "failed", plan.version, error=error))
    return outcomes


class _TablePurge:
    def __init__(
        self,
        spark: Any,
        settings: Settings,
        plan: TablePlan,
        key: bytes,
        hashes: tuple[str, ...],
        request_id: str,
        known: tuple[str, ...] = (),
        sealed: SealedIdsRef | None = None,
    ) -> None:
        self.spark = spark
        # Raw ids stay in this process: a purge on Spark rewrites on executors, which open the sealed ids themselves.
        self.known = known if spark is None else ()
        self.sealed = sealed
        self.settings = settings
        self.plan = plan
        self.key = key
        self.hashes = hashes
        self.request_id = request_id
        self.s3: S3Client = aws.client("s3")
        self.dataset = settings.dataset_named(plan.dataset)
        self.users = HashedUsers(hashes, Pseudonymizer(key), self.known)
        self._threads = threading.local()  # each reading thread's own HashedUsers (its memory is not thread-safe)
        self.outcome = TableOutcome(plan.dataset, "nothing-to-erase", plan.version)
        # Object versions known to hold none of the users: the files this erasure wrote (read before the write,
        # confirmed by checksum) and every version read clean.
        self.proven: set[tuple[str, str]] = set()
        self.log_clean = {(S3Uri.parse(path).key, version, etag) for path, version, etag in plan.log_clean}
        self.written: set[str] = set()  # the live files this erasure wrote: the second reader reads their ids
        self.replaced: set[str] = set()  # the files it replaced: they hold the users (their rows were erased)
        self.new_entries: list[dict[str, Any]] = []  # the rewrites' results: the new files' index rows
        # Metadata (an Iceberg manifest's bounds) is read for the users' ids and the forms bounds truncate them to.
        self.metadata_hashes = (*hashes, *plan.bound_hashes)
        self.iceberg: iceberg_erasure.IcebergErasure | None = None
        self.committed: set[int] = set()  # the versions this erasure committed

    def run(self) -> TableOutcome:
        if self.plan.not_certifiable:
            self.outcome.status = "failed"
            self.outcome.error = self.plan.not_certifiable
            return self.outcome
        table = open_table(self.s3, self.dataset)
        physical = table.physical_id_fields()
        trusted = self._vouched_files(table)
        if isinstance(table, IcebergTable):
            self.iceberg = self._iceberg(table)
        planned = {f.s3path: f for f in self.plan.files}
        since = self.plan.version
        for _ in range(COMMIT_ATTEMPTS):
            state = table.state()
            self.outcome.version_read = state.version
            targets = [f for f in planned.values() if f.s3path in state.files]
            found = self._found_since(table, since, state, physical, trusted)
            candidates = [(f.s3path, f.rows) for f in targets] + list(found.items())
            items = [
                item
                for path, rows in candidates
                if (item := self._item(table, state, path, rows, physical, planned)) is not None
            ]
            if not items and not (self.iceberg is not None and self.iceberg.pending(state)):
                break
            rewritten = self._rewrite(items) if items else []
            committed = self._commit(table, state, rewritten)
            if committed is None:
                continue  # a conflicting commit: read the table again
            if committed == state.version:
                break  # nothing to commit after all
            self.outcome.status = "erased"
            self.outcome.version_committed = committed
            self.committed.add(committed)
            self.outcome.files_replaced += [_replaced(r) for r in rewritten]
            self.replaced |= {r["before"] for r in rewritten}
            self.new_entries += [r for r in rewritten if r.get("after")]
            planned = {}
            since = committed
            self.written |= {r["after"] for r in rewritten if r.get("after")}
            trusted |= self.written
        else:
            self.outcome.status = "failed"
            self.outcome.error = f"the table kept changing: no commit in {COMMIT_ATTEMPTS} attempts"
            return self.outcome
        # The new files' rows go into the index (the index's server busy, this process mostly waiting) while the
        # history is erased and the second reader reads: neither needs the index.
        with ThreadPoolExecutor(2) as indexing:
            indexed = indexing.submit(self._index_written)
            # A table that holds none of the users gets no commit, checkpoint or deletion: only the checks below.
            erasing = self.outcome.version_committed is not None or not self.plan.empty
            state = table.state()
            if (
                erasing
                and isinstance(table, DeltaLog)
                and (self.plan.new_checkpoint or self._commits_since_name_users(table, state.version))
            ):
                # Log entries before a checkpoint are not needed to read the current version: they can go.
                self.outcome.checkpoint_version = checkpoint(self.dataset)
                table.listing(refresh=True)
            # The second reader reads the current version while its history goes: nothing it reads is deleted (only
            # what the current version does not need).
            pointer = table.pointer(refresh=False) if isinstance(table, IcebergTable) else None
            reading = indexing.submit(self._second_reader, state, trusted, table.physical_id_fields(), pointer)
            # One listing of the location after the commit: what names the users and the current version does not
            # need is deleted, what it needs is reported (the request is then not certified).
            deleted = self._history(table, state, trusted, delete=erasing)
            if erasing:
                self.outcome.versions_cut = list(self.plan.versions_cut)
                if self.iceberg is not None:
                    self._iceberg_outcome(self.iceberg)
            fresh = indexed.result()
            if fresh is not None:  # the index follows the table while the second reader may still read
                store = open_store(self.settings.index, create=False)
                try:
                    self._follow(store, table, deleted, fresh)
                finally:
                    store.close()
            self.outcome.remaining += reading.result()
        if self.outcome.remaining and self.outcome.status != "failed":
            log.warning("a table still holds the users", extra={"dataset": self.dataset.name})
        return self.outcome

    def _iceberg(self, table: IcebergTable) -> iceberg_erasure.IcebergErasure:
        paths = {S3Uri.parse(p).key: p for p in {e.s3path for e in self.plan.log_entries}}
        clean = {f"s3://{self.dataset.uri.bucket}/{key}" for key, _, _ in self.log_clean} - set(paths.values())
        return iceberg_erasure.IcebergErasure(
            self.s3,
            table,
            self.users,
            HashedUsers(self.metadata_hashes, Pseudonymizer(self.key)),
            naming=set(paths.values()),
            clean=clean,
            history={h.s3path for h in self.plan.history} | {d.s3path for d in self.plan.delete_files},
            max_bytes=self.settings.indexing.max_record_bytes,
            known_deletes=_planned_deletes(table, self.plan.version),
        )

    def _iceberg_outcome(self, erasure: iceberg_erasure.IcebergErasure) -> None:
        expired = sorted({s for c in erasure.commits for s in c.expired})
        self.outcome.versions_cut = expired
        self.outcome.snapshot_id = next((c.snapshot_id for c in reversed(erasure.commits) if c.snapshot_id), None)
        self.outcome.manifests_rewritten = sum(c.manifests_rewritten for c in erasure.commits)
        self.outcome.delete_files = [
            {"before": d.before, "after": d.after} for c in erasure.commits for d in c.delete_files
        ]
        if erasure.commits:
            self.outcome.status = "erased"
            self.outcome.version_committed = erasure.commits[-1].version

    def _commits_since_name_users(self, table: DeltaLog, latest: int) -> bool:
        """Whether a commit after the plan, not this erasure's, names the users (its statistics): the current version
        is read through it until a checkpoint, which the plan did not foresee."""
        others = [v for v in range(self.plan.version + 1, latest + 1) if v not in self.committed]
        table.prefetch(others)
        return any(contained(self._thread_users(), strings(table.commit_actions(v))) for v in others)

    # what to rewrite

    def _vouched_files(self, table: LakeTable) -> set[str]:
        """The live files of the version planned that the index says hold none of the users."""
        try:
            state = table.state(self.plan.version)
        except Exception:
            return set()
        named = {f.s3path for f in self.plan.files} | {h.s3path for h in self.plan.history}
        return set(state.files) - named

    def _found_since(
        self, table: LakeTable, since: int, state: TableState, physical: tuple[str, ...], trusted: set[str]
    ) -> dict[str, tuple[int, ...]]:
        """Live files added after the plan (or the last commit) that hold the users: their rows."""
        if state.version <= since:
            return {}
        changes = table.changes(since, state.version)
        added = changes.added if changes is not None else {p: f for p, f in state.files.items() if p not in trusted}
        found: dict[str, tuple[int, ...]] = {}
        for path, file in added.items():
            if path in trusted:
                continue
            uri = S3Uri.parse(path)
            head = head_object(self.s3, uri.bucket, uri.key)
            if head is None:
                continue
            with open_seekable(self.s3, head) as raw:
                rows = data_file_users(raw, head.key, physical, self.settings.indexing.max_record_bytes)
            hidden = table.deleted_rows(file)
            mine = sorted(r for user, lines in rows.items() if user in self.users for r in lines if r not in hidden)
            if mine or (hidden and contained(self.users, rows)):
                found[path] = tuple(mine)
            else:
                trusted.add(path)
        return found

    def _item(
        self,
        table: LakeTable,
        state: TableState,
        path: str,
        rows: tuple[int, ...],
        physical: tuple[str, ...],
        planned: dict[str, Any],
    ) -> RewriteItem | None:
        file = state.files.get(path)
        if file is None:
            return None
        if isinstance(table, IcebergTable):
            new_key = iceberg_erasure.new_key(self.dataset, file)
        else:
            directory = file.native_path.rsplit("/", 1)[0] + "/" if "/" in file.native_path else ""
            new_key = f"{directory}part-00000-{uuid.uuid4()}-c000.parquet"
        hidden = tuple(sorted(table.deleted_rows(file)))
        etag = planned[path].etag if path in planned else ""
        # The index holds the rows of a planned file as they are now only while the table is at the plan's version
        # (a later commit may have changed what its deletion vector hides).
        indexed = path in planned and state.version == self.plan.version
        return RewriteItem(self.dataset.name, file, etag, rows, physical, hidden, new_key, indexed)

    def _rewrite(self, items: list[RewriteItem]) -> list[dict[str, Any]]:
        env = job_environment(self.settings)
        settings, key, hashes, known, sealed = self.settings, self.key, self.hashes, self.known, self.sealed
        results = on_executors(
            self.spark,
            sorted(items, key=lambda i: -i.file.size),
            lambda part: rewrite_partition(settings, env, key, hashes, part, known, sealed),
            label="table files rewritten",
        )
        failed = [r for r in results if r.get("error")]
        if failed:
            delete_written(self.s3, self.dataset, results)
            raise RewriteFailed(f"{len(failed)} file(s) could not be rewritten: {failed[0]['error']}")
        for r in results:
            if r.get("after"):
                self.proven.add((S3Uri.parse(r["after"]).key, r["after_version"] or "null"))
        return results

    def _commit(self, table: LakeTable, state: TableState, rewritten: list[dict[str, Any]]) -> int | None:
        """One transaction replacing the files; the version committed, or None after a conflicting commit (the
        files written for it are deleted)."""
        try:
            if self.iceberg is not None:
                return self.iceberg.commit(state, rewritten, self.request_id)
            return commit_replacement(self.dataset, state, rewritten, self.request_id)
        except (CommitConflict, iceberg_erasure.ConcurrentCommit):
            log.info(
                "a concurrent commit conflicts with the erasure; starting again", extra={"dataset": self.dataset.name}
            )
            delete_written(self.s3, self.dataset, rewritten)
            return None

    # history

    def _history(self, table: LakeTable, state: TableState, trusted: set[str], delete: bool) -> dict[str, list[str]]:
        """Read every version under the location that may hold the users; delete those that do (delete=True) and
        are not needed by the current version, report the others. Returns the versions deleted by path. Iceberg:
        what only the snapshots the erasure expired reached is deleted unread (lakepurge.purge.iceberg)."""
        uri = self.dataset.uri
        needed_from, needed_keys = 0, set()
        if isinstance(table, DeltaLog):
            checkpoint = table.listing().complete_checkpoint(state.version)  # as listed for the state (or since)
            needed_from = checkpoint.version if checkpoint is not None else 0
            needed_keys = set(checkpoint.keys) if checkpoint is not None else set()
        garbage = self.iceberg.garbage if self.iceberg is not None and delete else set()
        deleted: dict[str, list[str]] = {}
        remaining = []
        candidates = []
        for version in object_versions(self.s3, uri.bucket, uri.key):
            key, version_id = version["Key"], version["VersionId"] or "null"
            path = f"s3://{uri.bucket}/{key}"
            if path in garbage:
                candidates.append((version, key, version_id, path))
                continue
            if (key, version_id) in self.proven or (key, version_id, version["ETag"]) in self.log_clean:
                continue
            if version["IsLatest"] and path in state.files and path in trusted:
                continue
            candidates.append((version, key, version_id, path))

        def naming(candidate: tuple[dict[str, Any], str, str, str]) -> bool | None:
            if candidate[3] in self.replaced or candidate[3] in garbage:
                return True  # this erasure took the users' rows out of it, or expired all that reached it
            try:
                return self._names(table, candidate[1], candidate[2])
            except ObjectChanged:
                return None  # deleted since listed

        with ThreadPoolExecutor(READ_THREADS) as pool:
            answers = list(pool.map(naming, candidates))
        doomed: list[tuple[str, str]] = []
        for (version, key, version_id, path), names in zip(candidates, answers, strict=True):
            if not names:
                if names is not None:
                    self.proven.add((key, version_id))
                continue
            if self.iceberg is not None:
                needed = self.iceberg.needed(path, version["IsLatest"])
            else:
                needed = (version["IsLatest"] and path in state.files) or needed_log(
                    key, uri.key, needed_from, needed_keys
                )
            if delete and not needed:
                doomed.append((key, version_id))
                deleted.setdefault(path, []).append(version_id)
                continue
            why = "needed by the table's current version" if needed else "holds the users"
            remaining.append({"object": path, "version_id": version_id, "reason": why})
        checked = len(candidates)
        delete_versions(self.s3, uri.bucket, doomed)
        if isinstance(table, DeltaLog) and any(table.is_metadata(key) for key, _ in doomed):
            table.forget_listing()  # its refreshes list only what is newer than it knows
        for path, versions in deleted.items():
            what = "log" if table.is_metadata(S3Uri.parse(path).key) else "data"
            self.outcome.objects_deleted.append({"object": path, "version_ids": versions, "what": what})
        self.outcome.objects_checked += checked
        self.outcome.remaining += remaining
        return deleted

    def _thread_users(self, metadata: bool = False) -> HashedUsers:
        """This thread's HashedUsers: the users, or (metadata) with the forms an Iceberg manifest's bounds hold."""
        name = "metadata_users" if metadata else "users"
        users: HashedUsers | None = getattr(self._threads, name, None)
        if users is None:
            hashes = self.metadata_hashes if metadata else self.hashes
            users = HashedUsers(hashes, Pseudonymizer(self.key), self.known)
            setattr(self._threads, name, users)
        return users

    def _names(self, table: LakeTable, key: str, version_id: str) -> bool:
        bucket = self.dataset.uri.bucket
        users = self._thread_users()
        pinned: dict[str, Any] = {"VersionId": version_id} if version_id != "null" else {}
        max_bytes = self.settings.indexing.max_record_bytes
        try:
            if table.is_data(key):
                head = self.s3.head_object(Bucket=bucket, Key=key, **pinned)
                found = ObjectHead(
                    bucket, key, head["ETag"], pinned.get("VersionId"), head["LastModified"], head["ContentLength"]
                )
                with open_seekable(self.s3, found) as raw:
                    return contained(users, data_file_users(raw, key, table.physical_id_fields(), max_bytes))
            body = self.s3.get_object(Bucket=bucket, Key=key, **pinned)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "NoSuchVersion", "404"):
                raise ObjectChanged(key) from None
            raise
        if self.plan.bound_hashes:
            users = self._thread_users(metadata=True)
        return object_names(body, key, users, (), False, max_bytes)

    def _index_written(self) -> frozenset[str] | None:
        """The new files into the index, on INDEX_WRITERS connections (each file atomically, on one of them: a
        server inserts on one core per connection): the replaced file's rows moved in the index when the rewrite
        dropped exactly the rows the index named (and hidden ones), else the rows the rewrite read of the new file
        (not read again). Their paths, or None when the table was never indexed (nothing to follow)."""
        store = open_store(self.settings.index, create=False)
        try:
            if indexed_version(store, self.dataset) is None:
                return None
        finally:
            store.close()
        now = datetime.now(UTC)
        work = []
        for result in self.new_entries:
            entry = ObjectIndex(result["after"], self.dataset.name, result["after_etag"], result["after_version"], now)
            if "rows_by_user" in result:
                entry.lines_by_user = result["rows_by_user"]  # lists already (a copy cost 3 s for a million rows)
                entry.records = result["rows_after"]
            work.append((entry, result))

        def write(share: list[tuple[ObjectIndex, dict[str, Any]]]) -> list[str]:
            writer = open_store(self.settings.index, create=False)
            try:
                writer.replace_objects([entry for entry, result in share if "rows_by_user" in result], force=True)
                indexed = [entry.s3path for entry, result in share if "rows_by_user" in result]
                # The replaced file's rows, less those dropped, moved in the index; one it no longer holds as
                # rewritten is left out, for the table's follow to read.
                return indexed + [
                    entry.s3path
                    for entry, result in share
                    if "rows_dropped" in result
                    and writer.copy_rewritten(result["before"], result["before_etag"], entry, result["rows_dropped"])
                ]
            finally:
                writer.close()

        shares = [work[i::INDEX_WRITERS] for i in range(INDEX_WRITERS) if work[i::INDEX_WRITERS]]
        with ThreadPoolExecutor(INDEX_WRITERS) as pool:
            return frozenset(path for written in pool.map(write, shares) for path in written)

    def _follow(
        self, store: IndexStore, table: LakeTable, deleted: dict[str, list[str]], fresh: frozenset[str]
    ) -> None:
        """The index follows the table to the erasure's commit (the replaced files leave it, the new ones, indexed
        already, are not read), then forgets every version deleted (the index keeps a removed file's version in a
        versioned bucket)."""
        follow_table(self.s3, store, self.settings, self.dataset, table=table, fresh=fresh)
        for path, versions in deleted.items():
            store.forget_noncurrent(path, [*versions, "null"])

    # verification

    def _second_reader(
        self, state: TableState, trusted: set[str], physical: tuple[str, ...], pointer: str | None
    ) -> list[dict[str, Any]]:
        """DuckDB reads the current version with readers of its own. With verify = "full" (and for `verify`): its
        extension's scan of every live file (its own log replay): the same live files as the log reader, each with
        the rows its log entry states, and none of the users' ids. Otherwise what changed, and a proof of the rest:
        the extension lists the live files (its own log replay, no data read), which must be the log reader's, the
        replaced ones gone; the files written and any live file the index does not vouch for (the rest the index
        read and found without the users) are read with DuckDB's Parquet reader: the rows the rewrite kept, none of
        the users' ids. physical: the id fields as the files name them; pointer: an Iceberg table's metadata file.
        Returns what it finds still there."""
        remaining: list[dict[str, Any]] = []
        full = self.settings.purge.verify == "full" or not self.request_id
        users = KeyedUsers(self.key, self.hashes)
        replaced = {normal_path(f["before"]): f for f in self.outcome.files_replaced}
        written = {normal_path(f["after"]): f for f in self.outcome.files_replaced if f.get("after")}
        reading = _normal_set(state) if full else {normal_path(p) for p in set(state.files) - trusted} | set(written)
        found = None if full else read_files(self.dataset, reading, physical, users)
        if found is None:
            found = scan_table(self.dataset, pointer, users)
            live = set(found.counts)
        else:
            live = live_files(self.dataset, pointer)
        self.outcome.second_reader = {
            "files_counted": len(found.counts),
            "rows_counted": sum(found.counts.values()),
            "files_read_for_ids": len(reading),
            "live_files_listed": len(live),
        }
        gone = sorted(set(replaced) & live)
        if gone:
            remaining.append({"object": gone[0], "reason": "the second reader still reads a replaced file"})
        if live != _normal_set(state):
            remaining.append(
                {
                    "object": self.dataset.location,
                    "reason": "the second reader sees other live files than the table's log",
                }
            )
        expected = {path: f["rows_after"] for path, f in written.items()}
        if full:  # a file with deleted rows (a deletion vector, position or equality deletes) shows fewer
            expected |= {
                normal_path(p): f.records for p, f in state.files.items() if f.records is not None and not f.deletes
            }
        differing = sorted(p for p, n in expected.items() if found.counts.get(p) != n and p in live)
        if differing:
            remaining.append(
                {"object": differing[0], "reason": f"{len(differing)} file(s) read with other row counts than stated"}
            )
        if found.users_found:
            remaining.append({"object": self.dataset.location, "reason": "the second reader finds the users"})
        return remaining


def _planned_deletes(table: IcebergTable, version: int) -> frozenset[str]:
    """The delete files of the version a plan was made at (none when it cannot be read: all are read then)."""
    try:
        return frozenset(e.path for e in table.snapshot(version).deletes.values()) if version >= 0 else frozenset()
    except TableError:
        return frozenset()


def _replaced(result: dict[str, Any]) -> dict[str, Any]:
    names = ("before", "after", "rows_before", "rows_erased", "rows_hidden_dropped", "rows_after")
    return {name: result.get(name) for name in names}


def _normal_set(state: TableState) -> set[str]:
    return {normal_path(p) for p in state.files}


def verify_table(
    settings: Settings, dataset: DatasetConfig, key: bytes, hashes: tuple[str, ...], bound_hashes: tuple[str, ...] = ()
) -> TableOutcome:
    """Is any of the users anywhere in the table? Trusting nothing: the second reader reads every id of the current
    version (commits the index has not seen included), and every version of every object under the location is
    read (data, change data, log, checkpoints; Iceberg's manifests for the ids and, bound_hashes, the forms their
    bounds truncate them to)."""
    plan = TablePlan(dataset.name, dataset.format, dataset.location, -1, bound_hashes=bound_hashes)
    check = _TablePurge(None, settings, plan, key, hashes, "")
    table = open_table(check.s3, dataset)
    if isinstance(table, IcebergTable):
        check.iceberg = check._iceberg(table)
    state = table.state()
    check.outcome.version_read = state.version
    pointer = table.pointer(refresh=False) if isinstance(table, IcebergTable) else None
    # A check without a request reads every file by the extension's scan, which names the columns itself.
    check.outcome.remaining += check._second_reader(state, set(), (), pointer)
    check._history(table, state, set(), delete=False)
    return check.outcome
