"""Access export (GDPR Art. 15, "send me a copy of my data"): exactly the users' records, read through the index,
in one encrypted archive, with a time-limited link to it. The lake is only ever read.

For each object the index names:

1. HEAD the current version. Still the indexed ETag: the indexed lines are read. Changed since indexing: the current
   version is searched again for the users' lines (the purge engine's :func:`~lakepurge.purge.engine.find_user_lines`).
   Every read is pinned to that version (``VersionId``, or ``If-Match`` on the ETag; a replacement mid-read starts the
   object again).
2. Each line is checked to hold one of the users before it is taken, by the purge's own ownership check
   (:class:`~lakepurge.purge.engine.Ownership` for JSON Lines and CSV, :func:`~lakepurge.purge.rewrite.owned_rows` for
   Parquet): a stale index never exports someone else's record. JSON Lines and CSV objects are streamed only up to
   the last wanted line; Parquet reads only the row groups that hold wanted rows (ranged GETs). Objects of
   one-user-per-object datasets, their owner checked now, are taken whole.
3. Into a zip: ``datasets/<dataset>/<n>.<ext>`` per object, in the original format (JSON Lines and CSV lines
   byte-identical, decompressed; CSV with its header; Parquet rows in a Parquet file of the same schema) or converted
   to JSON Lines or CSV on request; ``relational/<name>.jsonl``, the users' rows of each ``[[relational]]`` table;
   ``manifest.json``, what each file holds and where it came from (objects as logs name them, line numbers, version
   id and ETag). No user id appears in a file name.
4. The zip is encrypted with a data key KMS generates for this request, of the export key (``[workflow]
   export_kms_key_id``, the stack's ExportKey) under ``EncryptionContext {"export_request_id": ...}``: a context key
   no sealed request has, so whoever may open archives opens no request's ids. AES-256-GCM in 1 MiB segments
   (:func:`seal`; :func:`unseal` reverses it, given ``kms:Decrypt`` under that context). It is written to the
   destination, and a presigned GET link to it is made (SigV4; 7 days at most, and never past the signing
   credentials' expiry nor the archive's: :func:`presigned_link`).
5. ``exports/<request id>.json`` in the reports location (:class:`lakepurge.layout.ExportDocument`) records what was
   exported: users as keyed hashes, counts, objects, the archive, its version and SHA-256. The record is written
   last, once: it is what makes the export done. A run that failed before it left at most an archive, which a run
   of the same request id replaces (every earlier version of it deleted): an export is idempotent per request id.

Archives expire: ``[workflow] export_retention_days`` (30 by default) after they were written, by the stack's
lifecycle rule on ``access-exports/`` and, wherever they are, by each export (:func:`expire_archives`). ``lakepurge
export --open`` opens an archive only as the request whose record names its bytes (:func:`open_archive`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import orjson
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lakepurge import aws, layout
from lakepurge.config import DatasetConfig, Settings
from lakepurge.coverage import of_index
from lakepurge.formats import csv_records, iter_line_batches, open_decompressed, parse_paths
from lakepurge.index import open_store, relational_dsn
from lakepurge.index.base import WHOLE_OBJECT
from lakepurge.logs import get_logger, object_ref
from lakepurge.privacy import Pseudonymizer
from lakepurge.purge.engine import Ownership, find_user_lines
from lakepurge.purge.rewrite import owned_rows, without_views
from lakepurge.s3io import ObjectChanged, ObjectHead, error_code, head_object, open_body, open_seekable
from lakepurge.s3uri import S3Uri

log = get_logger()

EXPORT_VERSION = 1
FORMATS = ("original", "jsonl", "csv")
MAX_LINK_SECONDS = 7 * 24 * 3600  # a SigV4 presigned URL lives at most 7 days
DEFAULT_RETENTION_DAYS = 30  # [workflow] export_retention_days
ARCHIVE_SUFFIX = ".zip.enc"
ARCHIVE_ENCRYPTION = "lakepurge-aes-256-gcm-v1"  # the archive's "encryption" metadata: what expire_archives deletes
MAGIC = b"LPXAEAD1"  # the sealed archive's first bytes (format version 1)
# The archive's encryption context key: sealed requests use "request_id", so a grant to open archives (conditioned
# on this key) opens no request.
EXPORT_CONTEXT_KEY = "export_request_id"
SEGMENT_BYTES = 1 << 20
_TAG_BYTES = 16
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SPOOL = 64 * 1024 * 1024


class ExportRefused(Exception):
    """The export cannot start as asked (an argument, the destination, a request id already used); nothing written.
    The message names no user id."""


class ExportFailed(Exception):
    """An object could not be read; nothing was written (an incomplete copy is never delivered as complete)."""


@dataclass(frozen=True)
class Link:
    """A presigned GET link and when it really stops working: the requested lifetime, cut to the archive's expiry and
    to the signing credentials' when they are temporary (limited_by says which; "session" when temporary credentials
    do not tell their expiry, as a Lambda's do not: the link dies with the signer's role session, at the latest at
    expires_at)."""

    url: str
    expires_at: datetime
    limited_by: str  # "requested", "archive", "credentials" or "session"


@dataclass(frozen=True)
class ExportRun:
    request_id: str
    archive: str
    link: str
    link_expires_at: str
    link_limited_by: str
    archive_expires_at: str
    record: str
    archive_sha256: str
    users_requested: int
    users_found: int
    records: dict[str, int]
    objects: int
    relational_rows: dict[str, int]
    coverage_gaps: list[str]
    seconds: float

    @property
    def empty(self) -> bool:
        return not self.objects and not any(self.relational_rows.values())

    def summary(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "empty": self.empty,
            "users_requested": self.users_requested,
            "users_found": self.users_found,
            "objects": self.objects,
            "records": self.records,
            "relational_rows": self.relational_rows,
            "archive": self.archive,
            "archive_sha256": self.archive_sha256,
            "link": self.link,
            "link_expires_at": self.link_expires_at,
            "link_limited_by": self.link_limited_by,
            "archive_expires_at": self.archive_expires_at,
            "record": self.record,
            "coverage_gaps": self.coverage_gaps,
            "seconds": round(self.seconds, 2),
        }


# -- the archive ------------------------------------------------------------------------------------------------------


class _Archive:
    """The zip being built (spooled to disk past 64 MiB), each file's SHA-256 remembered for the manifest."""

    def __init__(self, created: datetime) -> None:
        self.file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL)  # noqa: SIM115 - closed in close()
        self._zip = zipfile.ZipFile(self.file, "w", compression=zipfile.ZIP_DEFLATED)
        self._when = (max(created.year, 1980), created.month, created.day, created.hour, created.minute, created.second)

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, self._when)
        info.compress_type = zipfile.ZIP_DEFLATED
        return info

    def write(self, name: str, chunks: Iterable[bytes]) -> str:
        digest = hashlib.sha256()
        with self._zip.open(self._info(name), "w") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        return digest.hexdigest()

    def finish(self, manifest: dict[str, Any]) -> None:
        self.write("manifest.json", [orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)])
        self._zip.close()
        self.file.seek(0)

    def close(self) -> None:
        self.file.close()


