"""VerifyPurge Task: accept the purge only on a passed certificate for the approved report; record the users in
the suppression list."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import VerifyTask

logger = Logger(service="lakepurge")


@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = VerifyTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    verification = steps.verify(
        runtime.settings(), Clients.from_environment(), runtime.index_store(), task.request_id, task.report
    )
    return verification.model_dump(mode="json")
