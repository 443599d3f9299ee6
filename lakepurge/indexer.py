"""Indexing one object: read the current version, find each record's user ids, replace the object's index rows.

The indexer never trusts an event's description of an object: it reads what is in S3 now. Replayed, duplicated
and out-of-order events therefore all converge on the index a fresh backfill would build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from botocore.exceptions import ClientError

from lakepurge.config import DatasetConfig, Settings
from lakepurge.formats import IdFieldError, extract_ids, group_records, parse_paths
from lakepurge.index.base import WHOLE_OBJECT, IndexStore, ObjectIndex, UnindexableLine
from lakepurge.logs import get_logger, object_ref
from lakepurge.privacy import Pseudonymizer
from lakepurge.s3io import ObjectChanged, ObjectHead, head_object, open_body, open_seekable

log = get_logger(__name__)

Action = Literal["indexed", "unchanged", "removed", "absent", "ignored"]


@dataclass(frozen=True, slots=True)
class IndexOutcome:
    s3path: str
    action: Action
    records: int = 0
    unindexable: int = 0
    reappeared: int = 0


def scan_object(s3: Any, settings: Settings, dataset: DatasetConfig, head: ObjectHead) -> ObjectIndex:
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
        return result
    assert dataset.id_fields is not None
    raw = open_seekable(s3, head) if dataset.format == "parquet" else open_body(s3, head)
    try:
        grouped = group_records(raw, head.key, dataset.format, dataset.id_fields, settings.indexing.max_record_bytes)
    finally:
        raw.close()
    result.lines_by_user = grouped.lines_by_user
    result.records = grouped.records
    result.unindexable.extend(UnindexableLine(item.line, item.reason) for item in grouped.unindexable)
    return result


def _scan_owner(s3: Any, dataset: DatasetConfig, head: ObjectHead, result: ObjectIndex) -> None:
    """One-user-per-object datasets: the owner comes from the key, a sidecar object or an object tag."""
    owners: tuple[str, ...] = ()
    problem = None
    if dataset.id_from_key is not None:
        match = re.search(dataset.id_from_key, head.key)
        if match is None or not match.group("id"):
            problem = "key does not match id_from_key"
        else:
            owners = (match.group("id"),)
    elif dataset.id_sidecar is not None:
        sidecar_key = head.key + dataset.id_sidecar.suffix
        try:
            body = s3.get_object(Bucket=head.bucket, Key=sidecar_key)["Body"].read()
            document = orjson.loads(body)
            if not isinstance(document, dict):
                raise IdFieldError("sidecar is not a JSON object")
            owners = extract_ids(document, parse_paths([dataset.id_sidecar.field]))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise
            problem = f"sidecar {sidecar_key} missing"
        except orjson.JSONDecodeError:
            problem = f"sidecar {sidecar_key} is not valid JSON"
        except IdFieldError as exc:
            problem = f"sidecar {sidecar_key}: {exc}"
    else:
        assert dataset.id_tag is not None
        tags = s3.get_object_tagging(Bucket=head.bucket, Key=head.key, **head.pinned_version())["TagSet"]
        owners = tuple(t["Value"] for t in tags if t["Key"] == dataset.id_tag and t["Value"])
        if not owners:
            problem = f"object tag '{dataset.id_tag}' missing"
    if problem is not None:
        result.unindexable.append(UnindexableLine(WHOLE_OBJECT, problem))
        return
    result.records = 1
    result.lines_by_user = {owner: [WHOLE_OBJECT] for owner in owners}


def flag_erased_users(store: IndexStore, scanned: ObjectIndex, pseudonymizer: Pseudonymizer | None) -> None:
    """Count the object's users who are on the suppression list (erased before, back from a restored backup or a
    replayed pipeline): the object is flagged in the index and in `lakepurge status`."""
    if pseudonymizer is None or not scanned.lines_by_user:
        return
    hashes = [pseudonymizer(user) for user in scanned.lines_by_user]
    scanned.reappeared = len(store.erased_among(hashes))


def index_object(
    s3: Any,
    store: IndexStore,
    settings: Settings,
    bucket: str,
    key: str,
    force: bool = False,
    attempts: int = 3,
    pseudonymizer: Pseudonymizer | None = None,
) -> IndexOutcome:
    """Bring the index in line with what S3 holds now at bucket/key (created, overwritten or removed)."""
    dataset = settings.dataset_for(bucket, key)
    if dataset is None:
        return IndexOutcome(f"s3://{bucket}/{key}", "ignored")
    key = dataset.data_key(key)
    s3path = f"s3://{bucket}/{key}"
    ref = object_ref(s3path, dataset)
    for attempt in range(1, attempts + 1):
        head = head_object(s3, bucket, key)
        if head is None:
            removed = store.remove_object(s3path)
            log.info("object gone", extra={"object": ref, "removed_rows": removed})
            return IndexOutcome(s3path, "removed" if removed else "absent")
        try:
            scanned = scan_object(s3, settings, dataset, head)
        except ObjectChanged:
            log.info("object replaced while reading; reading again", extra={"object": ref, "attempt": attempt})
            continue
        flag_erased_users(store, scanned, pseudonymizer)
        written = store.replace_objects([scanned], force=force)
        if scanned.reappeared:
            log.warning("erased users found again", extra={"object": ref, "users": scanned.reappeared})
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
        return IndexOutcome(s3path, action, scanned.records, len(scanned.unindexable), scanned.reappeared)
    raise ObjectChanged(f"{ref} kept changing while being indexed ({attempts} attempts)")