# -- reading one object -----------------------------------------------------------------------------------------------


@dataclass
class _Extract:
    """The users' records of one object version, ready to be written."""

    head: ObjectHead
    stale: bool
    lines: list[int] = field(default_factory=list)  # exported line numbers ([WHOLE_OBJECT] for a whole object)
    # jsonl: the lines; csv: the header's physical lines then each record's (physical lines, fields)
    jsonl: list[bytes] = field(default_factory=list)
    csv_header: list[bytes] = field(default_factory=list)
    csv_columns: list[str] = field(default_factory=list)
    csv_rows: list[tuple[list[bytes], list[str]]] = field(default_factory=list)
    parquet_schema: Any = None
    parquet_tables: list[Any] = field(default_factory=list)


def read_users_records(
    s3: Any,
    settings: Settings,
    dataset: DatasetConfig,
    s3path: str,
    indexed_etag: str,
    indexed_lines: Iterable[int],
    users: frozenset[str],
    attempts: int = 3,
) -> _Extract | None:
    """The users' records of one object (see the module docstring), or None when the object is gone or holds none
    of them now. A whole object (one-user-per-object dataset) is only checked here, and read when written."""
    uri = S3Uri.parse(s3path)
    for _ in range(attempts):
        head = head_object(s3, uri.bucket, uri.key)
        if head is None:
            return None
        stale = head.etag != indexed_etag
        if stale and dataset.is_table:
            return None  # a table's data file never changes: another one under its name left the table
        try:
            if dataset.per_object or stale:
                _, lines = find_user_lines(s3, settings, dataset, head, users)  # the owner / the lines, checked now
            else:
                lines = sorted(set(indexed_lines))
            if not lines:
                return None
            extract = _Extract(head, stale)
            if dataset.per_object:
                extract.lines = [WHOLE_OBJECT]
            elif dataset.format == "parquet" or dataset.is_table:
                _read_parquet(s3, dataset, extract, lines, users)
            elif dataset.format == "csv":
                _read_csv(s3, settings, dataset, extract, lines, users)
            else:
                _read_jsonl(s3, settings, dataset, extract, lines, users)
            return extract if extract.lines else None
        except ObjectChanged:
            log.info(
                "object replaced while being exported; reading it again", extra={"object": object_ref(s3path, dataset)}
            )
    raise ObjectChanged(f"{object_ref(s3path, dataset)} kept changing while being exported ({attempts} attempts)")


