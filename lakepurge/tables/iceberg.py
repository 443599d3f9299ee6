"""Apache Iceberg, read from its metadata with boto3, pyarrow and lakepurge's Avro reader (no pyiceberg: the Lambda
functions read tables too).

The catalog points at the table's current metadata file (lakepurge.core.table_catalogs); that file lists the snapshots,
each with a manifest list (Avro) naming manifests (Avro) whose entries are the snapshot's data files and delete
files. A version of the table, for lakepurge, is a metadata file: its number (``00007-<uuid>.metadata.json`` is
version 7), which every commit increments; the rows are those of its ``main`` branch's snapshot.

Rows a table no longer shows but whose bytes are still in a live data file: position deletes (Parquet files of
file_path and pos, maybe with the deleted row itself), deletion vectors (format version 3: a Puffin blob with the
same roaring bitmap as Delta's) and equality deletes (Parquet files of the deleted rows' values: for an id column,
the ids themselves), which hide the rows of older data files (lower data sequence number) of their partition whose
values they hold. Manifests never change once written, so what is read of them is kept for the process.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from lakepurge.core.config import DatasetConfig
from lakepurge.core.s3io import error_code
from lakepurge.core.table_catalogs import metadata_location, read_metadata, s3_path, s3_properties
from lakepurge.tables.avro import read_container
from lakepurge.tables.base import TableChanges, TableError, TableFile, TableState, relative_key
from lakepurge.tables.delta import decode_bitmap_array

METADATA = "metadata/"
READ_THREADS = 16
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2
ADDED, DELETED = 1, 2  # manifest entry status (0: existing)
FILE_PATH_FIELD = 2147483546  # a position delete file's file_path column (its bounds name the data files it covers)
METRICS_COLUMN = "write.metadata.metrics.column."
STRING_BOUND_LENGTH = 16  # Iceberg truncates a string column's bounds to this many characters by default
_VERSION = re.compile(r"^(?:(\d+)-.+|v(\d+))\.(?:gz\.)?metadata\.json(?:\.gz)?$")
_DV_MAGIC = b"\xd1\xd3\x39\x64"
_WRITE_PATHS = ("write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path")
# What was read of immutable files, by path, shared by every reader of this process.
_MANIFESTS: dict[str, list[dict[str, Any]]] = {}
_MANIFEST_LISTS: dict[str, list[dict[str, Any]]] = {}
_POSITIONS: dict[str, dict[str, list[int]]] = {}  # position delete file -> data file path -> positions
_KEPT = 20_000


@dataclass(frozen=True)
class Entry:
    """A live entry of a snapshot's manifests: a data file or a delete file, with its inherited sequence number."""

    content: int
    path: str  # s3://
    native_path: str  # as the manifest writes it
    file_format: str
    size: int
    records: int
    spec_id: int
    partition: tuple[tuple[str, Any], ...]
    sequence: int  # data sequence number
    manifest: str
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None
    content_offset: int | None = None
    content_size: int | None = None
    file_path_bounds: tuple[str | None, str | None] = (None, None)


@dataclass
class Snapshot:
    """One version's snapshot as read: its live data files and delete files."""

    snapshot_id: int | None
    data: dict[str, Entry] = field(default_factory=dict)
    deletes: dict[str, Entry] = field(default_factory=dict)  # keyed by path (a Puffin file: path#offset)
    manifests: tuple[str, ...] = ()
    manifest_list: str | None = None


def version_of(pointer: str) -> int:
    """The number of a metadata file (``00007-<uuid>.metadata.json``: 7; a Hadoop table's ``v7.metadata.json``)."""
    found = _VERSION.match(pointer.rsplit("/", 1)[-1])
    if not found:
        raise TableError(f"{pointer}: not an Iceberg metadata file name (NNNNN-<uuid>.metadata.json)")
    return int(found.group(1) or found.group(2))


def is_metadata_file(key: str) -> bool:
    """Whether a key is an Iceberg metadata file (what a commit writes last, before the catalog points at it)."""
    return bool(_VERSION.match(key.rsplit("/", 1)[-1]))


