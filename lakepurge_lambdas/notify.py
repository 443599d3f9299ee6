"""Notify Task: publish how the request ended to the SNS topic and record its final state."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.core.privacy import hash_key
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import NotifyTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = NotifyTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    settings = runtime.settings()
    key = hash_key(settings.privacy)
    notified = steps.notify(
        settings, Clients.from_environment(), aws.client("sns"), key, task.request_id, task.outcome, task.state
    )
    return notified.model_dump(mode="json", exclude_none=True)  # an ending's absent details stay absent