def _read_jsonl(
    s3: Any, settings: Settings, dataset: DatasetConfig, extract: _Extract, lines: list[int], users: frozenset[str]
) -> None:
    wanted, last = set(lines), max(lines)
    owner = Ownership(dataset, users)
    with _decompressed(s3, settings, extract.head) as source:
        for first, batch in iter_line_batches(source, settings.indexing.max_record_bytes):
            for number, line in enumerate(batch, first):
                if number in wanted and line is not None and owner.json_line(number, line):
                    extract.jsonl.append(line)
            if first + len(batch) > last:
                break  # past the last wanted line: the rest of the object is not read
    extract.lines = owner.erased


def _read_csv(
    s3: Any, settings: Settings, dataset: DatasetConfig, extract: _Extract, lines: list[int], users: frozenset[str]
) -> None:
    wanted, last = set(lines), max(lines)
    owner = Ownership(dataset, users)
    with _decompressed(s3, settings, extract.head) as source:
        header = True
        for record in csv_records(source, settings.indexing.max_record_bytes, rows_for=wanted | {0}):
            if header:  # as the purge reads it: the first record is the header
                owner.csv_header(record.row or [])
                extract.csv_header = [line for line in record.lines if line is not None]
                extract.csv_columns = list(record.row or [])
                header = False
            elif record.line in wanted and record.row is not None and owner.csv_record(record.line, record.row):
                extract.csv_rows.append(([line or b"" for line in record.lines], record.row))
            if record.line >= last:
                break
    extract.lines = owner.erased


@contextmanager
def _decompressed(s3: Any, settings: Settings, head: ObjectHead) -> Iterator[IO[bytes]]:
    """The version's body, decompressed as the indexer reads it (with its inflation limits), closed after."""
    body = open_body(s3, head)
    try:
        yield open_decompressed(body, head.key, settings.indexing.inflation)
    finally:
        body.close()


def _read_parquet(s3: Any, dataset: DatasetConfig, extract: _Extract, lines: list[int], users: frozenset[str]) -> None:
    import pyarrow.parquet as pq

    assert dataset.id_fields is not None
    paths = parse_paths(dataset.id_fields)
    source = pq.ParquetFile(open_seekable(s3, extract.head))  # the footer, then only the groups read below
    extract.parquet_schema = source.schema_arrow
    plain = without_views(source.schema_arrow)  # Arrow takes no rows of view types: their plain forms are taken
    wanted = sorted(set(lines))
    start = 0
    for index in range(source.metadata.num_row_groups):
        rows = source.metadata.row_group(index).num_rows
        inside = [line - start for line in wanted if start <= line < start + rows]
        if inside:
            table = source.read_row_group(index)
            table = table.cast(plain) if plain is not None else table
            owned = owned_rows(table, paths, users)
            keep = [row for row in inside if owned[row]]
            if keep:
                taken = table.take(keep)
                extract.parquet_tables.append(taken.cast(source.schema_arrow) if plain is not None else taken)
                extract.lines.extend(start + row for row in keep)
        start += rows


# -- writing one object's records -------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def _jsonl_bytes(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for record in records:
        yield orjson.dumps(record, default=_json_default) + b"\n"


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return orjson.dumps(value, default=_json_default).decode()


def _csv_bytes(records: list[dict[str, Any]]) -> Iterator[bytes]:
    """Records as CSV: a header of every top-level field (in order of first appearance), nested values as JSON."""
    columns = list(dict.fromkeys(name for record in records for name in record))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow([_csv_cell(record.get(name)) for name in columns])
    yield out.getvalue().encode()


