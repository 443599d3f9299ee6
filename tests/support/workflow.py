"""A deployed local workflow for tests: the real ASL on moto, the real handlers, a sample lake indexed in
PostgreSQL and reconciled (so its coverage is recorded and requests can be certified), an SQS queue subscribed to the
outcome topic, and the approval page driven with API Gateway events."""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
import time
import tomllib
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.local import workflow as local_workflow
from lakepurge.workflow.intake import file_request
from lakepurge.workflow.store import RequestKind
from tests.support.events import LambdaContext, load
from tests.support.lakes import LakeCase
from tests.support.purging import HASH_KEY, index_lake

SENDER = "privacy-bot@example.com"
APPROVERS = ["dpo@example.com", "cto@example.com"]
APPROVAL_URL = "https://abcdef1234.execute-api.us-east-1.amazonaws.com/approval"
EXPORTS_LOCATION = "s3://lake-exports/access/"  # where access requests' archives go


@dataclass
class WorkflowCase:
    lake: LakeCase
    settings: Settings
    toml: str
    deployed: local_workflow.LocalWorkflow
    queue_url: str
    kinds: dict[str, str] = field(default_factory=dict)  # request id -> "access", for those filed as such

    @property
    def sfn(self) -> Any:
        return aws.client("stepfunctions")

    def file(self, users: list[str], request_id: str, kind: RequestKind = "erasure") -> str:
        self.kinds[request_id] = kind
        file_request(
            self.settings,
            Clients.from_environment(),
            self.sfn,
            Pseudonymizer(HASH_KEY.encode()),
            users,
            "privacy-portal",
            request_id,
            kind=kind,
        )
        return request_id

    def file_event(self, ids: list[dict[str, str]], request_id: str) -> str:
        """A deletion request naming these typed ids, filed through the intake handler as its EventBridge event."""
        from lakepurge_lambdas import intake

        event = copy.deepcopy(load("eventbridge_deletion_requested.json"))
        event["detail"] = {"ids": ids, "requester": "privacy-portal", "request_id": request_id}
        filed: str = intake.handler(event, LambdaContext())["request_id"]
        return filed

    def execution_arn(self, request_id: str) -> str:
        access = self.kinds.get(request_id) == "access"
        machine = self.deployed.export_state_machine_arn if access else self.deployed.state_machine_arn
        return machine.replace(":stateMachine:", ":execution:") + f":{request_id}"

    def finish(self, request_id: str, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            execution = self.sfn.describe_execution(executionArn=self.execution_arn(request_id))
            if execution["status"] != "RUNNING":
                return dict(execution)
            time.sleep(0.25)
        raise AssertionError(f"execution {request_id} still running after {timeout} s")

    def approve_and_finish(self, request_id: str) -> dict[str, Any]:
        """The first approver approves; the execution runs to its end, which must be SUCCEEDED."""
        decided = call_approval("POST", link_in(self.emails(request_id)[0]), "approve")
        assert decided["statusCode"] == 200, decided["body"]
        execution = self.finish(request_id)
        assert execution["status"] == "SUCCEEDED", self.failures(request_id)
        return execution

    def history(self, request_id: str) -> list[dict[str, Any]]:
        return list(self.sfn.get_execution_history(executionArn=self.execution_arn(request_id))["events"])

    def failures(self, request_id: str) -> list[dict[str, Any]]:
        """The failure details of the execution's history, for assertion messages."""
        return [
            {k: v for k, v in event.items() if k.endswith("FailedEventDetails") or k == "type"}
            for event in self.history(request_id)
            if "Failed" in event["type"] or "TimedOut" in event["type"]
        ]

    def wait_for_event(self, request_id: str, predicate: Any, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.history(request_id):
                if predicate(event):
                    return event
            time.sleep(0.25)
        raise AssertionError(f"execution {request_id}: the awaited event did not happen in {timeout} s")

    def emails(self, request_id: str, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mails = [m for m in local_workflow.sent_emails() if request_id in m["subject"]]
            if len(mails) == len(APPROVERS):
                return mails
            if self.sfn.describe_execution(executionArn=self.execution_arn(request_id))["status"] != "RUNNING":
                break
            time.sleep(0.25)
        raise AssertionError(f"no approval email for {request_id} within {timeout} s: {self.failures(request_id)}")

    def notifications(self, wait_for: int = 1, timeout: float = 30) -> list[dict[str, str]]:
        sqs = aws.client("sqs")
        found: list[dict[str, str]] = []
        deadline = time.monotonic() + timeout
        while len(found) < wait_for and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", []):
                envelope = json.loads(message["Body"])
                outcome = envelope.get("MessageAttributes", {}).get("outcome", {}).get("Value", "")
                found.append(
                    {"subject": envelope.get("Subject", ""), "message": envelope["Message"], "outcome": outcome}
                )
                sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return found

    def what_left(self, request_id: str, page: str, certificate: dict[str, Any], logs: RecordList) -> dict[str, str]:
        """All the stack gave out of the request, as text by where it went (to search for raw identifiers): the
        execution's history, the emails, the approval page, the handlers' logs, the certificate, the notifications."""
        left = {
            "history": json.dumps(self.history(request_id), default=str),
            "emails": json.dumps([m for m in local_workflow.sent_emails() if request_id in m["subject"]]),
            "page": page,
            "logs": "\n".join(json.dumps(r.__dict__, default=str) for r in logs.records),
            "certificate": json.dumps(certificate),
            "notifications": json.dumps(self.notifications()),
        }
        assert request_id in left["logs"], "the handlers' logs were not captured"
        return left


def _dataset_of(settings: Settings, bucket: str, key: str) -> str | None:
    dataset = settings.dataset_for(bucket, key)
    return dataset.name if dataset is not None else None


def link_in(email: dict[str, Any]) -> str:
    match = re.search(r"https://\S+", email["body"])
    assert match, "the approval email has no link"
    return match.group(0)


def approval_event(method: str, link: str, form: dict[str, str] | None = None) -> dict[str, Any]:
    """An HTTP API (payload 2.0) event for the approval page, from the recorded fixtures."""
    name = "apigw_http_approval_get.json" if method == "GET" else "apigw_http_approval_post.json"
    event = copy.deepcopy(load(name))
    query = urlsplit(link).query
    event["rawQueryString"] = query
    event["queryStringParameters"] = dict(parse_qsl(query))
    if form is not None:
        event["body"] = base64.b64encode(urlencode(form).encode()).decode()
    return event


def call_approval(method: str, link: str, decision: str | None = None) -> dict[str, Any]:
    from lakepurge_lambdas import approval_api

    form = None
    if method == "POST":
        form = {**dict(parse_qsl(urlsplit(link).query)), "decision": decision or ""}
    response: dict[str, Any] = approval_api.handler(approval_event(method, link, form), LambdaContext())
    return response


def deploy_case(
    lake: LakeCase,
    approval_timeout_seconds: int = 600,
    inline_max_objects: int = 20,
    extra_toml: str = "",
    unindexed: Collection[str] = (),
) -> WorkflowCase:
    """Index the lake object by object, as S3 events would, then reconcile it (the path that records each dataset's
    coverage), and deploy the workflow for it; the returned TOML is what handlers read. The ``unindexed`` datasets
    are never indexed nor reconciled: the index has no coverage of them."""
    local_workflow.install_lambda_dispatch()
    local_workflow.close_answered_task_tokens()
    local_workflow.enable_execution(aws.client("s3").meta.endpoint_url)
    settings = lake.settings
    skipped = set(unindexed)
    assert skipped <= {d.name for d in settings.datasets}, f"no such dataset: {skipped}"
    objects = [o for o in lake.lake.objects if _dataset_of(settings, lake.lake.bucket, o.key) not in skipped]
    store = open_store(settings.index)
    try:
        covered = [d.name for d in settings.datasets if d.name not in skipped]
        index_lake(store, settings, replace(lake.lake, objects=objects), covered)
    finally:
        store.close()
    deployed, workflow_toml = local_workflow.prepare(
        SENDER,
        APPROVERS,
        APPROVAL_URL,
        approval_timeout_seconds=approval_timeout_seconds,
        inline_max_objects=inline_max_objects,
        exports_location=EXPORTS_LOCATION,
    )
    aws.client("s3").create_bucket(Bucket="lake-exports")
    # A test lake is small: any few users are a large share of a dataset.
    toml = (
        lake.toml + "\n[purge]\nmax_dataset_fraction = 1.0\nmax_table_fraction = 1.0\n\n" + workflow_toml + extra_toml
    )
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="outcomes")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.client("sns").subscribe(TopicArn=deployed.topic_arn, Protocol="sqs", Endpoint=queue_arn)
    return WorkflowCase(lake, parse_settings(tomllib.loads(toml)), toml, deployed, queue_url)


class RecordList(logging.Handler):
    """Keeps every log record it is given, to search them for raw ids."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
