"""Access export (GDPR Art. 15, "send me a copy of my data"): exactly the users' records, read through the index,
in one encrypted archive, with a time-limited link to it. The lake is only ever read.

For each object the index names:

1. HEAD the current version. Still the indexed ETag: the indexed lines are read. Changed since indexing: the current
   version is searched again for the users' lines (the purge engine's :func:`~lakepurge.purge.engine.find_user_lines`).
   Every read is pinned to that version (``VersionId``, or ``If-Match`` on the ETag; a replacement mid-read starts the
   object again).
2. Each line is checked to hold one of the users before it is taken, by the purge's own ownership check
   (:class:`~lakepurge.purge.ownership.Ownership` for JSON Lines and CSV, :func:`~lakepurge.purge.ownership.owned_rows`
   for Parquet): a stale index never exports someone else's record. JSON Lines and CSV objects are streamed only up to
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
   (:func:`~lakepurge.access.sealing.seal`; :func:`~lakepurge.access.sealing.unseal` reverses it, given ``kms:Decrypt``
   under that context). It is written to the destination, and a presigned GET link to it is made (SigV4; 7 days at
   most, and never past the signing credentials' expiry nor the archive's: :func:`presigned_link`).
5. ``exports/<request id>.json`` in the reports location (:class:`lakepurge.reports.layout.ExportDocument`) records
   what was exported: users as keyed hashes, counts, objects, the archive, its version and SHA-256. The record is
   written last, once: it is what makes the export done. A run that failed before it left at most an archive, which a
   run of the same request id replaces (every earlier version of it deleted): an export is idempotent per request id.

Archives expire: ``[workflow] export_retention_days`` (30 by default) after they were written, by the stack's
lifecycle rule on ``access-exports/`` and, wherever they are, by each export (:func:`expire_archives`). ``lakepurge
export --open`` opens an archive only as the request whose record names its bytes (:func:`open_archive`).

:func:`export_users` runs four steps: look-up (the index), extract (steps 1 to 3: reading an object is
lakepurge.access.extract, the zip lakepurge.access.archive), seal (step 4, the format is lakepurge.access.sealing)
and record (step 5).
"""

from __future__ import annotations

import hashlib
import io
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import IO, TYPE_CHECKING, Any

import orjson

from lakepurge.access.archive import Archive, export_relational, write_object, write_revealed
from lakepurge.access.extract import TABLE_VERSION, follow_tables, read_users_records, with_partition
from lakepurge.access.sealing import EXPORT_CONTEXT_KEY, SEGMENT_BYTES, archive_header, seal, sealed_for, unseal
from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import delete_key_versions
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_existing
from lakepurge.index.base import Hits, ObjectHits
from lakepurge.indexing.coverage import DatasetCoverage, of_index
from lakepurge.indexing.resolution import Expansion, ExpansionRefused, expands, resolve
from lakepurge.protection.protect import Protection, reveal_for_person
from lakepurge.protection.shred import protected_datasets
from lakepurge.protection.vault import Vault
from lakepurge.records.limits import IN_MEMORY_BYTES
from lakepurge.reports import layout
from lakepurge.tables.base import TableError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

EXPORT_VERSION = 1
FORMATS = ("original", "jsonl", "csv")
MAX_LINK_SECONDS = 7 * 24 * 3600  # a SigV4 presigned URL lives at most 7 days
DEFAULT_RETENTION_DAYS = 30  # [workflow] export_retention_days
ARCHIVE_SUFFIX = ".zip.enc"
ARCHIVE_ENCRYPTION = "lakepurge-aes-256-gcm-v1"  # the archive's "encryption" metadata: what expire_archives deletes
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class ExportRefused(Exception):
    """The export cannot start as asked (an argument, the destination, a request id already used); nothing written.
    The message names no user id."""


class ExportExpansionRefused(ExportRefused):
    """A guard of resolution stopped the export (a shared identifier): refused as the purge's, exit 3."""


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


# -- where the archive goes, its link, its expiry -------------------------------------------------------------------


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


def open_archive(settings: Settings, s3: S3Client, kms: Any, sealed: bytes, request_id: str) -> bytes:
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


def expire_archives(s3: S3Client, to: S3Uri, retention_days: int, now: datetime | None = None) -> list[str]:
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
            pinned: dict[str, Any] = (
                {"VersionId": version["VersionId"]} if version.get("VersionId") not in (None, "null") else {}
            )
            head = s3.head_object(Bucket=folder.bucket, Key=version["Key"], **pinned)
            if (head.get("Metadata") or {}).get("encryption") != ARCHIVE_ENCRYPTION:
                continue  # not an archive of lakepurge's: never deleted
            s3.delete_object(Bucket=folder.bucket, Key=version["Key"], **pinned)
            expired.add(name.removesuffix(ARCHIVE_SUFFIX))
    if expired:
        log.info("expired access-export archives deleted", extra={"archives": len(expired), "days": retention_days})
    return sorted(expired)


