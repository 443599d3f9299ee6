"""Indexing one object: read the current version, find each record's user ids, replace the object's index rows.

The indexer never trusts an event's description of an object: it reads what is in S3 now. Replayed, duplicated
and out-of-order events therefore all converge on the index a fresh backfill would build.
"""

from __future__ import annotations

import csv
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson
from botocore.exceptions import ClientError

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import exempt_datasets, id_rules
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import ObjectChanged, ObjectHead, head_object, head_version, open_body, open_seekable
from lakepurge.index.base import WHOLE_OBJECT, IndexStore, NoncurrentVersion, ObjectIndex, UnindexableLine
from lakepurge.records.formats import group_records
from lakepurge.records.identifiers import without_marked_ids
from lakepurge.records.ids import IdFieldError, IdKeys, extract_ids, id_problem, parse_paths, parse_record
from lakepurge.records.record_map import RecordMapBuilder
from lakepurge.tables.detect import TableFormatError, detect_cached, key_table_format
from lakepurge.tables.iceberg import is_metadata_file
from lakepurge.tables.index import NotIndexed, follow_table, open_table

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

Action = Literal["indexed", "unchanged", "removed", "absent", "ignored", "failed"]


@dataclass(frozen=True, slots=True)
class IndexOutcome:
    s3path: str
    action: Action
    records: int = 0
    unindexable: int = 0
    returning_users: int = 0
    reason: str | None = None  # why an object under a dataset was ignored (not data: see skip_reason)
    error: str = ""  # why a "failed" object could not be indexed (failure_reason: never record content)


FAILED_PREFIX = "object could not be indexed: "


def failure_reason(exc: BaseException) -> str:
    """What an unreadable object's failure is, for the index, `status` and logs: the error class and a short
    message from which anything quoted (which could be record content) is cut."""
    if isinstance(exc, UnicodeError) and hasattr(exc, "reason"):
        message = f"{exc.reason} at byte {getattr(exc, 'start', '?')}"
    else:
        text = str(exc).strip().splitlines()
        message = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text[0] if text else "")
        if len(message) > 160:
            message = message[:157] + "..."
    return f"{FAILED_PREFIX}{type(exc).__name__}" + (f": {message}" if message else "")


def failed_object(index: ObjectIndex, reason: str) -> ObjectIndex:
    """The index entry of an object that could not be indexed: no rows, no records, and one whole-object
    unindexable line that `lakepurge status` lists. Its ETag is empty, so a later backfill or event reads it again
    instead of skipping it as unchanged."""
    return ObjectIndex(
        s3path=index.s3path,
        dataset=index.dataset,
        etag="",
        version_id=index.version_id,
        last_modified=index.last_modified,
        unindexable=[UnindexableLine(WHOLE_OBJECT, reason)],
    )


def content_error(exc: BaseException, dataset: DatasetConfig) -> bool:
    """Whether an error reading an object is about what the object holds (the same bytes fail again: record the
    object as failed) rather than about reaching it (transient: raise, so the event is retried)."""
    if isinstance(exc, (csv.Error, UnicodeError, ValueError, zlib.error)):
        return True
    if any(cls.__name__ == "ArrowException" and cls.__module__.startswith("pyarrow") for cls in type(exc).__mro__):
        return True
    # pyarrow reports a corrupt Parquet file as OSError; botocore's network errors are no OSError.
    return dataset.format in ("parquet", "delta") and isinstance(exc, OSError)


def scan_object(s3: S3Client, settings: Settings, dataset: DatasetConfig, head: ObjectHead) -> ObjectIndex:
    """Read one object version and build its index rows (raises ObjectChanged if it is replaced meanwhile)."""
    result = ObjectIndex(
        s3path=head.s3path,
        dataset=dataset.name,
        etag=head.etag,
        version_id=head.version_id,
        last_modified=head.last_modified,
    )
    if dataset.per_object:
        _scan_owner(s3, dataset, head, result)
        return _in_index_forms(settings, dataset, result)
    assert dataset.id_fields is not None
    raw = open_seekable(s3, head) if dataset.format == "parquet" else open_body(s3, head)
    # Where a purge would splice the object, where its records start is noted as they are read.
    mapped = dataset.format != "parquet" and head.size >= settings.purge.splice.min_bytes
    builder = RecordMapBuilder(head.size) if mapped else None
    try:
        indexing, rules = settings.indexing, id_rules(dataset)
        limits = (indexing.max_record_bytes, indexing.inflation)
        grouped = group_records(raw, head.key, dataset.format, dataset.id_fields, *limits, builder, rules)
    finally:
        raw.close()
    result.lines_by_user = grouped.lines_by_user
    result.records = grouped.records
    result.unindexable.extend(UnindexableLine(item.line, item.reason) for item in grouped.unindexable)
    if builder is not None:
        result.record_map = builder.build(head.etag, head.version_id).encode()
    return _in_index_forms(settings, dataset, result)


