"""StartPurge Task: check the approval and the report's hash, erase relational rows, then purge inline (small
reports) or start the Spark job. Returns the job to poll."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import PurgeTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = PurgeTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    job = steps.start_purge(
        runtime.settings(),
        Clients.from_environment(),
        task.request_id,
        task.report,
        task.approval,
        context.get_remaining_time_in_millis() / 1000,  # how long this invocation may still hold the purge
    )
    return job.model_dump(mode="json")
