"""A purge's requested raw ids for its Spark executors, sealed in transit and at rest, and nowhere else.

Whoever starts a purge on Spark holding the raw ids (the workflow's StartPurge, the operator's CLI) writes them under
the request's results prefix (layout.executor_ids) as AES-256-GCM under a key derived from the hash key and the
request id (HMAC-SHA256(hash key, "lakepurge executor ids v1|" + request id)), the request id as associated data, a
fresh nonce. The job's driver never opens it: task closures carry its S3 location and ETag (:class:`SealedIdsRef`),
and each executor Python worker GETs and opens it once per request (:func:`opened`), to check each object by the ids
themselves (privacy.HashedUsers(known=...), built once per worker process and request: :func:`task_users`) rather
than by a keyed hash of every id it reads. The driver deletes it
(every version) when the executors are done; ending a request deletes it too (workflow.store.RequestStore.shred).

A document that is absent, changed, or sealed for another request or key is not used: the executors then hash every
id they read (slower, never wrong).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from botocore.exceptions import ClientError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.core.s3io import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from lakepurge.core.s3uri import S3Uri

log = get_logger()

_LABEL = b"lakepurge executor ids v1|"
_VERSION = b"\x01"
_NONCE_BYTES = 12


def sealing_key(hash_key: bytes, request_id: str) -> bytes:
    """The request's 256-bit sealing key: only a holder of the hash key can derive it, and each request has its own."""
    return hmac.new(hash_key, _LABEL + request_id.encode(), hashlib.sha256).digest()


def seal(hash_key: bytes, request_id: str, ids: Iterable[str]) -> bytes:
    """The stored form: a version byte, the nonce, and the AES-GCM ciphertext of the ids (a JSON list)."""
    nonce = os.urandom(_NONCE_BYTES)
    plaintext = orjson.dumps(list(dict.fromkeys(ids)))
    return _VERSION + nonce + AESGCM(sealing_key(hash_key, request_id)).encrypt(nonce, plaintext, request_id.encode())


def unseal(body: bytes, hash_key: bytes, request_id: str) -> tuple[str, ...] | None:
    """The ids sealed in ``body``, or None when it is of another version, changed, or sealed for another request or
    under another key."""
    if len(body) <= 1 + _NONCE_BYTES or body[:1] != _VERSION:
        return None
    nonce, ciphertext = body[1 : 1 + _NONCE_BYTES], body[1 + _NONCE_BYTES :]
    try:
        plaintext = AESGCM(sealing_key(hash_key, request_id)).decrypt(nonce, ciphertext, request_id.encode())
        ids = orjson.loads(plaintext)
    except (InvalidTag, ValueError):  # (orjson's errors are ValueErrors)
        return None
    if not isinstance(ids, list) or not all(isinstance(user, str) for user in ids):
        return None
    return tuple(ids)


@dataclass(frozen=True)
class SealedIdsRef:
    """Where a request's sealed ids are, as task closures carry them: a location and an ETag, never the ids or the
    ciphertext (the hash key travels in the same closures)."""

    bucket: str
    key: str
    request_id: str
    etag: str


def write(s3: S3Client, where: S3Uri, hash_key: bytes, request_id: str, ids: Iterable[str]) -> None:
    """Store a request's sealed ids (a retried start writes them again under a fresh nonce)."""
    body = seal(hash_key, request_id, ids)
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=body, ContentType="application/octet-stream")


def locate(s3: Any, where: S3Uri, request_id: str) -> SealedIdsRef | None:
    """The stored document's location and ETag (a HEAD: the driver never reads its body), or None if none is."""
    try:
        head = s3.head_object(Bucket=where.bucket, Key=where.key)
    except ClientError as exc:
        if error_code(exc) in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    return SealedIdsRef(where.bucket, where.key, request_id, str(head["ETag"]))


def delete(s3: Any, where: S3Uri) -> int:
    """Delete the document and every version of it (and its delete markers: a versioned bucket keeps the others).
    Returns how many versions were deleted; idempotent."""
    deleted = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=where.bucket, Prefix=where.key):
        for version in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            if version["Key"] == where.key:
                s3.delete_object(Bucket=where.bucket, Key=where.key, VersionId=version["VersionId"])
                deleted += 1
    return deleted


# The ids this worker process opened, for one request at a time (its tasks open them once): in memory only. The
# next request's ids replace them; the process's end drops them.
_opened: dict[SealedIdsRef, tuple[str, ...]] = {}
_opened_lock = threading.Lock()


def opened(s3: Any, where: SealedIdsRef | None, hash_key: bytes) -> tuple[str, ...]:
    """The sealed ids, opened here (an executor), or () when there are none to use: the caller then hashes every id.
    A document gone, changed since the driver saw it, or that fails authentication is logged by counts only."""
    if where is None:
        return ()
    with _opened_lock:
        if where in _opened:
            return _opened[where]
        try:
            body = s3.get_object(Bucket=where.bucket, Key=where.key, IfMatch=where.etag)["Body"].read()
        except Exception as exc:  # gone, changed (If-Match), refused, unreachable: slower, never a failed task
            code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            log.warning(
                "sealed ids not read: every id read is hashed", extra={"request_id": where.request_id, "error": code}
            )
            return ()
        ids = unseal(body, hash_key, where.request_id)
        if ids is None:
            log.warning(
                "sealed ids failed authentication: every id read is hashed",
                extra={"request_id": where.request_id, "bytes": len(body)},
            )
            return ()
        _opened.clear()
        _built.clear()
        _opened[where] = ids
        return ids


# The users built from the opened ids, by the hashes they stand for (a purge's, a table's with its metadata forms):
# building one (a hash of each id, their set and Arrow array) costs 1-4 ms per 1,000 ids, once per worker process
# and request instead of once per task. Dropped with the ids when another request's are opened.
_built: dict[tuple[SealedIdsRef, frozenset[str]], HashedUsers] = {}


def task_users(
    s3: Any, where: SealedIdsRef | None, hash_key: bytes, hashes: Iterable[str], known: tuple[str, ...] = ()
) -> HashedUsers:
    """The users as a task checks them: by ``known`` (the raw ids of a process that holds them: an inline purge),
    else by the ids sealed for the executors, else (none, or not usable) by their keyed hashes alone."""
    wanted = frozenset(hashes)
    if known or where is None:
        return HashedUsers(wanted, Pseudonymizer(hash_key), known)
    with _opened_lock:
        built = _built.get((where, wanted))
    if built is not None:
        return built
    ids = opened(s3, where, hash_key)
    built = HashedUsers(wanted, Pseudonymizer(hash_key), ids)
    if ids:
        with _opened_lock:
            for other in [k for k in _built if k[0] != where]:
                del _built[other]
            _built[(where, wanted)] = built
    return built
