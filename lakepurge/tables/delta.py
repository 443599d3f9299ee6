"""Delta Lake, read from its log with boto3 and pyarrow alone (no deltalake: the Lambda functions read tables too).

The log (``_delta_log/``) is a sequence of commits ``NNNNNNNNNNNNNNNNNNNN.json`` (one action per line: ``add``,
``remove``, ``cdc``, ``metaData``, ``protocol``, ``commitInfo``...) with checkpoints that hold a version's whole
state: classic (``N.checkpoint.parquet``), multi-part (``N.checkpoint.P.T.parquet``) and v2 (``N.checkpoint.UUID
.json|parquet``, whose ``add`` actions may sit in ``_sidecars/``). A version's live files are the newest checkpoint
at or before it plus the commits after it. Paths in actions are URL-encoded and relative to the table's root.

Deletion vectors (``add.deletionVector``) hide rows of a live file: their bytes stay in the file. They are read here
(RoaringBitmapArray, inline or in ``deletion_vector_*.bin`` files) so the index knows which rows are live and which
are history.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from botocore.exceptions import ClientError

from lakepurge.core.config import DatasetConfig
from lakepurge.core.s3io import error_code
from lakepurge.tables.base import TableChanges, TableError, TableFile, TableState, relative_key
from lakepurge.tables.storage import S3Access

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOG = "_delta_log/"
READ_THREADS = 16  # log objects read at once (small objects: the round trip is the cost)
# Parsed commits by (bucket, key, ETag), shared by every reader of this process (a commit never changes).
_COMMITS: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
_COMMITS_KEPT = 20_000
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.([0-9a-fA-F-]{36}))?\.(parquet|json)$")
# Reader features lakepurge reads correctly; a table needing another one is refused (TableError), never misread.
READER_FEATURES = {"deletionVectors", "columnMapping", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
READER_FEATURES |= {"typeWidening", "typeWidening-preview"}
CHANGE_DATA = "_change_data/"


@dataclass(frozen=True)
class Checkpoint:
    version: int
    keys: tuple[str, ...]  # its parts (multi-part) or its one file (classic, v2)
    v2: bool


@dataclass
class LogListing:
    """The log's objects, by what they are."""

    commits: dict[int, str] = field(default_factory=dict)  # version -> key
    checkpoints: dict[int, list[Checkpoint]] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)  # key -> ETag: what a parsed commit is cached under

    @property
    def latest(self) -> int | None:
        versions = [*self.commits, *self.checkpoints]
        return max(versions) if versions else None

    def complete_checkpoint(self, at_most: int) -> Checkpoint | None:
        """The newest checkpoint at or before a version that has all its parts."""
        for version in sorted((v for v in self.checkpoints if v <= at_most), reverse=True):
            for checkpoint in self.checkpoints[version]:
                if checkpoint.v2:
                    return checkpoint
                parts = checkpoint.keys
                if len(parts) == 1 or _multi_part_complete(parts):
                    return checkpoint
        return None


def _multi_part_complete(parts: tuple[str, ...]) -> bool:
    found = [_CHECKPOINT.match(key.rsplit("/", 1)[-1]) for key in parts]
    total = {int(m.group(3)) for m in found if m and m.group(3)}
    return len(total) == 1 and len(parts) == total.pop()


