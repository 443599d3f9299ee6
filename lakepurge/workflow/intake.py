"""Filing a deletion (or access) request: store it (ids encrypted, deadline set) and start its state machine with
its id only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from lakepurge.aws import Clients
from lakepurge.config import ConfigError, Settings
from lakepurge.logs import get_logger
from lakepurge.privacy import Pseudonymizer
from lakepurge.workflow.store import KINDS, RequestKind, RequestStore, workflow_settings

log = get_logger()

# Step Functions execution names: 1-80 characters, no whitespace or URL-special characters.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


@dataclass(frozen=True)
class FiledRequest:
    request_id: str
    execution_arn: str
    deadline: str


def file_request(
    settings: Settings,
    clients: Clients,
    sfn: Any,
    pseudonymizer: Pseudonymizer,
    users: list[str],
    requester: str,
    request_id: str,
    received_at: datetime | None = None,
    kind: RequestKind = "erasure",
) -> FiledRequest:
    """Idempotent per request id: the same request filed twice is stored and started once. An ``access`` request
    (GDPR Art. 15) starts the export state machine (workflow.export_state_machine_arn) instead of the purge's."""
    workflow = workflow_settings(settings)
    if kind not in KINDS:
        raise ValueError(f"request kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == "access":
        if workflow.export_state_machine_arn is None:
            raise ConfigError("workflow.export_state_machine_arn: needed to start the access export workflow")
        state_machine_arn = workflow.export_state_machine_arn
    else:
        if workflow.state_machine_arn is None:
            raise ConfigError("workflow.state_machine_arn: needed to start the purge workflow")
        state_machine_arn = workflow.state_machine_arn
    if not _REQUEST_ID.match(request_id):
        raise ValueError(f"request id {request_id!r}: use 1-80 letters, digits, '-' or '_'")
    users = [u for u in users if u]  # exactly as given: the index matches ids exactly (" bob" is not "bob")
    store = RequestStore(settings, clients.s3, clients.kms)
    request = store.create(request_id, users, requester, received_at or datetime.now(UTC), pseudonymizer, kind)
    try:
        execution_arn = sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=request_id,
            input=orjson.dumps({"request_id": request_id}).decode(),
        )["executionArn"]
    except sfn.exceptions.ExecutionAlreadyExists:
        execution_arn = state_machine_arn.replace(":stateMachine:", ":execution:") + f":{request_id}"
    log.info("request filed", extra={"request_id": request_id, "kind": kind, "users": len(request.user_hashes)})
    return FiledRequest(request_id, execution_arn, request.deadline)
