"""The intake Lambda against S3, KMS and Step Functions on the moto server: the request's legal deadline runs from
the intake's own clock, whatever time the sender states."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.workflow.store import RequestStore
from tests.support.configs import workflow_toml
from tests.support.events import LambdaContext, load

pytestmark = pytest.mark.integration

PASS_MACHINE = orjson.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}).decode()


@pytest.fixture
def intake(aws: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from lakepurge_lambdas import intake

    s3, kms, sfn = aws_client("s3"), aws_client("kms"), aws_client("stepfunctions")
    s3.create_bucket(Bucket="intake-reports")
    key_id = kms.create_key(Description="lakepurge requests")["KeyMetadata"]["KeyId"]
    machine = sfn.create_state_machine(
        name="intake-purge", definition=PASS_MACHINE, roleArn="arn:aws:iam::123456789012:role/lakepurge"
    )["stateMachineArn"]
    monkeypatch.setenv(
        runtime.TOML_VARIABLE,
        """
[index]
backend = "dynamodb"
table = "unused"

[reports]
location = "s3://intake-reports/"

"""
        + workflow_toml(machine, key_id),
    )
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", "intake-test-hash-key-0123456789")
    runtime.reset()
    yield intake
    runtime.reset()


def aws_client(service: str) -> Any:
    return aws.client(service)


@pytest.mark.parametrize("stated_days_ago", [60, -60], ids=["stated long ago", "stated in the future"])
def test_given_a_sender_stating_when_it_received_the_request_when_filed_then_the_deadline_runs_from_the_intake_clock(
    intake: Any, stated_days_ago: int
) -> None:
    stated = (datetime.now(UTC) - timedelta(days=stated_days_ago)).replace(microsecond=0)
    event = copy.deepcopy(load("eventbridge_deletion_requested.json"))
    event["detail"]["received_at"] = stated.isoformat()
    before = datetime.now(UTC).replace(microsecond=0)

    filed = intake.handler(event, LambdaContext())

    after = datetime.now(UTC)
    settings = runtime.settings()
    request = RequestStore(settings, aws_client("s3"), aws_client("kms")).get(filed["request_id"])
    assert before <= datetime.fromisoformat(request.received_at) <= after
    assert before + timedelta(days=30) <= datetime.fromisoformat(filed["deadline"]) <= after + timedelta(days=30)
    assert request.deadline == filed["deadline"]
    assert request.stated_received_at == stated.isoformat()  # kept, as information only
