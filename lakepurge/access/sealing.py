"""The sealed archive's format: AES-256-GCM in 1 MiB segments under a data key KMS generates for one export
request, of the export key, under ``EncryptionContext {"export_request_id": ...}`` (a context key no sealed request
has, so whoever may open archives opens no request's ids). :func:`seal` writes it, :func:`unseal` reads it back.
"""

from __future__ import annotations

import base64
import os
from typing import IO, Any

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"LPXAEAD1"  # the sealed archive's first bytes (format version 1)
# The archive's encryption context key: sealed requests use "request_id", so a grant to open archives (conditioned
# on this key) opens no request.
EXPORT_CONTEXT_KEY = "export_request_id"
SEGMENT_BYTES = 1 << 20
_TAG_BYTES = 16


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
