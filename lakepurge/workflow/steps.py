"""The domain function behind each state-machine Task. Handlers in lakepurge_lambdas/ parse the event and call these.

Every input and output here is what Step Functions records in the execution history, so none carries a raw user
id: tasks that need the ids (the report, the relational DELETEs) decrypt them from the request store themselves.
They are the typed messages of lakepurge.workflow.events; only the handlers turn them into JSON.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakepurge.access.export import LINK_LIMITS, export_users, presigned_link
from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.core.config import ConfigError, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.core.s3io import head_object
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import IndexStore
from lakepurge.indexing.coverage import DatasetCoverage, dead_letter_count, describe_gaps
from lakepurge.indexing.returning import record_erasure
from lakepurge.purge.engine import verify_object
from lakepurge.purge.job import purge_relational, recorded_outcomes
from lakepurge.purge.launch import JobState, PurgeJobSpec, inline_fits, launcher_for, run_inline, write_sealed_ids
from lakepurge.reports import kept, layout
from lakepurge.reports.report import OBJECT_REFERENCE, Report, ReportTampered, build_report, resolve_references
from lakepurge.workflow.approval import open_approval
from lakepurge.workflow.events import (
    ApprovalRequested,
    Approved,
    EndedExport,
    EndedJob,
    EndedReport,
    EndedState,
    EndedVerification,
    ErasedBeforeFailure,
    Exported,
    NoCertificate,
    Notified,
    Outcome,
    PurgeStarted,
    PurgeStatus,
    ReportRef,
    ReportSummary,
    TaskError,
    Verification,
    VerifyOutcome,
)
from lakepurge.workflow.pages import approval_email
from lakepurge.workflow.store import (
    PURGING,
    REPORTED,
    RequestNotFound,
    RequestStore,
    StateIsFinal,
    workflow_settings,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()


class NotApproved(Exception):
    """The purge was asked to start without a recorded approval of this report."""


def generate_report(
    settings: Settings, clients: Clients, index: IndexStore, pseudonymizer: Pseudonymizer, request_id: str
) -> ReportSummary:
    """Look the request's users up and write its report (once: a retried Task reuses the first one).

    The report states every dataset's coverage, the indexer's dead-letter queue counted: while any dataset is not
    completely indexed, ``coverage_complete`` is false and the state machine ends the request INDEX_INCOMPLETE
    (a lookup there could miss the users' records, so neither "nothing found" nor "erased" can be certified)."""
    requests = RequestStore(settings, clients.s3, clients.kms)
    request = requests.get(request_id)
    found = layout.find_report(clients.s3, settings, request_id)
    if found is not None:
        report, uri, digest = found
    else:
        users, _ = requests.open(request)
        queue_url = settings.indexing.dead_letter_queue_url
        dead_letters = dead_letter_count(clients.sqs or aws.client("sqs"), queue_url) if queue_url else 0
        report = build_report(
            index,
            settings,
            users,
            request_id,
            pseudonymizer,
            dead_letters=dead_letters,
            s3=clients.s3,
            keeping=request.kind != "access",  # an access export includes the kept datasets
        )
        uri, digest = layout.write_report(clients.s3, settings, report)
    summary = report.summary()
    requests.set_state(request_id, REPORTED, objects=summary["objects"], lines=summary["lines"])
    return ReportSummary(
        uri=uri,
        sha256=digest,
        users_requested=summary["users_requested"],
        users_found=summary["users_found"],
        objects=summary["objects"],
        lines=summary["lines"],
        relational_rows=sum(summary["relational_rows"].values()),
        empty=report.empty,
        coverage_complete=coverage_complete(report),
        coverage_gaps=[gap.dataset for gap in report.gaps],  # dataset names only
        approval_timeout_seconds=workflow_settings(settings).approval_timeout_seconds,
    )


def coverage_complete(report: Report) -> bool:
    """Whether the report may certify its request: every dataset completely indexed when it was made. A report
    written before coverage was recorded in reports (version 1) states none, so it certifies nothing."""
    return report.version >= 2 and not report.gaps


def request_approval(
    settings: Settings,
    clients: Clients,
    ses: Any,
    request_id: str,
    report: ReportRef,
    task_token: str,
    wait_began_at: datetime | None = None,
) -> ApprovalRequested:
    """Mint the approvers' links and email them; the state machine then waits for the decision."""
    workflow = workflow_settings(settings)
    requests = RequestStore(settings, clients.s3, clients.kms)
    request = requests.get(request_id)
    planned, _ = layout.load_report(clients.s3, report.uri, report.sha256)
    summary = planned.summary()
    links, expires_at = open_approval(
        settings, requests, request_id, report.uri, report.sha256, task_token, wait_began_at
    )
    for link in links:
        subject, body = approval_email(request, summary, link, expires_at)
        extra = {"ConfigurationSetName": workflow.ses_configuration_set} if workflow.ses_configuration_set else {}
        ses.send_email(
            Source=workflow.sender,
            Destination={"ToAddresses": [link.approver]},
            Message={"Subject": {"Data": subject}, "Body": {"Text": {"Data": body}}},
            **extra,
        )
    return ApprovalRequested(emails_sent=len(links), expires_at=expires_at)


# The longest a Lambda invocation runs: an inline purge whose start was claimed longer ago has ended, one way or
# another. The handler passes its own time left instead.
LONGEST_INVOCATION_SECONDS = 900.0


def start_purge(
    settings: Settings,
    clients: Clients,
    request_id: str,
    report: ReportRef,
    approval: Approved,
    seconds_left: float = LONGEST_INVOCATION_SECONDS,
) -> PurgeStarted:
    """Check the approval against the stored decision and the report's bytes, erase the relational rows, then
    purge inline (small reports) or start the Spark job.

    Idempotent: the first invocation claims the start (``purge-start.json``); another delivery of the Task (Step
    Functions retrying a call whose answer was lost, while the first may still be purging) starts nothing and
    answers RUNNING, and PurgeStatus follows the first one's purge. A claiming invocation that fails gives its
    claim up, so that a retry starts the purge again (it resumes)."""
    workflow = workflow_settings(settings)
    requests = RequestStore(settings, clients.s3, clients.kms)
    decision = requests.decision(request_id)
    if decision is None or decision.decision != "approved":
        raise NotApproved(f"request {request_id} has no recorded approval")
    if decision.report_sha256 != report.sha256 or approval.report_sha256 != report.sha256:
        raise ReportTampered(f"request {request_id}: the approved report hash is not the generated one")
    # The one read of the report in this step (raises ReportTampered); the inline purge is handed it.
    planned, _ = layout.load_report(clients.s3, report.uri, decision.report_sha256)
    # Exemptions changed since the approval (a legal hold placed, one ended) stop it before relational rows go.
    kept.check_unchanged(settings, planned.rewritten_datasets, planned.exemptions, datetime.now(UTC).date())
    claimed, claim = requests.claim_purge_start(request_id, seconds_left)
    if not claimed:
        log.info("the purge was started by another delivery of this Task", extra={"request_id": request_id})
        if claim.backend is not None and claim.job_id is not None:
            return PurgeStarted(
                backend=claim.backend, id=claim.job_id, state="RUNNING", poll_seconds=workflow.poll_seconds
            )
        return PurgeStarted(backend="inline", id=request_id, state="RUNNING", poll_seconds=workflow.poll_seconds)
    try:
        return _start_claimed(settings, clients, requests, request_id, report.uri, planned, decision, claim)
    except BaseException:
        requests.release_purge_start(request_id)
        raise


def _start_claimed(
    settings: Settings,
    clients: Clients,
    requests: RequestStore,
    request_id: str,
    report_uri: str,
    planned: Report,
    decision: layout.DecisionDocument,
    claim: layout.PurgeStartDocument,
) -> PurgeStarted:
    workflow = workflow_settings(settings)
    if planned.relational and requests.relational(request_id) is None:
        users, _ = requests.open(requests.get(request_id))
        deleted = purge_relational(settings, users, planned.relational)
        recorded = layout.RelationalDocument.model_validate({"tables": deleted})
        requests.put_document(request_id, layout.RELATIONAL, recorded, only_once=True)
    spec = PurgeJobSpec(
        request_id=request_id,
        report_uri=report_uri,
        report_sha256=decision.report_sha256,
        approved_by=decision.approved_by,
        approved_at=decision.decided_at,
    )
    requests.set_state(request_id, PURGING)
    if inline_fits(settings, planned, clients.s3):
        # Purged in this process, which may open the sealed ids as it does for the relational rows: the check
        # before each write then looks the users up instead of hashing every id it reads.
        users, _ = requests.open(requests.get(request_id))
        result = run_inline(settings, spec, planned, requested=users)
        return PurgeStarted(
            backend="inline",
            id=request_id,
            state="SUCCEEDED" if result.verified else "FAILED",
            poll_seconds=workflow.poll_seconds,
        )
    # Executors get no raw id from the driver: this process, which may open the sealed request, seals the ids for
    # them under the request's results prefix (deleted when the job's executors are done, or the request ends).
    users, _ = requests.open(requests.get(request_id))
    write_sealed_ids(clients.s3, settings, planned, users)
    launcher = launcher_for(settings)
    job_id = launcher.start(spec)
    started = claim.model_copy(update={"backend": launcher.backend, "job_id": job_id})
    requests.put_document(request_id, layout.PURGE_START, started)  # another delivery now polls this job
    return PurgeStarted(backend=launcher.backend, id=job_id, state="RUNNING", poll_seconds=workflow.poll_seconds)


def export_archive(
    settings: Settings, clients: Clients, request_id: str, report: ReportRef, approval: Approved
) -> Exported:
    """An approved access request (GDPR Art. 15): check the approval as StartPurge does, then export the users'
    records (lakepurge.access.export) into one encrypted archive under ``workflow.exports_location``. Only reads the
    lake.
    Idempotent: a retried Task finds the export record of the first attempt and only mints a new link."""
    workflow = workflow_settings(settings)
    if workflow.exports_location is None:
        raise ConfigError("workflow.exports_location: needed to export an access request")
    requests = RequestStore(settings, clients.s3, clients.kms)
    request = requests.get(request_id)
    if request.kind != "access":
        raise NotApproved(f"request {request_id} is not an access request")
    decision = requests.decision(request_id)
    if decision is None or decision.decision != "approved":
        raise NotApproved(f"request {request_id} has no recorded approval")
    if decision.report_sha256 != report.sha256 or approval.report_sha256 != report.sha256:
        raise ReportTampered(f"request {request_id}: the approved report hash is not the generated one")
    layout.load_report(clients.s3, report.uri, decision.report_sha256)  # raises ReportTampered
    record_uri = layout.export_record(settings, request_id)
    recorded = layout.read_document(clients.s3, record_uri, layout.ExportDocument)
    if recorded is None:
        users, _ = requests.open(request)
        run = export_users(
            settings,
            users,
            S3Uri.parse(workflow.exports_location),
            request_id=request_id,
            expires_seconds=workflow.export_link_seconds,
            say=lambda _line: None,  # the CLI's progress lines; the Task returns the counts instead
            retention_days=workflow.export_retention_days,
        )
        return Exported(
            archive=run.archive,
            archive_sha256=run.archive_sha256,
            link=run.link,
            link_expires_at=run.link_expires_at,
            link_limited_by=run.link_limited_by,
            record=run.record,
            objects=run.objects,
            records=sum(run.records.values()),
            relational_rows=sum(run.relational_rows.values()),
        )
    expiry = recorded.archive_expires_at
    link = presigned_link(
        S3Uri.parse(recorded.archive),
        workflow.export_link_seconds,
        not_after=datetime.fromisoformat(expiry) if expiry else None,
    )
    return Exported(
        archive=recorded.archive,
        archive_sha256=recorded.archive_sha256,
        link=link.url,
        link_expires_at=link.expires_at.isoformat(timespec="seconds"),
        link_limited_by=link.limited_by,
        record=str(record_uri),
        objects=len(recorded.objects),
        records=sum(recorded.records.values()),
        relational_rows=sum(t.rows for t in recorded.relational),
    )


def purge_status(settings: Settings, clients: Clients, job: PurgeStarted, report: ReportRef) -> PurgeStatus:
    """The job's state. A failed job whose report no longer hashes to the approved one was refused by the job:
    that is reported as the tampering it is (ReportTampered), not as a crash."""
    if job.backend == "inline":
        return _purge_started_elsewhere(settings, clients, job, report)
    status = launcher_for(settings).status(job.id)
    if status.state == "FAILED":
        layout.load_report(clients.s3, report.uri, report.sha256)
    return PurgeStatus(
        backend=job.backend, id=job.id, state=status.state, poll_seconds=job.poll_seconds, detail=status.detail
    )


def _purge_started_elsewhere(settings: Settings, clients: Clients, job: PurgeStarted, report: ReportRef) -> PurgeStatus:
    """The purge another delivery of StartPurge claimed (``job.id`` is the request id): its Spark job once it
    records one; inline, done when it wrote the certificate, failed when its invocation gave the claim up or ran out
    of time without one."""
    request_id = job.id
    claim = RequestStore(settings, clients.s3, clients.kms).purge_start(request_id)
    if claim is not None and claim.backend is not None and claim.job_id is not None:
        started = PurgeStarted(backend=claim.backend, id=claim.job_id, state="RUNNING", poll_seconds=job.poll_seconds)
        return purge_status(settings, clients, started, report)
    certificate = layout.read_certificate(clients.s3, layout.certificate(settings, request_id))
    state: JobState
    if claim is not None and certificate is not None and certificate.started_at >= claim.claimed_at:
        passed = certificate.verification.passed and certificate.report_sha256 == report.sha256
        state, detail = ("SUCCEEDED", "certified") if passed else ("FAILED", "certified, but not verified")
    elif claim is not None and datetime.now(UTC) <= datetime.fromisoformat(claim.holder_until):
        state, detail = "RUNNING", "running in the StartPurge invocation that claimed it"
    else:
        state, detail = "FAILED", "the StartPurge invocation that ran it ended without a certificate"
    if state == "FAILED":
        layout.load_report(clients.s3, report.uri, report.sha256)
    return PurgeStatus(backend="inline", id=request_id, state=state, poll_seconds=job.poll_seconds, detail=detail)


def verify(
    settings: Settings,
    clients: Clients,
    index: IndexStore,
    pseudonymizer: Pseudonymizer,
    request_id: str,
    report: ReportRef,
) -> VerifyOutcome:
    """Accept the purge only if its certificate is for the approved report and its verification passed; then end
    the erasure as the operator path does (returning.record_erasure: the suppression list, the returning users
    counted again)."""
    location = layout.certificate(settings, request_id)
    certificate = layout.read_certificate(clients.s3, location)
    if certificate is None:
        return NoCertificate(reason="no certificate was written")
    planned, _ = layout.load_report(clients.s3, report.uri, report.sha256)
    verified = certificate.verification.passed and certificate.report_sha256 == report.sha256
    reason = "" if verified else "the certificate's verification did not pass"
    shred = certificate.crypto_shred
    if verified and planned.shred is not None and not (shred and shred["verification"]["passed"]):
        # The approved report planned to destroy keys: a certificate that does not show them destroyed and checked
        # gone from every vault copy has erased less than was approved, whatever its objects' verification says.
        verified, reason = False, "the approved crypto-shred is not in the certificate, verified"
    if verified:
        record_erasure(index, pseudonymizer, planned.user_hashes, request_id)
    totals = certificate.totals
    return Verification(
        verified=verified,
        certificate=str(location),
        users_erased=planned.users_found if verified else 0,
        objects_rewritten=totals.objects_rewritten,
        lines_erased=totals.lines_erased,
        relational_rows_deleted=totals.relational_rows_deleted,
        reason=reason,
    )


def _moved_on(s3: S3Client, s3path: str, etag: str | None) -> bool:
    if s3path.startswith(OBJECT_REFERENCE):
        return True  # resolved to no version in the lake: the object is gone
    uri = S3Uri.parse(s3path)
    head = head_object(s3, uri.bucket, uri.key)
    return head is None or head.etag != etag


def erased_before_failure(
    settings: Settings, clients: Clients, key: bytes, request_id: str, report: ReportRef
) -> ErasedBeforeFailure:
    """After a failed purge: the objects already erased, each re-read now to confirm none of the users remains."""
    pseudonymizer = Pseudonymizer(key)
    stored, _ = layout.load_report(clients.s3, report.uri, report.sha256)
    planned = resolve_references(clients.s3, settings, stored, pseudonymizer)
    planned_paths = [o.s3path for o in planned.objects] + [v.s3path for v in planned.versions]
    results = layout.results_prefix(settings, request_id)
    recorded = recorded_outcomes(clients.s3, results, planned_paths, pseudonymizer).values()
    # An intent is recorded just before a write: if the object moved on from the version it read, the write happened.
    done = [o for o in recorded if o.committed or _moved_on(clients.s3, o.s3path, o.before_etag)]
    users = HashedUsers(planned.user_hashes, pseudonymizer)
    datasets = {o.s3path: o.dataset for o in planned.objects}
    datasets.update((v.s3path, v.dataset) for v in planned.versions)
    verified = 0
    for outcome in done:
        dataset = settings.dataset_named(datasets[outcome.s3path])
        if outcome.s3path.startswith(OBJECT_REFERENCE):
            verified += 1  # the listing that resolves references found no version of it left to read
        elif not verify_object(clients.s3, settings, dataset, outcome.s3path, users):
            verified += 1
    return ErasedBeforeFailure(objects_erased=len(done), objects_verified=verified, objects_planned=len(stored.objects))


def _coverage_gaps(clients: Clients, report: EndedReport | None) -> list[DatasetCoverage]:
    """The incomplete datasets as the report states them; by name only when the report cannot be read back."""
    if report is None:
        return []
    try:
        planned, _ = layout.load_report(clients.s3, report.uri, report.sha256)
        return planned.gaps
    except (ClientError, KeyError, ReportTampered, ValueError) as exc:
        log.warning("the report could not be read for the notification", extra={"error": type(exc).__name__})
        return [
            DatasetCoverage(str(name), False, "not completely indexed (see the report)", "lakepurge status")
            for name in report.coverage_gaps
        ]


def _incomplete(request_id: str, report: EndedReport | None, gaps: list[DatasetCoverage], deadline: str) -> str:
    where = describe_gaps(gaps) if gaps else "the report predates coverage checks (no dataset's coverage is stated)"
    return (
        f"Request {request_id} cannot be answered yet: the index does not completely cover {len(gaps)} dataset(s),"
        f" so a lookup could miss the user(s)' records there. {where}. NOTHING was erased and nothing is"
        f" certified. The request is still open against its legal deadline ({deadline or 'see lakepurge status'}):"
        f" once lakepurge status shows the index complete, file the request again under a new request id."
        f" Report: {report.uri if report else None}"
    )


def _progress(erased: ErasedBeforeFailure) -> str:
    return (
        f" Of {erased.objects_planned} object(s) planned, {erased.objects_erased} were erased before the failure"
        f" ({erased.objects_verified} re-read now and verified clean); the others are unchanged."
    )


def _ended(
    request_id: str,
    outcome: Outcome,
    state: EndedState,
    rejected_by: str | None,
    gaps: list[DatasetCoverage] | None = None,
    deadline: str = "",
    erased: ErasedBeforeFailure | None = None,
    uncounted: str = "",
) -> str:
    """The ending's message. ``erased``: what a failed purge erased (JOB_FAILED; FAILED once the report exists, as
    when an inline purge's invocation failed or timed out half-way), counted from its recorded outcomes; or
    ``uncounted``, why that count could not be made."""
    report = state.report
    uri = report.uri if report else None
    job = state.job or EndedJob()
    checked = state.verification or EndedVerification()
    error = state.error or TaskError()
    cause = (error.cause or "")[:300]
    export = state.export or EndedExport()
    messages = {
        "EXPORTED": (
            f"Access request {request_id} is exported: {export.records} record(s) from {export.objects} object(s)"
            f" and {export.relational_rows} relational row(s), in one archive encrypted under the workflow's export"
            f" key (open it with `lakepurge export --open ARCHIVE --out DIR`, which checks it against its record and"
            f" needs kms:Decrypt on that key)."
            f" Download link, valid until {export.link_expires_at}{LINK_LIMITS.get(export.link_limited_by, '')}:"
            f" {export.link} ."
            f" Archive: {export.archive}. Export record: {export.record}"
        ),
        "ERASED": (
            f"Request {request_id} is erased and verified: {checked.lines_erased} record(s) in"
            f" {checked.objects_rewritten} object(s) and {checked.relational_rows_deleted}"
            f" relational row(s). Certificate: {checked.certificate}"
        ),
        "NOTHING_FOUND": (
            f"Request {request_id}: none of its {report.users_requested if report else 0} user(s) has data in the"
            f" index or the relational tables. Nothing was erased. Report: {uri}"
        ),
        "INDEX_INCOMPLETE": _incomplete(request_id, report, gaps or [], deadline),
        "REJECTED": f"Request {request_id} was REJECTED by {rejected_by or 'an approver'}. Nothing was erased.",
        "APPROVAL_TIMED_OUT": (
            f"No approver decided request {request_id} in time: the approval expired and NOTHING was erased."
            " The request is still open against its legal deadline; file it again to ask for approval."
        ),
        "REPORT_TAMPERED": (
            f"The report of request {request_id} no longer matches the hash its approver approved. The purge was"
            f" refused and NOTHING was erased by it. Report: {uri}"
        ),
        "VERIFICATION_FAILED": (
            f"Request {request_id} was purged but verification did NOT pass"
            f" ({checked.reason or 'see the certificate'}); data may remain."
            f" Certificate: {checked.certificate}"
        ),
        "JOB_FAILED": f"The purge job of request {request_id} FAILED ({job.backend}: {job.detail}).",
        "FAILED": f"Request {request_id} FAILED at a step; nothing is reported erased. Error: {error.error}: {cause}",
    }
    if outcome == "FAILED" and uncounted:
        return (
            f"Request {request_id} FAILED at a step; what it erased before the failure could not be counted now"
            f" ({uncounted}). Error: {error.error}: {cause}"
        )
    if erased is None:
        return messages[outcome]
    if outcome == "FAILED":
        return f"Request {request_id} FAILED at a step. Error: {error.error}: {cause}." + _progress(erased)
    return messages[outcome] + _progress(erased) + " Running the purge again resumes it."


def notify(
    settings: Settings, clients: Clients, sns: Any, key: bytes, request_id: str, outcome: Outcome, state: EndedState
) -> Notified:
    """Tell the topic how the request ended, record its final state and shred the request's sealed user ids.
    Counts and ids of requests only."""
    requests = RequestStore(settings, clients.s3, clients.kms)
    decision = requests.decision(request_id)
    gaps, deadline = None, ""
    if outcome == "INDEX_INCOMPLETE":
        gaps = _coverage_gaps(clients, state.report)
        deadline = requests.get(request_id).deadline
    rejected_by = decision.rejected_by if decision is not None else None
    try:
        kind = requests.get(request_id).kind
    except RequestNotFound:
        kind = "erasure"  # (its ending is still told; shredding below reports the missing request)
    erased, uncounted = None, ""
    if outcome == "JOB_FAILED" and state.report is not None:
        erased = erased_before_failure(settings, clients, key, request_id, state.report)
    elif outcome == "FAILED" and state.report is not None and kind == "erasure":
        # Any step may have failed, the purge too (an inline one that raised or ran out of time half-way). The
        # catch-all ending must still be told: what cannot be counted now is said so, never "nothing".
        try:
            erased = erased_before_failure(settings, clients, key, request_id, state.report)
        except Exception as exc:
            log.warning("what was erased could not be counted", extra={"error": type(exc).__name__})
            uncounted = type(exc).__name__
    message = _ended(request_id, outcome, state, rejected_by, gaps, deadline, erased, uncounted)
    if kind == "access":
        # The same endings, said of an access export: nothing is ever erased by one.
        message = re.sub(r"\berased\b", "exported", message)
    detail: dict[str, Any] = {}
    if gaps is not None:
        detail = {"coverage_gaps": [gap.dataset for gap in gaps]}  # dataset names, for lakepurge status
    if erased is not None:
        detail = dict(erased)
    sns.publish(
        TopicArn=workflow_settings(settings).topic_arn,
        Subject=f"lakepurge {outcome}: request {request_id}"[:100],
        Message=message,
        MessageAttributes={"outcome": {"DataType": "String", "StringValue": outcome}},
    )
    try:
        requests.set_state(request_id, outcome, **detail)
    except StateIsFinal:
        # An ending was recorded first (a retried Notify after another ending): it stays; this message still went.
        log.warning("request already ended; its state is kept", extra={"request_id": request_id, "outcome": outcome})
    # The request has ended (this outcome or an earlier one): no step will need its raw ids again (the relational
    # DELETEs ran in StartPurge, before the purge), so they are destroyed. Idempotent: a retried Notify repeats it.
    requests.shred(request_id)
    return Notified(outcome=outcome, **detail)