class IcebergTable:
    """One Iceberg table, read with boto3. Implements lakepurge.tables.base.LakeTable."""

    def __init__(self, s3: Any, dataset: DatasetConfig) -> None:
        self.s3 = s3
        self.dataset = dataset
        self.bucket = dataset.uri.bucket
        self.root = dataset.uri.key
        self._pointer: str | None = None
        self._metadata: dict[str, dict[str, Any]] = {}  # metadata file -> its document
        self._pointers: dict[int, str] = {}  # version -> metadata file
        self._snapshots: dict[int, Snapshot] = {}
        self._states: dict[int, TableState] = {}

    # versions

    def pointer(self, refresh: bool = True) -> str | None:
        """The current metadata file, as the catalog records it now."""
        if self._pointer is None or refresh:
            found = metadata_location(self.dataset)
            self._pointer = s3_path(found) if found is not None else None
            if self._pointer is not None:
                self._pointers[version_of(self._pointer)] = self._pointer
        return self._pointer

    def latest_version(self) -> int | None:
        pointer = self.pointer()
        return None if pointer is None else version_of(pointer)

    def metadata(self, version: int | None = None) -> dict[str, Any]:
        """A version's metadata file (the current one, as the catalog says now, by default)."""
        if version is None:
            current = self.pointer()
            if current is None:
                raise TableError(f"dataset '{self.dataset.name}': the catalog has no table {self.dataset.table}")
            return self._document(current)
        pointer = self._pointers.get(version) or self._find_pointer(version)
        if pointer is None:
            raise TableError(
                f"dataset '{self.dataset.name}': version {version} of the Iceberg table (its metadata file) is gone"
            )
        return self._document(pointer)

    def _document(self, pointer: str) -> dict[str, Any]:
        if pointer not in self._metadata:
            try:
                document = read_metadata(pointer)
            except ClientError as exc:
                if error_code(exc) in ("NoSuchKey", "404"):
                    raise TableError(f"dataset '{self.dataset.name}': metadata file {pointer} is gone") from None
                raise
            self._check(document, pointer)
            self._metadata[pointer] = document
        return self._metadata[pointer]

    def _known_current(self) -> dict[str, Any]:
        """The current metadata file as last asked of the catalog (asked now if never): what the table's schema and
        properties are read from, without asking the catalog again for each file read."""
        return self._document(self._pointer) if self._pointer is not None else self.metadata()

    def _find_pointer(self, version: int) -> str | None:
        """A version's metadata file: the current one, or a past one from the current one's metadata-log."""
        current = self._known_current()
        if version in self._pointers:
            return self._pointers[version]
        for item in current.get("metadata-log") or ():
            path = s3_path(str(item.get("metadata-file", "")))
            if _VERSION.match(path.rsplit("/", 1)[-1]) and version_of(path) == version:
                self._pointers[version] = path
                return path
        return None

    def _check(self, document: dict[str, Any], pointer: str) -> None:
        location = s3_path(str(document.get("location", ""))).rstrip("/") + "/"
        if location != f"s3://{self.bucket}/{self.root}":
            raise TableError(
                f"dataset '{self.dataset.name}': the table's location is {location}, not {self.dataset.location}"
            )
        version = int(document.get("format-version", 1))
        if version > 3:
            raise TableError(f"dataset '{self.dataset.name}': Iceberg format version {version} is not read")
        properties = document.get("properties") or {}
        for name in _WRITE_PATHS:
            place = properties.get(name)
            if place and not s3_path(place).rstrip("/").startswith(location.rstrip("/")):
                raise TableError(
                    f"dataset '{self.dataset.name}': the table writes outside its location ({name} = {place}):"
                    " lakepurge erases only under a table's location"
                )

    # snapshots and their files

    def snapshot_id(self, version: int | None = None) -> int | None:
        """The main branch's snapshot of a version (None: a table without one)."""
        return main_snapshot(self.metadata(version))

    def snapshot(self, version: int | None = None) -> Snapshot:
        document = self.metadata(version)
        number = version if version is not None else version_of(self._pointer or "")
        if number not in self._snapshots:
            self._snapshots[number] = self.read_snapshot(document, main_snapshot(document))
        return self._snapshots[number]

    def read_snapshot(self, document: Mapping[str, Any], snapshot_id: int | None) -> Snapshot:
        """A snapshot's live files, read from its manifest list and manifests."""
        if snapshot_id is None:
            return Snapshot(None)
        described = snapshot_of(document, snapshot_id)
        if described is None:
            raise TableError(f"dataset '{self.dataset.name}': snapshot {snapshot_id} is not in the table's metadata")
        listed = self.manifest_list(described)
        found = Snapshot(snapshot_id, manifest_list=s3_path(str(described.get("manifest-list") or "")) or None)
        found.manifests = tuple(s3_path(m["manifest_path"]) for m in listed)
        self.prefetch_manifests(found.manifests)
        for manifest in listed:
            for entry in self.manifest_entries(manifest):
                if entry.content == DATA:
                    found.data[entry.path] = entry
                else:
                    key = entry.path if entry.content_offset is None else f"{entry.path}#{entry.content_offset}"
                    found.deletes[key] = entry
        others = {e.file_format for e in found.data.values()} - {"PARQUET"}
        if others:
            raise TableError(
                f"dataset '{self.dataset.name}': the table has data files in {', '.join(sorted(others))}:"
                " lakepurge reads and rewrites Parquet data files only"
            )
        return found

    def manifest_list(self, snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
        """A snapshot's manifests, as its manifest list describes them (a v1 snapshot may list them inline)."""
        path = snapshot.get("manifest-list")
        if not path:
            return [{"manifest_path": p, "content": DATA, "sequence_number": 0} for p in snapshot.get("manifests", [])]
        path = s3_path(str(path))
        if path not in _MANIFEST_LISTS:
            _remember(_MANIFEST_LISTS, path, read_container(self.read(path))[1])
        return _MANIFEST_LISTS[path]

    def prefetch_manifests(self, paths: Iterable[str]) -> None:
        missing = [p for p in dict.fromkeys(paths) if p not in _MANIFESTS]
        if len(missing) > 1:
            with ThreadPoolExecutor(READ_THREADS) as pool:
                for path, records in zip(missing, pool.map(self._manifest_records, missing), strict=True):
                    _remember(_MANIFESTS, path, records)

    def _manifest_records(self, path: str) -> list[dict[str, Any]]:
        return read_container(self.read(path))[1]

    def manifest_entries(self, manifest: Mapping[str, Any], live: bool = True) -> list[Entry]:
        """A manifest's entries (live ones: ADDED and EXISTING), with the sequence numbers they inherit."""
        path = s3_path(str(manifest["manifest_path"]))
        if path not in _MANIFESTS:
            _remember(_MANIFESTS, path, self._manifest_records(path))
        inherited = int(manifest.get("sequence_number") or 0)
        entries = []
        for record in _MANIFESTS[path]:
            if live and record["status"] == DELETED:
                continue
            entries.append(self._entry(record, inherited, int(manifest.get("partition_spec_id") or 0), path))
        return entries

    def _entry(self, record: Mapping[str, Any], inherited: int, spec_id: int, manifest: str) -> Entry:
        data_file = record["data_file"]
        native = str(data_file["file_path"])
        path = s3_path(native)
        if not path.startswith(f"s3://{self.bucket}/{self.root}"):
            raise TableError(
                f"dataset '{self.dataset.name}': the table references a file outside its location ({path}):"
                " lakepurge erases only files under a table's location"
            )
        sequence = record.get("sequence_number")
        bounds = (
            _string_bound(data_file.get("lower_bounds"), FILE_PATH_FIELD),
            _string_bound(data_file.get("upper_bounds"), FILE_PATH_FIELD),
        )
        return Entry(
            content=int(data_file.get("content") or 0),
            path=path,
            native_path=native,
            file_format=str(data_file.get("file_format", "PARQUET")).upper(),
            size=int(data_file.get("file_size_in_bytes") or 0),
            records=int(data_file.get("record_count") or 0),
            spec_id=spec_id,
            partition=tuple(sorted((data_file.get("partition") or {}).items())),
            sequence=inherited if sequence is None else int(sequence),
            manifest=manifest,
            equality_ids=tuple(data_file.get("equality_ids") or ()),
            referenced_data_file=data_file.get("referenced_data_file"),
            content_offset=data_file.get("content_offset"),
            content_size=data_file.get("content_size_in_bytes"),
            file_path_bounds=bounds,
        )

    def read(self, path: str, version_id: str | None = None) -> bytes:
        bucket, key = s3_path(path)[5:].split("/", 1)
        pinned = {"VersionId": version_id} if version_id and version_id != "null" else {}
        try:
            body: bytes = self.s3.get_object(Bucket=bucket, Key=key, **pinned)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "NoSuchVersion", "404"):
                raise TableError(
                    f"the Iceberg metadata of dataset '{self.dataset.name}' changed while being read ({key} is gone):"
                    " read it again"
                ) from None
            raise
        return body

    # LakeTable

    def state(self, version: int | None = None) -> TableState:
        if version is None:
            version = self.latest_version()
            if version is None:
                raise TableError(f"dataset '{self.dataset.name}': the catalog has no table {self.dataset.table}")
        if version in self._states:
            return self._states[version]
        document = self.metadata(version)
        snapshot = self.snapshot(version)
        deletes = _DeleteIndex(snapshot.deletes.values())
        files = {}
        for entry in snapshot.data.values():
            files[entry.path] = TableFile(
                path=entry.path,
                size=entry.size,
                records=entry.records,
                partition={name: None if value is None else str(value) for name, value in entry.partition},
                deletes=deletes.applying_to(entry),
                native_path=entry.native_path,
            )
        state = TableState(version, int(document.get("last-updated-ms") or 0), files)
        self._states[version] = state
        return state

    def changes(self, since: int, version: int) -> TableChanges | None:
        try:
            before, after = self.state(since), self.state(version)
        except TableError:
            return None  # the indexed version's metadata file is gone: the index is compared with the table instead
        added = {p: f for p, f in after.files.items() if p not in before.files or before.files[p].deletes != f.deletes}
        removed = {p for p, f in before.files.items() if p not in after.files or after.files[p].deletes != f.deletes}
        written = self._written_since(self.snapshot_id(since), self.metadata(version))
        old, new = self.snapshot(since), self.snapshot(version)
        passed = {p for p in written if p not in before.files and p not in after.files and p not in new.deletes}
        history = {e.path for k, e in new.deletes.items() if k not in old.deletes and e.file_format == "PARQUET"}
        return TableChanges(since, version, added, removed, passed, history)

    def _written_since(self, since: int | None, document: Mapping[str, Any]) -> set[str]:
        """The files the snapshots after `since` on the main branch's line wrote (their own manifests' ADDED
        entries): those added and removed again in between are still on storage until expired."""
        written: set[str] = set()
        for described in ancestors(document, main_snapshot(document)):
            if described["snapshot-id"] == since:
                break
            for manifest in self.manifest_list(described):
                if manifest.get("added_snapshot_id") == described["snapshot-id"]:
                    for entry in self.manifest_entries(manifest, live=False):
                        if entry.content_offset is None:
                            written.add(entry.path)
        return written

    def deleted_rows(self, file: TableFile) -> set[int]:
        if not file.deletes:
            return set()
        rows: set[int] = set()
        for path in file.deletes.get("positions", ()):
            rows.update(self.positions(path).get(file.native_path, ()))
        for vector in file.deletes.get("vectors", ()):
            rows |= self._vector(vector["path"], int(vector["offset"]), int(vector["size"]))
        equality = file.deletes.get("equality", ())
        if equality:
            rows |= self._equality_rows(file, equality)
        return rows

    def positions(self, path: str) -> dict[str, list[int]]:
        if path not in _POSITIONS:
            import pyarrow.parquet as pq

            table = pq.read_table(io.BytesIO(self.read(path)), columns=["file_path", "pos"])
            by_file: dict[str, list[int]] = {}
            for name, position in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
                by_file.setdefault(name, []).append(position)
            _remember(_POSITIONS, path, by_file)
        return _POSITIONS[path]

    def _vector(self, path: str, offset: int, size: int) -> set[int]:
        """A deletion vector's positions: <length: 4 bytes BE><magic D1 D3 39 64><bitmap><CRC-32 of magic+bitmap>."""
        bucket, key = path[5:].split("/", 1)
        blob = self.s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + size - 1}")["Body"].read()
        (length,) = struct.unpack(">I", blob[:4])
        body = blob[4 : 4 + length]
        (crc,) = struct.unpack(">I", blob[4 + length : 8 + length])
        if body[:4] != _DV_MAGIC or zlib.crc32(body) != crc:
            raise TableError(f"deletion vector in {path} at {offset}: not a valid deletion-vector-v1 blob")
        return decode_bitmap_array(body)

    def _equality_rows(self, file: TableFile, equality: Iterable[Mapping[str, Any]]) -> set[int]:
        """The rows of a data file whose values on each equality delete's columns are among that file's rows."""
        import pyarrow.parquet as pq

        data = pq.ParquetFile(io.BytesIO(self.read(file.path)))
        names = {field_id: name for name, field_id in schema_field_ids(current_schema(self._known_current())).items()}
        rows: set[int] = set()
        for delete in equality:
            ids = tuple(int(i) for i in delete["ids"])
            deleted = pq.ParquetFile(io.BytesIO(self.read(delete["path"])))
            values = set(_rows_by_field_ids(deleted, ids, names))
            if values:
                rows.update(i for i, row in enumerate(_rows_by_field_ids(data, ids, names)) if row in values)
        return rows

    def snapshots_cut(self, erased: set[str], naming: set[str]) -> tuple[list[int], list[int], str]:
        """The snapshots of the current metadata that reach what the erasure deletes (a file holding the users, a
        manifest list or manifest naming them): they are expired; the others are kept. Third: why the erasure
        cannot go on (a branch or tag other than main holds such a snapshot: expiring it would drop the ref)."""
        document = self.metadata()
        cut: list[int] = []
        kept: list[int] = []
        for described in document.get("snapshots") or ():
            listed = self.manifest_list(described)
            metadata = {s3_path(str(described.get("manifest-list") or ""))}
            metadata |= {s3_path(m["manifest_path"]) for m in listed}
            self.prefetch_manifests(s3_path(m["manifest_path"]) for m in listed)
            reached = metadata & naming or any(
                e.path in erased for manifest in listed for e in self.manifest_entries(manifest)
            )
            (cut if reached else kept).append(int(described["snapshot-id"]))
        refs = {
            name: int(ref["snapshot-id"])
            for name, ref in (document.get("refs") or {}).items()
            if name != "main" and int(ref["snapshot-id"]) in set(cut)
        }
        problem = ""
        if refs:
            name, snapshot = sorted(refs.items())[0]
            problem = (
                f"dataset '{self.dataset.name}': {len(refs)} branch(es) or tag(s) of the Iceberg table reach the users'"
                f" data (e.g. '{name}' at snapshot {snapshot}); lakepurge erases the main branch and would have to drop"
                " them: remove those refs (or erase on them with the table's own engine), then run the request again"
            )
        return sorted(cut), sorted(kept), problem

    def is_metadata(self, key: str) -> bool:
        return relative_key(self.dataset, key).startswith(METADATA)

    def is_data(self, key: str) -> bool:
        relative = relative_key(self.dataset, key)
        return not relative.startswith(METADATA) and relative.endswith(".parquet")

    def physical_id_fields(self) -> tuple[str, ...]:
        """The id fields as the current schema names them; an id column the partition spec exposes (identity or
        truncate) is refused: its values are in every manifest and manifest list."""
        assert self.dataset.id_fields is not None
        document = self._known_current()
        fields = {field_id: name for name, field_id in schema_field_ids(current_schema(document)).items()}
        ids = {name: field_id for field_id, name in fields.items()}
        for id_field in self.dataset.id_fields:
            field_id = ids.get(id_field)
            if field_id is None:
                continue  # the indexer reports the column missing
            for spec in document.get("partition-specs") or ():
                for part in spec.get("fields") or ():
                    transform = str(part.get("transform", ""))
                    if part.get("source-id") == field_id and (transform == "identity" or transform.startswith("trunc")):
                        raise TableError(
                            f"dataset '{self.dataset.name}': id field '{id_field}' is a partition source of the"
                            f" Iceberg table ({transform}): its values are in the table's manifests, which lakepurge"
                            " does not erase by row"
                        )
        return tuple(self.dataset.id_fields)

    def id_field_ids(self) -> dict[int, str]:
        """Field id -> name of the dataset's id columns (top-level or nested) in the current schema."""
        assert self.dataset.id_fields is not None
        ids = schema_field_ids(current_schema(self._known_current()))
        return {ids[name]: name for name in self.dataset.id_fields if name in ids}

    def storage_options(self) -> dict[str, str]:
        return s3_properties()

    def id_metrics_warning(self) -> str:
        """Whether new manifests will hold the id columns' bounds (Iceberg writes truncate(16) by default): the
        advice to set their metrics mode to none, or ""."""
        properties = self._known_current().get("properties") or {}
        default = properties.get("write.metadata.metrics.default", "truncate(16)")
        columns = [
            name
            for name in self.dataset.id_fields or ()
            if properties.get(f"{METRICS_COLUMN}{name}", default).strip().lower() != "none"
        ]
        if not columns:
            return ""
        settings = ", ".join(f"{METRICS_COLUMN}{name} = none" for name in columns)
        return (
            f"every manifest the table writes keeps the lower and upper bounds of id column(s) {', '.join(columns)},"
            f" which name people: set the table properties {settings} (an erasure rewrites the manifests naming the"
            " users it erases, but not the others)"
        )

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.root.rstrip('/')}"


