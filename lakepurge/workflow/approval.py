"""Approval by a person: an email with a link, a confirmation page, a decision by POST.

Each configured approver gets a link carrying a one-time secret of their own; the server keeps only its SHA-256
(``approval.json``). Following the link (GET) shows the report summary and never decides: mail scanners fetch
links. A POST with the secret decides once: the decision is claimed with If-None-Match (a second approver finds it
there), bound to the report's SHA-256, and handed to the waiting state machine (SendTaskSuccess / SendTaskFailure)
after ``sent_at`` is recorded on the claim (If-Match): from then on the claim is never removed, since the token may
have been consumed. A repeat of the same approver's decision (a double click, a retry after a transient error or a
lost response) completes the delivery if needed and answers that the decision stands; it never withdraws it. When
Step Functions answers that the task no longer waits, the execution's history tells whether it took this decision
(recorded ``delivered_at``) or ended its wait otherwise (recorded ``not_taken``; the request's ending stands).
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
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode

from botocore.exceptions import ClientError
from pydantic import ValidationError

from lakepurge.core.aws import SecretUnavailable
from lakepurge.core.config import ConfigError, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import condition_failed
from lakepurge.reports import layout
from lakepurge.reports.report import Report, ReportTampered
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

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

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
    """The signed pending approval and the approver the link's secret belongs to (expiry not checked: a repeat of a
    decision already taken is answered after the links expired too)."""
    approval = _approval(settings, store, request_id)
    try:
        entry = approval.approvers[int(approver_index)]
    except (ValueError, IndexError):
        raise ApprovalRefused(403, "this link is not valid") from None
    if not hmac.compare_digest(entry.secret_sha256, _digest(secret)):
        raise ApprovalRefused(403, "this link is not valid")
    return approval, entry.email


def _expired(approval: layout.ApprovalDocument) -> bool:
    return datetime.fromisoformat(approval.expires_at) < datetime.now(UTC)


def _unexpired(approval: layout.ApprovalDocument) -> None:
    if _expired(approval):
        raise ApprovalRefused(410, "this link has expired; the request was not approved")


def _undecided(store: RequestStore, request_id: str) -> None:
    if store.decision(request_id) is not None:
        raise ApprovalRefused(409, "this request has already been decided")


def pending(
    settings: Settings, store: RequestStore, s3: S3Client, request_id: str, approver_index: str, secret: str
) -> PendingApproval:
    """What the confirmation page shows (a GET: reads only)."""
    approval, approver = _check(settings, store, request_id, approver_index, secret)
    _unexpired(approval)
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


@dataclass(frozen=True)
class Decided:
    """What a deciding POST recorded. ``repeated``: the same approver's decision was already recorded (a double click,
    a retried POST): this POST decided nothing new (at most it completed the delivery), and the decision stands."""

    record: dict[str, Any]
    repeated: bool = False


def decide(
    settings: Settings,
    store: RequestStore,
    s3: S3Client,
    sfn: Any,
    request_id: str,
    approver_index: str,
    secret: str,
    decision: Decision,
    requester: Requester | None = None,
) -> Decided:
    """Decide once and wake the state machine. Returns the recorded decision (signed, with who sent the POST).

    A repeat of the same approver's decision (a double click, a retry after an error) never withdraws it: it
    completes the delivery if that is still to be done, and answers that the decision stands."""
    approval, approver = _check(settings, store, request_id, approver_index, secret)
    key = _signing_key(settings)
    verdict = "approved" if decision == "approve" else "rejected"
    stored = store.decision_and_etag(request_id)
    repeated = stored is not None
    if stored is None:
        _unexpired(approval)
        stored = _claim(store, s3, sfn, key, request_id, approval, approver, verdict, requester or Requester())
    if stored is None:  # a concurrent POST claimed it first (a double click, or another approver)
        repeated, stored = True, store.decision_and_etag(request_id)
        if stored is None:
            raise ApprovalRefused(409, "this request has already been decided")
    record, etag = stored
    _same_decision(key, request_id, record, approver, verdict)
    if record.delivered_at is None and record.not_taken is None:
        record, etag = _deliver(settings, store, sfn, key, request_id, approval, record, etag)
    if record.not_taken is not None:
        raise ApprovalRefused(410, "the request is no longer waiting for a decision; this decision was not taken")
    log.info("approval decided", extra={"request_id": request_id, "decision": record.decision, "repeated": repeated})
    return Decided(record.to_json(), repeated)


def _claim(
    store: RequestStore,
    s3: S3Client,
    sfn: Any,
    key: bytes,
    request_id: str,
    approval: layout.ApprovalDocument,
    approver: str,
    verdict: str,
    sender: Requester,
) -> tuple[layout.DecisionDocument, str] | None:
    """Write the signed decision once (If-None-Match). Returns it with its ETag, or None when a concurrent POST
    claimed first (the caller tells a double click from another decision)."""
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
        approved_by=approver if verdict == "approved" else None,
        rejected_by=None if verdict == "approved" else approver,
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
        return record, store.put_document(request_id, layout.DECISION, record, only_once=True)
    except layout.AlreadyWritten:
        return None


def _same_decision(key: bytes, request_id: str, record: layout.DecisionDocument, approver: str, verdict: str) -> None:
    """A recorded decision this POST may stand on: the same approver's same decision, signed by the page (a claim
    another writer put there is never delivered). Another decision, or another approver's, is refused (409)."""
    if record.decision != verdict or record.by != approver:
        raise ApprovalRefused(409, "this request has already been decided")
    try:
        signing.verify(key, request_id, layout.DECISION, record)
    except signing.SignatureInvalid as exc:
        log.warning("decision.json refused: %s", exc, extra={"request_id": request_id})
        raise ApprovalRefused(403, "the recorded decision cannot be verified; nothing was decided") from None