def _csv_record(columns: list[str], row: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = dict(zip(columns, row, strict=False))
    for extra, value in enumerate(row[len(columns) :], len(columns)):
        record[f"_column_{extra}"] = value
    return record


def _parquet_bytes(extract: _Extract) -> bytes:
    import pyarrow.parquet as pq

    out = io.BytesIO()
    with pq.ParquetWriter(out, extract.parquet_schema) as writer:
        for table in extract.parquet_tables:
            writer.write_table(table)
    return out.getvalue()


def _records(dataset: DatasetConfig, extract: _Extract) -> list[dict[str, Any]]:
    """The extract's records as dicts (for a conversion)."""
    if dataset.format == "jsonl":
        return [orjson.loads(line) for line in extract.jsonl]
    if dataset.format == "csv":
        return [_csv_record(extract.csv_columns, row) for _, row in extract.csv_rows]
    return [row for table in extract.parquet_tables for row in table.to_pylist()]


def _suffix(key: str) -> str:
    """A whole object's file extension (never the rest of its name: keys may hold the user's id)."""
    name = key.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    suffix = name[dot:] if dot > 0 else ""
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def _write_object(
    s3: Any, archive: _Archive, dataset: DatasetConfig, extract: _Extract, fmt: str, number: int
) -> tuple[str, str, str, int]:
    """Write one object's records into the archive: (file name, its format, its SHA-256, records)."""
    base = f"datasets/{_safe(dataset.name)}/{number:05d}"
    if dataset.per_object:
        name = base + _suffix(extract.head.key)
        body = open_body(s3, extract.head)
        try:
            digest = archive.write(name, iter(lambda: body.read(SEGMENT_BYTES), b""))
        finally:
            body.close()
        return name, "whole-object", digest, 1
    records = len(extract.lines)
    native = "parquet" if dataset.is_table else dataset.format  # a table's rows, as its data files hold them
    target = native if fmt == "original" else fmt
    chunks: Iterable[bytes]
    if target == native == "jsonl":
        chunks = (line + b"\n" for line in extract.jsonl)
    elif target == native == "csv":
        physical = extract.csv_header + [line for lines, _ in extract.csv_rows for line in lines]
        chunks = (line + b"\n" for line in physical)
    elif target == native == "parquet":
        chunks = [_parquet_bytes(extract)]
    elif target == "jsonl":
        chunks = _jsonl_bytes(_records(dataset, extract))
    else:
        chunks = _csv_bytes(_records(dataset, extract))
    name = f"{base}.{target}"
    return name, target, archive.write(name, chunks), records


# -- relational tables ------------------------------------------------------------------------------------------------


def _export_relational(settings: Settings, users: list[str], archive: _Archive) -> list[dict[str, Any]]:
    """Each [[relational]] table's rows of the users (SELECT *), as JSON Lines; tables without any are left out."""
    if not settings.relational:
        return []
    import psycopg
    from psycopg import sql
    from psycopg.rows import dict_row

    entries = []
    for table in settings.relational:
        query = sql.SQL("SELECT * FROM {} WHERE {} = ANY(%s)").format(
            sql.Identifier(*table.table.split(".")), sql.Identifier(table.column)
        )
        with psycopg.connect(relational_dsn(table, deleting=False), autocommit=True, row_factory=dict_row) as conn:
            rows = conn.execute(query, (users,)).fetchall()
        if not rows:
            continue
        name = f"relational/{_safe(table.name)}.jsonl"
        digest = archive.write(name, _jsonl_bytes(rows))
        entries.append({"file": name, "name": table.name, "table": table.table, "rows": len(rows), "sha256": digest})
    return entries


# -- sealing ----------------------------------------------------------------------------------------------------------


_VERSION = "#version"


def _follow_tables(s3: Any, store: Any, settings: Settings) -> dict[str, dict[str, Any]]:
    """Each table dataset followed to its newest version: its live files (path -> the id fields as its data files
    name them) and the version (under _VERSION). A table that cannot be followed fails the export."""
    from lakepurge.tables.base import TableError
    from lakepurge.tables.index import follow_table, open_table

    readers: dict[str, dict[str, Any]] = {}
    for dataset in (d for d in settings.datasets if d.is_table):
        try:
            follow_table(s3, store, settings, dataset)
            table = open_table(s3, dataset)
            state = table.state()
            fields = table.physical_id_fields()
        except TableError as exc:
            raise ExportFailed(f"{exc}: nothing was exported") from None
        # An Iceberg data file holds its partition's source columns itself (its partition values are transforms).
        files = {
            path: (fields, dict(file.partition) if dataset.format == "delta" else {})
            for path, file in state.files.items()
        }
        readers[dataset.name] = files | {_VERSION: state.version}
    return readers


def _with_partition(extract: _Extract, partition: dict[str, Any]) -> None:
    """A table's partition values are in its log, not its data files: each exported row gets them back (as the
    log writes them, strings)."""
    import pyarrow as pa

    for name, value in partition.items():
        if name in extract.parquet_schema.names:
            continue
        extract.parquet_schema = extract.parquet_schema.append(pa.field(name, pa.string()))
        extract.parquet_tables = [
            t.append_column(name, pa.array([value] * t.num_rows, pa.string())) for t in extract.parquet_tables
        ]


def seal(plain: IO[bytes], out: IO[bytes], kms: Any, key_id: str, request_id: str) -> str:
    """Encrypt a stream with a fresh KMS data key (EncryptionContext {EXPORT_CONTEXT_KEY: ...}): MAGIC, a 4-byte length
    and a JSON header (the wrapped data key, the context, the segment size, a nonce prefix), then AES-256-GCM
    segments of SEGMENT_BYTES, each authenticated with the header and a last-segment flag (a truncated or reordered
    archive does not decrypt). Returns the id of the KMS key that wrapped the data key."""
    context = {EXPORT_CONTEXT_KEY: request_id}
    data_key = kms.generate_data_key(KeyId=key_id, KeySpec="AES_256", EncryptionContext=context)
    header = orjson.dumps(
        {
            "alg": "AES-256-GCM",
            "kms_key_id": data_key["KeyId"],
            "encrypted_data_key": base64.b64encode(data_key["CiphertextBlob"]).decode(),
            "encryption_context": context,
            "segment_bytes": SEGMENT_BYTES,
            "nonce_prefix": base64.b64encode(os.urandom(8)).decode(),
        },
        option=orjson.OPT_SORT_KEYS,
    )
    prefix = base64.b64decode(orjson.loads(header)["nonce_prefix"])
    aead = AESGCM(data_key["Plaintext"])
    out.write(MAGIC + len(header).to_bytes(4, "big") + header)
    segment, counter = plain.read(SEGMENT_BYTES), 0
    while True:
        following = plain.read(SEGMENT_BYTES)
        flag = b"\x00" if following else b"\x01"
        out.write(aead.encrypt(prefix + counter.to_bytes(4, "big"), segment, header + flag))
        if not following:
            return str(data_key["KeyId"])
        segment, counter = following, counter + 1


def archive_header(sealed: IO[bytes]) -> tuple[bytes, dict[str, Any]]:
    """A sealed archive's header, as bytes and parsed (ValueError: not an archive)."""
    if sealed.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a lakepurge export archive")
    header = sealed.read(int.from_bytes(sealed.read(4), "big"))
    try:
        meta = orjson.loads(header)
    except orjson.JSONDecodeError:
        raise ValueError("not a lakepurge export archive (its header is not readable)") from None
    if not isinstance(meta, dict):
        raise ValueError("not a lakepurge export archive (its header is not readable)")
    return header, meta


def sealed_for(meta: dict[str, Any]) -> str | None:
    """The request an archive was sealed for, from its encryption context (``request_id`` in archives written
    before the export context key)."""
    context = meta.get("encryption_context") or {}
    found = context.get(EXPORT_CONTEXT_KEY) or context.get("request_id")
    return str(found) if found else None


def unseal(sealed: IO[bytes], kms: Any) -> bytes:
    """The plaintext of a sealed archive (needs kms:Decrypt on its key, under its encryption context)."""
    header, meta = archive_header(sealed)
    plaintext_key = kms.decrypt(
        CiphertextBlob=base64.b64decode(meta["encrypted_data_key"]), EncryptionContext=meta["encryption_context"]
    )["Plaintext"]
    aead = AESGCM(plaintext_key)
    prefix = base64.b64decode(meta["nonce_prefix"])
    size = int(meta["segment_bytes"]) + _TAG_BYTES
    out = bytearray()
    segment, counter = sealed.read(size), 0
    while True:
        following = sealed.read(size)
        flag = b"\x00" if following else b"\x01"
        out += aead.decrypt(prefix + counter.to_bytes(4, "big"), segment, header + flag)
        if not following:
            return bytes(out)
        segment, counter = following, counter + 1


# -- the export -------------------------------------------------------------------------------------------------------


def _folder(to: S3Uri) -> S3Uri:
    return S3Uri(to.bucket, to.key if not to.key or to.key.endswith("/") else to.key + "/")


def archive_location(settings: Settings, to: S3Uri, request_id: str) -> S3Uri:
    """Where the archive goes: ``<to>/<request id>.zip.enc``. Never inside a dataset: the lake is not written."""
    target = S3Uri(to.bucket, f"{_folder(to).key}{request_id}{ARCHIVE_SUFFIX}")
    for dataset in settings.datasets:
        if dataset.contains(target.bucket, target.key):
            raise ExportRefused(
                f"--to {to} lies inside dataset {dataset.name} ({dataset.location}): an export never writes into the"
                " lake; choose another bucket or prefix"
            )
    return target


def open_archive(settings: Settings, s3: Any, kms: Any, sealed: bytes, request_id: str) -> bytes:
    """The plaintext (a zip) of an archive opened as request ``request_id``'s, once it is shown to be that request's:
    its export record (``exports/<request id>.json``) names these very bytes (their SHA-256), the archive was sealed
    for that request (its encryption context) and decrypts to the plaintext the record names. Raises ExportRefused
    otherwise (an archive of another request, delivered or opened under the wrong id, or one changed since), and
    ValueError for bytes that are no archive."""
    where = layout.export_record(settings, request_id)
    record = layout.read_document(s3, where, layout.ExportDocument)
    if record is None:
        raise ExportRefused(f"request {request_id} has no export record ({where}): the archive cannot be checked")
    if hashlib.sha256(sealed).hexdigest() != record.archive_sha256:
        raise ExportRefused(
            f"this is not the archive exported for request {request_id}: its SHA-256 is not the one its record"
            f" ({where}) names"
        )
    _, meta = archive_header(io.BytesIO(sealed))
    if sealed_for(meta) != request_id:
        raise ExportRefused(f"this archive was sealed for another request than {request_id}")
    plaintext = unseal(io.BytesIO(sealed), kms)
    if hashlib.sha256(plaintext).hexdigest() != record.plaintext_sha256:
        raise ExportRefused(f"this archive does not decrypt to the one recorded for request {request_id}")
    return plaintext


def expire_archives(s3: Any, to: S3Uri, retention_days: int, now: datetime | None = None) -> list[str]:
    """Delete every version of the archives directly under ``to`` (``<request id>.zip.enc``, lakepurge's by their
    metadata) written ``retention_days`` or more ago: what the stack's lifecycle rule does for access-exports/, for
    any location (the command line's --to, a local stack). Returns the request ids whose archives went."""
    folder = _folder(to)
    cutoff = (now or datetime.now(UTC)) - timedelta(days=retention_days)
    expired: set[str] = set()
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=folder.bucket, Prefix=folder.key):
        for version in page.get("Versions", []):
            name = version["Key"][len(folder.key) :]
            if "/" in name or not name.endswith(ARCHIVE_SUFFIX) or version["LastModified"] > cutoff:
                continue
            pinned = {"VersionId": version["VersionId"]} if version.get("VersionId") not in (None, "null") else {}
            head = s3.head_object(Bucket=folder.bucket, Key=version["Key"], **pinned)
            if (head.get("Metadata") or {}).get("encryption") != ARCHIVE_ENCRYPTION:
                continue  # not an archive of lakepurge's: never deleted
            s3.delete_object(Bucket=folder.bucket, Key=version["Key"], **pinned)
            expired.add(name.removesuffix(ARCHIVE_SUFFIX))
    if expired:
        log.info("expired access-export archives deleted", extra={"archives": len(expired), "days": retention_days})
    return sorted(expired)


