"""Stored deletion requests: who is to be erased (encrypted), by when, and where the request stands.

A request lives under ``<reports.location>requests/<request id>/`` (lakepurge.reports.layout):
- ``request.json``: written once. The raw user ids (and the requester) are sealed with AES-GCM under a fresh data
  key from KMS, so reading them needs kms:Decrypt on the workflow key; the keyed hashes stay readable for lookups.
- ``state.json``: the current state, overwritten at each step.
The state machine carries only the request id: raw ids never enter its input, output or history.

Once the request ends (Notify records a final state), its sealed ids are shredded (:meth:`RequestStore.shred`):
``request.json`` is rewritten without the KMS-sealed data key and the ciphertext, and its earlier versions are
deleted, so nobody can ever decrypt the raw ids again; the keyed hashes, the receipt time and the deadline stay.
The ids sealed for a Spark purge's executors (lakepurge.core.executor_ids) are deleted then too, if still there.
Every step that needs the raw ids (the report, the relational DELETEs, run by StartPurge before the purge) runs
before the request ends; a request that ended unanswered (APPROVAL_TIMED_OUT, INDEX_INCOMPLETE) is filed again
with its ids under a new request id.
"""

from __future__ import annotations

import base64
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

import orjson
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lakepurge.core import executor_ids
from lakepurge.core.config import ConfigError, Settings, WorkflowConfig
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import condition_failed, delete_key_versions
from lakepurge.core.s3uri import S3Uri
from lakepurge.reports import layout
from lakepurge.workflow.events import Outcome

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Where a request stands before it ends; an ending (an outcome) never changes again.
RECEIVED = "RECEIVED"
REPORTED = "REPORTED"
AWAITING_APPROVAL = "AWAITING_APPROVAL"
APPROVED = "APPROVED"
PURGING = "PURGING"
FINAL_STATES: tuple[str, ...] = get_args(Outcome)  # how a request can end
# Endings that answer the person: erased and certified, exported, nothing to erase, or refused by an approver.
ANSWERED: tuple[str, ...] = ("ERASED", "EXPORTED", "NOTHING_FOUND", "REJECTED")


def is_open(state: str) -> bool:
    """Still to be answered: not ended, or ended without an answer. Every ending outside ANSWERED (the index could
    not be trusted, nobody approved in time, a job or its verification failed, a tampered report) leaves the request
    to be answered within its legal deadline: it stays open and turns overdue. The one rule `status`, `requests`,
    `/ops` and the RequestsOpen metric count by."""
    return state not in ANSWERED


class RequestNotFound(LookupError):
    pass


class StateIsFinal(Exception):
    """The request already ended: an ending is never overwritten (a late approval, a retried Task)."""


class RequestConflict(ValueError):
    """A request id is reused for a different set of users."""


class RequestRefused(ValueError):
    """The intake refused a request (too many ids, an id too long): the message names the limit, never an id."""


class RequestShredded(LookupError):
    """The request ended and its sealed ids were destroyed (crypto-shredding): they can never be opened again."""


RequestKind = Literal["erasure", "access"]
KINDS: tuple[str, ...] = get_args(RequestKind)

# The fields of request.json that hold the sealed ids; shredding removes them.
SEALED_FIELDS: tuple[str, ...] = ("sealed_key", "nonce", "sealed")


@dataclass(frozen=True)
class ErasureRequest:
    request_id: str
    received_at: str
    deadline: str
    user_hashes: tuple[str, ...]
    kms_key_id: str
    # None once the request ended and was shredded (RequestStore.shred): nobody can open its ids any more.
    sealed_key: str | None = None  # base64 KMS ciphertext of the data key
    nonce: str | None = None  # base64
    sealed: str | None = None  # base64 AES-GCM ciphertext of {"users": [...], "requester": ...}
    shredded_at: str | None = None
    kind: RequestKind = "erasure"  # "access": an Art. 15 export (statemachine/export.asl.json), nothing erased
    # The KMS encryption context the data key was sealed under: {"request_id", "kind"} (the key policy lets
    # ExportArchive open access requests only); None: a request sealed before issue 25, under {"request_id"}.
    encryption_context: dict[str, str] | None = None

    @property
    def sealing_context(self) -> dict[str, str]:
        return self.encryption_context or {"request_id": self.request_id}

    # When the sender says it received the request, kept as information only: the deadline runs from received_at,
    # the intake's own clock, so no sender can move it.
    stated_received_at: str | None = None

    @property
    def shredded(self) -> bool:
        return self.sealed_key is None or self.nonce is None or self.sealed is None

    def days_left(self, now: datetime | None = None) -> int:
        remaining = datetime.fromisoformat(self.deadline) - (now or datetime.now(UTC))
        return remaining.days


