"""What an erasure will do to a table, as the report states it before anyone approves: the live files rewritten
(and their rows), the files of the table's history deleted with every S3 version, the log entries (Delta) or metadata
objects (Iceberg: manifests, manifest lists, metadata files) naming the users removed, and which versions (Delta) or
snapshots (Iceberg) of the table stay readable for time travel.

The plan is made at the table's newest version: the index first follows the commits it has not seen (bounded by
MAX_CATCHUP_COMMITS); a table it cannot follow is planned as not certifiable, with the reason and what to run.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import object_versions
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import IndexStore
from lakepurge.tables.base import TableError
from lakepurge.tables.delta import LOG, READ_THREADS, DeltaLog
from lakepurge.tables.iceberg import IcebergTable, bound_forms
from lakepurge.tables.index import follow_table, metadata_folder, open_table
from lakepurge.tables.scan import contained, object_names, strings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectVersionTypeDef

log = get_logger()

# The most commits a request follows before planning (the index follows the table's commits as they come; more than
# this since the version indexed means events are not reaching it: the request is not certified, reconcile first).
MAX_CATCHUP_COMMITS = 1000


@dataclass(frozen=True)
class PlannedFile:
    """A live file holding some of the users: rewritten without their rows, replaced in one commit."""

    s3path: str
    etag: str
    rows: tuple[int, ...]  # the users' rows (0-based positions in the file)
    records: int  # the file's rows in the table
    hidden_rows: bool = False  # rows its deletion vector hides belong to the users too


@dataclass(frozen=True)
class PlannedObject:
    """An object (a data file that left the table, change data, a log entry): deleted with these S3 versions."""

    s3path: str
    version_ids: tuple[str, ...]


@dataclass(frozen=True)
class TablePlan:
    dataset: str
    format: str
    location: str
    version: int  # the table's newest version when the plan was made, indexed
    files: tuple[PlannedFile, ...] = ()
    history: tuple[PlannedObject, ...] = ()
    log_entries: tuple[PlannedObject, ...] = ()
    versions_cut: tuple[int, ...] = ()  # versions up to `version` that time travel can no longer read
    not_certifiable: str = ""  # why the table could not be planned (then it is a coverage gap)
    # The log objects read and found naming none of the users, (path, version id, ETag): the erasure need not read
    # them again (a version of an object never changes; an ETag tells a "null" version overwritten since).
    log_clean: tuple[tuple[str, str, str], ...] = ()
    # Iceberg: the live delete files holding the users (an equality delete naming them, a position delete carrying
    # their rows), rewritten without them or dropped in the erasure's commit; the snapshots time travel keeps
    # (versions_cut then holds the snapshots expired); the keyed hashes of the users' ids as a manifest's 16-character
    # column bounds truncate them (lakepurge.tables.iceberg.bound_forms).
    delete_files: tuple[PlannedObject, ...] = ()
    snapshots_kept: tuple[int, ...] = ()
    bound_hashes: tuple[str, ...] = ()
    # Delta: whether the erasure writes a checkpoint: only when a log entry naming the users is one the current
    # version is read through (a report made before this field existed: always).
    new_checkpoint: bool = True

    @property
    def rows(self) -> int:
        return sum(len(f.rows) for f in self.files)

    @property
    def empty(self) -> bool:
        return not self.files and not self.history and not self.log_entries and not self.delete_files

    def time_travel(self) -> str:
        """What happens to the table's history, in words (the report, the approval page, the plan)."""
        if self.empty:
            return "nothing of the users is in the table or its history: no commit, checkpoint or deletion"
        if self.format == "iceberg":
            return self._snapshots_in_words()
        if self.files:
            change, readable = f"one commit (version {self.version + 1}) replaces {len(self.files)} file(s)", 1
        else:
            change, readable = "no commit (no live file holds the users)", 0
        before = self.version + readable - 1
        kept = _ranges(v for v in range(before + 1) if v not in set(self.versions_cut))
        cut = _ranges(self.versions_cut)
        checkpoint = (
            f"a checkpoint at version {self.version + readable}"
            if self.new_checkpoint
            else "no checkpoint (no log entry the current version is read through names the users)"
        )
        return (
            f"{change}; {checkpoint}; {len(self.history)} file(s) of the table's"
            f" history and {len(self.log_entries)} log entr(y/ies) naming the users are deleted with every S3"
            f" version. Time travel: version {self.version + readable} on stays readable; of versions 0-{before},"
            f" {kept or 'none'} stay readable, {cut or 'none'} are cut"
        )

    def _snapshots_in_words(self) -> str:
        rewrites = self.files or self.delete_files or any("/metadata/" in e.s3path for e in self.log_entries)
        change = (
            f"one commit (version {self.version + 1}) adds a snapshot that replaces {len(self.files)} data file(s)"
            f" and {len(self.delete_files)} delete file(s), its rewritten manifests without the id columns' bounds,"
            " and expires the snapshots below"
            if rewrites
            else "one commit expires the snapshots below"
        )
        kept = _listed(self.snapshots_kept) if self.snapshots_kept else "no older snapshot"
        return (
            f"{change}; {len(self.history)} file(s) of the table's history and {len(self.log_entries)} metadata"
            " object(s) naming the users, and every file only the expired snapshots reached, are deleted with every"
            f" S3 version. Time travel: {'the new snapshot and ' if rewrites else ''}{kept} stay readable;"
            f" {_listed(self.versions_cut) if self.versions_cut else 'no snapshot'} expired"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> TablePlan:
        return cls(
            **{
                **document,
                "files": tuple(PlannedFile(**{**f, "rows": tuple(f["rows"])}) for f in document.get("files", ())),
                "history": tuple(_object(h) for h in document.get("history", ())),
                "log_entries": tuple(_object(e) for e in document.get("log_entries", ())),
                "versions_cut": tuple(document.get("versions_cut", ())),
                "log_clean": tuple(tuple(c) for c in document.get("log_clean", ())),
                "delete_files": tuple(_object(d) for d in document.get("delete_files", ())),
                "snapshots_kept": tuple(document.get("snapshots_kept", ())),
                "bound_hashes": tuple(document.get("bound_hashes", ())),
            }
        )

    def summary(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": self.version,
            "files": len(self.files),
            "rows": self.rows,
            "history_files": len(self.history),
            "log_entries": len(self.log_entries),
            "time_travel": self.not_certifiable or self.time_travel(),
        }


def _object(document: Mapping[str, Any]) -> PlannedObject:
    return PlannedObject(document["s3path"], tuple(document["version_ids"]))


def _listed(snapshots: Iterable[int]) -> str:
    ids = sorted(snapshots)
    if not ids:
        return "no snapshot"
    shown = ", ".join(str(i) for i in ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
    return f"{len(ids)} snapshot(s) ({shown})"


def _ranges(versions: Iterable[int]) -> str:
    spans: list[list[int]] = []
    for v in sorted(set(versions)):
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass
class _Found:
    files: dict[str, PlannedFile] = field(default_factory=dict)
    history: dict[str, set[str]] = field(default_factory=dict)
    deletes: dict[str, set[str]] = field(default_factory=dict)


def plan_table(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    dataset: DatasetConfig,
    users: list[str],
    hashed: Container[str],
) -> TablePlan:
    """The plan for one table, after the index followed it to its newest version. users: the raw ids (the index's
    lookup); hashed: the same users as HashedUsers (the log is read for their keyed hashes)."""
    root = f"s3://{dataset.uri.bucket}/{dataset.uri.key}"
    table = open_table(s3, dataset)
    bound: tuple[str, ...] = ()
    if isinstance(table, IcebergTable):  # manifests' bounds truncate ids over 16 characters: those forms too
        hashes_of = getattr(hashed, "hashes_of", None)
        forms = [form for user in users for form in bound_forms(user)]
        if hashes_of is not None:
            bound = tuple(hashes_of(forms))
            hashed = hashed.including(bound)  # type: ignore[attr-defined]
        else:
            hashed = {*users, *forms}
    # Every version under the Delta log, listed once: the current ones are the table's listing (which the index's
    # follow then only refreshes), all of them are read for the users below; listed again if the log moved meanwhile.
    logged = list(object_versions(s3, dataset.uri.bucket, dataset.uri.key + LOG)) if isinstance(table, DeltaLog) else []
    if isinstance(table, DeltaLog):
        table.use_listing((v["Key"], v["ETag"]) for v in logged if v["IsLatest"])
    try:
        followed = follow_table(s3, store, settings, dataset, max_commits=MAX_CATCHUP_COMMITS, table=table)
    except TableError as exc:
        return TablePlan(dataset.name, dataset.format, dataset.location, -1, not_certifiable=str(exc))
    if not isinstance(table, DeltaLog) or set(table.listing().etags.items()) - {(v["Key"], v["ETag"]) for v in logged}:
        logged = list(object_versions(s3, dataset.uri.bucket, dataset.uri.key + metadata_folder(dataset)))
    # Asked after following the table: the files its new commits added or removed are in the answer.
    found_hits = {p: h for p, h in store.lookup_objects(users).objects.items() if p.startswith(root)}
    found_history = {p: v for p, v in store.noncurrent_of(users).items() if p.startswith(root)}
    state = table.state(followed.version)
    records = store.object_records(list(found_hits))
    found = _Found()
    for path, hit in found_hits.items():
        if path in state.files:
            found.files[path] = PlannedFile(path, hit.etag, hit.lines, records.get(path, 0))
    live_deletes = (
        {e.path for e in table.snapshot(state.version).deletes.values()} if isinstance(table, IcebergTable) else set()
    )
    for path in found_history:
        if path in live_deletes:  # an Iceberg delete file the current snapshot reads
            found.deletes[path] = _versions_of(s3, path)
        elif path in state.files:  # a live file whose deletion vector hides the users' rows
            file = found.files.get(path)
            entry = store.get_object(path)
            found.files[path] = PlannedFile(
                path, entry.etag if entry else "", file.rows if file else (), records.get(path, 0), hidden_rows=True
            )
        else:
            found.history[path] = _versions_of(s3, path)
    logs, clean = _log_entries(s3, settings, table, hashed, logged)
    kept: list[int] = []
    cut: list[int] = []
    problem = ""
    if isinstance(table, IcebergTable):
        erased = set(found.files) | set(found.history) | set(found.deletes)
        cut, kept, problem = table.snapshots_cut(erased, set(logs))
    new_checkpoint = False
    if isinstance(table, DeltaLog):
        new_checkpoint = any(table.reads_through(S3Uri.parse(path).key, state.version) for path in logs)
        cut = _versions_cut(table, set(found.files) | set(found.history), logs, state.version)
        if not found.files:  # no commit: the current version stays readable (a checkpoint is written at it)
            cut = [v for v in cut if v != state.version]
    return TablePlan(
        dataset=dataset.name,
        format=dataset.format,
        location=dataset.location,
        version=state.version,
        files=tuple(found.files[p] for p in sorted(found.files)),
        history=tuple(PlannedObject(p, tuple(sorted(v))) for p, v in sorted(found.history.items()) if v),
        log_entries=tuple(PlannedObject(p, tuple(sorted(v))) for p, v in sorted(logs.items())),
        versions_cut=tuple(cut),
        log_clean=tuple(sorted(clean)),
        not_certifiable=problem,
        delete_files=tuple(PlannedObject(p, tuple(sorted(v))) for p, v in sorted(found.deletes.items()) if v),
        snapshots_kept=tuple(kept),
        bound_hashes=bound,
        new_checkpoint=new_checkpoint,
    )


def _versions_of(s3: S3Client, s3path: str) -> set[str]:
    uri = S3Uri.parse(s3path)
    return {v["VersionId"] or "null" for v in object_versions(s3, uri.bucket, uri.key) if v["Key"] == uri.key}


def _log_entries(
    s3: S3Client, settings: Settings, table: Any, hashed: Container[str], versions: list[ObjectVersionTypeDef]
) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """Of these versions of the table's log's objects (Iceberg: its metadata folder's), those that name one of the
    users (path -> version ids), and those that name none (path, version id, ETag). Delta's current commits are read
    through the table's cache of parsed commits, which the replay of the versions cut reads next."""
    uri = table.dataset.uri
    delta = isinstance(table, DeltaLog)
    commits = {key: version for version, key in table.listing().commits.items()} if delta else {}

    def names(version: dict[str, Any]) -> tuple[str, str, str, bool]:
        key, version_id = version["Key"], version["VersionId"] or "null"
        path = f"s3://{uri.bucket}/{key}"
        if version["IsLatest"] and key in commits:
            found = contained(hashed, strings(table.commit_actions(commits[key])))
        else:
            pinned: dict[str, Any] = {"VersionId": version_id} if version_id != "null" else {}
            body = s3.get_object(Bucket=uri.bucket, Key=key, **pinned)["Body"].read()
            found = object_names(body, key, hashed, (), False, settings.indexing.max_record_bytes)
        return path, version_id, version["ETag"], found

    naming: dict[str, set[str]] = {}
    clean = []
    with ThreadPoolExecutor(READ_THREADS) as pool:  # small objects: the round trips are the cost
        for path, version_id, etag, found in pool.map(names, versions):
            if found:
                naming.setdefault(path, set()).add(version_id)
            else:
                clean.append((path, version_id, etag))
    return naming, clean


def _versions_cut(table: DeltaLog, erased: set[str], removed: Mapping[str, set[str]], newest: int) -> list[int]:
    """The versions up to `newest` that time travel cannot read once the erased files and the removed log entries
    are gone: a version whose files include an erased one, or whose reading needs a removed commit or checkpoint
    (a version is read from the newest checkpoint at or before it, plus the commits after it)."""
    listing = table.listing()
    removed_keys = {S3Uri.parse(p).key for p in removed}
    gone_commits = {v for v, key in listing.commits.items() if key in removed_keys}
    usable_checkpoints = {
        v for v, found in listing.checkpoints.items() if any(not set(c.keys) & removed_keys for c in found)
    }
    start = min(listing.commits, default=0)
    # The log may have been cleaned up before `start`: its state then comes from the checkpoint just before.
    live: set[str] = set(table.state(start - 1).files) if start > 0 else set()
    erased_live = len(live & erased)
    cut = list(range(start))  # no longer readable before lakepurge touches anything
    table.prefetch(range(start, newest + 1))
    chain_ok = start == 0 or (start - 1) in usable_checkpoints
    for version in range(start, newest + 1):
        if version not in listing.commits:
            cut.append(version)
            chain_ok = False
            continue
        for action in table.commit_actions(version):
            if "add" in action:
                path = table.path_of(action["add"]["path"])
                if path not in live:
                    live.add(path)
                    erased_live += path in erased
            elif "remove" in action:
                path = table.path_of(action["remove"]["path"])
                if path in live:
                    live.discard(path)
                    erased_live -= path in erased
        chain_ok = (chain_ok and version not in gone_commits) or version in usable_checkpoints
        if erased_live or not chain_ok:
            cut.append(version)
    return cut
