"""Intake Lambda: an EventBridge ``DeletionRequested`` or ``AccessRequested`` event -> a stored request (of kind
"erasure" or "access") and a started execution of the purge or the export state machine.

detail: ``{"user_ids": [...], "ids": [{"kind": "email", "value": "..."}], "requester": "...", "received_at":
"ISO-8601", "request_id": "optional"}`` (user_ids untyped, ids typed by an [identifiers.KIND]; at least one). Without a
request id the event id names the request, so a redelivered event files nothing twice. The intake stamps the time of
receipt itself (the deadline runs from it); the sender's ``received_at`` is kept only as information.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.intake import file_request
from lakepurge.workflow.store import RequestKind

logger = Logger(service="lakepurge")

# The detail types the intake accepts (both with the same detail), and the kind of request each files.
KINDS_BY_DETAIL_TYPE: dict[str, RequestKind] = {"DeletionRequested": "erasure", "AccessRequested": "access"}


class TypedId(BaseModel):
    kind: str
    value: str


class DeletionRequested(BaseModel):
    user_ids: list[str] = Field(default_factory=list)
    ids: list[TypedId] = Field(default_factory=list)
    requester: str
    received_at: datetime | None = None
    request_id: str | None = None


@logger.inject_lambda_context(clear_state=True)
@event_source(data_class=EventBridgeEvent)
@sanitized_errors
def handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    if event.source != "lakepurge" or event.detail_type not in KINDS_BY_DETAIL_TYPE:
        raise ValueError(f"unexpected event {event.source}/{event.detail_type}")
    detail = DeletionRequested.model_validate(event.detail)
    if not detail.user_ids and not detail.ids:
        raise ValueError("the request names no id: give user_ids or ids")
    request_id = detail.request_id or f"req-{event.get_id}"
    logger.set_correlation_id(request_id)
    filed = file_request(
        runtime.settings(),
        Clients.from_environment(),
        aws.client("stepfunctions"),
        runtime.require_pseudonymizer(),
        detail.user_ids,
        detail.requester,
        request_id,
        KINDS_BY_DETAIL_TYPE[event.detail_type],
        stated_received_at=detail.received_at,
        typed_ids=[(typed.kind, typed.value) for typed in detail.ids],
    )
    return {"request_id": filed.request_id, "execution_arn": filed.execution_arn, "deadline": filed.deadline}
