"""The index of a table follows the table, not the bucket.

- Each **live data file** of the version indexed is an indexed object: user -> the file and its rows (0-based
  positions in the file; rows a deletion vector hides are not the table's and are left out).
- Everything that still holds rows but is not in that version is a **history holder**, kept as the index keeps
  noncurrent S3 versions (user -> file, version id; "null" in an unversioned bucket): files a commit removed that
  are still on storage (no VACUUM yet), rows hidden by a deletion vector (the live file itself), change data
  (``_change_data/``), files no commit added (a failed writer's), and noncurrent S3 versions of any of them.
- The **version indexed** is one more indexed object, the table's log or metadata folder (``<root>_delta_log/``,
  Iceberg's ``<root>metadata/``), whose ETag is ``table-version:N`` and last-modified time the commit's: the index
  ignores an older version written after a newer one, as it does for objects.

New commits are followed from the version indexed on (``follow_table``): only the files those commits added or
removed are read. A data file that no commit added is never indexed as live.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import ObjectHead, head_object, object_versions, open_seekable
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import IndexStore, NoncurrentVersion, ObjectIndex, UnindexableLine
from lakepurge.tables.base import LakeTable, TableChanges, TableError, TableFile, TableState
from lakepurge.tables.delta import LOG, DeltaLog
from lakepurge.tables.iceberg import METADATA, IcebergTable
from lakepurge.tables.scan import data_file_users

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

VERSION_TAG = "table-version:"
NO_VERSION_ID = "null"  # S3's name for the only version of an object in an unversioned bucket


def open_table(s3: S3Client, dataset: DatasetConfig) -> LakeTable:
    if dataset.format == "delta":
        return DeltaLog(s3, dataset)
    if dataset.format == "iceberg":
        return IcebergTable(s3, dataset)
    raise TableError(f"dataset '{dataset.name}': format {dataset.format} is not a table format")


def metadata_folder(dataset: DatasetConfig) -> str:
    """The folder under a table's root that holds its log (Delta) or metadata (Iceberg)."""
    return METADATA if dataset.format == "iceberg" else LOG


def marker_path(dataset: DatasetConfig) -> str:
    """The index entry that records which version of the table is indexed."""
    return f"s3://{dataset.uri.bucket}/{dataset.uri.key}{metadata_folder(dataset)}"


def indexed_version(store: IndexStore, dataset: DatasetConfig) -> int | None:
    entry = store.get_object(marker_path(dataset))
    if entry is None or not entry.etag.startswith(VERSION_TAG):
        return None
    return int(entry.etag.removeprefix(VERSION_TAG))


def record_version(store: IndexStore, dataset: DatasetConfig, state: TableState, records: int = 0) -> None:
    stamp = datetime.fromtimestamp(state.timestamp_ms / 1000, UTC) if state.timestamp_ms else datetime.now(UTC)
    marker = ObjectIndex(marker_path(dataset), dataset.name, f"{VERSION_TAG}{state.version}", None, stamp)
    marker.records = records
    store.replace_objects([marker])


def is_marker(s3path: str) -> bool:
    return s3path.endswith(("/" + LOG, "/" + METADATA))


@dataclass
class ScannedFile:
    """One live file as the index stores it, and the users of the rows its deletion vector hides."""

    entry: ObjectIndex
    hidden: tuple[str, ...]
    bytes_read: int = 0


def scan_live_file(s3: S3Client, settings: Settings, table: LakeTable, file: TableFile) -> ScannedFile:
    uri = S3Uri.parse(file.path)
    head = head_object(s3, uri.bucket, uri.key)
    dataset = table.dataset
    if head is None:
        # The log names a file that is not there: the table is broken, or the file was removed behind its back.
        entry = ObjectIndex(file.path, dataset.name, "", None, datetime.now(UTC))
        entry.unindexable.append(UnindexableLine(-1, "the table's log names this file, which is not on storage"))
        return ScannedFile(entry, ())
    return scan_file_version(s3, settings, table, head, table.deleted_rows(file))


def scan_file_version(
    s3: S3Client, settings: Settings, table: LakeTable, head: ObjectHead, hidden_rows: set[int]
) -> ScannedFile:
    rows = _rows_by_user(s3, settings, table, head)
    live: dict[str, list[int]] = {}
    hidden: list[str] = []
    for user, lines in rows.items():
        kept = [line for line in lines if line not in hidden_rows] if hidden_rows else lines
        if kept:
            live[user] = kept
        if len(kept) < len(lines):
            hidden.append(user)
    entry = ObjectIndex(head.s3path, table.dataset.name, head.etag, head.version_id, head.last_modified)
    entry.lines_by_user = live
    entry.records = sum(len(lines) for lines in live.values())
    return ScannedFile(entry, tuple(hidden), head.size)


