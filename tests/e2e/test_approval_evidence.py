"""approval.json and decision.json as evidence (issue 14): another writer of the reports bucket replaces approval.json
with its own approver secret and the waiting execution's task token, then posts an approval through the public page:
refused (403), nothing approved, the request's state unchanged. The genuine approval then still works, and
decision.json records the POST's source IP and (truncated) user agent, signed."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest

from lakepurge.core import aws
from lakepurge.reports import layout
from lakepurge.workflow import signing
from lakepurge.workflow.approval import USER_AGENT_MAX
from lakepurge.workflow.store import RequestStore, workflow_settings
from tests.support.events import LambdaContext
from tests.support.workflow import WorkflowCase, approval_event, call_approval, link_in

pytestmark = pytest.mark.e2e

ATTACKER_SECRET = "mallorys-own-secret-0123456789"


def _first_user(case: WorkflowCase) -> str:
    return sorted(case.lake.lake.truth)[0][0]


def _attackers_link(request_id: str) -> str:
    query = urlencode({"request": request_id, "approver": 0, "secret": ATTACKER_SECRET})
    return f"https://abcdef1234.execute-api.us-east-1.amazonaws.com/approval?{query}"


def _succeeded_tasks(case: WorkflowCase, request_id: str) -> int:
    return sum(1 for event in case.history(request_id) if event["type"] == "TaskSucceeded")


def _post(link: str, decision: str, user_agent: str | None = None, source_ip: str | None = None) -> dict[str, Any]:
    from urllib.parse import parse_qsl, urlsplit

    from lakepurge_lambdas import approval_api

    event = copy.deepcopy(approval_event("POST", link, {**dict(parse_qsl(urlsplit(link).query)), "decision": decision}))
    if user_agent is not None:
        event["requestContext"]["http"]["userAgent"] = user_agent
        event["headers"]["user-agent"] = user_agent
    if source_ip is not None:
        event["requestContext"]["http"]["sourceIp"] = source_ip
    response: dict[str, Any] = approval_api.handler(event, LambdaContext())
    return response


def _awaiting_approval(
    workflow_case: Callable[..., WorkflowCase], request_id: str, approver: int
) -> tuple[WorkflowCase, str, str, RequestStore]:
    """A request for one user, waiting for its approval: the case, its id, one approver's link, the store."""
    case = workflow_case(objects=12, users=20)
    filed = case.file([_first_user(case)], request_id)
    link = link_in(case.emails(filed)[approver])
    return case, filed, link, RequestStore(case.settings, aws.client("s3"), aws.client("kms"))


def test_a_forged_approval_json_is_refused_and_the_genuine_decision_records_who_sent_it(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case, request_id, genuine_link, store = _awaiting_approval(workflow_case, "req-forged", approver=0)
    genuine = store.approval(request_id)
    assert genuine is not None and genuine.signature, "RequestApproval did not sign approval.json"
    state_before = store.document(request_id, layout.STATE)
    assert state_before is not None and state_before["state"] == "AWAITING_APPROVAL"

    # Another role's forgery: its own approver secret, the same task token; unsigned, then signed with a wrong key.
    forged = genuine.model_copy(
        update={
            "approvers": (
                layout.Approver(
                    email="mallory@example.com", secret_sha256=hashlib.sha256(ATTACKER_SECRET.encode()).hexdigest()
                ),
            ),
            "signature": None,
        }
    )
    wrong_key = b"a-key-the-attacker-made-up-0123456789"
    succeeded_before = _succeeded_tasks(case, request_id)
    attempts = {
        "unsigned": forged,
        "signed with a wrong key": signing.sign(wrong_key, request_id, layout.APPROVAL, forged),
        "the genuine signature kept": forged.model_copy(update={"signature": genuine.signature}),
    }
    for what, document in attempts.items():
        store.put_document(request_id, layout.APPROVAL, document)

        shown = call_approval("GET", _attackers_link(request_id))
        posted = _post(_attackers_link(request_id), "approve")

        assert shown["statusCode"] == 403, (what, shown["body"])
        assert posted["statusCode"] == 403, (what, posted["body"])
        assert "cannot be verified" in posted["body"]
        assert ATTACKER_SECRET not in posted["body"]
        assert store.document(request_id, layout.DECISION) is None, what
        assert store.document(request_id, layout.STATE) == state_before, what
        execution = case.sfn.describe_execution(executionArn=case.execution_arn(request_id))
        assert execution["status"] == "RUNNING", (what, execution)
    assert _succeeded_tasks(case, request_id) == succeeded_before, "a forged approval woke the execution"
    # Even the genuine approver's link is refused while the forgery stands: nothing in it can be trusted.
    assert _post(genuine_link, "approve")["statusCode"] == 403

    # The genuine document back (a version restore): the genuine approver decides, and decision.json says who sent it.
    store.put_document(request_id, layout.APPROVAL, genuine)
    decided = _post(genuine_link, "approve", user_agent="Mozilla/5.0 " + "x" * 500, source_ip="203.0.113.42")

    assert decided["statusCode"] == 200, decided["body"]
    decision = store.decision(request_id)
    assert decision is not None and decision.decision == "approved" and decision.delivered_at
    assert decision.source_ip == "203.0.113.42"
    assert decision.user_agent == ("Mozilla/5.0 " + "x" * 500)[:USER_AGENT_MAX]
    key = signing.signing_key(workflow_settings(case.settings))
    signing.verify(key, request_id, layout.DECISION, decision)
    assert case.finish(request_id)["status"] == "SUCCEEDED"


def test_the_recorded_post_event_s_source_ip_and_user_agent_are_in_decision_json(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    from tests.support.workflow import APPROVERS

    case, request_id, link, store = _awaiting_approval(workflow_case, "req-who", approver=1)
    # An unsigned claim planted in this approver's name, as if a transient error had left it undelivered: the
    # approver's retry would deliver it, but the page did not sign it, so it is refused and nothing is delivered.
    planted = layout.DecisionDocument(
        decision="rejected",
        rejected_by=APPROVERS[1],
        by=APPROVERS[1],
        decided_at="2026-11-21T10:16:03+00:00",
        report_uri="s3://elsewhere/report.json",
        report_sha256="00" * 32,
    )
    store.put_document(request_id, layout.DECISION, planted)
    refused = call_approval("POST", link, "reject")
    assert refused["statusCode"] == 403, refused["body"]
    assert case.sfn.describe_execution(executionArn=case.execution_arn(request_id))["status"] == "RUNNING"
    store.delete_document(request_id, layout.DECISION)

    rejected = call_approval("POST", link, "reject")  # the fixture event: 198.51.100.7, Mozilla/5.0

    assert rejected["statusCode"] == 200, rejected["body"]
    stored = store.document(request_id, layout.DECISION)
    assert stored is not None
    assert stored["source_ip"] == "198.51.100.7" and stored["user_agent"] == "Mozilla/5.0"
    assert stored["signature"].startswith("hmac-sha256:")
    assert "authorized_subject" not in stored, "no JWT authorizer: no subject"
    assert case.finish(request_id)["status"] == "FAILED"
