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


def test_given_an_event_naming_a_typed_email_when_filed_then_its_index_form_is_sealed_and_never_in_the_sfn_input(
    intake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from lakepurge.records.identifiers import request_form

    monkeypatch.setenv(
        runtime.TOML_VARIABLE,
        os.environ[runtime.TOML_VARIABLE] + '\n[identifiers.email]\nnormalise = ["trim", "casefold"]\n',
    )
    runtime.reset()
    event = copy.deepcopy(load("eventbridge_deletion_requested.json"))
    event["detail"]["user_ids"] = ["u-1"]
    event["detail"]["ids"] = [{"kind": "email", "value": " Wanda@Example.COM "}]

    filed = intake.handler(event, LambdaContext())

    settings = runtime.settings()
    store = RequestStore(settings, aws_client("s3"), aws_client("kms"))
    request = store.get(filed["request_id"])
    wanda = request_form("email=wanda@example.com", settings.identifier_kinds)
    assert sorted(store.open(request)[0]) == sorted(["u-1", wanda])  # sealed with the untyped id, normalised
    stored = aws_client("s3").list_objects_v2(Bucket="intake-reports")["Contents"]
    for item in stored:
        body = aws_client("s3").get_object(Bucket="intake-reports", Key=item["Key"])["Body"].read()
        assert b"wanda" not in body.lower()  # sealed: never in clear where the request is kept
    execution = aws_client("stepfunctions").describe_execution(executionArn=filed["execution_arn"])
    assert orjson.loads(execution["input"]) == {"request_id": filed["request_id"]}


def test_given_a_typed_id_on_the_command_line_when_a_request_is_filed_then_it_is_sealed_as_its_index_form(
    intake: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from lakepurge.cli import main
    from lakepurge.records.identifiers import request_form

    config = tmp_path / "lakepurge.toml"
    config.write_text(os.environ[runtime.TOML_VARIABLE] + '\n[identifiers.email]\nnormalise = ["trim", "casefold"]\n')
    args = ["request", "u-1", "--id", "email= Wanda@Example.COM", "--request-id", "req-cli-typed", "--config"]

    assert main([*args, str(config), "--json"]) == 0, capsys.readouterr().err

    monkeypatch.setenv(runtime.TOML_VARIABLE, config.read_text())
    runtime.reset()
    settings = runtime.settings()
    store = RequestStore(settings, aws_client("s3"), aws_client("kms"))
    wanda = request_form("email=wanda@example.com", settings.identifier_kinds)
    assert sorted(store.open(store.get("req-cli-typed"))[0]) == sorted(["u-1", wanda])