def _rows_by_user(s3: S3Client, settings: Settings, table: LakeTable, head: ObjectHead) -> dict[str, list[int]]:
    with open_seekable(s3, head) as raw:
        return data_file_users(raw, head.key, table.physical_id_fields(), settings.indexing.max_record_bytes)


def history_users(s3: S3Client, settings: Settings, table: LakeTable, head: ObjectHead) -> tuple[str, ...]:
    """The users of a file version that is not live (removed, change data, an orphan, a noncurrent version)."""
    return tuple(_rows_by_user(s3, settings, table, head))


def store_live(store: IndexStore, table: LakeTable, scanned: ScannedFile) -> None:
    """A live file's rows, and its hidden rows' users as a history holder (the file's own version)."""
    store.replace_objects([scanned.entry], force=True)
    if scanned.hidden:
        version = scanned.entry.version_id or NO_VERSION_ID
        store.record_noncurrent([NoncurrentVersion(scanned.entry.s3path, table.dataset.name, version, scanned.hidden)])


def store_history(store: IndexStore, dataset: DatasetConfig, head: ObjectHead, users: tuple[str, ...]) -> None:
    if users:
        version = head.version_id or NO_VERSION_ID
        store.record_noncurrent([NoncurrentVersion(head.s3path, dataset.name, version, users)])


@dataclass(frozen=True)
class HistoryItem:
    """One version of a file under the table's location that is not a live file of the version indexed."""

    s3path: str
    version_id: str  # "null" in an unversioned bucket
    etag: str
    last_modified: datetime
    size: int

    def head(self) -> ObjectHead:
        uri = S3Uri.parse(self.s3path)
        version = None if self.version_id == NO_VERSION_ID else self.version_id
        return ObjectHead(uri.bucket, uri.key, self.etag, version, self.last_modified, self.size)


def history_items(s3: S3Client, table: LakeTable, live: Iterable[str]) -> list[HistoryItem]:
    """Every version of every data file under the table's location that is not the current version of a live
    file: removed files not vacuumed, change data, orphans, noncurrent versions."""
    current_live = set(live)
    uri = table.dataset.uri
    items = []
    for version in object_versions(s3, uri.bucket, uri.key):
        key = version["Key"]
        if not table.is_data(key):
            continue
        s3path = f"s3://{uri.bucket}/{key}"
        if version["IsLatest"] and s3path in current_live:
            continue
        items.append(
            HistoryItem(
                s3path, version["VersionId"] or NO_VERSION_ID, version["ETag"], version["LastModified"], version["Size"]
            )
        )
    return items


@dataclass
class Followed:
    """What following a table's new commits did."""

    dataset: str
    since: int | None
    version: int
    files_indexed: int = 0
    files_left: int = 0  # live files that left the table (their users kept as history while they are on storage)
    failed: list[str] = field(default_factory=list)


class NotIndexed(TableError):
    """The table was never indexed: a backfill (or reconciliation) must read it whole first."""


def follow_table(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    dataset: DatasetConfig,
    max_commits: int | None = None,
    table: LakeTable | None = None,
    fresh: frozenset[str] = frozenset(),
) -> Followed:
    """Bring the table's index from the version indexed to the newest: read the files the commits in between added
    (and the ones they added and removed again, and their change data) and move the files they removed to history.
    More than max_commits commits to follow raises TableError (the caller says what to run instead). fresh: files
    the caller has just indexed from the bytes it wrote (an erasure's rewrites): taken as indexed, not asked for."""
    table = table if table is not None else open_table(s3, dataset)
    since = indexed_version(store, dataset)
    if since is None:
        raise NotIndexed(f"dataset '{dataset.name}': the table was never indexed (run: lakepurge index backfill)")
    latest = table.latest_version()
    if latest is None:
        raise TableError(f"dataset '{dataset.name}': no {dataset.format} table at {dataset.location} any more")
    followed = Followed(dataset.name, since, max(latest, since))
    if latest <= since:
        return followed
    if max_commits is not None and latest - since > max_commits:
        raise TableError(
            f"dataset '{dataset.name}': the table moved on by {latest - since} commits since version {since} was"
            f" indexed (more than {max_commits} to follow now)"
        )
    changes = table.changes(since, latest)
    state = table.state(latest)
    if changes is None:
        changes = _compared(store, table, since, state)
    _apply(s3, store, settings, table, changes, followed, fresh)
    record_version(store, dataset, state)
    log.info(
        "table followed",
        extra={"dataset": dataset.name, "since": since, "version": latest, "files": followed.files_indexed},
    )
    return followed


