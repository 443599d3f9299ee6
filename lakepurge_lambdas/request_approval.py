"""RequestApproval Task (``lambda:invoke.waitForTaskToken``): email each approver a one-time link; the state
machine waits until the approval handler returns the token, or the Task times out."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import ApprovalTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = ApprovalTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    requested = steps.request_approval(
        runtime.settings(),
        Clients.from_environment(),
        aws.client("ses"),
        task.request_id,
        task.report,
        task.task_token,
        task.wait_began_at,
    )
    return requested.model_dump(mode="json")
