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
5. Verify: DuckDB's delta extension reads the current version (its own log replay): the same files as the log
   reader, each with the rows the index expects, and none of the users' ids in the files it reads; then the location
   is listed again and every version not read yet is read.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from lakepurge import aws
from lakepurge.config import DatasetConfig, Settings
from lakepurge.formats import extract_ids, parse_paths
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore, ObjectIndex
from lakepurge.logs import get_logger
from lakepurge.privacy import HashedUsers, Pseudonymizer
from lakepurge.purge import iceberg as iceberg_erasure
from lakepurge.purge.rewrite import rewrite_parquet
from lakepurge.purge.streams import Staged
from lakepurge.s3io import (
    ObjectChanged,
    ObjectHead,
    error_code,
    ever_versioned,
    head_object,
    object_versions,
    open_seekable,
)
from lakepurge.s3uri import S3Uri
from lakepurge.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.tables.base import LakeTable, TableError, TableFile, TableState
from lakepurge.tables.delta import LOG, READ_THREADS, DeltaLog
from lakepurge.tables.iceberg import IcebergTable
from lakepurge.tables.index import follow_table, indexed_version, open_table
from lakepurge.tables.plan import TablePlan
from lakepurge.tables.scan import contained, data_file_users, object_names
from lakepurge.tables.storage import MISSING_LIBRARY, S3Access, duckdb_with, duckdb_with_delta

log = get_logger()

COMMIT_ATTEMPTS = 3
REQUEST_KEY = "lakepurge.request"  # the only thing the erasure's commit records about it


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


@dataclass(frozen=True)
class RewriteItem:
    dataset: str
    file: TableFile
    etag: str  # "" when not known (a file found after the plan)
    rows: tuple[int, ...]
    physical_fields: tuple[str, ...]
    hidden: tuple[int, ...]  # rows its deletion vector hides
    new_key: str