class _DeleteIndex:
    """A snapshot's delete files by partition, to find those that apply to a data file."""

    def __init__(self, deletes: Iterable[Entry]) -> None:
        self.by_partition: dict[tuple[int, tuple[tuple[str, Any], ...]], list[Entry]] = {}
        self.global_equality: list[Entry] = []
        self.by_file: dict[str, list[Entry]] = {}
        for entry in deletes:
            if entry.referenced_data_file is not None or entry.content_offset is not None:
                self.by_file.setdefault(s3_path(entry.referenced_data_file or ""), []).append(entry)
            elif entry.content == EQUALITY_DELETES and not entry.partition:
                self.global_equality.append(entry)
            else:
                self.by_partition.setdefault((entry.spec_id, entry.partition), []).append(entry)

    def applying_to(self, data: Entry) -> dict[str, Any] | None:
        positions: list[str] = []
        vectors: list[dict[str, Any]] = []
        equality: list[dict[str, Any]] = []
        candidates = self.by_file.get(data.path, []) + self.by_partition.get((data.spec_id, data.partition), [])
        for delete in candidates + self.global_equality:
            if delete.content == EQUALITY_DELETES:
                if delete.sequence > data.sequence:
                    equality.append({"path": delete.path, "ids": list(delete.equality_ids)})
            elif delete.sequence >= data.sequence and _may_name(delete, data.native_path):
                if delete.content_offset is not None:
                    vectors.append({"path": delete.path, "offset": delete.content_offset, "size": delete.content_size})
                else:
                    positions.append(delete.path)
        if not (positions or vectors or equality):
            return None
        return {"positions": sorted(positions), "vectors": vectors, "equality": equality}