def _delete_other_versions(s3: S3Client, uri: S3Uri, keep: str | None) -> None:
    """Every version of the archive's key but ``keep``: those of an earlier, failed run of the same export hold the
    users' records too. (An unversioned bucket has only the one the last PUT replaced.)"""
    if keep is None or keep == "null":
        return
    delete_key_versions(s3, uri, keep=lambda version: version["VersionId"] == keep)


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


# -- the export: look-up, extract, seal, record -----------------------------------------------------------------------


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
    no_expand: Sequence[str] = (),
) -> ExportRun:
    """Export the users' records (see the module docstring). Raises ExportRefused before anything is read or written
    when the arguments cannot work, ExportFailed when an object cannot be read (nothing is written then). Archives
    of the destination older than ``retention_days`` are deleted first. A typed request is resolved as an erasure's
    report resolves it (lakepurge.indexing.resolution): every identifier of the person is exported."""
    started = time.monotonic()
    request_id, key_id = _checked(settings, fmt, request_id, kms_key, expires_seconds, retention_days)
    destination = archive_location(settings, to, request_id)
    s3, kms = aws.client("s3"), aws.client("kms")
    record_uri = layout.export_record(settings, request_id)
    if layout.read_or_none(s3, record_uri) is not None:
        raise ExportRefused(f"request {request_id} was exported already ({record_uri}): use another --request-id")
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    expansion = _resolved(settings, users, no_expand, pseudonymizer)
    wanted = frozenset(expansion.forms if expansion is not None else users)
    created = datetime.now(UTC).replace(microsecond=0)
    archive_expires = created + timedelta(days=retention_days)
    expire_archives(s3, to, retention_days, created)
    archive = Archive(created)
    try:
        found = _look_up(s3, settings, wanted)
        taken = _extract(s3, settings, found, wanted, pseudonymizer, archive, fmt)
        user_hashes = pseudonymizer.many(wanted)
        manifest = _manifest(request_id, created, fmt, user_hashes, found, taken)
        sealed = _seal(s3, kms, archive, manifest, key_id, request_id, destination, archive_expires)
    finally:
        archive.close()
    link = presigned_link(destination, expires_seconds, not_after=archive_expires)
    document = layout.ExportDocument(
        export_version=EXPORT_VERSION,
        request_id=request_id,
        created_at=created.isoformat(),
        user_hashes=user_hashes,
        users_found=found.hits.users_found,
        format=fmt,
        records=taken.counts,
        objects=[
            layout.ExportObject(
                object=o["object"],
                dataset=o["dataset"],
                version_id=o["version_id"],
                etag=o["etag"],
                records=o["records"],
                stale_index=o["stale_index"],
            )
            for o in taken.objects
        ],
        relational=[layout.ExportTable(name=t["name"], table=t["table"], rows=t["rows"]) for t in taken.relational],
        archive=str(destination),
        archive_sha256=sealed.sha256,
        plaintext_sha256=sealed.plaintext_sha256,
        kms_key_id=sealed.wrapped_by,
        encryption_context={EXPORT_CONTEXT_KEY: request_id},
        link_expires_at=link.expires_at.isoformat(),
        coverage_gaps=manifest["coverage_gaps"],
        archive_version_id=sealed.version_id,
        archive_expires_at=archive_expires.isoformat(),
        identifiers=expansion.to_report(pseudonymizer) if expansion is not None else None,
    )
    _record(s3, record_uri, document, destination, sealed.version_id)
    run = ExportRun(
        request_id=request_id,
        archive=str(destination),
        link=link.url,
        link_expires_at=link.expires_at.isoformat(),
        link_limited_by=link.limited_by,
        archive_expires_at=archive_expires.isoformat(),
        record=str(record_uri),
        archive_sha256=sealed.sha256,
        users_requested=len(user_hashes),
        users_found=found.hits.users_found,
        records=taken.counts,
        objects=len(taken.objects),
        relational_rows={t["name"]: t["rows"] for t in taken.relational},
        coverage_gaps=manifest["coverage_gaps"],
        seconds=time.monotonic() - started,
    )
    _tell(run, gaps_fix=[g.fix for g in found.gaps], say=say)
    return run


