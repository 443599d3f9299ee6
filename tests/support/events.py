"""Lambda events built from the real-shaped fixtures in tests/events/, retargeted at test objects."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

EVENTS = Path(__file__).resolve().parent.parent / "events"


def load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return document


def s3_record(bucket: str, key: str, event_name: str = "ObjectCreated:Put") -> dict[str, Any]:
    """One S3 notification record, with the key URL-encoded as S3 sends it."""
    body = json.loads(load("sqs_s3_notification.json")["Records"][0]["body"])
    record: dict[str, Any] = body["Records"][0]
    record["eventName"] = event_name
    record["s3"]["bucket"]["name"] = bucket
    record["s3"]["bucket"]["arn"] = f"arn:aws:s3:::{bucket}"
    record["s3"]["object"]["key"] = quote_plus(key, safe="/")
    return record


def sqs_event(*notifications: dict[str, Any] | str) -> dict[str, Any]:
    """An SQS batch; each message body is an S3 notification (dict) or a raw string."""
    template = load("sqs_s3_notification.json")["Records"][0]
    records = []
    for notification in notifications:
        message = copy.deepcopy(template)
        message["messageId"] = str(uuid.uuid4())
        message["body"] = notification if isinstance(notification, str) else json.dumps(notification)
        records.append(message)
    return {"Records": records}


def s3_notification(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def retargeted(name: str, bucket: str, key: str) -> dict[str, Any]:
    """An SQS batch fixture whose one message (an S3 notification or an EventBridge S3 event) names bucket/key
    instead, the key URL-encoded where S3 encodes it (notifications, not EventBridge)."""
    event = load(name)
    body = json.loads(event["Records"][0]["body"])
    if "detail" in body:
        body["resources"] = [f"arn:aws:s3:::{bucket}"]
        body["detail"]["bucket"]["name"] = bucket
        body["detail"]["object"]["key"] = key
    else:
        record = body["Records"][0]
        record["s3"]["bucket"]["name"] = bucket
        record["s3"]["bucket"]["arn"] = f"arn:aws:s3:::{bucket}"
        record["s3"]["object"]["key"] = quote_plus(key, safe="/")
    event["Records"][0]["body"] = json.dumps(body)
    return event


def drained(sqs: Any, queue_url: str) -> dict[str, Any]:
    """Every message waiting in a queue, received (and so hidden) as one SQS batch event for a handler."""
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    messages = []
    while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
        messages.extend(batch)
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


@dataclass
class LambdaContext:
    """The fields of the Lambda runtime's context object that Powertools reads."""

    function_name: str = "lakepurge-indexer"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:lakepurge-indexer"
    aws_request_id: str = ""

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 300_000