def _rewrite(
    store: RequestStore, key: bytes, request_id: str, record: layout.DecisionDocument, etag: str, **update: Any
) -> tuple[layout.DecisionDocument, str]:
    """Record ``update`` on the claim, conditional on the ETag read; when another POST of the same decision wrote it
    first, what it wrote (a double click's two POSTs race here, and one write wins)."""
    changed = signing.sign(key, request_id, layout.DECISION, record.model_copy(update=update))
    try:
        return changed, store.put_document(request_id, layout.DECISION, changed, if_match=etag)
    except ClientError as exc:
        if not condition_failed(exc):
            raise
    current = store.decision_and_etag(request_id)
    if current is None:
        raise ApprovalRefused(409, "this request has already been decided")
    _same_decision(key, request_id, current[0], record.by, record.decision)
    return current


def _deliver(
    settings: Settings,
    store: RequestStore,
    sfn: Any,
    key: bytes,
    request_id: str,
    approval: layout.ApprovalDocument,
    record: layout.DecisionDocument,
    etag: str,
) -> tuple[layout.DecisionDocument, str]:
    """Hand the claimed decision to the waiting execution and record whether it took it.

    ``sent_at`` is recorded before the token is first sent: from then on the token may have been consumed, so the
    claim is never removed. When Step Functions answers that the task no longer waits (AWS answers TaskTimedOut
    for a task already closed, by this decision's earlier POST too), or the request already ended, the execution's
    history tells which: the task closed with this decision (taken: recorded delivered) or otherwise (the wait timed
    out, the execution stopped: recorded not taken). Any other error leaves the claim for the same approver's retry.
    """
    taken: bool | None
    if _expired(approval):  # never sent late; one sent before may have been taken
        taken = None if record.sent_at is None else _taken(settings, store, sfn, request_id, record)
        if taken is None:
            raise ApprovalRefused(410, "this link has expired; the request was not approved")
    else:
        if record.sent_at is None:
            record, etag = _rewrite(store, key, request_id, record, etag, sent_at=now_iso())
            if record.delivered_at is not None or record.not_taken is not None:
                return record, etag
        try:
            if record.decision == "approved":
                store.set_state(request_id, APPROVED, only_from=(AWAITING_APPROVAL,), approved_at=record.decided_at)
            _send(sfn, approval, record)
            taken = True
        except StateIsFinal:
            taken = _taken(settings, store, sfn, request_id, record)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in _NOT_WAITING:
                raise
            taken = _taken(settings, store, sfn, request_id, record)
    if taken is None:
        raise ApprovalRefused(
            503, "the decision is recorded but could not be confirmed; send it again in a minute to complete it"
        )
    concluded = {"delivered_at": now_iso()} if taken else {"not_taken": "the execution no longer waited for it"}
    try:
        return _rewrite(store, key, request_id, record, etag, **concluded)
    except ClientError as exc:  # the execution's answer stands; a repeat records it (from the history again)
        log.warning("decision outcome not recorded: %s", exc, extra={"request_id": request_id})
        return record.model_copy(update=concluded), etag


_NOT_WAITING = ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist")


def _send(sfn: Any, approval: layout.ApprovalDocument, record: layout.DecisionDocument) -> None:
    """SendTaskSuccess (the RequestApproval Task's result, $.approval) or SendTaskFailure (Rejected)."""
    if record.decision == "approved":
        sfn.send_task_success(
            taskToken=approval.task_token,
            output=Approved(
                decision="approved",
                approved_by=record.approved_by or record.by,
                approved_at=record.decided_at,
                report_sha256=approval.report_sha256,
            ).model_dump_json(),
        )
    else:
        sfn.send_task_failure(taskToken=approval.task_token, error="Rejected", cause="rejected by an approver")


APPROVAL_STATE = "RequestApproval"  # the state of both ASL files that waits for the decision's task token
_EXECUTION_ENDED = ("ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut")


def _execution_arn(settings: Settings, store: RequestStore, request_id: str) -> str | None:
    """The request's execution: the intake names it after the request, on the machine of the request's kind."""
    workflow = workflow_settings(settings)
    kind = store.get(request_id).kind
    machine = workflow.export_state_machine_arn if kind == "access" else workflow.state_machine_arn
    return None if machine is None else machine.replace(":stateMachine:", ":execution:") + f":{request_id}"


def _taken(
    settings: Settings, store: RequestStore, sfn: Any, request_id: str, record: layout.DecisionDocument
) -> bool | None:
    """Whether the execution took this decision, from its history: True when its RequestApproval task closed with
    it (succeeded for an approval, failed Rejected for a rejection), False when it closed otherwise (timed out, the
    report refused) or the execution ended while it waited; None when it still waits, or nobody can tell."""
    execution = _execution_arn(settings, store, request_id)
    if execution is None:
        return None
    waiting = False
    try:
        for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution):
            for event in page["events"]:
                kind = event["type"]
                if kind == "TaskStateEntered":
                    waiting = event.get("stateEnteredEventDetails", {}).get("name") == APPROVAL_STATE
                elif kind in _EXECUTION_ENDED:
                    return False
                elif not waiting:
                    continue
                elif kind == "TaskSucceeded":
                    return record.decision == "approved"
                elif kind == "TaskFailed" and event.get("taskFailedEventDetails", {}).get("error") == "Rejected":
                    return record.decision == "rejected"
                elif kind in ("TaskTimedOut", "TaskStateExited"):
                    return False
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        log.warning("execution history unavailable: %s", code, extra={"request_id": request_id})
    return None
