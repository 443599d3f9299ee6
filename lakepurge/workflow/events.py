"""The messages of the state machine's Tasks: what each handler takes from the execution's state (``...Task``) and
what it returns into it, at the Task's ResultPath (statemachine/purge.asl.json).

The state machine reads the outputs by path ($.report.coverage_complete, $.report.approval_timeout_seconds,
$.job.state, $.job.poll_seconds, $.verification.verified): an output model's fields are exactly the keys the state
holds, in order, so renaming or adding a field here changes what the state machine sees. Handlers dump an output
once, at their edge (``model_dump(mode="json")``). Inputs ignore what they do not read. None carries a raw user id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lakepurge.purge.launch import JobState


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Task(_Message):
    request_id: str


class ReportRef(_Message):
    uri: str
    sha256: str


# -- outputs, in the order the state machine records them ----------------------------------------------------------


class ReportSummary(ReportRef):
    """GenerateReport -> ``$.report``: counts and dataset names, never an id. A false (or, from an older report,
    missing) ``coverage_complete`` ends the request INDEX_INCOMPLETE; an ``empty`` one ends it NOTHING_FOUND."""

    users_requested: int
    users_found: int
    objects: int
    lines: int
    relational_rows: int
    empty: bool
    coverage_complete: bool
    coverage_gaps: list[str]  # dataset names only
    approval_timeout_seconds: int  # RequestApproval's TimeoutSecondsPath


class ApprovalRequested(_Message):
    """RequestApproval's own return. A waitForTaskToken Task: ``$.approval`` is the decision (``Approved``)."""

    emails_sent: int
    expires_at: str  # ISO-8601: when the links stop deciding


class Approved(_Message):
    """RequestApproval -> ``$.approval``: what the approval page hands the waiting Task (SendTaskSuccess). A rejection
    is a Task failure (``Rejected``), never this."""

    decision: Literal["approved"]
    approved_by: str
    approved_at: str
    report_sha256: str


class PurgeStarted(_Message):
    """StartPurge -> ``$.job``: the job to poll. An inline purge has already ended (SUCCEEDED or FAILED)."""

    backend: str  # "inline" | "local" | "emr-serverless"
    id: str
    state: JobState
    poll_seconds: int  # WaitForPurge's SecondsPath


class PurgeStatus(PurgeStarted):
    """PurgeStatus -> ``$.job``: the job polled, with its launcher's short detail (never user data)."""

    detail: str


class Verification(_Message):
    """VerifyPurge -> ``$.verification`` once the certificate was read: ``verified`` true ends the request ERASED."""

    verified: bool
    certificate: str  # its s3:// URI
    users_erased: int
    objects_rewritten: int
    lines_erased: int
    relational_rows_deleted: int
    reason: str  # empty when verified


class NoCertificate(_Message):
    """VerifyPurge -> ``$.verification`` when the purge wrote no certificate: VERIFICATION_FAILED."""

    verified: Literal[False] = False
    certificate: None = None
    reason: str


VerifyOutcome = Verification | NoCertificate


class Exported(_Message):
    """ExportArchive -> ``$.export`` (access requests): the encrypted archive, its time-limited link and the export
    record. Counts and locations only; the archive's contents need kms:Decrypt under its request_id context."""

    archive: str  # s3:// URI of the encrypted archive
    archive_sha256: str
    link: str  # presigned GET of the archive
    link_expires_at: str
    link_limited_by: str = "requested"  # lakepurge.access.export.Link.limited_by: why the link ends then
    record: str  # s3:// URI of exports/<request id>.json
    objects: int
    records: int
    relational_rows: int


class ErasedBeforeFailure(_Message):
    """After a failed purge job: how far it got, each object counted re-read now."""

    objects_erased: int
    objects_verified: int
    objects_planned: int


Outcome = Literal[
    "ERASED",
    "EXPORTED",
    "NOTHING_FOUND",
    "INDEX_INCOMPLETE",
    "REJECTED",
    "APPROVAL_TIMED_OUT",
    "JOB_FAILED",
    "REPORT_TAMPERED",
    "VERIFICATION_FAILED",
    "FAILED",
]


class Notified(_Message):
    """Notify -> ``$.notified``: the outcome, with the incomplete datasets' names (INDEX_INCOMPLETE) or the failed
    job's progress (JOB_FAILED). The fields an ending does not have are None, and not dumped (``exclude_none``)."""

    outcome: Outcome
    coverage_gaps: list[str] | None = None
    objects_erased: int | None = None
    objects_verified: int | None = None
    objects_planned: int | None = None


# -- the execution's state at its end, as Notify reads it ----------------------------------------------------------
# Lenient on purpose: a request may fail at any step, and Notify must still tell the topic how an execution ended,
# one started by an older version included. So only what the message reads, with defaults.


class EndedReport(ReportRef):
    users_requested: int = 0
    coverage_gaps: list[str] = Field(default_factory=list)


class EndedExport(_Message):
    archive: str | None = None
    link: str | None = None
    link_expires_at: str | None = None
    link_limited_by: str = "requested"
    record: str | None = None
    objects: int = 0
    records: int = 0
    relational_rows: int = 0


class EndedJob(_Message):
    backend: str | None = None
    detail: str = ""


class EndedVerification(_Message):
    certificate: str | None = None
    objects_rewritten: int = 0
    lines_erased: int = 0
    relational_rows_deleted: int = 0
    reason: str | None = None


class TaskError(_Message):
    """A Catch's ``$.error``: the error's name and cause as Step Functions records them."""

    error: str | None = Field(default=None, alias="Error")
    cause: str | None = Field(default=None, alias="Cause")


class EndedState(_Message):
    report: EndedReport | None = None
    job: EndedJob | None = None
    verification: EndedVerification | None = None
    export: EndedExport | None = None
    error: TaskError | None = None


# -- inputs: each Task's Parameters ---------------------------------------------------------------------------------


class RequestTask(_Task):
    """GenerateReport: ``{"request_id"}``, the execution's input."""


class ApprovalTask(_Task):
    """RequestApproval's Payload."""

    report: ReportRef
    task_token: str
    wait_began_at: datetime | None = None  # $$.State.EnteredTime: the approval expires relative to it


class PurgeTask(_Task):
    report: ReportRef
    approval: Approved


class StatusTask(_Task):
    job: PurgeStarted  # StartPurge's, or the previous poll's (its detail ignored)
    report: ReportRef


class ExportTask(_Task):
    """ExportArchive (access requests): exports only what the approved report's request names."""

    report: ReportRef
    approval: Approved


class VerifyTask(_Task):
    report: ReportRef


class NotifyTask(_Task):
    outcome: Outcome
    state: EndedState  # ``$``: the whole state; what the ending reads of it