@dataclass
class _Replay:
    """Actions applied in order: the live files, and what left them."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # relative path -> add action
    metadata: dict[str, Any] | None = None
    protocol: dict[str, Any] | None = None
    timestamp_ms: int = 0

    def apply(self, action: dict[str, Any]) -> None:
        if "add" in action:
            add = action["add"]
            self.files[unquote(add["path"])] = add
        elif "remove" in action:
            self.files.pop(unquote(action["remove"]["path"]), None)
        elif "metaData" in action:
            self.metadata = action["metaData"]
        elif "protocol" in action:
            self.protocol = action["protocol"]
        elif "commitInfo" in action:
            info = action["commitInfo"]
            stamp = info.get("inCommitTimestamp") or info.get("timestamp")
            if isinstance(stamp, int):
                self.timestamp_ms = stamp


class DeltaLog:
    """One Delta table's log, read with boto3. Implements lakepurge.tables.base.LakeTable."""

    def __init__(self, s3: S3Client, dataset: DatasetConfig) -> None:
        self.s3 = s3
        self.dataset = dataset
        self.bucket = dataset.uri.bucket
        self.root = dataset.uri.key
        self._listing: LogListing | None = None
        self._states: dict[int, TableState] = {}
        self._metadata: dict[str, Any] | None = None

    # listing

    def listing(self, refresh: bool = False) -> LogListing:
        """The log as listed: once in full, then (refresh) only its keys from the newest version listed on (the
        log's keys sort by version), the older entries kept as listed. After lakepurge deleted log entries
        (forget_listing), the next refresh lists the whole log again."""
        if self._listing is None or (refresh and self._listing.latest is None):
            self._listing = self._list(None, LogListing())
        elif refresh:
            self._listing = self._list(self._listing.latest, self._listing)
        return self._listing

    def forget_listing(self) -> None:
        """Log entries were deleted: list the whole log again when next asked."""
        self._listing = None

    def list_from(self, version: int) -> LogListing:
        """The log listed from this version on only, for a reader that needs nothing older."""
        self._listing = self._list(version, LogListing())
        return self._listing

    def use_listing(self, current: Iterable[tuple[str, str]]) -> None:
        """The log as the caller listed it (the current objects under ``_delta_log/``: key, ETag), instead of
        listing it again; later refreshes list what is newer."""
        self._listing = self._list(None, LogListing(), current)

    def _list(
        self, since: int | None, known: LogListing, listed: Iterable[tuple[str, str]] | None = None
    ) -> LogListing:
        """The log's keys (listed: as the caller listed them), with the entries of versions before `since` taken
        from `known` (None: all listed). A new checkpoint of the newest version known sorts after `since`'s bare
        number, so it is listed."""
        prefix = self.root + LOG
        boundary = f"{prefix}{since:020d}" if since is not None else ""
        listing = LogListing(
            commits={v: k for v, k in known.commits.items() if since is not None and v < since},
            checkpoints={v: list(c) for v, c in known.checkpoints.items() if since is not None and v < since},
            etags={k: e for k, e in known.etags.items() if k < boundary},
        )
        parts: dict[tuple[int, int], list[str]] = {}
        for key, etag in self._listed(boundary) if listed is None else listed:
            listing.etags[key] = etag
            name = key[len(prefix) :]
            commit = _COMMIT.match(name)
            checkpoint = _CHECKPOINT.match(name)
            if commit:
                listing.commits[int(commit.group(1))] = key
            elif checkpoint and checkpoint.group(3):  # one part of a multi-part checkpoint
                parts.setdefault((int(checkpoint.group(1)), int(checkpoint.group(3))), []).append(key)
            elif checkpoint:
                found = Checkpoint(int(checkpoint.group(1)), (key,), checkpoint.group(4) is not None)
                listing.checkpoints.setdefault(found.version, []).append(found)
        for (version, _), keys in parts.items():
            listing.checkpoints.setdefault(version, []).append(Checkpoint(version, tuple(sorted(keys)), False))
        return listing

    def _listed(self, boundary: str) -> Iterator[tuple[str, str]]:
        paging: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.root + LOG}
        if boundary:
            paging["StartAfter"] = boundary
        for page in self.s3.get_paginator("list_objects_v2").paginate(**paging):
            for item in page.get("Contents", []):
                yield item["Key"], item["ETag"]

    def latest_version(self) -> int | None:
        return self.listing(refresh=True).latest

    # reading actions

    def read(self, key: str) -> bytes:
        try:
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise TableError(
                    f"the Delta log of dataset '{self.dataset.name}' changed while being read ({key} is gone):"
                    " read it again"
                ) from None
            raise
        return body

    def commit_actions(self, version: int) -> list[dict[str, Any]]:
        listing = self.listing()
        key = listing.commits.get(version)
        if key is None:
            raise TableError(f"dataset '{self.dataset.name}': commit {version} of the Delta log is not there")
        cached = (self.bucket, key, listing.etags.get(key, ""))
        actions = _COMMITS.get(cached)
        if actions is None:
            actions = parse_commit(self.read(key))
            if len(_COMMITS) >= _COMMITS_KEPT:
                _COMMITS.clear()
            _COMMITS[cached] = actions
        return actions

    def prefetch(self, versions: Iterable[int]) -> None:
        """Read the commits of these versions at once (a few requests in flight), into the cache: a commit never
        changes once written (it is cached under its ETag), so the reads of one process share them."""
        listing = self.listing()
        missing = [
            v
            for v in versions
            if v in listing.commits
            and (self.bucket, listing.commits[v], listing.etags.get(listing.commits[v], "")) not in _COMMITS
        ]
        if len(missing) > 1:
            with ThreadPoolExecutor(READ_THREADS) as pool:
                list(pool.map(self.commit_actions, missing))

    def checkpoint_actions(self, checkpoint: Checkpoint) -> Iterator[dict[str, Any]]:
        for key in checkpoint.keys:
            body = self.read(key)
            for action in parse_commit(body) if key.endswith(".json") else parquet_actions(body):
                if "sidecar" in action:
                    sidecar = self.root + LOG + "_sidecars/" + unquote(action["sidecar"]["path"]).rsplit("/", 1)[-1]
                    yield from parquet_actions(self.read(sidecar))
                else:
                    yield action

    def _replay(self, version: int | None) -> tuple[_Replay, int]:
        listing = self.listing()
        latest = listing.latest
        if latest is None:
            raise TableError(f"dataset '{self.dataset.name}': no Delta table at {self.dataset.location}")
        target = latest if version is None else version
        replay = _Replay()
        checkpoint = listing.complete_checkpoint(target)
        start = 0
        if checkpoint is not None:
            for action in self.checkpoint_actions(checkpoint):
                replay.apply(action)
            start = checkpoint.version + 1
        self.prefetch(range(start, target + 1))
        for v in range(start, target + 1):
            if v not in listing.commits:
                raise TableError(
                    f"dataset '{self.dataset.name}': version {target} of the Delta table cannot be read (commit {v}"
                    " is missing and no checkpoint covers it)"
                )
            for action in self.commit_actions(v):
                replay.apply(action)
        self._check_protocol(replay.protocol)
        return replay, target

    def _check_protocol(self, protocol: dict[str, Any] | None) -> None:
        features = set((protocol or {}).get("readerFeatures") or ())
        unknown = features - READER_FEATURES
        if unknown:
            raise TableError(
                f"dataset '{self.dataset.name}': the Delta table needs reader feature(s) {', '.join(sorted(unknown))},"
                " which lakepurge cannot read correctly: it is refused (see docs/LIMITS.md, Table formats)"
            )

    def state(self, version: int | None = None) -> TableState:
        if version is None:
            latest = self.listing(refresh=True).latest
            version = latest if latest is not None else version
        if version is not None and version in self._states:
            return self._states[version]
        replay, target = self._replay(version)
        self._metadata = replay.metadata
        files = {}
        for relative, add in replay.files.items():
            file = self._file(relative, add)
            files[file.path] = file
        state = TableState(target, replay.timestamp_ms, files)
        self._states[target] = state  # a version's files never change
        return state

    def _file(self, relative: str, add: dict[str, Any]) -> TableFile:
        if "://" in relative:
            raise TableError(
                f"dataset '{self.dataset.name}': the Delta table references a file by an absolute path (a shallow"
                " clone?): lakepurge erases only files under the table's location"
            )
        stats = add.get("stats")
        records = None
        if isinstance(stats, str) and stats:
            try:
                records = json.loads(stats).get("numRecords")
            except ValueError:
                records = None
        partition = add.get("partitionValues") or {}
        if isinstance(partition, list):  # a checkpoint's map column
            partition = dict(partition)
        return TableFile(
            path=f"s3://{self.bucket}/{self.root}{relative}",
            size=int(add.get("size") or 0),
            records=records if isinstance(records, int) else None,
            partition=partition,
            deletes=add.get("deletionVector") or None,
            native_path=add["path"],
        )

    def changes(self, since: int, version: int) -> TableChanges | None:
        listing = self.listing()
        if any(v not in listing.commits for v in range(since + 1, version + 1)):
            return None
        added: dict[str, TableFile] = {}
        removed: set[str] = set()
        passed: set[str] = set()
        history: set[str] = set()
        self.prefetch(range(since + 1, version + 1))
        for v in range(since + 1, version + 1):
            for action in self.commit_actions(v):
                if "add" in action:
                    file = self._file(unquote(action["add"]["path"]), action["add"])
                    if file.path in added:
                        passed.discard(file.path)
                    removed_before = file.path in removed
                    added[file.path] = file
                    if removed_before:
                        removed.discard(file.path)
                        removed.add(file.path)  # re-added (a new deletion vector): its old form left the table
                elif "remove" in action:
                    path = self.path_of(action["remove"]["path"])
                    if path in added:
                        del added[path]
                        if path not in removed:
                            passed.add(path)
                    else:
                        removed.add(path)
                elif "cdc" in action:
                    history.add(self.path_of(action["cdc"]["path"]))
        return TableChanges(since, version, added, removed, passed, history)

    def path_of(self, encoded: str) -> str:
        """The s3:// path of a file as an action names it (URL-encoded, relative to the root)."""
        return f"s3://{self.bucket}/{self.root}{unquote(encoded)}"

    def reads_through(self, key: str, version: int) -> bool:
        """Whether a version of the table is read through this log object (needed_log, from its newest complete
        checkpoint on)."""
        checkpoint = self.listing().complete_checkpoint(version)
        start = checkpoint.version if checkpoint is not None else 0
        return needed_log(key, self.root, start, set(checkpoint.keys) if checkpoint is not None else set())

    # the table's schema: column mapping

    def physical_id_fields(self) -> tuple[str, ...]:
        assert self.dataset.id_fields is not None
        if self._metadata is None:
            self.state()
        metadata = self._metadata
        schema = json.loads((metadata or {}).get("schemaString") or '{"fields": []}')
        partitions = set((metadata or {}).get("partitionColumns") or ())
        physical = []
        for id_field in self.dataset.id_fields:
            parts = id_field.split(".")
            if parts[0] in partitions:
                raise TableError(
                    f"dataset '{self.dataset.name}': id field '{id_field}' is a partition column of the Delta table:"
                    " a partition holds one value for a whole file, which lakepurge does not erase by row"
                )
            physical.append(".".join(_physical_path(schema, parts)))
        return tuple(physical)

    # deletion vectors

    def deleted_rows(self, file: TableFile) -> set[int]:
        if not file.deletes:
            return set()
        return read_deletion_vector(self.s3, self.bucket, self.root, file.deletes)

    # what a key under the table is

    def is_metadata(self, key: str) -> bool:
        return relative_key(self.dataset, key).startswith(LOG)

    def is_data(self, key: str) -> bool:
        relative = relative_key(self.dataset, key)
        return not relative.startswith(LOG) and relative.endswith(".parquet")

    def storage_options(self) -> dict[str, str]:
        return S3Access.resolved().object_store_options()

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.root.rstrip('/')}"


