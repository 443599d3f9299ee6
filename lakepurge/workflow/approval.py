"""Approval by a person: an email with a link, a confirmation page, a decision by POST.

Each configured approver gets a link carrying a one-time secret of their own; the server keeps only its SHA-256
(``approval.json``). Following the link (GET) shows the report summary and never decides: mail scanners fetch
links. A POST with the secret decides once: the decision is claimed with If-None-Match (a second approver finds it
there), bound to the report's SHA-256, and handed to the waiting state machine (SendTaskSuccess / SendTaskFailure).
It stands only if the state machine took it: when the execution no longer waits (timed out, stopped) the claim is
withdrawn and the request's ending is left as it is; after a transient error the same approver's retry delivers it.
The links expire a margin before the wait does, counted from when the wait began.

``approval.json`` and ``decision.json`` are signed with the approval signing key (lakepurge.workflow.signing), which
only RequestApproval and the approval page hold: an ``approval.json`` that does not verify (another writer's approver
secrets, or a replayed task token) is refused with 403 before any secret is compared, and a claimed decision that
does not verify is never delivered. The decision records the POST's source IP, user agent (truncated) and, behind
the optional JWT authorizer, the token's subject.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlencode

from botocore.exceptions import ClientError
from pydantic import ValidationError

from lakepurge import layout
from lakepurge.aws import SecretUnavailable
from lakepurge.config import ConfigError, Settings
from lakepurge.logs import get_logger
from lakepurge.report import Report, ReportTampered
from lakepurge.workflow import signing
from lakepurge.workflow.events import Approved
from lakepurge.workflow.store import (
    APPROVED,
    AWAITING_APPROVAL,
    ErasureRequest,
    RequestNotFound,
    RequestStore,
    StateIsFinal,
    now_iso,
    workflow_settings,
)

log = get_logger()

Decision = Literal["approve", "reject"]


class ApprovalRefused(Exception):
    """The link or the POST cannot decide: unknown request, wrong secret, expired, already decided."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


USER_AGENT_MAX = 200  # characters of the user agent kept in decision.json


@dataclass(frozen=True)
class Requester:
    """Who sent the deciding POST, as API Gateway saw it (requestContext of an HTTP API payload 2.0 event)."""

    source_ip: str | None = None
    user_agent: str | None = None
    authorized_subject: str | None = None  # the JWT's ``sub`` when the optional authorizer is on

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Requester:
        context = event.get("requestContext") or {}
        http = context.get("http") or {}
        claims = ((context.get("authorizer") or {}).get("jwt") or {}).get("claims") or {}
        agent = http.get("userAgent")
        subject = claims.get("sub")
        return cls(
            source_ip=str(http["sourceIp"])[:64] if http.get("sourceIp") else None,
            user_agent=str(agent)[:USER_AGENT_MAX] if agent else None,
            authorized_subject=str(subject)[:USER_AGENT_MAX] if subject else None,
        )


@dataclass(frozen=True)
class ApprovalLink:
    approver: str
    url: str


@dataclass(frozen=True)
class PendingApproval:
    request: ErasureRequest
    report: Report
    report_sha256: str
    approver: str
    expires_at: str


