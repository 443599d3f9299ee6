"""VerifyPurge Task: accept the purge only on a passed certificate for the approved report; record the users in
the suppression list and count the returning users again."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core.aws import Clients
from lakepurge.workflow import steps
from lakepurge.workflow.errors import sanitized_errors
from lakepurge.workflow.events import Verification, VerifyTask

logger = Logger(service="lakepurge")
metrics = Metrics(namespace="lakepurge", service="lakepurge")


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
@sanitized_errors
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    task = VerifyTask.model_validate(event)
    logger.set_correlation_id(task.request_id)
    verification = steps.verify(
        runtime.settings(),
        Clients.from_environment(),
        runtime.index_store(create=False),
        runtime.require_pseudonymizer(),
        task.request_id,
        task.report,
    )
    if (
        isinstance(verification, Verification) and verification.verified
    ):  # the step that ends a purge: what it erased, once per verified request
        metrics.add_metric(name="LinesErased", unit=MetricUnit.Count, value=verification.lines_erased)
        metrics.add_metric(name="ObjectsErased", unit=MetricUnit.Count, value=verification.objects_rewritten)
    return verification.model_dump(mode="json")
