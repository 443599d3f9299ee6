"""The intake's bounds on a request's ids, through the Lambda handler: a refusal names the limit (never an id) and
comes before any AWS call (the unit tier has no network: nothing can have been stored or started)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.workflow.store import RequestRefused
from tests.support.configs import workflow_toml
from tests.support.events import LambdaContext, load

pytestmark = pytest.mark.unit

CONFIG = """
[index]
backend = "dynamodb"
table = "lakepurge-index"

[reports]
location = "s3://lake-reports/"

""" + workflow_toml(
    "arn:aws:states:us-east-1:123456789012:stateMachine:lakepurge",
    "alias/lakepurge",
    max_request_users=3,
    max_user_id_bytes=64,
)


@pytest.fixture
def intake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from lakepurge_lambdas import intake

    monkeypatch.setenv(runtime.TOML_VARIABLE, CONFIG)
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", "unit-test-hash-key-0123456789")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    runtime.reset()
    yield intake
    runtime.reset()
    aws.client.cache_clear()  # the handler made clients without the moto server's endpoint: later tests need theirs


def _event(user_ids: list[str]) -> dict[str, Any]:
    event = copy.deepcopy(load("eventbridge_deletion_requested.json"))
    event["detail"]["user_ids"] = user_ids
    return event


def test_given_more_ids_than_the_limit_when_the_intake_runs_then_it_refuses_naming_the_limit(intake: Any) -> None:
    ids = [f"someone-{n}@example.com" for n in range(4)]

    with pytest.raises(RequestRefused, match=r"4 user ids, more than workflow\.max_request_users \(3\)") as refused:
        intake.handler(_event(ids), LambdaContext())

    assert not any(user in str(refused.value) for user in ids)


def test_given_an_id_longer_than_the_limit_when_the_intake_runs_then_it_refuses_naming_the_id_by_position(
    intake: Any,
) -> None:
    long_id = "é" * 33  # 66 UTF-8 bytes: the limit counts bytes, as the index does

    with pytest.raises(RequestRefused, match=r"user id #2 is 66 bytes, longer than workflow\.max_user_id_bytes \(64\)"):
        intake.handler(_event(["alice@example.com", long_id]), LambdaContext())


def test_given_a_typed_id_of_a_kind_not_configured_when_the_intake_runs_then_it_refuses_naming_the_kind(
    intake: Any,
) -> None:
    event = _event([])
    event["detail"]["ids"] = [{"kind": "email", "value": "wanda@example.com"}]

    with pytest.raises(RequestRefused, match=r"typed id #1: identifier kind 'email' is not configured") as refused:
        intake.handler(event, LambdaContext())

    assert "wanda" not in str(refused.value)
