"""The typed inputs of the Task handlers: what the state machine passes (request id, report reference, job)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Task(BaseModel):
    model_config = ConfigDict(extra="ignore")
    request_id: str


class ReportRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    uri: str
    sha256: str


class RequestTask(_Task):
    pass


class ApprovalTask(_Task):
    report: ReportRef
    task_token: str
    wait_began_at: datetime | None = None  # $$.State.EnteredTime: the approval expires relative to it


class PurgeTask(_Task):
    report: ReportRef
    approval: dict[str, Any]


class StatusTask(_Task):
    job: dict[str, Any]
    report: ReportRef


class VerifyTask(_Task):
    report: ReportRef


Outcome = Literal[
    "ERASED",
    "NOTHING_FOUND",
    "INDEX_INCOMPLETE",
    "REJECTED",
    "APPROVAL_TIMED_OUT",
    "JOB_FAILED",
    "REPORT_TAMPERED",
    "VERIFICATION_FAILED",
    "FAILED",
]


class NotifyTask(_Task):
    outcome: Outcome
    state: dict[str, Any]  # the execution's state at the end: report, approval, job, verification, error
