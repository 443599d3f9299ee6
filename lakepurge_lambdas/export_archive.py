"""ExportArchive Task (access requests, statemachine/export.asl.json): check the approval and the report's hash,
then export the request's users' records into one encrypted archive. Returns its link and record, never an id."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import ExportTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = ExportTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    exported = steps.export_archive(
        runtime.settings(), Clients.from_environment(), task.request_id, task.report, task.approval
    )
    return exported.model_dump(mode="json")
