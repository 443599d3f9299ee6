"""The Iceberg part of a table's erasure (lakepurge.purge.tables runs the shared flow): the commit, and what the
history deletion must keep.

One commit through the table's catalog, with pyiceberg, optimistic (it asserts the main branch's snapshot it read:
a concurrent commit makes it fail, and the erasure reads the table again and starts over):

- a new snapshot on main whose manifests no longer reach the files rewritten (their rewrites added, with a data
  sequence number of their own, so no older equality delete applies to them: the rows such deletes hid were dropped
  by the rewrite), whose delete files no longer name the users (an equality delete file's rows naming them are
  dropped, a position delete file's rows for the rewritten files too; a file left empty is dropped; a rewritten delete
  file keeps its data sequence number, so it hides what it hid), and whose manifests keep no column bounds of the id
  columns: every manifest the commit rewrites (those holding a changed file or naming the users, DELETED entries of
  older snapshots dropped) and writes loses them. Its summary names the request only.
- the expiry of every snapshot that reaches what the erasure deletes: a file holding the users, a manifest list or
  manifest naming them (lakepurge.tables.iceberg.IcebergTable.snapshots_cut).

Then every file only the expired snapshots reached (manifest lists, manifests, data and delete files) and every old
metadata file that lists an expired snapshot is deleted with every S3 version, as Iceberg's own expiry would, and
every other version under the location naming the users that the retained snapshots do not need.
"""

from __future__ import annotations

import functools
import io
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lakepurge.core.config import DatasetConfig
from lakepurge.core.logs import get_logger
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.table_catalogs import pyiceberg_catalog, read_metadata, s3_path
from lakepurge.tables.base import TableError, TableFile, TableState, relative_key
from lakepurge.tables.iceberg import IcebergTable, main_snapshot, version_of
from lakepurge.tables.scan import avro_names, contained, data_file_users
from lakepurge.tables.storage import MISSING_LIBRARY

log = get_logger()

REQUEST_KEY = "lakepurge.request"


class ConcurrentCommit(Exception):
    """Another writer committed to the table since it was read: read it again."""


@dataclass
class DeleteChange:
    """A live delete file the erasure changes: dropped (after None) or replaced by a rewrite."""

    before: str
    after: str | None = None
    records: int = 0
    size: int = 0


@dataclass
class IcebergCommit:
    version: int  # the metadata file the commit wrote (the table's version)
    snapshot_id: int | None  # the new snapshot (None: only snapshots were expired)
    expired: list[int] = field(default_factory=list)
    manifests_rewritten: int = 0
    delete_files: list[DeleteChange] = field(default_factory=list)


def new_key(dataset: DatasetConfig, file: TableFile) -> str:
    """Where a data file's rewrite goes, relative to the table's root: beside it, under a name of its own."""
    relative = relative_key(dataset, S3Uri.parse(file.path).key)
    directory = relative.rsplit("/", 1)[0] + "/" if "/" in relative else ""
    return f"{directory}lakepurge-{uuid.uuid4()}.parquet"


def load_table(dataset: DatasetConfig) -> Any:
    """The table as pyiceberg loads it through its catalog."""
    try:
        import pyiceberg  # noqa: F401
    except ImportError as exc:
        raise ImportError(MISSING_LIBRARY) from exc
    assert dataset.catalog is not None and dataset.table is not None
    return pyiceberg_catalog(dataset.catalog, dataset.catalog_config).load_table(dataset.table)