def _compared(store: IndexStore, table: LakeTable, since: int, state: TableState) -> TableChanges:
    """The changes between the version indexed and a state, when the commits in between are gone (cleaned up):
    the live files the index holds against the state's."""
    root = f"s3://{table.dataset.uri.bucket}/{table.dataset.uri.key}"
    indexed = {path for path in store.indexed_objects() if path.startswith(root) and not is_marker(path)}
    added = {path: file for path, file in state.files.items() if path not in indexed}
    return TableChanges(since, state.version, added, indexed - set(state.files), set(), set())


def _apply(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    table: LakeTable,
    changes: TableChanges,
    followed: Followed,
    fresh: frozenset[str] = frozenset(),
) -> None:
    dataset = table.dataset
    removed = sorted(changes.removed)
    with ThreadPoolExecutor(HEADS_AT_ONCE) as pool:
        heads = list(pool.map(lambda path: head_object(s3, *_split(path)), removed))
    for path, head in zip(removed, heads, strict=True):
        if head is not None:  # not vacuumed yet: its rows are history (a versioned bucket's store keeps them too)
            store_history(store, dataset, head, tuple(store.object_rows(path)))
        store.remove_object(path)
        followed.files_left += 1
    # Indexed already (the erasure indexes the files it writes): a data file never changes once committed.
    known = store.object_records([path for path in changes.added if path not in fresh])
    for file in changes.added.values():
        if file.path in fresh and not file.deletes:
            continue
        if file.path in known and not file.deletes and store_has(store, file.path):
            continue
        store_live(store, table, scan_live_file(s3, settings, table, file))
        followed.files_indexed += 1
    for path in sorted(changes.passed | changes.history):
        uri = S3Uri.parse(path)
        head = head_object(s3, uri.bucket, uri.key)
        if head is not None:
            store_history(store, dataset, head, history_users(s3, settings, table, head))


HEADS_AT_ONCE = 16


def _split(s3path: str) -> tuple[str, str]:
    uri = S3Uri.parse(s3path)
    return uri.bucket, uri.key


def store_has(store: IndexStore, s3path: str) -> bool:
    """Whether the index holds the file as read (a failed read leaves an empty ETag: read it again)."""
    entry = store.get_object(s3path)
    return entry is not None and bool(entry.etag)


def read_history(s3: S3Client, settings: Settings, table: LakeTable, item: HistoryItem) -> tuple[str, ...]:
    return history_users(s3, settings, table, item.head())


@dataclass(frozen=True)
class TableStatus:
    """A table dataset as `status` and `lookup` show it."""

    dataset: str
    version_indexed: int | None
    newest_version: int | None
    problem: str = ""  # why the index could not follow it ("" when it did, or was not asked to)
    warning: str = ""  # what the table does that lakepurge advises against (Iceberg: id columns' bounds written)

    def line(self) -> str:
        indexed = "never indexed" if self.version_indexed is None else f"version {self.version_indexed} indexed"
        newest = "" if self.newest_version is None else f", newest {self.newest_version}"
        line = f"table {self.dataset}: {indexed}{newest}" + (f" ({self.problem})" if self.problem else "")
        return line + (f"\n  WARNING: {self.warning}" if self.warning else "")

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        if not self.warning:
            del document["warning"]
        return document


def tables_status(
    s3: S3Client, store: IndexStore, settings: Settings, follow: bool = False, max_commits: int | None = None
) -> list[TableStatus]:
    """Each table dataset's version indexed and newest version; follow=True first brings the index to the newest
    (what `lookup` does, so the rows it names are those of the table's current version)."""
    found = []
    for dataset in (d for d in settings.datasets if d.is_table):
        problem = warning = ""
        try:
            if follow:
                follow_table(s3, store, settings, dataset, max_commits)
            table = open_table(s3, dataset)
            newest = table.latest_version()
            if isinstance(table, IcebergTable) and newest is not None:
                warning = table.id_metrics_warning()
        except TableError as exc:
            problem, newest = str(exc), None
        found.append(TableStatus(dataset.name, indexed_version(store, dataset), newest, problem, warning))
    return found
