"""A task's rewritten objects verified by one listing instead of a HEAD each, in buckets without versioning.

Verification takes the version a purge wrote as proven when S3 still serves that write (engine._proven_clean: a
HEAD per object, its version id, ETag and CRC64NVME). In a bucket that never had versioning a key has one version,
and a listing names the ETag of many keys in one request. When the write's ETag is the MD5 of the bytes S3 received
(one PutObject, unencrypted or SSE-S3: s3write.Written.etag_is_md5), a listed ETag equal to it names those very
bytes: the bytes read for the users before the write, whose CRC64NVME S3 validated on receipt. An overwrite since
(a concurrent writer's bytes) lists another ETag; a key listed with another ETag, or not reached by the listing, is
verified as before (engine.verify_object). Like the checksum, MD5 guards against mix-ups and corruption, not against
a forger with write access to the bucket (docs/ARCHITECTURE.md, "Verification by checksum").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lakepurge.core.config import DatasetConfig
from lakepurge.purge.engine import ObjectOutcome

# A listing page (up to 1,000 keys) is asked for each this many of the objects it is to confirm, at most: a task
# whose objects lie far apart in a large prefix goes back to a HEAD each for those the pages did not reach.
OBJECTS_PER_PAGE = 10
PAGE_KEYS = 1000  # S3's most keys a listing page holds


def listable(outcome: ObjectOutcome, dataset: DatasetConfig, versioned: bool) -> bool:
    """Whether a listing's ETag can prove the object the purge wrote: a bucket without versioning (one version a
    key, nothing noncurrent to read), a write whose ETag is its bytes' MD5, no sidecar naming an owner (read as
    before), not spliced (its copied ranges have a proof of their own)."""
    return (
        not versioned
        and outcome.status == "erased"
        and outcome.after_etag_md5
        and bool(outcome.after_checksum)
        and outcome.after_version is None
        and outcome.splice is None
        and dataset.id_sidecar is None
    )


def listed_etags(s3: Any, bucket: str, keys: Iterable[str]) -> dict[str, str]:
    """The ETag (quotes removed) of each of the keys that a listing of their range reaches: from the first key,
    under their common prefix, at most one page for every OBJECTS_PER_PAGE keys."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    pages = max(1, len(wanted) // OBJECTS_PER_PAGE)
    first, last = wanted[0], wanted[-1]  # the keys sorted: what they all start with, the first and last share
    shared = next((n for n, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), min(len(first), len(last)))
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": first[:shared], "MaxKeys": PAGE_KEYS}
    if len(first) > 1:
        args["StartAfter"] = first[:-1]  # before the first key, and after nearly every key before it
    found: dict[str, str] = {}
    targets = set(wanted)
    for _ in range(pages):
        page = s3.list_objects_v2(**args)
        contents = page.get("Contents", [])
        found.update((item["Key"], item["ETag"].strip('"')) for item in contents if item["Key"] in targets)
        if not page.get("IsTruncated") or not contents or contents[-1]["Key"] >= wanted[-1]:
            break
        args["ContinuationToken"] = page["NextContinuationToken"]
    return found


def proven_by_listing(outcome: ObjectOutcome, listed: dict[str, str], key: str) -> bool:
    """Whether the listing names, for the object's key, the ETag of the purge's write."""
    etag = outcome.after_etag
    return etag is not None and listed.get(key) == etag.strip('"')