class IcebergErasure:
    """What the shared erasure asks of an Iceberg table: whether there is something to commit, the commit, and
    (after it) what the current metadata needs and what the expired snapshots leave behind."""

    def __init__(
        self,
        s3: Any,
        table: IcebergTable,
        users: Any,
        metadata_users: Any,
        naming: set[str],
        clean: set[str],
        history: set[str],
        max_bytes: int,
        known_deletes: frozenset[str] = frozenset(),
    ) -> None:
        self.s3 = s3
        self.table = table
        self.dataset = table.dataset
        self.users = users  # data: the users' ids
        self.metadata_users = metadata_users  # manifests: their ids and the forms bounds truncate them to
        self.naming = set(naming)  # metadata objects known to name the users (the plan's)
        self.clean = set(clean)  # metadata objects known not to (the plan's, latest versions)
        self.history = set(history)  # files holding the users that the table no longer reads (the plan's)
        # The delete files of the version planned: the plan read them (through the index) and found those naming
        # the users, which are in history; only delete files added since are read for them here.
        self.known_deletes = known_deletes
        self.max_bytes = max_bytes
        self.garbage: set[str] = set()  # what only the expired snapshots reached, and their metadata files
        self.reachable: set[str] = set()  # what the current metadata needs (after the commit)
        self.commits: list[IcebergCommit] = []
        self._expired_once = False

    # what to commit

    def pending(self, state: TableState) -> bool:
        """Whether the table needs a commit although no data file is rewritten (a delete file or a current manifest
        naming the users, snapshots to expire): asked once, before the first commit."""
        if self._expired_once:
            return False
        snapshot = self.table.snapshot(state.version)
        if self._changed_deletes(snapshot, set()) or set(snapshot.manifests) & self._naming_metadata():
            return True
        cut, _, _ = self.table.snapshots_cut(self.history, self._naming_metadata())
        return bool(cut)

    def _naming_metadata(self) -> set[str]:
        """Every manifest list and manifest of the current metadata's snapshots that names the users: the plan's,
        and those written since, read now."""
        document = self.table.metadata(self.table.latest_version())
        unknown = []
        for described in document.get("snapshots") or ():
            listed = self.table.manifest_list(described)
            paths = [s3_path(str(described.get("manifest-list") or ""))]
            paths += [s3_path(m["manifest_path"]) for m in listed]
            unknown += [p for p in paths if p not in self.naming and p not in self.clean]
        for path in dict.fromkeys(unknown):
            (self.naming if avro_names(self.table.read(path), self.metadata_users) else self.clean).add(path)
        return self.naming

    def _changed_deletes(self, snapshot: Any, replaced: set[str]) -> dict[str, Any]:
        """The live delete files to change, by key (a Puffin blob: path#offset) -> the entry: position deletes of a
        replaced data file, and delete files whose rows name the users."""
        changed = {}
        replaced_entries = [snapshot.data[p] for p in replaced if p in snapshot.data]
        for key, entry in snapshot.deletes.items():
            if entry.file_format != "PARQUET":
                if entry.referenced_data_file is not None and s3_path(entry.referenced_data_file) in replaced:
                    changed[key] = entry
                continue
            # Read only the position deletes whose partition and file_path bounds may hold a replaced file's rows.
            near = [d.native_path for d in replaced_entries if _covers(entry, d)] if entry.content == 1 else []
            of_replaced = bool(near) and bool(set(near) & set(self.table.positions(entry.path)))
            if of_replaced or self._names(entry.path):
                changed[key] = entry
        return changed

    def _names(self, path: str) -> bool:
        """Whether a delete file names the users: the plan's answer, else (one it did not know) its rows read."""
        if path in self.history:
            return True
        if path in self.known_deletes:
            return False
        uri = S3Uri.parse(path)
        body = self.table.read(path)
        return contained(self.users, data_file_users(body, uri.key, self.table.physical_id_fields(), self.max_bytes))

    # the commit

    def commit(self, state: TableState, rewritten: list[dict[str, Any]], request_id: str) -> int:
        """One commit: the new snapshot (files replaced, delete files changed, manifests rewritten without id bounds)
        and the expiry; returns the table's new version. Raises ConcurrentCommit when the main branch moved."""
        from pyiceberg.exceptions import CommitFailedException

        pyiceberg_table = load_table(self.dataset)
        expected = main_snapshot(self.table.metadata(state.version))
        found = pyiceberg_table.metadata.refs.get("main")
        if (found.snapshot_id if found is not None else None) != expected:
            raise ConcurrentCommit("the table's main branch moved since it was read")
        if pyiceberg_table.metadata.format_version > 2:
            raise TableError(
                f"dataset '{self.dataset.name}': the Iceberg table is format version 3, whose manifests pyiceberg 0.12"
                " cannot write: lakepurge indexes and verifies it but cannot commit an erasure (see docs/LIMITS.md)"
            )
        replaced = {r["before"]: r for r in rewritten}
        snapshot = self.table.snapshot(state.version)
        before = self.table.metadata(state.version)
        changes = self._rewrite_deletes(snapshot, self._changed_deletes(snapshot, set(replaced)), set(replaced))
        naming = self._naming_metadata()
        erased = set(replaced) | self.history | {c.before for c in changes}
        cut, _, problem = self.table.snapshots_cut(erased, naming)
        if problem:
            raise TableError(problem)
        writer = _SnapshotWriter(pyiceberg_table, expected)
        try:
            new_snapshot = None
            if replaced or changes or set(snapshot.manifests) & naming:
                new_snapshot = writer.write(replaced, changes, naming, set(self.table.id_field_ids()), request_id)
            if new_snapshot is None and expected in cut:  # expiring main's snapshot needs a new one on main
                raise TableError(f"dataset '{self.dataset.name}': the current snapshot reaches erased bytes")
            updates = writer.updates(new_snapshot, cut)
            if not updates:
                return state.version
            response = pyiceberg_table.catalog.commit_table(pyiceberg_table, writer.requirements(), tuple(updates))
        except CommitFailedException as exc:
            writer.discard(self.s3)
            _discard(self.s3, changes)
            raise ConcurrentCommit(str(exc)) from None
        except Exception:
            writer.discard(self.s3)
            _discard(self.s3, changes)
            raise
        version = version_of(s3_path(response.metadata_location))
        self._expired_once = True
        self.commits.append(
            IcebergCommit(
                version,
                None if new_snapshot is None else new_snapshot.snapshot_id,
                sorted(cut),
                writer.rewritten,
                changes,
            )
        )
        self._after_commit(before, cut)
        log.info("iceberg erasure committed", extra={"dataset": self.dataset.name, "version": version})
        return version

    def _rewrite_deletes(self, snapshot: Any, changed: dict[str, Any], replaced: set[str]) -> list[DeleteChange]:
        """Each changed delete file without its rows for the replaced data files and its rows naming the users,
        written beside it (or dropped when nothing is left)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        natives = {snapshot.data[p].native_path for p in replaced if p in snapshot.data}
        physical = self.table.physical_id_fields()
        changes = []
        for entry in changed.values():
            if entry.file_format != "PARQUET":
                changes.append(DeleteChange(f"{entry.path}#{entry.content_offset}"))
                continue
            source = pq.ParquetFile(io.BytesIO(self.table.read(entry.path)))
            rows = source.read()
            keep = pa.array([True] * rows.num_rows)
            if entry.content == 1:
                keep = pc.invert(pc.is_in(rows.column("file_path"), value_set=pa.array(sorted(natives))))
            uri = S3Uri.parse(entry.path)
            named = data_file_users(self.table.read(entry.path), uri.key, physical, self.max_bytes)
            mine = {row for user, lines in named.items() if user in self.users for row in lines}
            if mine:
                keep = pc.and_(keep, pa.array([i not in mine for i in range(rows.num_rows)]))
            kept = rows.filter(keep)
            if kept.num_rows == 0:
                changes.append(DeleteChange(entry.path))
                continue
            body = io.BytesIO()
            pq.write_table(kept.cast(source.schema_arrow), body)
            data = body.getvalue()
            if contained(self.users, data_file_users(data, uri.key, physical, self.max_bytes)):
                raise TableError(f"dataset '{self.dataset.name}': a rewritten delete file still names the users")
            key = uri.key.rsplit("/", 1)[0] + f"/lakepurge-{uuid.uuid4()}-deletes.parquet"
            self.s3.put_object(Bucket=uri.bucket, Key=key, Body=data, IfNoneMatch="*")
            changes.append(DeleteChange(entry.path, f"s3://{uri.bucket}/{key}", kept.num_rows, len(data)))
        return changes

    def _after_commit(self, before: dict[str, Any], cut: list[int]) -> None:
        """What the new metadata needs, and the garbage of the expired snapshots: what only they reached, and the
        old metadata files that list any of them."""
        expired_files: set[str] = set()
        cut_set = set(cut)
        for described in before.get("snapshots") or ():
            if int(described["snapshot-id"]) in cut_set:
                expired_files |= self._files_of(described)
        self.table = IcebergTable(self.s3, self.dataset)
        self.reachable = self.needed_now()
        self.garbage |= expired_files - self.reachable
        current = self.table.pointer(refresh=False)
        for item in self.table.metadata().get("metadata-log") or ():
            path = s3_path(str(item.get("metadata-file", "")))
            if path != current and path not in self.garbage and _lists_any(path, cut_set):
                self.garbage.add(path)

    def _files_of(self, described: dict[str, Any]) -> set[str]:
        listed = self.table.manifest_list(described)
        files = {s3_path(str(described.get("manifest-list") or ""))}
        for manifest in listed:
            files.add(s3_path(manifest["manifest_path"]))
            files |= {e.path for e in self.table.manifest_entries(manifest)}
        return files

    def needed_now(self) -> set[str]:
        """Every file the current metadata's snapshots read, the metadata file itself and its statistics files."""
        document = self.table.metadata()
        needed = {self.table.pointer(refresh=False) or ""}
        for described in document.get("snapshots") or ():
            needed |= self._files_of(described)
        for statistics in [*(document.get("statistics") or ()), *(document.get("partition-statistics") or ())]:
            needed.add(s3_path(str(statistics.get("statistics-path", ""))))
        return needed

    def needed(self, path: str, latest: bool) -> bool:
        if not self.reachable:
            self.reachable = self.needed_now()
        return latest and path in self.reachable