def purge_tables(
    spark: Any, settings: Settings, plans: Iterable[TablePlan], key: bytes, hashes: tuple[str, ...], request_id: str
) -> list[TableOutcome]:
    """Erase the users from every planned table; never raises for one table (a failed table is an outcome)."""
    outcomes = []
    for plan in plans:
        try:
            outcomes.append(_TablePurge(spark, settings, plan, key, hashes, request_id).run())
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
        self, spark: Any, settings: Settings, plan: TablePlan, key: bytes, hashes: tuple[str, ...], request_id: str
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.plan = plan
        self.key = key
        self.hashes = hashes
        self.request_id = request_id
        self.s3 = aws.client("s3")
        self.dataset = settings.dataset_named(plan.dataset)
        self.users = HashedUsers(hashes, Pseudonymizer(key))
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
        erasing = self.outcome.version_committed is not None or not self.plan.empty
        if erasing and self.iceberg is None:
            # Log entries before a checkpoint are not needed to read the current version: they can go.
            self.outcome.checkpoint_version = _checkpoint(self.dataset)
        state = table.state()
        deleted: dict[str, list[str]] = {}
        if erasing:
            # A table that holds none of the users gets no commit, checkpoint or deletion: only the checks below.
            deleted = self._history(table, state, trusted, delete=True)
            self.outcome.versions_cut = list(self.plan.versions_cut)
            if self.iceberg is not None:
                self._iceberg_outcome(self.iceberg)
        store = open_store(self.settings.index, create=False)
        try:
            state = self._reindex(store, table, deleted) or table.state()
        finally:
            store.close()
        self._second_reader(table, state, trusted)
        self._history(table, state, trusted, delete=False)  # what is left, listed again
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
        if file.deletes and isinstance(table, DeltaLog):
            raise TableError(
                f"dataset '{self.dataset.name}': a file to rewrite has a deletion vector, whose removal deltalake"
                " cannot commit exactly: purge the table's deletion vectors first (REORG TABLE ... APPLY (PURGE)"
                " on Spark), then run the request again"
            )
        if isinstance(table, IcebergTable):
            new_key = iceberg_erasure.new_key(self.dataset, file)
        else:
            directory = file.native_path.rsplit("/", 1)[0] + "/" if "/" in file.native_path else ""
            new_key = f"{directory}part-00000-{uuid.uuid4()}-c000.parquet"
        hidden = tuple(sorted(table.deleted_rows(file)))
        etag = planned[path].etag if path in planned else ""
        return RewriteItem(self.dataset.name, file, etag, rows, physical, hidden, new_key)

    def _rewrite(self, items: list[RewriteItem]) -> list[dict[str, Any]]:
        env = job_environment(self.settings)
        settings, key, hashes = self.settings, self.key, self.hashes
        results = on_executors(
            self.spark,
            sorted(items, key=lambda i: -i.file.size),
            lambda part: _rewrite_partition(settings, env, key, hashes, part),
            label="table files rewritten",
        )
        failed = [r for r in results if r.get("error")]
        if failed:
            _delete_written(self.s3, self.dataset, results)
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
            _delete_written(self.s3, self.dataset, rewritten)
            return None

    # history

    def _history(self, table: LakeTable, state: TableState, trusted: set[str], delete: bool) -> dict[str, list[str]]:
        """Read every version under the location that may hold the users; delete those that do (delete=True) and
        are not needed by the current version, report the others. Returns the versions deleted by path. Iceberg:
        what only the snapshots the erasure expired reached is deleted unread (lakepurge.purge.iceberg)."""
        uri = self.dataset.uri
        needed_from, needed_keys = 0, set()
        if isinstance(table, DeltaLog):
            checkpoint = table.listing(refresh=True).complete_checkpoint(state.version)
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
                needed = (version["IsLatest"] and path in state.files) or _needed_log(
                    key, uri.key, needed_from, needed_keys
                )
            if delete and not needed:
                doomed.append((key, version_id))
                deleted.setdefault(path, []).append(version_id)
                continue
            why = "needed by the table's current version" if needed else "holds the users"
            remaining.append({"object": path, "version_id": version_id, "reason": why})
        checked = len(candidates)
        _delete_versions(self.s3, uri.bucket, doomed)
        for path, versions in deleted.items():
            what = "log" if table.is_metadata(S3Uri.parse(path).key) else "data"
            self.outcome.objects_deleted.append({"object": path, "version_ids": versions, "what": what})
        self.outcome.objects_checked += checked
        if not delete:
            self.outcome.remaining = remaining
        return deleted

    def _thread_users(self, metadata: bool = False) -> HashedUsers:
        """This thread's HashedUsers: the users, or (metadata) with the forms an Iceberg manifest's bounds hold."""
        name = "metadata_users" if metadata else "users"
        users: HashedUsers | None = getattr(self._threads, name, None)
        if users is None:
            users = HashedUsers(self.metadata_hashes if metadata else self.hashes, Pseudonymizer(self.key))
            setattr(self._threads, name, users)
        return users

    def _names(self, table: LakeTable, key: str, version_id: str) -> bool:
        bucket = self.dataset.uri.bucket
        users = self._thread_users()
        pinned = {"VersionId": version_id} if version_id != "null" else {}
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

    def _reindex(self, store: IndexStore, table: LakeTable, deleted: dict[str, list[str]]) -> TableState | None:
        """The index follows the table to the erasure's commit (the replaced files leave it, the new ones come in:
        indexed from what the rewrite read of them, not read again), then forgets every version deleted (the index
        keeps a removed file's version in a versioned bucket)."""
        if indexed_version(store, self.dataset) is None:
            return None
        now = datetime.now(UTC)
        entries = []
        for result in self.new_entries:
            entry = ObjectIndex(result["after"], self.dataset.name, result["after_etag"], result["after_version"], now)
            entry.lines_by_user = result["rows_by_user"]  # lists already (a copy cost 3 s for a million rows)
            entry.records = result["rows_after"]
            entries.append(entry)
        if entries:
            store.replace_objects(entries, force=True)
        followed = follow_table(self.s3, store, self.settings, self.dataset, table=table)
        for path, versions in deleted.items():
            store.forget_noncurrent(path, [*versions, "null"])
        return table.state(followed.version)

    # verification

    def _second_reader(self, table: LakeTable, state: TableState, trusted: set[str]) -> None:
        """DuckDB's delta extension reads the current version with its own log replay. What changed is read: the
        files replaced are gone from it, the files written hold the rows the rewrite kept, and none of the users'
        ids is in them (nor in any file not vouched for). With verify = "full" (and for `verify`), every file: the
        same live files as the log reader, each with the rows its log entry states, and no id of the users."""
        full = self.settings.purge.verify == "full" or not self.request_id
        replaced = {_normal(f["before"]): f for f in self.outcome.files_replaced}
        written = {_normal(f["after"]): f for f in self.outcome.files_replaced if f.get("after")}
        reading = set(state.files) if full else (set(state.files) - trusted) | self.written
        pointer = table.pointer(refresh=False) if isinstance(table, IcebergTable) else None
        found = second_reader(self.dataset, None if full else set(replaced) | set(written) | reading, pointer)
        self.outcome.second_reader = {
            "files_counted": len(found.counts),
            "rows_counted": sum(found.counts.values()),
            "files_read_for_ids": len(reading),
        }
        gone = sorted(set(replaced) & set(found.counts))
        if gone:
            self.outcome.remaining.append(
                {"object": gone[0], "reason": "the second reader still reads a replaced file"}
            )
        if full and set(found.counts) != {_normal(p) for p in state.files}:
            self.outcome.remaining.append(
                {
                    "object": self.dataset.location,
                    "reason": "the second reader sees other live files than the table's log",
                }
            )
        expected = {path: f["rows_after"] for path, f in written.items()}
        if full:  # a file with deleted rows (a deletion vector, position or equality deletes) shows fewer
            expected |= {
                _normal(p): f.records for p, f in state.files.items() if f.records is not None and not f.deletes
            }
        live = _normal_set(state)
        differing = sorted(p for p, n in expected.items() if found.counts.get(p) != n and p in live)
        if differing:
            self.outcome.remaining.append(
                {"object": differing[0], "reason": f"{len(differing)} file(s) read with other row counts than stated"}
            )
        if contained(self.users, found.ids):
            self.outcome.remaining.append(
                {"object": self.dataset.location, "reason": "the second reader finds the users"}
            )


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
    return {_normal(p) for p in state.files}


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
    check._second_reader(table, state, set())
    found = list(check.outcome.remaining)
    check._history(table, state, set(), delete=False)
    check.outcome.remaining = found + check.outcome.remaining
    return check.outcome