def expiry(wait_began_at: datetime, timeout_seconds: int) -> datetime:
    """When the links stop deciding: before the state machine's wait times out, with a margin for clock skew and the
    time the decision takes to reach it (a tenth of the wait, at most five minutes)."""
    margin = min(300.0, timeout_seconds / 10)
    return wait_began_at + timedelta(seconds=timeout_seconds - margin)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_approval(
    settings: Settings,
    store: RequestStore,
    request_id: str,
    report_uri: str,
    report_sha256: str,
    task_token: str,
    wait_began_at: datetime | None = None,
) -> tuple[list[ApprovalLink], str]:
    """Record what is to be approved and mint one secret per approver; returns the links and when they expire.
    Opening again (a retried Task) replaces the secrets, so only the newest email's links work."""
    workflow = workflow_settings(settings)
    key = signing.signing_key(workflow)  # before anything is written: no key, no approval
    if store.decision(request_id) is not None:
        raise ApprovalRefused(409, f"request {request_id} is already decided")
    began = wait_began_at.astimezone(UTC) if wait_began_at is not None else datetime.now(UTC)
    expires_at = expiry(began, workflow.approval_timeout_seconds).isoformat(timespec="seconds")
    links, approvers = [], []
    for index, approver in enumerate(workflow.approvers):
        secret = secrets.token_urlsafe(32)
        approvers.append(layout.Approver(email=approver, secret_sha256=_digest(secret)))
        query = urlencode({"request": request_id, "approver": index, "secret": secret})
        links.append(ApprovalLink(approver, f"{workflow.approval_url}?{query}"))
    document = layout.ApprovalDocument(
        report_uri=report_uri,
        report_sha256=report_sha256,
        task_token=task_token,
        opened_at=now_iso(),
        expires_at=expires_at,
        approvers=tuple(approvers),
    )
    store.put_document(request_id, layout.APPROVAL, signing.sign(key, request_id, layout.APPROVAL, document))
    store.set_state(request_id, AWAITING_APPROVAL, expires_at=expires_at)
    return links, expires_at


_UNVERIFIED = "this approval cannot be verified; nothing was decided"


def _signing_key(settings: Settings) -> bytes:
    try:
        return signing.signing_key(workflow_settings(settings))
    except (ConfigError, SecretUnavailable) as exc:
        log.error("no approval signing key, approvals are refused: %s", exc)
        raise ApprovalRefused(503, "approvals cannot be verified at the moment; nothing was decided") from None


def _approval(settings: Settings, store: RequestStore, request_id: str) -> layout.ApprovalDocument:
    """The pending approval, only if its signature verifies: one another writer replaced is refused (403)."""
    key = _signing_key(settings)
    try:
        approval = store.approval(request_id) if request_id else None
    except ValidationError:
        log.warning("approval.json is not an approval document: refused", extra={"request_id": request_id})
        raise ApprovalRefused(403, _UNVERIFIED) from None
    if approval is None:
        raise ApprovalRefused(404, "no approval is pending for this link")
    try:
        signing.verify(key, request_id, layout.APPROVAL, approval)
    except signing.SignatureInvalid as exc:
        log.warning("approval.json refused: %s", exc, extra={"request_id": request_id})
        raise ApprovalRefused(403, _UNVERIFIED) from None
    return approval


def _check(
    settings: Settings, store: RequestStore, request_id: str, approver_index: str, secret: str
) -> tuple[layout.ApprovalDocument, str]:
    approval = _approval(settings, store, request_id)
    try:
        entry = approval.approvers[int(approver_index)]
    except (ValueError, IndexError):
        raise ApprovalRefused(403, "this link is not valid") from None
    if not hmac.compare_digest(entry.secret_sha256, _digest(secret)):
        raise ApprovalRefused(403, "this link is not valid")
    if datetime.fromisoformat(approval.expires_at) < datetime.now(UTC):
        raise ApprovalRefused(410, "this link has expired; the request was not approved")
    return approval, entry.email


def _undecided(store: RequestStore, request_id: str) -> None:
    if store.decision(request_id) is not None:
        raise ApprovalRefused(409, "this request has already been decided")


def pending(
    settings: Settings, store: RequestStore, s3: Any, request_id: str, approver_index: str, secret: str
) -> PendingApproval:
    """What the confirmation page shows (a GET: reads only)."""
    approval, approver = _check(settings, store, request_id, approver_index, secret)
    _undecided(store, request_id)
    try:
        report, _ = layout.load_report(s3, approval.report_uri, approval.report_sha256)
    except ReportTampered:
        raise ApprovalRefused(409, "the report changed after this email was sent; it cannot be approved") from None
    try:
        request = store.get(request_id)
    except RequestNotFound:
        raise ApprovalRefused(404, "no approval is pending for this link") from None
    return PendingApproval(request, report, approval.report_sha256, approver, approval.expires_at)


