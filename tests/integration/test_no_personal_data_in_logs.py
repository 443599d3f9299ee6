"""Logs never carry a user id: not from records, not from keys that name their user, not from bad lines."""

from __future__ import annotations

import json
import logging

import orjson
import pytest

from lakepurge.core import aws
from lakepurge_lambdas import indexer as indexer_lambda
from tests.support.events import LambdaContext, s3_notification, s3_record, sqs_event
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration


def test_given_indexing_with_bad_lines_and_id_bearing_keys_when_logging_then_no_user_id_is_logged(
    lake_factory, pg_dsn, caplog
):
    case = lake_factory(index_toml("postgres", pg_dsn), objects=40, users=15)
    s3 = aws.client("s3")
    secret_user = "alice.secret@example.com"
    s3.put_object(
        Bucket="lake",
        Key="reviews/bad/leaky.jsonl",
        Body=orjson.dumps({"user_id": secret_user}) + b'\n{"user_id": "' + secret_user.encode() + b'", broken\n',
    )
    s3.put_object(Bucket="lake", Key=f"clicks/{secret_user}-bad.txt", Body=b"x")  # key names the user
    keys = [o.key for o in case.lake.objects] + ["reviews/bad/leaky.jsonl", f"clicks/{secret_user}-bad.txt"]
    events = [s3_notification(s3_record("lake", k)) for k in keys]
    s3.delete_object(Bucket="lake", Key=case.lake.objects[0].key)
    events.append(s3_notification(s3_record("lake", case.lake.objects[0].key, "ObjectRemoved:Delete")))
    events.append(s3_notification(s3_record("lake", f"clicks/{secret_user}-gone.csv", "ObjectRemoved:Delete")))

    with (
        caplog.at_level(logging.DEBUG, logger="lakepurge"),
        caplog.at_level(logging.DEBUG, logger="aws_lambda_powertools"),
    ):
        response = indexer_lambda.handler(sqs_event(*events, "not json"), LambdaContext())

    assert len(response["batchItemFailures"]) == 1
    # Our logs and Powertools' (botocore's own DEBUG output is off unless an operator turns it on).
    ours = [r for r in caplog.records if r.name.startswith(("lakepurge", "aws_lambda_powertools"))]
    assert any(r.levelno >= logging.WARNING for r in ours)  # problems were logged ...
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in ours)
    for user in [*case.lake.users, secret_user]:
        assert user not in logged  # ... without naming anyone
