"""Filing a deletion (or access) request: store it (ids encrypted, deadline set) and start its state machine with
its id only."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from lakepurge.core.aws import Clients
from lakepurge.core.config import ConfigError, Settings, WorkflowConfig
from lakepurge.core.config_identity import typed_request_forms
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.records.identifiers import KIND_MARKER, RequestIdError
from lakepurge.workflow.store import KINDS, RequestKind, RequestRefused, RequestStore, workflow_settings

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
    kind: RequestKind = "erasure",
    stated_received_at: datetime | None = None,
    typed_ids: Sequence[tuple[str, str]] = (),
) -> FiledRequest:
    """Idempotent per request id: the same request filed twice is stored and started once. An ``access`` request
    (GDPR Art. 15) starts the export state machine (workflow.export_state_machine_arn) instead of the purge's.

    The request is received now: its legal deadline runs from this clock, never from a time the sender states
    (``stated_received_at`` is kept in the request as information). Too many ids, or an id too long, are refused
    (RequestRefused naming the limit) before anything is stored. ``typed_ids`` (kind, value) are stored, sealed with
    the untyped ids, as their index forms (records.identifiers: normalised as the kind says); a kind that is not
    configured is refused, naming the kind, never the value."""
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
    users += _index_forms(settings, request_id, users, typed_ids)
    _within_limits(workflow, request_id, users)
    store = RequestStore(settings, clients.s3, clients.kms)
    request = store.create(
        request_id, users, requester, datetime.now(UTC), pseudonymizer, kind, stated_received_at=stated_received_at
    )
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


def _index_forms(
    settings: Settings, request_id: str, untyped: list[str], typed_ids: Sequence[tuple[str, str]]
) -> list[str]:
    if settings.identifiers and any(user.startswith(KIND_MARKER) for user in untyped):
        raise RequestRefused(f"request {request_id}: an untyped id begins with U+001F, the marker of identifier kinds")
    forms = []
    for number, (kind, value) in enumerate(typed_ids, 1):
        try:
            # (a kind some dataset holds through a transform is looked for in that form too; a composite's value is
            # the JSON object of its parts, as on the command line)
            forms.extend(typed_request_forms(f"{kind}={value}", settings.datasets, settings.identifiers))
        except RequestIdError as exc:
            raise RequestRefused(f"request {request_id}: typed id #{number}: {exc}") from None
    return forms


def _within_limits(workflow: WorkflowConfig, request_id: str, users: list[str]) -> None:
    if len(users) > workflow.max_request_users:
        raise RequestRefused(
            f"request {request_id}: {len(users)} user ids, more than workflow.max_request_users"
            f" ({workflow.max_request_users}): split it into several requests, or raise the limit"
        )
    for number, user in enumerate(users, 1):
        size = len(user.encode("utf-8", "surrogatepass"))
        if size > workflow.max_user_id_bytes:
            raise RequestRefused(
                f"request {request_id}: user id #{number} is {size} bytes, longer than workflow.max_user_id_bytes"
                f" ({workflow.max_user_id_bytes}): no indexed id is that long; check what was sent"
            )