class RewriteFailed(Exception):
    """A file of the table could not be rewritten: nothing was committed."""


class CommitConflict(Exception):
    """A concurrent commit changed the files this erasure replaces."""


def _normal(path: str) -> str:
    return unquote(path)


def _needed_log(key: str, root: str, needed_from: int, checkpoint_keys: set[str]) -> bool:
    """Whether the current version is read through this log object: the newest checkpoint (its parts and
    sidecars), the commits after it, and _last_checkpoint."""
    if not key.startswith(root + LOG):
        return False
    name = key[len(root + LOG) :]
    if key in checkpoint_keys or name == "_last_checkpoint" or name.startswith("_sidecars/"):
        return True
    number = name.split(".", 1)[0]
    return number.isdigit() and int(number) >= needed_from and name.endswith(".json") and ".checkpoint" not in name


def _delete_versions(s3: Any, bucket: str, versions: list[tuple[str, str]]) -> None:
    """Delete object versions for good, 1,000 a request (by version id where the bucket has had versioning)."""
    by_id = ever_versioned(s3, bucket)
    for start in range(0, len(versions), 1000):
        batch = versions[start : start + 1000]
        objects = [{"Key": key, "VersionId": v} if by_id else {"Key": key} for key, v in batch]
        response = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        errors = response.get("Errors") or []
        if errors:
            raise DeleteFailed(f"{len(errors)} object version(s) could not be deleted: {errors[0].get('Code')}")


class DeleteFailed(Exception):
    """S3 refused to delete some of the object versions that name the users (Object Lock, permissions)."""


def _delete_version(s3: Any, bucket: str, key: str, version_id: str) -> None:
    """Delete one version for good: by its id in a bucket that has (had) versioning (a "null" version is one written
    before versioning was turned on), the object itself in a bucket that never had it."""
    if version_id == "null" and not ever_versioned(s3, bucket):
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version_id)


def _delete_written(s3: Any, dataset: DatasetConfig, results: Iterable[dict[str, Any]]) -> None:
    """Files written for an attempt that was not committed: no commit names them, they hold other people's rows."""
    for result in results:
        if result.get("after"):
            uri = S3Uri.parse(result["after"])
            _delete_version(s3, uri.bucket, uri.key, result.get("after_version") or "null")


_LOADED: dict[str, Any] = {}  # dataset -> the DeltaTable the erasure's commit loaded (the driver's only)


