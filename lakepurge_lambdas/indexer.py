"""Indexer Lambda: S3 ObjectCreated/ObjectRemoved/ObjectTagging notifications, through SQS (partial-batch failures)
or direct. The SQS messages may be S3 event notifications or EventBridge events from the bucket ("Object
Created"/"Object Deleted"/"Object Tags Added"/"Object Tags Deleted", source aws.s3: how a bucket that already has
notifications can feed the index too).

Each notification only names a key: the library reads what S3 holds now and replaces that object's index rows,
so duplicates and out-of-order deliveries are harmless. A tag change matters only to a tag-owned dataset (the owner
tag names the object's user), whose object is then read again although its ETag did not change.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, S3Event
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.indexing.indexer import IndexOutcome, index_object, record_created_version

logger = Logger(service="lakepurge")
metrics = Metrics(namespace="lakepurge", service="lakepurge")
processor = BatchProcessor(event_type=EventType.SQS)


# (bucket, key, the version an ObjectCreated event created, whether the event is a tag change)
Change = tuple[str, str, str | None, bool]
TAGS_CHANGED = ("Object Tags Added", "Object Tags Deleted")  # EventBridge's detail-types of s3:ObjectTagging:*


def _index_s3_event(event: S3Event) -> list[IndexOutcome]:
    # S3 URL-encodes keys in notifications. A created version is named so that, if it is overwritten before its event
    # is handled, it is still indexed (as the noncurrent version it has become).
    return _index_keys(
        [
            (
                r.s3.bucket.name,
                unquote_plus(r.s3.get_object.key),
                r.s3.get_object.version_id if r.event_name.startswith("ObjectCreated") else None,
                r.event_name.startswith("ObjectTagging"),
            )
            for r in event.records
        ]
    )


def _index_keys(keys: list[Change]) -> list[IndexOutcome]:
    outcomes = []
    for bucket, key, created_version, tags_changed in keys:
        if created_version:
            record_created_version(
                aws.client("s3"), runtime.index_store(), runtime.settings(), bucket, key, created_version
            )
        outcome = index_object(
            aws.client("s3"),
            runtime.index_store(),
            runtime.settings(),
            bucket,
            key,
            pseudonymizer=runtime.pseudonymizer(),
            tags_changed=tags_changed,
        )
        outcomes.append(outcome)
        metrics.add_metric(name="ObjectsIndexed", unit=MetricUnit.Count, value=1)
        if outcome.unindexable:
            metrics.add_metric(name="UnindexableLines", unit=MetricUnit.Count, value=outcome.unindexable)
        if outcome.returning_users:
            metrics.add_metric(name="ReturningUsers", unit=MetricUnit.Count, value=outcome.returning_users)
    return outcomes


def record_handler(record: SQSRecord) -> dict[str, int]:
    body = record.json_body
    if not isinstance(body, dict) or body.get("Event") == "s3:TestEvent":
        return {"objects": 0}  # the test message S3 sends when a notification is configured
    if body.get("source") == "aws.s3" and "detail" in body:
        # EventBridge names the key as it is (not URL-encoded).
        bridged = EventBridgeEvent(body)
        created = bridged.detail["object"].get("version-id") if bridged.detail_type == "Object Created" else None
        tagged = bridged.detail_type in TAGS_CHANGED
        outcomes = _index_keys([(bridged.detail["bucket"]["name"], bridged.detail["object"]["key"], created, tagged)])
    elif "Records" in body:
        outcomes = _index_s3_event(S3Event(body))
    else:
        raise ValueError("SQS message is neither an S3 event notification nor an EventBridge S3 event")
    return {"objects": len(outcomes), "unindexable": sum(o.unindexable for o in outcomes)}


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    logger.set_correlation_id(context.aws_request_id)
    records = event.get("Records") or []
    if records and records[0].get("eventSource") == "aws:sqs":
        return dict(
            process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
        )
    outcomes = _index_s3_event(S3Event(event))
    return {
        "objects": len(outcomes),
        "indexed": sum(o.action == "indexed" for o in outcomes),
        "removed": sum(o.action == "removed" for o in outcomes),
        "unindexable": sum(o.unindexable for o in outcomes),
    }
