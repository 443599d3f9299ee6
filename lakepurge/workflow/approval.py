"""Approval by a person: an email with a link, a confirmation page, a decision by POST.

Each configured approver gets a link carrying a one-time secret of their own; the server keeps only its SHA-256
(``approval.json``). Following the link (GET) shows the report summary and never decides: mail scanners fetch
links. A POST with the secret decides once: the decision is claimed with If-None-Match (a second approver finds it
there), bound to the report's SHA-256, and handed to the waiting state machine (SendTaskSuccess / SendTaskFailure).
It stands only if the state machine took it: when the execution no longer waits (timed out, stopped) the claim is
withdrawn and the request's ending is left as it is; after a transient error the same approver's retry delivers it.
The links expire a margin before the wait does, counted from when the wait began.
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

from lakepurge import layout
from lakepurge.config import Settings
from lakepurge.logs import get_logger
from lakepurge.report import Report, ReportTampered
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

log = get_logger(__name__)

Decision = Literal["approve", "reject"]


class ApprovalRefused(Exception):
    """The link or the POST cannot decide: unknown request, wrong secret, expired, already decided."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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
    store.put_document(
        request_id,
        layout.APPROVAL,
        layout.ApprovalDocument(
            report_uri=report_uri,
            report_sha256=report_sha256,
            task_token=task_token,
            opened_at=now_iso(),
            expires_at=expires_at,
            approvers=tuple(approvers),
        ),
    )
    store.set_state(request_id, AWAITING_APPROVAL, expires_at=expires_at)
    return links, expires_at


def _check(
    store: RequestStore, request_id: str, approver_index: str, secret: str
) -> tuple[layout.ApprovalDocument, str]:
    approval = store.approval(request_id) if request_id else None
    if approval is None:
        raise ApprovalRefused(404, "no approval is pending for this link")
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
    approval, approver = _check(store, request_id, approver_index, secret)
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
) -> dict[str, Any]:
    """Decide once and wake the state machine. Returns the recorded decision."""
    approval, approver = _check(store, request_id, approver_index, secret)
    verdict = "approved" if decision == "approve" else "rejected"
    claimed = store.decision(request_id)
    if claimed is not None:
        # The same approver's same decision, not yet taken by the state machine (a transient error): deliver it now.
        retry = claimed.delivered_at is None and claimed.decision == verdict and claimed.by == approver
        if not retry:
            raise ApprovalRefused(409, "this request has already been decided")
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
        )
        try:
            store.put_document(request_id, layout.DECISION, record, only_once=True)
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise ApprovalRefused(409, "this request has already been decided") from None
            raise
    _deliver(store, sfn, request_id, approval, record)
    record = record.model_copy(update={"delivered_at": now_iso()})
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