def _in_index_forms(settings: Settings, dataset: DatasetConfig, result: ObjectIndex) -> ObjectIndex:
    """The object's rows keyed by the index forms of its ids (docs/design/PERSON.md). A typed dataset (id_kind,
    id_kinds, id_composites) was read in index forms already (records.id_typing); an untyped dataset's rows are kept
    as read, but for an id that spells a typed form where kinds are configured: its line becomes unindexable."""
    if dataset.id_typing is not None:
        return result
    what = "id field(s) " + ", ".join(dataset.id_fields) if dataset.id_fields is not None else "the object's owner"
    rows, bad = without_marked_ids(result.lines_by_user, bool(settings.identifiers), what)
    result.lines_by_user = rows
    if bad:
        result.records -= len(bad)
        result.unindexable.extend(UnindexableLine(line, reason) for line, reason in bad.items())
        result.unindexable.sort(key=lambda item: item.line)
    return result


def keep_record_maps(store: IndexStore, maps: Iterable[tuple[str, bytes | None]]) -> None:
    """Store the record maps (s3path, map) of objects whose rows were just written. A map only saves a later purge a
    read of the object: one that cannot be stored is logged and left out, it fails nothing."""
    present = [(s3path, blob) for s3path, blob in maps if blob is not None]
    if not present:
        return
    try:
        store.set_record_maps(present)
    except Exception as exc:
        log.warning("record maps could not be stored", extra={"objects": len(present), "error": type(exc).__name__})


def _scan_owner(s3: S3Client, dataset: DatasetConfig, head: ObjectHead, result: ObjectIndex) -> None:
    """One-user-per-object datasets: the owner comes from the key, a sidecar object or an object tag."""
    owners: tuple[str, ...] = ()
    problem = None
    if dataset.id_from_key is not None:
        match = re.search(dataset.id_from_key, head.key)
        if match is None or not match.group("id"):
            problem = "key does not match id_from_key"
        else:
            owners = (match.group("id"),)
            problem = id_problem(owners[0], "id from the key")
    elif dataset.id_sidecar is not None:
        sidecar_key = head.key + dataset.id_sidecar.suffix
        # the reason is stored and shown by `status`: it names the sidecar by its suffix, never by its key (which
        # holds the data object's key, and so maybe its user's id)
        sidecar = f"sidecar (key + {dataset.id_sidecar.suffix!r})"
        try:
            body = s3.get_object(Bucket=head.bucket, Key=sidecar_key)["Body"].read()
            paths = parse_paths([dataset.id_sidecar.field])
            document = parse_record(body, IdKeys.of(paths))  # every owner it names, should it name the field twice
            if not isinstance(document, dict):
                raise IdFieldError("sidecar is not a JSON object")
            owners = extract_ids(document, paths)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            problem = f"{sidecar} missing"
        except orjson.JSONDecodeError:
            problem = f"{sidecar} is not valid JSON"
        except IdFieldError as exc:
            problem = f"{sidecar}: {exc}"
    else:
        assert dataset.id_tag is not None
        owners = tag_values(s3, dataset, head.bucket, head.key, head.version_id)
        if not owners:
            problem = f"object tag '{dataset.id_tag}' missing"
        for owner in owners:
            problem = problem or id_problem(owner, f"object tag '{dataset.id_tag}'")
    if problem is not None:
        result.unindexable.append(UnindexableLine(WHOLE_OBJECT, problem))
        return
    result.records = 1
    result.lines_by_user = {owner: [WHOLE_OBJECT] for owner in owners}


def tag_values(s3: S3Client, dataset: DatasetConfig, bucket: str, key: str, version_id: str | None) -> tuple[str, ...]:
    """The values of a tag-owned object's owner tag (an object has each tag key at most once); version_id None: the
    current version's."""
    pinned: dict[str, Any] = {"VersionId": version_id} if version_id else {}
    tags = s3.get_object_tagging(Bucket=bucket, Key=key, **pinned)["TagSet"]
    return tuple(t["Value"] for t in tags if t["Key"] == dataset.id_tag and t["Value"])


def tag_owners(
    s3: S3Client, dataset: DatasetConfig, bucket: str, key: str, version_id: str | None = None
) -> frozenset[str]:
    """The owners an index of the object holds now, as its owner tag names them (none while the tag is missing or
    not a valid id: the object is then unindexable)."""
    values = tag_values(s3, dataset, bucket, key, version_id)
    if any(id_problem(value, "tag") is not None for value in values):
        return frozenset()
    return frozenset(values)


