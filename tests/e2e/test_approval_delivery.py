"""Approvals that survive people and networks (issue 25): a decision is delivered to the waiting execution once, and
nothing that happens to the POST afterwards (a double click, a retry after a transient error) withdraws it.

The approval page runs on 127.0.0.1 behind real HTTP (lakepurge.local.approval_server), and Step Functions answers
SendTaskSuccess/SendTaskFailure after 200 ms, as a remote endpoint does. The local stack answers a token whose task is
already closed with TaskTimedOut, as AWS does (moto alone accepts it again)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.workflow.store import RequestKind
from tests.support.workflow import WorkflowCase, link_in

pytestmark = pytest.mark.e2e

STEP_FUNCTIONS_LATENCY = 0.2  # seconds before moto's Step Functions takes a SendTaskSuccess/SendTaskFailure
LAMBDA_LATENCY = 0.2  # seconds before an invoked function starts (the next Task after the decision: StartPurge)


@pytest.fixture
def page() -> Iterator[Any]:
    from lakepurge.local.approval_server import ApprovalServer

    server = ApprovalServer()
    yield server
    server.stop()


def _delay(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, seconds: float) -> None:
    call = getattr(owner, name)

    def delayed(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, delayed)


@pytest.fixture
def slow_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """SendTaskSuccess/SendTaskFailure reach the execution 200 ms after they are sent, and a Task's function starts
    200 ms after the execution invokes it (the in-process dispatch is installed by then: workflow_case deploys)."""
    from moto.awslambda.models import LambdaFunction
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    for name in ("send_task_success", "send_task_failure"):
        _delay(monkeypatch, StepFunctionsParserBackend, name, STEP_FUNCTIONS_LATENCY)
    _delay(monkeypatch, LambdaFunction, "invoke", LAMBDA_LATENCY)


def _post(page: Any, link: str, decision: str) -> requests.Response:
    form = {**dict(parse_qsl(urlsplit(link).query)), "decision": decision}
    return requests.post(page.url, data=form, timeout=60)


def _users(case: WorkflowCase, count: int) -> list[str]:
    return sorted({user for user, _, _ in case.lake.lake.truth})[:count]


def _double_click(page: Any, link: str, decision: str) -> list[requests.Response]:
    """Two POSTs of the same form, the second 50 ms after the first, both answered."""
    answers: list[requests.Response] = []
    clicks = [threading.Thread(target=lambda: answers.append(_post(page, link, decision))) for _ in range(2)]
    clicks[0].start()
    time.sleep(0.05)
    clicks[1].start()
    for click in clicks:
        click.join()
    return answers


@pytest.mark.parametrize("kind", ["erasure", "access"])
def test_given_slow_step_functions_when_the_approver_double_clicks_approve_then_the_request_ends_as_approved(
    workflow_case: Callable[..., WorkflowCase], page: Any, request: pytest.FixtureRequest, kind: RequestKind
) -> None:
    """Erased (the purge machine) or exported (the export machine: its execution is found by the request's kind)."""
    from lakepurge.workflow.store import RequestStore

    case = workflow_case(objects=8, users=10)
    request.getfixturevalue("slow_aws")
    request_id = case.file(_users(case, 1), f"req-double-click-{kind}", kind)
    link = link_in(case.emails(request_id)[0])

    answers = _double_click(page, link, "approve")

    execution = case.finish(request_id)
    assert execution["status"] == "SUCCEEDED", case.failures(request_id)
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert all("<title>Request approved</title>" in a.text for a in answers), [a.text for a in answers]
    assert case.notifications()[0]["outcome"] == ("ERASED" if kind == "erasure" else "EXPORTED")
    assert sum("the decision stands" in a.text for a in answers) == 1, "the repeated POST does not say so"
    decision = RequestStore(case.settings, aws.client("s3"), aws.client("kms")).decision(request_id)
    assert decision is not None and decision.decision == "approved" and decision.delivered_at


class _FailingDecisionWrite:
    """The reports bucket's client, whose ``nth`` rewrite of decision.json after the claim fails with a 500: before
    S3 applied it, or after (the response lost)."""

    def __init__(self, inner: Any, nth: int, applied: bool) -> None:
        self._inner, self._nth, self._applied = inner, nth, applied
        self.rewrites = 0

    def put_object(self, **kwargs: Any) -> Any:
        if kwargs["Key"].endswith("/decision.json") and "IfNoneMatch" not in kwargs:
            self.rewrites += 1
            if self.rewrites == self._nth:
                if self._applied:
                    self._inner.put_object(**kwargs)
                raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "PutObject")
        return self._inner.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("nth", "applied"),
    [(1, False), (1, True), (2, False)],
    ids=["first-rewrite-refused", "first-rewrite-applied-response-lost", "second-rewrite-refused"],
)
def test_given_a_failed_write_of_the_decision_when_the_approver_posts_again_then_the_approval_stands_and_erases(
    workflow_case: Callable[..., WorkflowCase], page: Any, monkeypatch: pytest.MonkeyPatch, nth: int, applied: bool
) -> None:
    from lakepurge.workflow.store import RequestStore

    case = workflow_case(objects=8, users=10)
    request_id = case.file(_users(case, 1), "req-write-fails")
    link = link_in(case.emails(request_id)[0])
    real_client = aws.client
    s3 = _FailingDecisionWrite(real_client("s3"), nth, applied)
    monkeypatch.setattr(aws, "client", lambda name, **kw: s3 if name == "s3" else real_client(name, **kw))

    first = _post(page, link, "approve")
    again = _post(page, link, "approve")  # the approver retries (after a 500), or checks (after a 200)

    assert first.status_code in (200, 500), first.text
    assert again.status_code == 200 and "<title>Request approved</title>" in again.text, again.text
    assert s3.rewrites >= nth, "the failing write was never attempted"
    monkeypatch.setattr(aws, "client", real_client)
    assert case.finish(request_id)["status"] == "SUCCEEDED", case.failures(request_id)
    decision = RequestStore(case.settings, aws.client("s3"), aws.client("kms")).decision(request_id)
    assert decision is not None and decision.decision == "approved" and decision.delivered_at