def _covers(delete: Any, data: Any) -> bool:
    """Whether a position delete file may hold rows of a data file (its partition, its file_path bounds)."""
    if delete.referenced_data_file is not None:
        return bool(delete.referenced_data_file == data.native_path)
    if (delete.spec_id, delete.partition) != (data.spec_id, data.partition):
        return False
    low, high = delete.file_path_bounds
    return (low is None or low <= data.native_path) and (high is None or data.native_path <= high)


def _lists_any(path: str, snapshots: set[int]) -> bool:
    """Whether an old metadata file lists any of these snapshots (a file already gone lists nothing)."""
    try:
        document = read_metadata(path)
    except Exception:
        return False
    return any(int(s.get("snapshot-id", -1)) in snapshots for s in document.get("snapshots") or ())


def _discard(s3: Any, changes: Iterable[DeleteChange]) -> None:
    for change in changes:
        if change.after:
            uri = S3Uri.parse(change.after)
            s3.delete_object(Bucket=uri.bucket, Key=uri.key)


class _SnapshotWriter:
    """The erasure's snapshot, written with pyiceberg's manifest writers (a delete manifest by a writer of the same
    kind whose content is deletes)."""

    def __init__(self, table: Any, parent: int | None) -> None:
        self.table = table
        self.parent = parent
        self.commit_uuid = uuid.uuid4()
        self.written: list[str] = []
        self.rewritten = 0
        self._count = 0

    def requirements(self) -> tuple[Any, ...]:
        from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID

        return (
            AssertTableUUID(uuid=self.table.metadata.table_uuid),
            AssertRefSnapshotId.model_validate({"ref": "main", "snapshot-id": self.parent}),
        )

    def updates(self, snapshot: Any, cut: list[int]) -> list[Any]:
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.update import AddSnapshotUpdate, RemoveSnapshotsUpdate, SetSnapshotRefUpdate

        updates: list[Any] = []
        if snapshot is not None:
            updates.append(AddSnapshotUpdate(snapshot=snapshot))
            updates.append(
                SetSnapshotRefUpdate.model_validate(
                    {"ref-name": "main", "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot.snapshot_id}
                )
            )
        if cut:
            updates.append(RemoveSnapshotsUpdate.model_validate({"snapshot-ids": sorted(cut)}))
        return updates

    def write(
        self,
        replaced: dict[str, dict[str, Any]],
        changes: list[DeleteChange],
        naming: set[str],
        id_fields: set[int],
        request_id: str,
    ) -> Any:
        from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus
        from pyiceberg.table.snapshots import Operation, Snapshot, Summary

        metadata = self.table.metadata
        io_ = self.table.io
        snapshot_id = random.getrandbits(63) or 1
        changed = {c.before: c for c in changes}
        kept, new_entries = [], []
        deleted_records = deleted_files = 0
        parent = self.table.snapshot_by_id(self.parent) if self.parent is not None else None
        for manifest in parent.manifests(io_) if parent is not None else ():
            entries = manifest.fetch_manifest_entry(io_, discard_deleted=False)
            keys = {_key(e.data_file) for e in entries}
            if not (keys & (set(replaced) | set(changed))) and s3_path(manifest.manifest_path) not in naming:
                kept.append(manifest)
                continue
            live = []
            for entry in entries:
                if entry.status == ManifestEntryStatus.DELETED:
                    continue  # an older snapshot's removal: no reader needs it
                _without_bounds(entry.data_file, id_fields)
                gone = _key(entry.data_file) in replaced or _key(entry.data_file) in changed
                live.append((entry, gone))
                if gone and entry.data_file.content == DataFileContent.DATA:
                    deleted_files += 1
                    deleted_records += entry.data_file.record_count
                    result = replaced[_key(entry.data_file)]
                    if result.get("after"):
                        new_entries.append((entry, self._data_file(entry.data_file, result)))
                elif gone and changed[_key(entry.data_file)].after:
                    new_entries.append((entry, self._delete_file(entry.data_file, changed[_key(entry.data_file)])))
            if live:
                written = self._manifest(manifest.content, manifest.partition_spec_id, snapshot_id)
                with written as out:
                    for entry, gone in live:
                        if gone:
                            out.delete(entry)
                        else:
                            out.existing(entry)
                kept.append(written.to_manifest_file())
                self.rewritten += 1
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            for spec_id in sorted({e.data_file.spec_id for e, _ in new_entries}):
                group = [
                    (old, new)
                    for old, new in new_entries
                    if new.spec_id == spec_id
                    and (new.content == DataFileContent.DATA) == (content == ManifestContent.DATA)
                ]
                if not group:
                    continue
                written = self._manifest(content, spec_id, snapshot_id)
                with written as out:
                    for old, new in group:
                        keep_sequence = new.content != DataFileContent.DATA  # a rewritten delete hides what it hid
                        out.add(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=snapshot_id,
                                sequence_number=old.sequence_number if keep_sequence else None,
                                data_file=new,
                            )
                        )
                kept.append(written.to_manifest_file())
        sequence = metadata.next_sequence_number()
        manifest_list = self._list(snapshot_id, sequence, kept)
        totals = _totals(kept)
        summary = Summary(
            operation=Operation.OVERWRITE,
            **{
                REQUEST_KEY: request_id,
                "deleted-data-files": str(deleted_files),
                "deleted-records": str(deleted_records),
                "added-data-files": str(sum(1 for _, new in new_entries if new.content == DataFileContent.DATA)),
                **totals,
            },
        )
        return Snapshot.model_validate(
            {
                "snapshot-id": snapshot_id,
                "parent-snapshot-id": self.parent,
                "sequence-number": sequence,
                "timestamp-ms": int(time.time() * 1000),
                "manifest-list": manifest_list,
                "summary": summary,
                "schema-id": metadata.current_schema_id,
            }
        )

    def _manifest(self, content: Any, spec_id: int, snapshot_id: int) -> Any:
        from pyiceberg.manifest import ManifestContent, write_manifest

        metadata = self.table.metadata
        path = self._path(f"{self.commit_uuid}-m{self._count}.avro")
        self._count += 1
        arguments = (metadata.specs()[spec_id], metadata.schema(), self.table.io.new_output(path), snapshot_id)
        if content == ManifestContent.DELETES:
            return _delete_manifest_writer()(*arguments, "deflate")
        return write_manifest(metadata.format_version, *arguments, "deflate")

    def _list(self, snapshot_id: int, sequence: int, manifests: list[Any]) -> str:
        from pyiceberg.manifest import write_manifest_list

        path = self._path(f"snap-{snapshot_id}-0-{self.commit_uuid}.avro")
        output = self.table.io.new_output(path)
        fv = self.table.metadata.format_version
        with write_manifest_list(fv, output, snapshot_id, self.parent, sequence, "deflate") as writer:
            writer.add_manifests(manifests)
        return path

    def _path(self, name: str) -> str:
        path: str = self.table.location_provider().new_metadata_location(name)
        self.written.append(path)
        return path

    def _data_file(self, old: Any, result: dict[str, Any]) -> Any:
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

        new = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=result["after"],
            file_format=FileFormat.PARQUET,
            partition=old.partition,
            record_count=result["rows_after"],
            file_size_in_bytes=result["size_after"],
        )
        new.spec_id = old.spec_id
        return new

    def _delete_file(self, old: Any, change: DeleteChange) -> Any:
        from pyiceberg.manifest import DataFile, FileFormat

        new = DataFile.from_args(
            content=old.content,
            file_path=change.after,
            file_format=FileFormat.PARQUET,
            partition=old.partition,
            record_count=change.records,
            file_size_in_bytes=change.size,
            equality_ids=old.equality_ids,
        )
        new.spec_id = old.spec_id
        return new

    def discard(self, s3: Any) -> None:
        """Delete what was written for a commit that did not happen (no snapshot names it)."""
        for path in self.written:
            uri = S3Uri.parse(s3_path(path))
            s3.delete_object(Bucket=uri.bucket, Key=uri.key)