def _delete_other_versions(s3: Any, uri: S3Uri, keep: str | None) -> None:
    """Every version of the archive's key but ``keep``: those of an earlier, failed run of the same export hold the
    users' records too. (An unversioned bucket has only the one the last PUT replaced.)"""
    if keep is None or keep == "null":
        return
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for version in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            if version["Key"] == uri.key and version["VersionId"] != keep:
                s3.delete_object(Bucket=uri.bucket, Key=uri.key, VersionId=version["VersionId"])


def presigned_link(uri: S3Uri, seconds: int, not_after: datetime | None = None, now: datetime | None = None) -> Link:
    """A SigV4 presigned GET link to ``uri`` and its real lifetime: ``seconds`` (at most 7 days, SigV4's limit), cut
    to ``not_after`` (the archive's expiry) and, when the process signs with temporary credentials (a role's), to
    their expiry: S3 refuses a link whose signing session ended, whatever its X-Amz-Expires says. The link states
    the lifetime it really has (X-Amz-Expires). Temporary credentials that do not tell their expiry (a Lambda's,
    from its environment) leave it unknown: limited_by "session"."""
    signer = aws.presigner()
    start = now or datetime.now(UTC)
    end, limited_by = start + timedelta(seconds=min(seconds, MAX_LINK_SECONDS)), "requested"
    if not_after is not None and not_after < end:
        end, limited_by = not_after, "archive"
    frozen = signer.credentials.get_frozen_credentials() if signer.credentials is not None else None
    if frozen is not None and frozen.token:
        # botocore keeps a refreshable (temporary) credential's expiry in _expiry_time, with no public accessor
        expiry = getattr(signer.credentials, "_expiry_time", None)
        if expiry is None:
            limited_by = "session"
        elif expiry < end:
            end, limited_by = expiry, "credentials"
    lifetime = max(1, int((end - start).total_seconds()))
    url = signer.client.generate_presigned_url(
        "get_object", Params={"Bucket": uri.bucket, "Key": uri.key}, ExpiresIn=lifetime
    )
    return Link(url, start + timedelta(seconds=lifetime), limited_by)