def needed_log(key: str, root: str, needed_from: int, checkpoint_keys: set[str]) -> bool:
    """Whether the current version is read through this log object: the newest checkpoint (its parts and
    sidecars), the commits after it, and _last_checkpoint."""
    if not key.startswith(root + LOG):
        return False
    name = key[len(root + LOG) :]
    if key in checkpoint_keys or name == "_last_checkpoint" or name.startswith("_sidecars/"):
        return True
    number = name.split(".", 1)[0]
    return number.isdigit() and int(number) >= needed_from and name.endswith(".json") and ".checkpoint" not in name


def _physical_path(schema: dict[str, Any], parts: list[str]) -> list[str]:
    """A dotted id path through the table's schema, each name replaced by its physical name (column mapping);
    names not in the schema are kept (the indexer then reports the column missing)."""
    fields = schema.get("fields") or []
    out = []
    for part in parts:
        match = next((f for f in fields if f.get("name") == part), None)
        if match is None:
            out.append(part)
            fields = []
            continue
        metadata = match.get("metadata") or {}
        out.append(metadata.get("delta.columnMapping.physicalName") or part)
        kind = match.get("type")
        while isinstance(kind, dict) and kind.get("type") in ("array", "map"):
            kind = kind.get("elementType") or kind.get("valueType")
        fields = kind.get("fields", []) if isinstance(kind, dict) else []
    return out