def _checkpoint(dataset: DatasetConfig) -> int:
    """Checkpoint the table's newest version (the table as the commit loaded it, brought up to date)."""
    table = _LOADED.pop(dataset.name, None)
    if table is not None:
        table.update_incremental()
    else:
        table = _delta_table(dataset)
    table.create_checkpoint()
    version: int = table.version()
    return version


def _delta_table(dataset: DatasetConfig, version: int | None = None) -> Any:
    try:
        from deltalake import DeltaTable
    except ImportError as exc:
        raise ImportError(MISSING_LIBRARY) from exc
    uri = f"s3://{dataset.uri.bucket}/{dataset.uri.key.rstrip('/')}"
    return DeltaTable(uri, version=version, storage_options=S3Access.resolved().object_store_options())


def commit_replacement(
    dataset: DatasetConfig, state: TableState, rewritten: list[dict[str, Any]], request_id: str
) -> int:
    """Remove the rewritten files' old versions and add the new ones in one commit on top of `state`; returns the
    version committed. A concurrent commit that removed one of these files raises CommitConflict."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    table = _delta_table(dataset, state.version)
    _LOADED[dataset.name] = table  # the checkpoint that follows brings it up to date instead of loading it again
    now = int(time.time() * 1000)
    actions: list[Any] = []
    for result in rewritten:
        file = state.files[result["before"]]
        partition = dict(file.partition)
        actions.append(RemoveAction(file.native_path, True, now, file.size, partition))
        if result.get("after"):
            stats = json.dumps({"numRecords": result["rows_after"]})
            actions.append(AddAction(result["after_native"], result["size_after"], partition, now, True, stats))
    metadata = table.metadata()
    try:
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=list(metadata.partition_columns) or None,
            commit_properties=CommitProperties(custom_metadata={REQUEST_KEY: request_id}),
        )
    except CommitFailedError as exc:
        raise CommitConflict(str(exc)) from None
    return _committed_version(dataset, state.version, request_id)


def _committed_version(dataset: DatasetConfig, after: int, request_id: str) -> int:
    """The version of the commit that names this request (concurrent commits may have come before it)."""
    log_reader = DeltaLog(aws.client("s3"), dataset)
    latest = log_reader.latest_version() or after
    for version in range(latest, after, -1):
        for action in log_reader.commit_actions(version):
            if action.get("commitInfo", {}).get(REQUEST_KEY) == request_id:
                return version
    raise CommitConflict("the erasure's commit is not in the log")


def _rewrite_partition(
    settings: Settings, env: dict[str, str], key: bytes, hashes: tuple[str, ...], items: Iterable[RewriteItem]
) -> Iterator[dict[str, Any]]:
    apply_job_environment(env)
    s3 = aws.client("s3")
    local = threading.local()  # a HashedUsers per thread: its memory is not thread-safe

    def rewrite(item: RewriteItem) -> dict[str, Any]:
        if not hasattr(local, "users"):
            local.users = HashedUsers(hashes, Pseudonymizer(key))
        try:
            return _rewrite_one(s3, settings, local.users, item)
        except Exception as exc:
            log.exception("rewrite of a table file failed", extra={"error": type(exc).__name__})
            return {"before": item.file.path, "error": type(exc).__name__}

    # Several files at once per task, as the purge does objects: the work is S3 round trips and Arrow (no GIL).
    with ThreadPoolExecutor(settings.purge.threads_per_task) as pool:
        yield from pool.map(rewrite, list(items))


def _rewrite_one(s3: Any, settings: Settings, users: Container[str], item: RewriteItem) -> dict[str, Any]:
    uri = S3Uri.parse(item.file.path)
    head = head_object(s3, uri.bucket, uri.key)
    if head is None or (item.etag and head.etag != item.etag):
        raise ObjectChanged(f"{item.file.path} is not the version the table's log names")
    dataset = settings.dataset_named(item.dataset).model_copy(update={"id_fields": item.physical_fields})
    hidden = set(item.hidden)
    max_bytes = settings.indexing.max_record_bytes
    rows = item.rows
    for attempt in range(2):
        with open_seekable(s3, head) as raw:
            staged, erased = rewrite_parquet(raw, rows, users, dataset, hidden)
        left = data_file_users(staged.reader(), uri.key, item.physical_fields, max_bytes)
        if not contained(users, left):
            break
        staged.close()
        if attempt:
            raise OutputNotClean(f"the rewritten file still holds some of the users ({item.file.path})")
        # The index named some of the users' rows but not all: find every one in the file and start again.
        with open_seekable(s3, head) as raw:
            found = data_file_users(raw, uri.key, item.physical_fields, max_bytes)
        rows = tuple(sorted(r for user, lines in found.items() if user in users for r in lines))
    result: dict[str, Any] = {
        "before": item.file.path,
        "before_etag": head.etag,
        "rows_before": (item.file.records if item.file.records is not None else -1),
        "rows_erased": len(erased),
        "rows_hidden_dropped": len(hidden),
    }
    rows_after = _row_count(staged)
    try:
        if rows_after == 0:
            return {**result, "after": None, "rows_after": 0}
        new_key = settings.dataset_named(item.dataset).uri.key + unquote(item.new_key)
        written = _write_new(s3, uri.bucket, new_key, staged)
    finally:
        staged.close()
    return {
        **result,
        "after": f"s3://{uri.bucket}/{written[0]}",
        "after_native": item.new_key,
        "after_version": written[1],
        "after_checksum": written[2],
        "after_etag": written[4],
        "rows_after": rows_after,
        "size_after": written[3],
        "rows_by_user": left,  # the new file's index rows, as verification read them before the write
    }


class OutputNotClean(Exception):
    """The rewritten bytes still hold some of the users: nothing is written."""


def _row_count(staged: Staged) -> int:
    import pyarrow.parquet as pq

    rows: int = pq.ParquetFile(staged.reader()).metadata.num_rows
    return rows


def _write_new(s3: Any, bucket: str, key: str, staged: Staged) -> tuple[str, str | None, str, int, str]:
    response = s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=staged.reader(),
        IfNoneMatch="*",
        ChecksumAlgorithm="CRC64NVME",
        ChecksumCRC64NVME=staged.checksum,
    )
    version = response.get("VersionId")
    return key, None if version in (None, "null") else version, staged.checksum, staged.size, response["ETag"]


def second_reader(dataset: DatasetConfig, files: set[str] | None, pointer: str | None = None) -> SecondReading:
    """The current version as DuckDB's delta extension reads it (Iceberg: its iceberg extension, of the metadata file
    `pointer`): the rows of each live file among `files` (every live file: None; a filter DuckDB pushes into its
    scan) and every distinct value of their id columns. One scan answers both (DuckDB's grouping, in C): a million
    rows cost a hash per distinct id, not a Python step per row."""
    if files is not None and not files:
        return SecondReading({}, [])
    assert dataset.id_fields is not None
    paths = parse_paths(dataset.id_fields)
    top = sorted({p[0] for p in paths})
    uri = f"s3://{dataset.uri.bucket}/{dataset.uri.key.rstrip('/')}".replace("'", "''")
    scan = f"delta_scan('{uri}', filename=true)"
    if pointer is not None:  # its filename column is there without asking (asked, 1.5.5 fails)
        scan = f"iceberg_scan('{pointer.replace(chr(39), chr(39) * 2)}')"
    sets = ", ".join(["(filename)", *(f"({_identifier(c)})" for c in top)])
    where = "" if files is None else f" WHERE {_among(files)}"
    query = (
        f"SELECT filename, {', '.join(_identifier(c) for c in top)}, count(*) AS n FROM {scan}{where}"
        f" GROUP BY GROUPING SETS ({sets})"
    )
    counts: dict[str, int] = {}
    ids: list[str] = []
    connection = duckdb_with("iceberg") if pointer is not None else duckdb_with_delta()
    try:
        for batch in connection.execute(query).to_arrow_reader():
            for record in batch.to_pylist():
                n = record.pop("n")
                name = record.pop("filename")
                if name is not None:
                    counts[_normal(name)] = int(n)
                    continue
                try:
                    ids.extend(extract_ids(record, paths))
                except ValueError:
                    continue  # an id the indexer reports unindexable is nobody's
    finally:
        connection.close()
    return SecondReading(counts, ids)


def _among(paths: set[str]) -> str:
    """A filter on DuckDB's filename column: each path as the log names it and as it is decoded."""
    names = sorted({*paths, *map(_normal, paths)})
    return f"filename IN ({', '.join(map(_literal, names))})"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class SecondReading:
    counts: dict[str, int]
    ids: list[str]
