"""A purge's requested raw ids for its Spark executors, sealed in transit and at rest, and nowhere else.

Whoever starts a purge on Spark holding the raw ids (the workflow's StartPurge, the operator's CLI) writes them under
the request's results prefix (layout.executor_ids) as AES-256-GCM under a key derived from the hash key and the
request id (HMAC-SHA256(hash key, "lakepurge executor ids v1|" + request id)), a fresh nonce, and as associated data
the request id and the document's binding: a digest of the keyed hashes of exactly the ids sealed, computed as they
are sealed (the starter seals only ids whose hash is one of the report's: :func:`covering`). The job's driver never
opens it: task closures carry its S3 location and ETag (:class:`SealedIdsRef`), and each executor Python worker GETs
and opens it once per request (:func:`opened`), to check each object by the ids themselves (privacy.HashedUsers,
built once per worker process and request: :func:`task_users`) rather than by a keyed hash of every id it reads.
When the binding is that of the hashes the executor was given, the ids are exactly those hashes' and none is hashed
again (HashedUsers.of_proven_ids); otherwise (other hashes: a table's with its metadata forms, a resolution's extra
identifiers) each is hashed and kept only if its hash is one of them. The driver deletes it (every version) when
the executors are done; ending a request deletes it too (workflow.store.RequestStore.shred).

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
from lakepurge.core.s3io import delete_key_versions, error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from lakepurge.core.s3uri import S3Uri

log = get_logger()

_LABEL = b"lakepurge executor ids v1|"  # (the sealing key's label)
_VERSION = b"\x02"
_NONCE_BYTES = 12
_BINDING_BYTES = 32


def binding(hashes: Iterable[str]) -> bytes:
    """The digest a document's ids are bound to: SHA-256 of their distinct keyed hashes, sorted, one per line. (Sorted
    before they are made distinct: a report's hashes come sorted, and sorting them again costs nearly nothing.)"""
    return _digest(tuple(dict.fromkeys(sorted(hashes))))


def _digest(hashes: tuple[str, ...]) -> bytes:
    return hashlib.sha256("\n".join(hashes).encode()).digest()