def parse_commit(body: bytes) -> list[dict[str, Any]]:
    """A commit's (or a JSON checkpoint's) actions, one JSON object per line."""
    actions = []
    for line in body.splitlines():
        if line.strip():
            action = json.loads(line)
            if isinstance(action, dict):
                actions.append(action)
    return actions


_ACTION_COLUMNS = ("add", "remove", "metaData", "protocol", "sidecar", "txn", "domainMetadata", "checkpointMetadata")


def parquet_actions(body: bytes) -> Iterator[dict[str, Any]]:
    """A Parquet checkpoint's (or sidecar's) actions, as a commit's would be."""
    import io

    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(body))
    columns = [name for name in _ACTION_COLUMNS if name in table.column_names]
    for row in table.select(columns).to_pylist():
        for name in columns:
            value = row.get(name)
            if value is not None:
                yield {name: value}


# Deletion vectors: the Delta protocol's RoaringBitmapArray (64-bit positions as 32-bit roaring bitmaps by their
# high half), in a file (storage type "u": a path derived from a UUID; "p": an absolute path) or inline ("i").

_DV_MAGIC = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_decode(text: str) -> bytes:
    """Z85 (the protocol's base85) as bytes: a UUID is 20 characters, an inline bitmap a padded multiple of 5."""
    values = {c: i for i, c in enumerate(_Z85)}
    out = bytearray()
    for i in range(0, len(text) - len(text) % 5, 5):
        number = 0
        for char in text[i : i + 5]:
            number = number * 85 + values[char]
        out += number.to_bytes(4, "big")
    return bytes(out)