def _checked(
    settings: Settings,
    fmt: str,
    request_id: str | None,
    kms_key: str | None,
    expires_seconds: int,
    retention_days: int,
) -> tuple[str, str]:
    """The request id (a new one when none is given) and the KMS key the archive is sealed with; ExportRefused when
    an argument cannot work."""
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
    return request_id, key_id


@dataclass(frozen=True)
class _Found:
    """What the index holds for the users: the datasets it does not fully cover, each table dataset's live files at
    its newest version (extract.follow_tables), and the objects with the users' lines."""

    gaps: list[DatasetCoverage]
    tables: dict[str, dict[str, Any]]
    hits: Hits
    owners: dict[str, str] = field(default_factory=dict)  # pseudonym -> the user's id, for crypto-shred datasets


def _resolved(
    settings: Settings, users: list[str], no_expand: Sequence[str], pseudonymizer: Pseudonymizer
) -> Expansion | None:
    """A typed request's resolution (None for an untyped one); ExportRefused when a guard stops it."""
    if not expands(settings, users):
        return None
    store = open_existing(settings.index)
    try:
        return resolve(store, settings, users, no_expand, pseudonymizer)
    except ExpansionRefused as exc:
        raise ExportExpansionRefused(str(exc)) from None
    finally:
        store.close()


def _look_up(s3: S3Client, settings: Settings, wanted: frozenset[str]) -> _Found:
    """Look-up: the index's coverage, the tables followed to their newest version (a table's rows are those of its
    newest version; one that cannot be followed fails the export), and the objects holding the users."""
    store = open_existing(settings.index)
    try:
        gaps = [c for c in of_index(settings, store) if not c.complete]
        try:
            tables = follow_tables(s3, store, settings)
        except TableError as exc:
            raise ExportFailed(f"{exc}: nothing was exported") from None
        hits = store.lookup_objects(sorted(wanted))
        owners: dict[str, str] = {}
        if protected_datasets(settings):
            # Crypto-shred datasets hold the users' pseudonyms: the vault names them, the index finds them.
            with Vault.open(settings) as vault:
                owners = {pseudonym: user for user, pseudonym in vault.pseudonyms_of(sorted(wanted)).items()}
            hits = _with(hits, store.lookup_objects(sorted(owners)), len(wanted))
    finally:
        store.close()
    return _Found(gaps, tables, hits, owners)


def _with(hits: Hits, more: Hits, requested: int) -> Hits:
    """Two look-ups' objects together (an object in both: the lines of both). A user found by id and by pseudonym
    is counted by both look-ups: the users found are capped at the users requested."""
    objects = dict(hits.objects)
    for path, hit in more.objects.items():
        known = objects.get(path)
        lines = hit.lines if known is None else tuple(sorted(set(known.lines) | set(hit.lines)))
        objects[path] = ObjectHits(path, hit.etag, lines)
    return Hits(objects, min(requested, hits.users_found + more.users_found))


@dataclass
class _Taken:
    """What the archive holds: the manifest's entry of each object, the objects that no longer hold the users (by
    reference), the records per dataset, the relational tables' entries."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    relational: list[dict[str, Any]] = field(default_factory=list)


def _extract(
    s3: S3Client,
    settings: Settings,
    found: _Found,
    wanted: frozenset[str],
    pseudonymizer: Pseudonymizer,
    archive: Archive,
    fmt: str,
) -> _Taken:
    """Extract: each object's records of the users, read from the lake as it is now and written into the archive,
    then the users' rows of each relational table. An object that cannot be read fails the export."""
    taken = _Taken()
    vault = Vault.open(settings, create=False) if found.owners else None
    try:
        _extract_objects(s3, settings, found, wanted, pseudonymizer, archive, fmt, taken, vault)
    finally:
        if vault is not None:
            vault.close()
    taken.relational = export_relational(settings, sorted(wanted), archive)
    return taken