def export_users(
    settings: Settings,
    users: list[str],
    to: S3Uri,
    fmt: str = "original",
    request_id: str | None = None,
    kms_key: str | None = None,
    expires_seconds: int = MAX_LINK_SECONDS,
    say: Callable[[str], None] = print,
    retention_days: int = DEFAULT_RETENTION_DAYS,
) -> ExportRun:
    """Export the users' records (see the module docstring). Raises ExportRefused before anything is read or written
    when the arguments cannot work, ExportFailed when an object cannot be read (nothing is written then). Archives
    of the destination older than ``retention_days`` are deleted first."""
    started = time.monotonic()
    if fmt not in FORMATS:
        raise ExportRefused(f"--format {fmt}: one of {', '.join(FORMATS)}")
    if not 1 <= expires_seconds <= MAX_LINK_SECONDS:
        raise ExportRefused(f"the link's lifetime must be between 1 second and 7 days, not {expires_seconds} s")
    if retention_days < 1:
        raise ExportRefused(f"the archive's retention must be at least 1 day, not {retention_days}")
    request_id = request_id or f"export-{uuid.uuid4()}"
    if not _REQUEST_ID.fullmatch(request_id):
        raise ExportRefused("--request-id: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
    workflow = settings.workflow
    key_id = kms_key or (workflow.export_kms_key_id or workflow.kms_key_id if workflow is not None else None)
    if not key_id:
        raise ExportRefused(
            "no KMS key to encrypt the archive: pass --kms-key KEY, or set [workflow] export_kms_key_id (or kms_key_id)"
        )
    destination = archive_location(settings, to, request_id)
    s3, kms = aws.client("s3"), aws.client("kms")
    record_uri = layout.export_record(settings, request_id)
    if layout.read_or_none(s3, record_uri) is not None:
        raise ExportRefused(f"request {request_id} was exported already ({record_uri}): use another --request-id")
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    wanted = frozenset(users)
    created = datetime.now(UTC).replace(microsecond=0)
    archive_expires = created + timedelta(days=retention_days)
    expire_archives(s3, to, retention_days, created)
    archive = _Archive(created)
    try:
        store = open_store(settings.index)
        try:
            gaps = [c for c in of_index(settings, store) if not c.complete]
            readers = _follow_tables(s3, store, settings)  # a table's rows: those of its newest version
            hits = store.lookup_objects(sorted(wanted))
        finally:
            store.close()
        objects: list[dict[str, Any]] = []
        gone: list[str] = []
        counts: dict[str, int] = {}
        for number, s3path in enumerate(sorted(hits.objects)):
            uri = S3Uri.parse(s3path)
            dataset = settings.dataset_for(uri.bucket, uri.key)
            if dataset is None:
                continue  # indexed under a dataset since removed from the configuration
            ref = object_ref(s3path, dataset, pseudonymizer)
            hit = hits.objects[s3path]
            partition: dict[str, Any] = {}
            if dataset.is_table:
                if s3path not in readers.get(dataset.name, {}):
                    continue  # a history holder's rows are not the table's
                fields, partition = readers[dataset.name][s3path]
                dataset = dataset.model_copy(update={"id_fields": fields})
            try:
                extract = read_users_records(s3, settings, dataset, s3path, hit.etag, hit.lines, wanted)
                if extract is not None and partition:
                    _with_partition(extract, partition)
                if extract is None:
                    gone.append(ref)
                    continue
                name, written_as, digest, records = _write_object(s3, archive, dataset, extract, fmt, number)
            except Exception as exc:
                log.exception("object could not be exported", extra={"object": ref, "error": type(exc).__name__})
                raise ExportFailed(f"{ref}: {type(exc).__name__}: nothing was exported") from None
            if extract.stale:
                log.info("object changed since indexing: searched again", extra={"object": ref})
            counts[dataset.name] = counts.get(dataset.name, 0) + records
            objects.append(
                {
                    "file": name,
                    "format": written_as,
                    "sha256": digest,
                    "dataset": dataset.name,
                    "source_format": "whole-object" if dataset.per_object else dataset.format,
                    **({"table_version": readers[dataset.name][_VERSION]} if dataset.is_table else {}),
                    "object": ref,
                    "version_id": extract.head.version_id,
                    "etag": extract.head.etag,
                    "lines": "whole-object" if dataset.per_object else extract.lines,
                    "records": records,
                    "stale_index": extract.stale,
                }
            )
        relational = _export_relational(settings, sorted(wanted), archive)
        user_hashes = pseudonymizer.many(wanted)
        empty = not objects and not relational
        manifest: dict[str, Any] = {
            "export_version": EXPORT_VERSION,
            "request_id": request_id,
            "created_at": created.isoformat(),
            "format": fmt,
            "users_requested": len(user_hashes),
            "users_found": hits.users_found,
            "user_hashes": user_hashes,
            "objects": objects,
            "relational": relational,
            "objects_without_the_users_now": len(gone),
            "coverage_gaps": [f"{g.dataset}: {g.reason}" for g in gaps],
            "lines": "0-based lines of the decompressed object (a CSV record's first line, the header being line 0);"
            " row index for Parquet",
        }
        if empty:
            manifest["note"] = "nothing found: none of the requested users has records in the indexed lake"
        archive.finish(manifest)
        plaintext_sha256 = _sha256_of(archive.file)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as sealed:
            wrapped_by = seal(archive.file, sealed, kms, key_id, request_id)
            sealed.seek(0)
            archive_sha256 = _sha256_of(sealed)
            # Unconditional: an archive already there without a record is a failed run's, replaced (and its version
            # deleted once the record is written); the record is written once, and is what makes the export done.
            written = s3.put_object(
                Bucket=destination.bucket,
                Key=destination.key,
                Body=sealed,
                ContentType="application/octet-stream",
                Metadata={
                    "request-id": request_id,
                    "sha256": archive_sha256,
                    "encryption": ARCHIVE_ENCRYPTION,
                    "expires-at": archive_expires.isoformat(),
                },
            )
    finally:
        archive.close()
    archive_version = written.get("VersionId")
    link = presigned_link(destination, expires_seconds, not_after=archive_expires)
    expires_at = link.expires_at.isoformat()
    document = layout.ExportDocument(
        export_version=EXPORT_VERSION,
        request_id=request_id,
        created_at=created.isoformat(),
        user_hashes=user_hashes,
        users_found=hits.users_found,
        format=fmt,
        records=counts,
        objects=[
            layout.ExportObject(
                object=o["object"],
                dataset=o["dataset"],
                version_id=o["version_id"],
                etag=o["etag"],
                records=o["records"],
                stale_index=o["stale_index"],
            )
            for o in objects
        ],
        relational=[layout.ExportTable(name=t["name"], table=t["table"], rows=t["rows"]) for t in relational],
        archive=str(destination),
        archive_sha256=archive_sha256,
        plaintext_sha256=plaintext_sha256,
        kms_key_id=wrapped_by,
        encryption_context={EXPORT_CONTEXT_KEY: request_id},
        link_expires_at=expires_at,
        coverage_gaps=manifest["coverage_gaps"],
        archive_version_id=archive_version,
        archive_expires_at=archive_expires.isoformat(),
    )
    try:
        s3.put_object(
            Bucket=record_uri.bucket,
            Key=record_uri.key,
            Body=orjson.dumps(document.to_json(), option=orjson.OPT_INDENT_2),
            ContentType="application/json",
            IfNoneMatch="*",
        )
    except ClientError as exc:
        if error_code(exc) not in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
            raise
        if archive_version not in (None, "null"):  # the other run's archive is the one its record names
            s3.delete_object(Bucket=destination.bucket, Key=destination.key, VersionId=archive_version)
        raise ExportRefused(
            f"request {request_id} was exported at the same time by another run ({record_uri})"
        ) from None
    _delete_other_versions(s3, destination, archive_version)
    log.info(
        "access export written",
        extra={"request_id": request_id, "objects": len(objects), "records": sum(counts.values())},
    )
    run = ExportRun(
        request_id=request_id,
        archive=str(destination),
        link=link.url,
        link_expires_at=expires_at,
        link_limited_by=link.limited_by,
        archive_expires_at=archive_expires.isoformat(),
        record=str(record_uri),
        archive_sha256=archive_sha256,
        users_requested=len(user_hashes),
        users_found=hits.users_found,
        records=counts,
        objects=len(objects),
        relational_rows={t["name"]: t["rows"] for t in relational},
        coverage_gaps=manifest["coverage_gaps"],
        seconds=time.monotonic() - started,
    )
    _tell(run, gaps_fix=[g.fix for g in gaps], say=say)
    return run


def _sha256_of(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := handle.read(SEGMENT_BYTES):
        digest.update(chunk)
    handle.seek(0)
    return digest.hexdigest()


def _tell(run: ExportRun, gaps_fix: list[str], say: Callable[[str], None]) -> None:
    if run.empty:
        say(
            f"export {run.request_id}: nothing found: none of the {run.users_requested} user(s) has records in the"
            " indexed lake; the archive holds an empty manifest"
        )
    else:
        say(
            f"export {run.request_id}: {sum(run.records.values())} record(s) of {run.users_found} of"
            f" {run.users_requested} user(s) in {run.objects} object(s),"
            f" {sum(run.relational_rows.values())} relational row(s)"
        )
    for name, records in sorted(run.records.items()):
        say(f"  dataset {name}: {records} record(s)")
    for name, rows in sorted(run.relational_rows.items()):
        say(f"  table {name}: {rows} row(s)")
    for gap, fix in zip(run.coverage_gaps, gaps_fix, strict=True):
        say(f"  WARNING: dataset {gap}: its records may be missing from the archive (run: {fix})")
    say(f"archive {run.archive} (sha256 {run.archive_sha256}), encrypted with a KMS data key of this request")
    say(f"  kept until {run.archive_expires_at}, then deleted (the export retention)")
    say(f"record {run.record}")
    say(f"link, valid until {run.link_expires_at}{LINK_LIMITS[run.link_limited_by]}:")
    say(f"  {run.link}")


# Why a link ends when it does (Link.limited_by), in the words the export prints.
LINK_LIMITS = {
    "requested": "",
    "archive": " (when the archive expires)",
    "credentials": " (when the temporary credentials that signed it expire)",
    "session": (
        " at the latest: it was signed with temporary credentials whose expiry this process cannot see, and stops"
        " working when their session ends; mint a longer one with `lakepurge export --link REQUEST_ID`"
    ),
}
