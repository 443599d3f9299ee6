"""Signatures of the approval documents: ``approval.json`` and ``decision.json`` carry an HMAC-SHA256 by the approval
signing key, which only the functions that open and decide approvals hold (``[workflow] approval_signing_key_secret``:
in the stack a Secrets Manager secret only RequestApproval and the approval page may read; or
``approval_signing_key_env`` locally).

Many roles may write to the reports bucket; none of the others can produce a signature. A document replaced by
another writer (its own approver secret hashes, the same task token) does not verify, and the approval page refuses
it before reading anything from it.

What is signed: a domain line naming the document and the request, then the document's canonical JSON (its stored
fields, ``signature`` left out, keys sorted, no whitespace). Naming the request keeps a valid document of one
request from standing for another; naming the document keeps a decision from standing for an approval.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import TypeVar

import orjson

from lakepurge.core import aws
from lakepurge.core.config import ConfigError, WorkflowConfig
from lakepurge.reports import layout

PREFIX = "hmac-sha256:"
MIN_KEY_LENGTH = 16

Doc = TypeVar("Doc", layout.ApprovalDocument, layout.DecisionDocument)


class SignatureInvalid(Exception):
    """The document has no signature, or one the key did not make. The message never holds the key or the MAC."""


def signing_key(workflow: WorkflowConfig) -> bytes:
    """The approval signing key: the Secrets Manager secret ``approval_signing_key_secret`` names (read through the
    cache of aws.secret_string; an unreadable one raises aws.SecretUnavailable), else the environment variable
    ``approval_signing_key_env`` names. Too short or unset: ConfigError (naming the setting, never the value)."""
    if workflow.approval_signing_key_secret is not None:
        value = aws.secret_string(workflow.approval_signing_key_secret)
        if len(value) < MIN_KEY_LENGTH:
            raise ConfigError(
                f"workflow.approval_signing_key_secret: the secret {workflow.approval_signing_key_secret} must hold"
                f" at least {MIN_KEY_LENGTH} characters"
            )
        return value.encode()
    value = os.environ.get(workflow.approval_signing_key_env, "")
    if len(value) < MIN_KEY_LENGTH:
        raise ConfigError(
            f"workflow.approval_signing_key_env: set {workflow.approval_signing_key_env} to a secret of at least"
            f" {MIN_KEY_LENGTH} characters (it signs approval.json and decision.json), or name a Secrets Manager"
            " secret with workflow.approval_signing_key_secret"
        )
    return value.encode()


def signed_bytes(request_id: str, name: str, document: layout.Document) -> bytes:
    """The bytes the MAC covers (see the module's docstring)."""
    fields = {k: v for k, v in document.to_json().items() if k != "signature"}
    header = f"lakepurge/{name}/v1\n{request_id}\n".encode()
    return header + orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def _mac(key: bytes, request_id: str, name: str, document: layout.Document) -> str:
    return PREFIX + hmac.new(key, signed_bytes(request_id, name, document), hashlib.sha256).hexdigest()


def sign(key: bytes, request_id: str, name: str, document: Doc) -> Doc:
    """The document with its signature (any earlier one replaced)."""
    unsigned = document.model_copy(update={"signature": None})
    return document.model_copy(update={"signature": _mac(key, request_id, name, unsigned)})


def verify(key: bytes, request_id: str, name: str, document: layout.ApprovalDocument | layout.DecisionDocument) -> None:
    """Raise SignatureInvalid unless the document carries the signature the key makes for it."""
    if not document.signature:
        raise SignatureInvalid(f"request {request_id}: {name} is not signed")
    if not hmac.compare_digest(document.signature.encode(), _mac(key, request_id, name, document).encode()):
        raise SignatureInvalid(f"request {request_id}: the signature of {name} does not verify")