def _extract_objects(
    s3: S3Client,
    settings: Settings,
    found: _Found,
    wanted: frozenset[str],
    pseudonymizer: Pseudonymizer,
    archive: Archive,
    fmt: str,
    taken: _Taken,
    vault: Vault | None,
) -> None:
    for number, s3path in enumerate(sorted(found.hits.objects)):
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is None:
            continue  # indexed under a dataset since removed from the configuration
        ref = object_ref(s3path, dataset, pseudonymizer)
        hit = found.hits.objects[s3path]
        partition: dict[str, Any] = {}
        if dataset.is_table:
            if s3path not in found.tables.get(dataset.name, {}):
                continue  # a history holder's rows are not the table's
            fields, partition = found.tables[dataset.name][s3path]
            dataset = dataset.model_copy(update={"id_fields": fields})
        protected = dataset.protection == "crypto-shred" and vault is not None
        owned = wanted | frozenset(found.owners) if protected else wanted
        try:
            extract = read_users_records(s3, settings, dataset, s3path, hit.etag, hit.lines, owned)
            if extract is not None and partition:
                with_partition(extract, partition)
            if extract is None:
                taken.gone.append(ref)
                continue
            if protected and vault is not None:
                reveal = partial(reveal_for_person, vault, protection=Protection.of(dataset), owners=found.owners)
                name, written_as, digest, records = write_revealed(archive, dataset, extract, fmt, number, reveal)
            else:
                name, written_as, digest, records = write_object(s3, archive, dataset, extract, fmt, number)
        except Exception as exc:
            log.exception("object could not be exported", extra={"object": ref, "error": type(exc).__name__})
            raise ExportFailed(f"{ref}: {type(exc).__name__}: nothing was exported") from None
        if extract.stale:
            log.info("object changed since indexing: searched again", extra={"object": ref})
        taken.counts[dataset.name] = taken.counts.get(dataset.name, 0) + records
        taken.objects.append(
            {
                "file": name,
                "format": written_as,
                "sha256": digest,
                "dataset": dataset.name,
                "source_format": "whole-object" if dataset.per_object else dataset.format,
                **({"table_version": found.tables[dataset.name][TABLE_VERSION]} if dataset.is_table else {}),
                "object": ref,
                "version_id": extract.head.version_id,
                "etag": extract.head.etag,
                "lines": "whole-object" if dataset.per_object else extract.lines,
                "records": records,
                "stale_index": extract.stale,
                **({"decrypted_through_the_vault": True} if protected else {}),
            }
        )


def _manifest(
    request_id: str, created: datetime, fmt: str, user_hashes: list[str], found: _Found, taken: _Taken
) -> dict[str, Any]:
    """manifest.json: what each file of the archive holds and where it came from; users as keyed hashes only."""
    manifest: dict[str, Any] = {
        "export_version": EXPORT_VERSION,
        "request_id": request_id,
        "created_at": created.isoformat(),
        "format": fmt,
        "users_requested": len(user_hashes),
        "users_found": found.hits.users_found,
        "user_hashes": user_hashes,
        "objects": taken.objects,
        "relational": taken.relational,
        "objects_without_the_users_now": len(taken.gone),
        "coverage_gaps": [f"{g.dataset}: {g.reason}" for g in found.gaps],
        "lines": "0-based lines of the decompressed object (a CSV record's first line, the header being line 0);"
        " row index for Parquet",
    }
    if not taken.objects and not taken.relational:
        manifest["note"] = "nothing found: none of the requested users has records in the indexed lake"
    return manifest


@dataclass(frozen=True)
class _Sealed:
    """The sealed archive as written: its SHA-256 and its plaintext's, its S3 version, the KMS key of its data key."""

    sha256: str
    plaintext_sha256: str
    version_id: str | None
    wrapped_by: str


def _seal(
    s3: S3Client,
    kms: Any,
    archive: Archive,
    manifest: dict[str, Any],
    key_id: str,
    request_id: str,
    destination: S3Uri,
    expires: datetime,
) -> _Sealed:
    """Seal: the manifest closes the zip, which is encrypted with a data key of this request and written to its
    destination."""
    archive.finish(manifest)
    plaintext_sha256 = _sha256_of(archive.file)
    with tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES) as sealed:
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
                "expires-at": expires.isoformat(),
            },
        )
    return _Sealed(archive_sha256, plaintext_sha256, written.get("VersionId"), wrapped_by)


def _record(
    s3: S3Client, record_uri: S3Uri, document: layout.ExportDocument, destination: S3Uri, archive_version: str | None
) -> None:
    """Record: exports/<request id>.json, written once, is what makes the export done; then the archive's other
    versions (a failed run's) go. A run of the same request id that recorded first keeps its archive: this one's is
    deleted and the export refused."""
    try:
        layout.write_once(s3, record_uri, orjson.dumps(document.to_json(), option=orjson.OPT_INDENT_2))
    except layout.AlreadyWritten:
        if archive_version not in (None, "null"):  # the other run's archive is the one its record names
            s3.delete_object(Bucket=destination.bucket, Key=destination.key, VersionId=archive_version)
        raise ExportRefused(
            f"request {document.request_id} was exported at the same time by another run ({record_uri})"
        ) from None
    _delete_other_versions(s3, destination, archive_version)
    log.info(
        "access export written",
        extra={
            "request_id": document.request_id,
            "objects": len(document.objects),
            "records": sum(document.records.values()),
        },
    )


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