def flag_erased_users(
    store: IndexStore, scanned: ObjectIndex, pseudonymizer: Pseudonymizer | None, settings: Settings | None = None
) -> None:
    """Count the object's users who are on the suppression list (erased before, back from a restored backup or a
    replayed pipeline): the object is flagged in the index and in `lakepurge status`. Not in a dataset an exemption
    keeps today ([[exemptions]]): its erased users' records are there by right, not back."""
    kept = exempt_datasets(settings.exemptions, datetime.now(UTC).date()) if settings is not None else {}
    if pseudonymizer is None or not scanned.lines_by_user or scanned.dataset in kept:
        return
    hashes = [pseudonymizer(user) for user in scanned.lines_by_user]
    scanned.returning_users = len(store.erased_among(hashes))


def _skip_reason(dataset: DatasetConfig, key: str, tags_changed: bool) -> str | None:
    """Why an event on this key changes nothing indexed (not data; a tag change where tags own nothing); a key of a
    Delta, Iceberg or Hudi table inside a dataset of files is refused (TableFormatError)."""
    if tags_changed and dataset.id_tag is None:
        return "a tag change outside a tag-owned dataset"
    table_format = key_table_format(dataset, key)
    if table_format is not None:
        raise TableFormatError(dataset, table_format)
    return dataset.skip_reason(key)


def index_object(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    bucket: str,
    key: str,
    force: bool = False,
    attempts: int = 3,
    pseudonymizer: Pseudonymizer | None = None,
    tags_changed: bool = False,
) -> IndexOutcome:
    """Bring the index in line with what S3 holds now at bucket/key (created, overwritten, removed or, with
    tags_changed, tagged).

    Keys that are not data (commit markers, checksums, hidden and temporary files: DatasetConfig.skip_reason) are
    ignored unread. A Delta, Iceberg or Hudi table is refused (TableFormatError): its files must not be indexed
    for a purge that would rewrite them.

    A version the index holds already (the same ETag and version id: the purge's and the vacuum's own writes, events
    delivered again) is not read: the index answers. Where the owner is named outside the object's bytes (an owner
    tag, a sidecar), it can change while the object's ETag does not (tagging keeps ETag and last-modified time; a
    sidecar is an object of its own): the object is then indexed whatever ETag the index holds (its tags or sidecar
    are read, never its bytes), and its owner read again after the write, so that an owner changed meanwhile (an
    earlier event handled late) starts it again. A tag change elsewhere changes nothing indexed."""
    dataset = settings.dataset_for(bucket, key)
    if dataset is None:
        return IndexOutcome(f"s3://{bucket}/{key}", "ignored")
    if dataset.is_table:
        return _table_event(s3, store, settings, dataset, bucket, key)
    skipped = _skip_reason(dataset, key, tags_changed)
    if skipped is not None:
        return IndexOutcome(f"s3://{bucket}/{key}", "ignored", reason=skipped)
    table_format = detect_cached(s3, dataset)
    if table_format is not None:
        raise TableFormatError(dataset, table_format)
    return _index_current(s3, store, settings, dataset, bucket, dataset.data_key(key), force, attempts, pseudonymizer)


def _index_current(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    dataset: DatasetConfig,
    bucket: str,
    key: str,
    force: bool,
    attempts: int,
    pseudonymizer: Pseudonymizer | None,
) -> IndexOutcome:
    """index_object for a data object of a dataset of files (not a table): its current version, read once."""
    s3path = f"s3://{bucket}/{key}"
    ref = object_ref(s3path, dataset, pseudonymizer)
    owner_apart = dataset.id_tag is not None or dataset.id_sidecar is not None
    force = force or owner_apart
    for attempt in range(1, attempts + 1):
        head = head_object(s3, bucket, key)
        if head is None:
            removed = store.remove_object(s3path)
            if head_object(s3, bucket, key) is not None:
                # Written again after our HEAD: its own indexing may have run before this removal. Index it now.
                continue
            log.info("object gone", extra={"object": ref, "removed_rows": removed})
            return IndexOutcome(s3path, "removed" if removed else "absent")
        held = None if force else store.get_object(s3path)
        if held is not None and held.etag == head.etag and held.version_id == head.version_id:
            # Indexed at this very version already (the purge's or the vacuum's own write, which moved the index
            # itself; an event delivered again): its rows came from these bytes, so they are not read again. Returning
            # users are counted when a version is indexed, and a purge counts them again itself: none found here.
            return IndexOutcome(s3path, "unchanged", held.records, len(held.unindexable))
        try:
            scanned = scan_object(s3, settings, dataset, head)
        except ObjectChanged:
            log.info("object replaced while reading; reading again", extra={"object": ref, "attempt": attempt})
            continue
        except Exception as exc:
            if not content_error(exc, dataset):
                raise
            return _record_failure(store, dataset, head, exc, force)
        flag_erased_users(store, scanned, pseudonymizer, settings)
        written = store.replace_objects([scanned], force=force)
        if written:
            keep_record_maps(store, [(s3path, scanned.record_map)])
        now = head_object(s3, bucket, key) if written else head
        if now is None or now.etag != head.etag:
            # Replaced or deleted since our HEAD: a newer version written in the same second (S3 times have whole
            # seconds) would not win the index's ordering against ours, so bring the index to what S3 holds now.
            log.info("object changed while being indexed; indexing it again", extra={"object": ref})
            continue
        if owner_apart and _owners_of(scan_object(s3, settings, dataset, now)) != _owners_of(scanned):
            log.info("owner changed while being indexed; indexing it again", extra={"object": ref})
            continue
        if scanned.returning_users:
            log.warning("returning users found", extra={"object": ref, "users": scanned.returning_users})
        if scanned.unindexable:
            log.warning(
                "unindexable lines",
                extra={
                    "object": ref,
                    "count": len(scanned.unindexable),
                    "first_lines": [u.line for u in scanned.unindexable[:10]],
                },
            )
        action: Action = "indexed" if written else "unchanged"
        return IndexOutcome(s3path, action, scanned.records, len(scanned.unindexable), scanned.returning_users)
    raise ObjectChanged(f"{ref} kept changing while being indexed ({attempts} attempts)")