def deletion_vector_key(root: str, descriptor: Mapping[str, Any]) -> str | None:
    """The key of a deletion vector's file ("u"), or None for an inline one."""
    kind, value = descriptor["storageType"], descriptor["pathOrInlineDv"]
    if kind == "u":
        prefix, encoded = value[:-20], value[-20:]
        uuid = z85_decode(encoded).hex()
        name = f"deletion_vector_{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}.bin"
        return root + (f"{prefix}/" if prefix else "") + name
    if kind == "p":
        return value.split("/", 3)[3] if "://" in value else value
    return None


def read_deletion_vector(s3: S3Client, bucket: str, root: str, descriptor: Mapping[str, Any]) -> set[int]:
    """The row positions a deletion vector hides."""
    size = int(descriptor["sizeInBytes"])
    key = deletion_vector_key(root, descriptor)
    if key is None:
        data = z85_decode(descriptor["pathOrInlineDv"])[:size]
    else:
        offset = int(descriptor.get("offset") or 1)
        # <size: 4 bytes, big-endian><the bitmap: size bytes><CRC-32: 4 bytes> at the offset
        raw = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + 4 + size + 4 - 1}")["Body"].read()
        (stated,) = struct.unpack(">i", raw[:4])
        data = raw[4 : 4 + stated]
        (crc,) = struct.unpack(">I", raw[4 + stated : 8 + stated])
        if zlib.crc32(data) != crc:
            raise TableError(f"deletion vector {key}: checksum mismatch")
    rows = decode_bitmap_array(data)
    if len(rows) != int(descriptor.get("cardinality", len(rows))):
        raise TableError("a deletion vector's row count differs from the log's cardinality")
    return rows


def decode_bitmap_array(data: bytes) -> set[int]:
    (magic,) = struct.unpack_from("<i", data, 0)
    if magic != _DV_MAGIC:
        raise TableError("not a deletion vector (bad magic number)")
    (count,) = struct.unpack_from("<q", data, 4)
    position = 12
    rows: set[int] = set()
    for _ in range(count):
        (high,) = struct.unpack_from("<I", data, position)
        position += 4
        low, position = _roaring32(data, position)
        rows.update((high << 32) | value for value in low)
    return rows


def _roaring32(data: bytes, position: int) -> tuple[list[int], int]:
    """A 32-bit roaring bitmap in the portable serialization format; returns its values and the end position."""
    (cookie,) = struct.unpack_from("<I", data, position)
    position += 4
    if cookie & 0xFFFF == 12347:  # with run containers
        containers = (cookie >> 16) + 1
        flags = data[position : position + (containers + 7) // 8]
        position += (containers + 7) // 8
        runs = [bool(flags[i // 8] >> (i % 8) & 1) for i in range(containers)]
    elif cookie == 12346:
        (containers,) = struct.unpack_from("<I", data, position)
        position += 4
        runs = [False] * containers
    else:
        raise TableError("a deletion vector's bitmap has an unknown format")
    header = struct.unpack_from(f"<{2 * containers}H", data, position)
    position += 4 * containers
    if cookie == 12346 or containers >= 4:
        position += 4 * containers  # offsets: the containers follow in order anyway
    values: list[int] = []
    for i in range(containers):
        key, cardinality = header[2 * i], header[2 * i + 1] + 1
        base = key << 16
        if runs[i]:
            (pairs,) = struct.unpack_from("<H", data, position)
            position += 2
            spans = struct.unpack_from(f"<{2 * pairs}H", data, position)
            position += 4 * pairs
            for start, length in zip(spans[::2], spans[1::2], strict=True):
                values.extend(range(base + start, base + start + length + 1))
        elif cardinality <= 4096:
            values.extend(base + v for v in struct.unpack_from(f"<{cardinality}H", data, position))
            position += 2 * cardinality
        else:
            words = struct.unpack_from("<1024Q", data, position)
            position += 8192
            for w, word in enumerate(words):
                bits = word
                while bits:
                    bit = bits & -bits
                    values.append(base + w * 64 + bit.bit_length() - 1)
                    bits ^= bit
    return values, position
