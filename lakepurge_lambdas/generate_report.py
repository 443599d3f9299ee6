"""GenerateReport Task: look the request's users up and write its report. Returns counts, URI and SHA-256."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import RequestTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = RequestTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    report = steps.generate_report(
        runtime.settings(),
        Clients.from_environment(),
        runtime.index_store(create=False),
        runtime.require_pseudonymizer(),
        task.request_id,
    )
    return report.model_dump(mode="json")