def _key(data_file: Any) -> str:
    return s3_path(str(data_file.file_path))


def _without_bounds(data_file: Any, field_ids: set[int]) -> None:
    """Drop the id columns' lower and upper bounds of a manifest entry's file (in place)."""
    from pyiceberg.manifest import DATA_FILE_TYPE, DEFAULT_READ_VERSION

    names = [f.name for f in DATA_FILE_TYPE[DEFAULT_READ_VERSION].fields]
    for name in ("lower_bounds", "upper_bounds"):
        position = names.index(name)
        bounds = data_file[position]
        if bounds:
            data_file[position] = {k: v for k, v in bounds.items() if k not in field_ids}


def _totals(manifests: Iterable[Any]) -> dict[str, str]:
    from pyiceberg.manifest import ManifestContent

    files = {ManifestContent.DATA: 0, ManifestContent.DELETES: 0}
    records = 0
    for manifest in manifests:
        files[manifest.content] += (manifest.added_files_count or 0) + (manifest.existing_files_count or 0)
        if manifest.content == ManifestContent.DATA:
            records += (manifest.added_rows_count or 0) + (manifest.existing_rows_count or 0)
    return {
        "total-data-files": str(files[ManifestContent.DATA]),
        "total-delete-files": str(files[ManifestContent.DELETES]),
        "total-records": str(records),
    }


@functools.cache
def _delete_manifest_writer() -> type:
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    class DeleteManifestWriter(ManifestWriterV2):
        """pyiceberg 0.12 writes data manifests only: the same writer, for delete files."""

        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    return DeleteManifestWriter