def _may_name(delete: Entry, native_path: str) -> bool:
    """Whether a position delete file may hold rows of this data file (its file_path bounds say where it cannot)."""
    if delete.referenced_data_file is not None:
        return delete.referenced_data_file == native_path
    low, high = delete.file_path_bounds
    return (low is None or low <= native_path) and (high is None or native_path <= high)


def _string_bound(bounds: Any, field_id: int) -> str | None:
    for item in bounds or ():
        if item.get("key") == field_id:
            return bytes(item["value"]).decode("utf-8", "replace")
    return None


def _rows_by_field_ids(parquet: Any, field_ids: tuple[int, ...], names: Mapping[int, str]) -> list[tuple[Any, ...]]:
    """Each row's values of the columns with these Iceberg field ids (a Parquet file's field_id metadata; a file
    written without them, by the current schema's names). A column found neither way is refused: a rewrite that
    could not drop the rows an equality delete hides would bring them back."""
    schema = parquet.schema_arrow
    columns = []
    for field_id in field_ids:
        name = next(
            (f.name for f in schema if (f.metadata or {}).get(b"PARQUET:field_id") == str(field_id).encode()), None
        )
        if name is None and names.get(field_id) in schema.names:
            name = names[field_id]
        if name is None:
            raise TableError(
                f"a file of the Iceberg table has no column for field id {field_id} of an equality delete: lakepurge"
                " cannot tell which of its rows the delete hides"
            )
        columns.append(name)
    table = parquet.read(columns=columns)
    return list(zip(*(table.column(n).to_pylist() for n in columns), strict=True))


