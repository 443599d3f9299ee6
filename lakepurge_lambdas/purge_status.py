"""PurgeStatus Task: the purge job's state (RUNNING, SUCCEEDED, FAILED) for the Wait/Choice loop."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import StatusTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = StatusTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    job = steps.purge_status(runtime.settings(), Clients.from_environment(), task.job, task.report)
    return job.model_dump(mode="json")