def _owners_of(scanned: ObjectIndex) -> frozenset[str]:
    """The users an index entry holds as owning the whole object."""
    return frozenset(user for user, lines in scanned.lines_by_user.items() if WHOLE_OBJECT in lines)


def _table_event(
    s3: S3Client, store: IndexStore, settings: Settings, dataset: DatasetConfig, bucket: str, key: str
) -> IndexOutcome:
    """An event under a table's location: a commit (or checkpoint) of its log, an Iceberg metadata file, makes the
    index follow the table to its newest version; a data file is indexed from the commit that adds it, never on its
    own (a file no commit added is not the table's: reconciliation reads it as history)."""
    s3path = f"s3://{bucket}/{key}"
    table = open_table(s3, dataset)
    if not table.is_metadata(key):
        return IndexOutcome(s3path, "ignored", reason="a table's data file: indexed from the commit that adds it")
    if dataset.format == "iceberg" and not is_metadata_file(key):
        return IndexOutcome(s3path, "ignored", reason="an Iceberg manifest: followed from the metadata file's event")
    try:
        followed = follow_table(s3, store, settings, dataset)
    except NotIndexed as exc:
        return IndexOutcome(s3path, "ignored", reason=str(exc))
    action: Action = "indexed" if followed.files_indexed or followed.files_left else "unchanged"
    return IndexOutcome(s3path, action, records=followed.files_indexed)


def _record_failure(
    store: IndexStore, dataset: DatasetConfig, head: ObjectHead, exc: Exception, force: bool
) -> IndexOutcome:
    """An object whose content cannot be read as its dataset's format: recorded as failed, never raised (the same
    bytes would fail every retry, and the other objects of the batch must still be indexed)."""
    reason = failure_reason(exc)
    empty = ObjectIndex(head.s3path, dataset.name, head.etag, head.version_id, head.last_modified)
    store.replace_objects([failed_object(empty, reason)], force=force)
    log.warning("object could not be indexed", extra={"object": object_ref(head.s3path, dataset), "error": reason})
    return IndexOutcome(head.s3path, "failed", unindexable=1, error=reason)


def record_created_version(
    s3: S3Client, store: IndexStore, settings: Settings, bucket: str, key: str, version_id: str
) -> bool:
    """An ObjectCreated event names the version it created. When that version is no longer current by the time the
    event is handled (overwritten or deleted meanwhile), index_object never read it, yet S3 keeps it: read it now and
    keep its users as a noncurrent version. Returns whether any were recorded."""
    dataset = settings.dataset_for(bucket, key)
    unversioned = not version_id or version_id == "null"
    # A table's history holders come from its log and its reconciliation.
    if dataset is None or unversioned or dataset.is_table or dataset.is_sidecar(key) or dataset.skip_reason(key):
        return False
    current = head_object(s3, bucket, key)
    if current is not None and current.version_id == version_id:
        return False  # still current: index_object read it
    head = head_version(s3, bucket, key, version_id)
    if head is None:
        return False  # deleted for good since
    try:
        scanned = scan_object(s3, settings, dataset, head)
    except ObjectChanged:
        return False
    if not scanned.lines_by_user:
        return False
    store.record_noncurrent([NoncurrentVersion(head.s3path, dataset.name, version_id, tuple(scanned.lines_by_user))])
    log.info("overwritten version indexed as noncurrent", extra={"object": object_ref(head.s3path, dataset)})
    return True