def _remember(cache: dict[str, Any], key: str, value: Any) -> None:
    if len(cache) >= _KEPT:
        cache.clear()
    cache[key] = value


def main_snapshot(document: Mapping[str, Any]) -> int | None:
    refs = document.get("refs") or {}
    if "main" in refs:
        return int(refs["main"]["snapshot-id"])
    current = document.get("current-snapshot-id")
    return None if current in (None, -1) else int(current)


def snapshot_of(document: Mapping[str, Any], snapshot_id: int) -> dict[str, Any] | None:
    return next((s for s in document.get("snapshots") or () if s.get("snapshot-id") == snapshot_id), None)


def ancestors(document: Mapping[str, Any], snapshot_id: int | None) -> list[dict[str, Any]]:
    """A snapshot and its parents, newest first, as far as the metadata still holds them."""
    found = []
    while snapshot_id is not None:
        described = snapshot_of(document, snapshot_id)
        if described is None:
            break
        found.append(described)
        parent = described.get("parent-snapshot-id")
        snapshot_id = None if parent is None else int(parent)
    return found


def current_schema(document: Mapping[str, Any]) -> dict[str, Any]:
    schemas = document.get("schemas")
    if schemas:
        wanted = document.get("current-schema-id", 0)
        return next((s for s in schemas if s.get("schema-id") == wanted), schemas[-1])
    return dict(document.get("schema") or {"fields": []})


def schema_field_ids(schema: Mapping[str, Any], prefix: str = "") -> dict[str, int]:
    """Dotted name -> field id of every field (through structs)."""
    found: dict[str, int] = {}
    for item in schema.get("fields") or ():
        name = prefix + str(item["name"])
        found[name] = int(item["id"])
        kind = item.get("type")
        if isinstance(kind, dict) and kind.get("type") == "struct":
            found |= schema_field_ids(kind, name + ".")
    return found


def bound_forms(user: str) -> tuple[str, ...]:
    """How a string id appears in a manifest's lower and upper bounds: whole when it is at most 16 characters,
    else its first 16 (the lower bound) and those with the last one incremented (the upper bound)."""
    if len(user) <= STRING_BOUND_LENGTH:
        return ()
    prefix = user[:STRING_BOUND_LENGTH]
    forms = [prefix]
    for i in range(STRING_BOUND_LENGTH - 1, -1, -1):
        code = ord(prefix[i]) + 1
        if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
            forms.append(prefix[:i] + chr(code))
            break
    return tuple(forms)
