"""RequestMetrics (scheduled, EventBridge): publish how many requests are open and overdue.

The counts are those of ``lakepurge requests`` and the operations page; the RequestsOverdue alarm of
infra/template.yaml watches the second. A request becomes overdue by the clock alone, so the count is taken on a
schedule, not only when a step runs.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import aws, runtime
from lakepurge.operations import request_counts

logger = Logger(service="lakepurge")
metrics = Metrics(namespace="lakepurge", service="lakepurge")


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    open_requests, overdue = request_counts(runtime.settings(), aws.client("s3"))
    metrics.add_metric(name="RequestsOpen", unit=MetricUnit.Count, value=open_requests)
    metrics.add_metric(name="RequestsOverdue", unit=MetricUnit.Count, value=overdue)
    if overdue:
        logger.warning("requests past their legal deadline", extra={"overdue": overdue})
    return {"open": open_requests, "overdue": overdue}
