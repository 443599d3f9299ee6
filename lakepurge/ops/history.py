"""Every request this deployment has handled, workflow and operator alike: `lakepurge requests`.

Workflow requests have their own folder (``requests/<id>/``: state, deadline); operator purges (``lakepurge purge``,
ids ``op-...``) leave a report, per-object results and a certificate. Both are read from the reports location, so
the history is what the evidence says, not what a process remembers. Nothing here holds a raw user id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from lakepurge.core.config import Settings
from lakepurge.reports import layout
from lakepurge.reports.report import Report
from lakepurge.workflow.store import RequestStore, is_open, list_requests

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Kind = Literal["workflow", "operator"]
# An operator purge that ran but did not end certified is still to be finished; a report never purged (PLANNED, a dry
# run) asks nothing of anyone.
OPERATOR_UNFINISHED: tuple[str, ...] = ("NOT_VERIFIED", "INCOMPLETE")
PLANNED = "PLANNED"


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    kind: Kind
    state: str  # the workflow's state; for an operator purge: ERASED, NOT_VERIFIED, INCOMPLETE or PLANNED
    created_at: str  # received (workflow) or reported (operator)
    deadline: str | None  # workflow requests: one month after receipt (GDPR Art. 12(3))
    days_left: int | None
    overdue: bool
    users: int | None  # how many users the report looked for
    objects: int | None  # objects the report named
    lines_erased: int | None  # from the certificate
    verified: bool | None  # the certificate's verification
    certificate: str | None  # its s3:// URI

    @property
    def open(self) -> bool:
        if self.kind == "workflow":
            return is_open(self.state)
        return self.state in OPERATOR_UNFINISHED

    @property
    def plan(self) -> bool:
        """A dry run's report that was never executed: a plan, not a request (listed apart, `requests --all`)."""
        return self.kind == "operator" and self.state == PLANNED


def split_plans(records: list[RequestRecord]) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(requests, plans): the dry runs that were never executed, apart from the requests and purges."""
    return [r for r in records if not r.plan], [r for r in records if r.plan]


def list_history(settings: Settings, s3: S3Client, kms: Any = None, now: datetime | None = None) -> list[RequestRecord]:
    """Every request, open and overdue ones first, then the newest first."""
    now = now or datetime.now(UTC)
    reported = set(layout.request_ids_under(s3, layout.reports_prefix(settings)))
    certified = set(layout.request_ids_under(s3, layout.certificates_prefix(settings)))
    workflow: dict[str, Any] = {}
    if settings.workflow is not None:
        workflow = {view.request_id: view for view in list_requests(RequestStore(settings, s3, kms), now)}
    records = []
    for request_id in sorted(reported | certified | workflow.keys()):
        report = _report(s3, settings, request_id) if request_id in reported else None
        certificate = layout.read_certificate(s3, layout.certificate(settings, request_id))
        view = workflow.get(request_id)
        if view is not None:
            state, created, deadline = view.state, view.received_at, view.deadline
            days_left, overdue, kind = view.days_left, view.overdue, "workflow"
        else:
            state = _operator_state(s3, settings, request_id, report, certificate)
            created = report.created_at if report is not None else (certificate.started_at if certificate else "")
            deadline, days_left, overdue, kind = None, None, False, "operator"
        records.append(
            RequestRecord(
                request_id=request_id,
                kind=kind,  # type: ignore[arg-type]
                state=state,
                created_at=created,
                deadline=deadline,
                days_left=days_left,
                overdue=overdue,
                users=len(report.user_hashes) if report is not None else None,
                objects=len(report.objects) if report is not None else None,
                lines_erased=certificate.totals.lines_erased if certificate else None,
                verified=certificate.verification.passed if certificate else None,
                certificate=str(layout.certificate(settings, request_id)) if certificate else None,
            )
        )
    records.sort(key=lambda r: r.created_at, reverse=True)
    records.sort(key=lambda r: (not r.overdue, not r.open))  # stable: newest first within each group
    return records


def _report(s3: S3Client, settings: Settings, request_id: str) -> Report | None:
    stored = layout.read_or_none(s3, layout.report(settings, request_id))
    return None if stored is None else Report.from_bytes(stored.body)


def _operator_state(
    s3: S3Client,
    settings: Settings,
    request_id: str,
    report: Report | None,
    certificate: layout.CertificateDocument | None,
) -> str:
    if certificate is not None:
        if not certificate.verification.passed:
            return "NOT_VERIFIED"
        return "NOTHING_FOUND" if report is not None and report.empty else "ERASED"
    results = layout.results_prefix(settings, request_id)
    # The executors' sealed ids are written before the job starts (a job that never started erased nothing); any
    # other result is an intent or an outcome of the purge itself.
    listed = s3.list_objects_v2(Bucket=results.bucket, Prefix=results.key, MaxKeys=2).get("Contents", [])
    sealed = layout.executor_ids(results).key
    return "INCOMPLETE" if any(found["Key"] != sealed for found in listed) else PLANNED