@dataclass(frozen=True)
class RequestState:
    state: str
    updated_at: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def open(self) -> bool:
        return is_open(self.state)


def workflow_settings(settings: Settings) -> WorkflowConfig:
    if settings.workflow is None:
        raise ConfigError("workflow: this command needs a [workflow] section (approvers, KMS key, SNS topic)")
    return settings.workflow


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


Doc = TypeVar("Doc", bound=layout.Document)


class RequestStore:
    def __init__(self, settings: Settings, s3: S3Client, kms: Any) -> None:
        self._workflow = workflow_settings(settings)
        self._settings = settings
        folder = layout.requests_prefix(settings)
        self._bucket = folder.bucket
        self._prefix = folder.key
        self._s3 = s3
        self._kms = kms

    def key(self, request_id: str, name: str) -> str:
        return layout.request_document(self._settings, request_id, name).key

    @property
    def bucket(self) -> str:
        return self._bucket

    def create(
        self,
        request_id: str,
        users: list[str],
        requester: str,
        received_at: datetime,
        pseudonymizer: Pseudonymizer,
        kind: RequestKind = "erasure",
        stated_received_at: datetime | None = None,
    ) -> ErasureRequest:
        """Store a new request. Filing the same request id again with the same users returns the stored one
        (EventBridge delivers at least once); with other users it is refused."""
        users = sorted(set(users))
        if not users:
            raise ValueError("a deletion request needs at least one user id")
        hashes = tuple(pseudonymizer.many(users))
        # The encryption context binds the data key to this request and its kind: the key policy lets only the
        # functions that need raw ids decrypt, only with a request_id context (kms:EncryptionContextKeys), and
        # ExportArchive only with kind "access" (kms:EncryptionContext:kind): it cannot open erasure requests.
        context = {"request_id": request_id, "kind": kind}
        data_key = self._kms.generate_data_key(
            KeyId=self._workflow.kms_key_id, KeySpec="AES_256", EncryptionContext=context
        )
        nonce = os.urandom(12)
        plaintext = orjson.dumps({"users": users, "requester": requester})
        sealed = AESGCM(data_key["Plaintext"]).encrypt(nonce, plaintext, request_id.encode())
        request = ErasureRequest(
            request_id=request_id,
            received_at=received_at.astimezone(UTC).isoformat(timespec="seconds"),
            deadline=(received_at + timedelta(days=self._workflow.deadline_days))
            .astimezone(UTC)
            .isoformat(timespec="seconds"),
            user_hashes=hashes,
            kms_key_id=self._workflow.kms_key_id,
            sealed_key=base64.b64encode(data_key["CiphertextBlob"]).decode(),
            nonce=base64.b64encode(nonce).decode(),
            sealed=base64.b64encode(sealed).decode(),
            kind=kind,
            encryption_context=context,
            stated_received_at=None
            if stated_received_at is None
            else stated_received_at.astimezone(UTC).isoformat(timespec="seconds"),
        )
        where = layout.request_document(self._settings, request_id, layout.REQUEST)
        try:
            layout.write_once(self._s3, where, orjson.dumps(asdict(request)))
        except layout.AlreadyWritten:
            existing = self.get(request_id)
            if existing.user_hashes != hashes or existing.kind != kind:
                raise RequestConflict(f"request {request_id} already exists for other users or another kind") from None
            return existing
        self.set_state(request_id, RECEIVED)
        return request

    def get(self, request_id: str) -> ErasureRequest:
        document = self._read(request_id, layout.REQUEST)
        document["user_hashes"] = tuple(document["user_hashes"])
        return ErasureRequest(**document)

    def open(self, request: ErasureRequest) -> tuple[list[str], str]:
        """The raw user ids and the requester (needs kms:Decrypt). RequestShredded once the request ended."""
        if request.sealed_key is None or request.nonce is None or request.sealed is None:
            raise RequestShredded(
                f"request {request.request_id} ended and its sealed user ids were destroyed"
                f" ({request.shredded_at or 'shredded'}): they cannot be decrypted any more"
            )
        context = request.sealing_context
        if context.get("request_id") != request.request_id:
            raise RequestConflict(f"request {request.request_id}: its sealing context names another request")
        data_key = self._kms.decrypt(CiphertextBlob=base64.b64decode(request.sealed_key), EncryptionContext=context)[
            "Plaintext"
        ]
        plaintext = AESGCM(data_key).decrypt(
            base64.b64decode(request.nonce), base64.b64decode(request.sealed), request.request_id.encode()
        )
        document = orjson.loads(plaintext)
        return list(document["users"]), str(document["requester"])

    def shred(self, request_id: str) -> bool:
        """Destroy the sealed ids of an ended request (crypto-shredding): rewrite ``request.json`` without the sealed
        data key and ciphertext (conditional on the version read), then delete its earlier versions (a versioned
        bucket keeps them). Idempotent: a retry finishes what a failed call began. Refused (ValueError) while the
        request has not ended. Returns whether this call removed the sealed fields."""
        state = self.state(request_id)
        if not state.final:
            raise ValueError(f"request {request_id} has not ended ({state.state}): its ids are still needed")
        where = layout.request_document(self._settings, request_id, layout.REQUEST)
        removed = False
        for _ in range(5):
            current = layout.read_or_none(self._s3, where)
            if current is None:
                raise RequestNotFound(f"request {request_id}: no {layout.REQUEST}")
            document: dict[str, Any] = orjson.loads(current.body)
            if not any(name in document for name in SEALED_FIELDS):
                break
            kept = {name: value for name, value in document.items() if name not in SEALED_FIELDS}
            kept["shredded_at"] = now_iso()
            try:
                self._s3.put_object(
                    Bucket=where.bucket,
                    Key=where.key,
                    Body=orjson.dumps(kept),
                    ContentType="application/json",
                    IfMatch=current.etag,
                )
                removed = True
                break
            except ClientError as exc:
                if not condition_failed(exc):
                    raise
        else:
            raise RequestConflict(f"request {request_id}: {layout.REQUEST} kept changing while being shredded")
        self._delete_earlier_versions(where.bucket, where.key)
        # The ids sealed for a Spark purge's executors, if its driver was killed before deleting them.
        executor_ids.delete(self._s3, layout.executor_ids(layout.results_prefix(self._settings, request_id)))
        return removed

    def _delete_earlier_versions(self, bucket: str, key: str) -> None:
        """Every version of one key but the current one (and its delete markers): none may keep the sealed ids."""
        delete_key_versions(self._s3, S3Uri(bucket, key), keep=lambda version: bool(version.get("IsLatest")))

    def set_state(
        self, request_id: str, state: str, *, only_from: tuple[str, ...] | None = None, **detail: Any
    ) -> bool:
        """Move the request to a state, unless it already ended (StateIsFinal). Conditional on the state read, so a
        concurrent writer (an ending written meanwhile) makes this one read again rather than overwrite it. With
        ``only_from``, a request in another state is left as it is (a repeated step never moves it back): returns
        whether the state was written."""
        body = orjson.dumps(asdict(RequestState(state, now_iso(), detail)))
        where = layout.request_document(self._settings, request_id, layout.STATE)
        for _ in range(5):
            current = layout.read_or_none(self._s3, where)
            if current is not None:
                previous = RequestState(**orjson.loads(current.body))
                if previous.final and previous.state != state:
                    raise StateIsFinal(f"request {request_id} already ended {previous.state}")
                if only_from is not None and previous.state not in only_from:
                    return False
            try:
                if current is None:
                    layout.write_once(self._s3, where, body)
                else:
                    self._s3.put_object(
                        Bucket=where.bucket,
                        Key=where.key,
                        Body=body,
                        ContentType="application/json",
                        IfMatch=current.etag,
                    )
                return True
            except layout.AlreadyWritten:
                continue  # the first state was written meanwhile: read it
            except ClientError as exc:
                if not condition_failed(exc):
                    raise
        raise StateIsFinal(f"request {request_id}: its state kept changing while being set to {state}")

    def state(self, request_id: str) -> RequestState:
        return RequestState(**self._read(request_id, layout.STATE))

    def put_document(
        self,
        request_id: str,
        name: str,
        document: dict[str, Any] | layout.Document,
        only_once: bool = False,
        if_match: str | None = None,
    ) -> str:
        """Write one of the request's documents; returns its ETag. ``only_once``: a second write fails with
        layout.AlreadyWritten; ``if_match``: the write fails with PreconditionFailed when the stored document is no
        longer that ETag."""
        where = layout.request_document(self._settings, request_id, name)
        body = orjson.dumps(document.to_json() if isinstance(document, layout.Document) else document)
        if only_once:
            written = layout.write_once(self._s3, where, body)
        else:
            condition: dict[str, Any] = {} if if_match is None else {"IfMatch": if_match}
            written = self._s3.put_object(
                Bucket=where.bucket, Key=where.key, Body=body, ContentType="application/json", **condition
            )
        return str(written.get("ETag", ""))

    def delete_document(self, request_id: str, name: str) -> None:
        self._s3.delete_object(Bucket=self._bucket, Key=self.key(request_id, name))

    def document(self, request_id: str, name: str) -> dict[str, Any] | None:
        """One of the request's documents as stored, or None (the typed reads are approval/decision/relational)."""
        stored = layout.read_or_none(self._s3, layout.request_document(self._settings, request_id, name))
        if stored is None:
            return None
        document: dict[str, Any] = orjson.loads(stored.body)
        return document

    def _typed(self, request_id: str, name: str, model: type[Doc]) -> Doc | None:
        return layout.read_document(self._s3, layout.request_document(self._settings, request_id, name), model)

    def approval(self, request_id: str) -> layout.ApprovalDocument | None:
        return self._typed(request_id, layout.APPROVAL, layout.ApprovalDocument)

    def decision(self, request_id: str) -> layout.DecisionDocument | None:
        return self._typed(request_id, layout.DECISION, layout.DecisionDocument)

    def decision_and_etag(self, request_id: str) -> tuple[layout.DecisionDocument, str] | None:
        """The decision with the ETag a conditional rewrite of it names (``put_document(if_match=...)``)."""
        stored = layout.read_or_none(self._s3, layout.request_document(self._settings, request_id, layout.DECISION))
        if stored is None:
            return None
        return layout.DecisionDocument.model_validate_json(stored.body), stored.etag

    def relational(self, request_id: str) -> layout.RelationalDocument | None:
        return self._typed(request_id, layout.RELATIONAL, layout.RelationalDocument)

    def purge_start(self, request_id: str) -> layout.PurgeStartDocument | None:
        return self._typed(request_id, layout.PURGE_START, layout.PurgeStartDocument)

    def claim_purge_start(self, request_id: str, hold_seconds: float) -> tuple[bool, layout.PurgeStartDocument]:
        """Claim the start of the request's purge for this invocation, which runs at most ``hold_seconds`` more.
        Returns (claimed, the claim): another delivery of the Task gets (False, the first one's claim)."""
        now = datetime.now(UTC)
        mine = layout.PurgeStartDocument(
            attempt=os.urandom(8).hex(),
            claimed_at=now.isoformat(timespec="seconds"),
            holder_until=(now + timedelta(seconds=hold_seconds)).isoformat(timespec="seconds"),
        )
        for _ in range(5):
            try:
                self.put_document(request_id, layout.PURGE_START, mine, only_once=True)
                return True, mine
            except layout.AlreadyWritten:
                pass
            held = self.purge_start(request_id)
            if held is not None:
                return False, held
        raise RequestConflict(f"request {request_id}: the purge's start kept being claimed and released")

    def release_purge_start(self, request_id: str) -> None:
        """The claiming invocation failed: a retry of the Task may start the purge again (it resumes)."""
        self.delete_document(request_id, layout.PURGE_START)

    def request_ids(self) -> list[str]:
        ids = []
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                ids.append(common["Prefix"][len(self._prefix) :].rstrip("/"))
        return ids

    def _read(self, request_id: str, name: str) -> dict[str, Any]:
        document = self.document(request_id, name)
        if document is None:
            raise RequestNotFound(f"request {request_id}: no {name}")
        return document


@dataclass(frozen=True)
class RequestView:
    request_id: str
    state: str
    received_at: str
    deadline: str
    days_left: int
    overdue: bool
    updated_at: str
    open: bool = True


def list_requests(store: RequestStore, now: datetime | None = None) -> list[RequestView]:
    """Every request with its state and deadline, most urgent open request first."""
    now = now or datetime.now(UTC)
    views = []
    for request_id in store.request_ids():
        request = store.get(request_id)
        try:
            state = store.state(request_id)
        except RequestNotFound:
            state = RequestState(RECEIVED, request.received_at)
        days_left = request.days_left(now)
        overdue = state.open and datetime.fromisoformat(request.deadline) < now
        views.append(
            RequestView(
                request_id,
                state.state,
                request.received_at,
                request.deadline,
                days_left,
                overdue,
                state.updated_at,
                state.open,
            )
        )
    return sorted(views, key=lambda v: (not v.open, v.deadline))