def decide(
    settings: Settings,
    store: RequestStore,
    s3: Any,
    sfn: Any,
    request_id: str,
    approver_index: str,
    secret: str,
    decision: Decision,
    requester: Requester | None = None,
) -> dict[str, Any]:
    """Decide once and wake the state machine. Returns the recorded decision (signed, with who sent the POST)."""
    approval, approver = _check(settings, store, request_id, approver_index, secret)
    key = _signing_key(settings)
    verdict = "approved" if decision == "approve" else "rejected"
    sender = requester or Requester()
    claimed = store.decision(request_id)
    if claimed is not None:
        # The same approver's same decision, not yet taken by the state machine (a transient error): deliver it now,
        # if the page itself signed it (a claim another writer put there is never delivered).
        retry = claimed.delivered_at is None and claimed.decision == verdict and claimed.by == approver
        if not retry:
            raise ApprovalRefused(409, "this request has already been decided")
        try:
            signing.verify(key, request_id, layout.DECISION, claimed)
        except signing.SignatureInvalid as exc:
            log.warning("decision.json refused: %s", exc, extra={"request_id": request_id})
            raise ApprovalRefused(403, "the recorded decision cannot be verified; nothing was decided") from None
        record = claimed
    else:
        try:
            layout.load_report(s3, approval.report_uri, approval.report_sha256)
        except ReportTampered:
            sfn.send_task_failure(
                taskToken=approval.task_token,
                error="ReportTampered",
                cause="the report changed between the approval email and the decision",
            )
            raise ApprovalRefused(409, "the report changed after this email was sent; it cannot be approved") from None
        record = layout.DecisionDocument(
            decision=verdict,
            approved_by=approver if decision == "approve" else None,
            rejected_by=None if decision == "approve" else approver,
            by=approver,
            decided_at=now_iso(),
            report_uri=approval.report_uri,
            report_sha256=approval.report_sha256,
            source_ip=sender.source_ip,
            user_agent=sender.user_agent,
            authorized_subject=sender.authorized_subject,
        )
        record = signing.sign(key, request_id, layout.DECISION, record)
        try:
            store.put_document(request_id, layout.DECISION, record, only_once=True)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise ApprovalRefused(409, "this request has already been decided") from None
            raise
    _deliver(store, sfn, request_id, approval, record)
    record = signing.sign(key, request_id, layout.DECISION, record.model_copy(update={"delivered_at": now_iso()}))
    store.put_document(request_id, layout.DECISION, record)
    log.info("approval decided", extra={"request_id": request_id, "decision": record.decision})
    return record.to_json()


_NOT_WAITING = ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist")


def _deliver(
    store: RequestStore,
    sfn: Any,
    request_id: str,
    approval: layout.ApprovalDocument,
    record: layout.DecisionDocument,
) -> None:
    """Hand the claimed decision to the waiting execution. If it no longer waits, or the request already ended, the
    claim is withdrawn (the decision took no effect, and no document may say otherwise); any other error leaves the
    claim for the same approver's retry."""
    try:
        if record.decision == "approved":
            store.set_state(request_id, APPROVED, approved_at=record.decided_at)
            sfn.send_task_success(
                taskToken=approval.task_token,
                output=Approved(  # the RequestApproval Task's result, $.approval
                    decision="approved",
                    approved_by=record.approved_by or record.by,
                    approved_at=record.decided_at,
                    report_sha256=approval.report_sha256,
                ).model_dump_json(),
            )
        else:
            sfn.send_task_failure(taskToken=approval.task_token, error="Rejected", cause="rejected by an approver")
    except StateIsFinal:
        store.delete_document(request_id, layout.DECISION)
        raise ApprovalRefused(410, "the request has already ended; this decision was not taken") from None
    except ClientError as exc:
        if exc.response["Error"]["Code"] in _NOT_WAITING:
            store.delete_document(request_id, layout.DECISION)
            raise ApprovalRefused(410, "the request is no longer waiting for a decision") from None
        raise
