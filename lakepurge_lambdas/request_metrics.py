"""RequestMetrics (scheduled, EventBridge): publish how many requests are open and overdue, and store the operations
page's view.

The counts are those of ``lakepurge requests`` and the operations page; the RequestsOverdue alarm of
infra/template.yaml watches the second. A request becomes overdue by the clock alone, so the count is taken on a
schedule, not only when a step runs. The view (requests, index counts, coverage: a full pass over the index) is built
here, once an hour, and stored in the reports location, where the page (GET /ops) reads it.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.ops.dashboard import refresh_view

logger = Logger(service="lakepurge")
metrics = Metrics(namespace="lakepurge", service="lakepurge")


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    view = refresh_view(runtime.settings(), aws.client("s3"), runtime.index_store(create=False), aws.client("sqs"))
    metrics.add_metric(name="RequestsOpen", unit=MetricUnit.Count, value=view.open)
    metrics.add_metric(name="RequestsOverdue", unit=MetricUnit.Count, value=view.overdue)
    if view.overdue:
        logger.warning("requests past their legal deadline", extra={"overdue": view.overdue})
    return {"open": view.open, "overdue": view.overdue}