def sealing_key(hash_key: bytes, request_id: str) -> bytes:
    """The request's 256-bit sealing key: only a holder of the hash key can derive it, and each request has its own."""
    return hmac.new(hash_key, _LABEL + request_id.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class OpenedIds:
    """A document's ids and the binding they were sealed with."""

    ids: tuple[str, ...]
    bound_to: bytes


def seal(hash_key: bytes, request_id: str, ids: Iterable[str]) -> bytes:
    """The stored form: a version byte, the binding (:func:`binding` of the keyed hashes of exactly these ids,
    computed here under the hash key), the nonce, and the AES-GCM ciphertext of the ids (a JSON list, each once,
    sorted: an executor sorts them for its Arrow array, at no cost once they are), with the request id, version and
    binding as associated data: an executor whose hashes have this binding has the hashes of exactly these ids, and
    builds its users from them without hashing one (:func:`task_users`)."""
    unique = sorted(set(ids))
    header = _VERSION + binding(Pseudonymizer(hash_key).each(unique))
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(sealing_key(hash_key, request_id)).encrypt(nonce, orjson.dumps(unique), _aad(request_id, header))
    return header + nonce + sealed


def _aad(request_id: str, header: bytes) -> bytes:
    return request_id.encode() + b"|" + header


def unseal(body: bytes, hash_key: bytes, request_id: str) -> tuple[str, ...] | None:
    """The ids sealed in ``body``, or None when it is of another version, changed, or sealed for another request or
    under another key."""
    opened = unseal_bound(body, hash_key, request_id)
    return None if opened is None else opened.ids


def unseal_bound(body: bytes, hash_key: bytes, request_id: str) -> OpenedIds | None:
    """:func:`unseal`, with the binding the ids were sealed with."""
    if body[:1] != _VERSION:
        return None
    header = body[: 1 + _BINDING_BYTES]
    aad = _aad(request_id, header)
    rest = body[len(header) :]
    if len(rest) <= _NONCE_BYTES:
        return None
    nonce, ciphertext = rest[:_NONCE_BYTES], rest[_NONCE_BYTES:]
    try:
        ids = orjson.loads(AESGCM(sealing_key(hash_key, request_id)).decrypt(nonce, ciphertext, aad))
    except (InvalidTag, ValueError):  # (orjson's errors are ValueErrors)
        return None
    if not isinstance(ids, list) or not all(isinstance(user, str) for user in ids):
        return None
    return OpenedIds(tuple(ids), header[1:])


def covering(hash_key: bytes, hashes: Iterable[str], ids: Iterable[str]) -> list[str]:
    """The ids (each once, in order) whose keyed hash is one of ``hashes``: the only ones a starter seals, so that no
    id but the request's users' reaches executors. An id that is not valid UTF-8 has no hash and is dropped."""
    wanted, pseudonymizer, kept = frozenset(hashes), Pseudonymizer(hash_key), []
    for user in dict.fromkeys(ids):
        try:
            if pseudonymizer(user) in wanted:
                kept.append(user)
        except UnicodeEncodeError:
            continue
    return kept


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
    return delete_key_versions(s3, where)


# The ids this worker process opened, for one request at a time (its tasks open them once): in memory only. The
# next request's ids replace them; the process's end drops them.
_opened: dict[SealedIdsRef, OpenedIds] = {}
_opened_lock = threading.Lock()


def opened(s3: Any, where: SealedIdsRef | None, hash_key: bytes) -> OpenedIds | None:
    """The sealed ids, opened here (an executor) once per request, or None when there are none to use: the caller then
    hashes every id. A document gone, changed since the driver saw it, or that fails authentication is logged by
    counts only."""
    if where is None:
        return None
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
            return None
        found = unseal_bound(body, hash_key, where.request_id)
        if found is None:
            log.warning(
                "sealed ids failed authentication: every id read is hashed",
                extra={"request_id": where.request_id, "bytes": len(body)},
            )
            return None
        _opened.clear()
        _built.clear()
        _opened[where] = found
        return found


# The users built from the opened ids, by the hashes they stand for (a purge's, a table's with its metadata forms):
# built once per worker process and request instead of once per task. Dropped with the ids when another request's
# are opened.
_built: dict[tuple[SealedIdsRef, frozenset[str]], HashedUsers] = {}


def task_users(
    s3: Any, where: SealedIdsRef | None, hash_key: bytes, hashes: Iterable[str], known: tuple[str, ...] = ()
) -> HashedUsers:
    """The users as a task checks them: by ``known`` (the raw ids of a process that holds them: an inline purge),
    else by the ids sealed for the executors, else (none, or not usable) by their keyed hashes alone."""
    ordered = tuple(hashes)  # (as given: a report's come sorted, which makes their binding cheap)
    wanted = frozenset(ordered)
    if known or where is None:
        return HashedUsers(wanted, Pseudonymizer(hash_key), known)
    with _opened_lock:
        built = _built.get((where, wanted))
    if built is not None:
        return built
    found = opened(s3, where, hash_key)
    if found is None:
        return HashedUsers(wanted, Pseudonymizer(hash_key))
    built = users_of(found, ordered, hash_key)
    with _opened_lock:
        for other in [k for k in _built if k[0] != where]:
            del _built[other]
        _built[(where, wanted)] = built
    return built


def users_of(found: OpenedIds, hashes: Iterable[str], hash_key: bytes) -> HashedUsers:
    """The users from opened ids. Sealed bound to exactly these hashes (the sealer hashed each id: each is one of
    them, and each of them some id's), no id is hashed again; otherwise (other hashes: a table's
    with its metadata forms, a resolution that added some) each id is hashed and kept only if its hash is one of these
    (1-4 ms per 1,000 ids)."""
    hashes = tuple(hashes)
    # Hashes as binding takes them (sorted, each once: a report's, as a driver gives them to its tasks) are digested as
    # they come: sorting 20,000 strings and making them distinct took ~2.5 ms of a new worker's opening, its memory
    # cold. Others are taken so first (the same users), then digested.
    if not hmac.compare_digest(found.bound_to, _digest(hashes)):
        hashes = tuple(dict.fromkeys(sorted(hashes)))
        if not hmac.compare_digest(found.bound_to, _digest(hashes)):
            return HashedUsers(hashes, Pseudonymizer(hash_key), found.ids)
    return HashedUsers.of_proven_ids(hashes, Pseudonymizer(hash_key), found.ids)
