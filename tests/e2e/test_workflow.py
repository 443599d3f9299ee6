"""The purge workflow executed from statemachine/purge.asl.json by moto, with the real handlers in-process.

Every path ends in its own SNS notification; the approval email and the execution history never hold a raw user id;
a GET on the approval link decides nothing and a replayed POST is refused."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import orjson
import pytest

from lakepurge import aws, runtime
from lakepurge.local.workflow import sent_emails
from tests.support.invariant import assert_invariant, snapshot
from tests.support.lakes import LakeCase
from tests.support.purging import HASH_KEY
from tests.support.workflow import APPROVERS, WorkflowCase, call_approval, deploy_case, link_in

pytestmark = pytest.mark.e2e


@pytest.fixture
def workflow_case(
    lake_factory: Callable[..., LakeCase], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., WorkflowCase]]:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)

    def create(**options: int) -> WorkflowCase:
        from tests.support.lakes import index_toml

        lake = lake_factory(index_toml("postgres", pg_dsn), objects=24, users=30)
        case = deploy_case(lake, **options)
        monkeypatch.setenv("LAKEPURGE_CONFIG_TOML", case.toml)
        runtime.reset()
        return case

    yield create


def _users_with_data(case: WorkflowCase, count: int) -> list[str]:
    seen: list[str] = []
    for user, _, _ in sorted(case.lake.lake.truth):
        if user not in seen:
            seen.append(user)
    return seen[:count]


def _assert_no_raw_ids(case: WorkflowCase, request_id: str, users: list[str]) -> None:
    history = json.dumps(case.history(request_id), default=str)
    mails = json.dumps([m for m in sent_emails() if request_id in m["subject"]])
    execution = json.dumps(case.sfn.describe_execution(executionArn=case.execution_arn(request_id)), default=str)
    for user in users:
        assert user not in history, "a raw user id is in the execution history"
        assert user not in mails, "a raw user id is in an approval email"
        assert user not in execution, "a raw user id is in the execution's input or output"


def test_approved_request_is_erased_verified_certified_and_notified(workflow_case: Callable[..., WorkflowCase]) -> None:
    case = workflow_case()
    s3 = aws.client("s3")
    users = _users_with_data(case, 2)
    before = snapshot(s3, case.lake.lake.bucket)

    request_id = case.file(users, "req-approve")
    mails = case.emails(request_id)
    assert sorted(m["to"][0] for m in mails) == sorted(APPROVERS)
    link = link_in(mails[0])

    page = call_approval("GET", link)
    assert page["statusCode"] == 200 and "Approve erasure" in page["body"]
    assert snapshot(s3, case.lake.lake.bucket) == before, "a GET changed the lake"
    assert case.sfn.describe_execution(executionArn=case.execution_arn(request_id))["status"] == "RUNNING"

    decided = call_approval("POST", link, "approve")
    assert decided["statusCode"] == 200, decided["body"]
    execution = case.finish(request_id)
    assert execution["status"] == "SUCCEEDED", execution

    assert_invariant(case.lake.lake, case.lake.settings, set(users), before, snapshot(s3, case.lake.lake.bucket))
    certificate_key = f"certificates/{request_id}.json"
    certificate = orjson.loads(s3.get_object(Bucket="lake-reports", Key=certificate_key)["Body"].read())
    assert certificate["verification"]["passed"] is True
    assert certificate["approved_by"] == APPROVERS[0] and certificate["approved_at"]
    [note] = case.notifications()
    assert "ERASED" in note["subject"] and f"s3://lake-reports/{certificate_key}" in note["message"]

    replay = call_approval("POST", link, "approve")
    assert replay["statusCode"] == 409, "a replayed POST was not refused"
    other = call_approval("POST", link_in(mails[1]), "reject")
    assert other["statusCode"] == 409, "a second approver could still decide"
    _assert_no_raw_ids(case, request_id, users)


def test_rejected_request_changes_nothing_and_says_rejected(workflow_case: Callable[..., WorkflowCase]) -> None:
    case = workflow_case()
    s3 = aws.client("s3")
    users = _users_with_data(case, 1)
    before = snapshot(s3, case.lake.lake.bucket)
    request_id = case.file(users, "req-reject")
    decided = call_approval("POST", link_in(case.emails(request_id)[1]), "reject")
    assert decided["statusCode"] == 200
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "Rejected"
    assert snapshot(s3, case.lake.lake.bucket) == before
    [note] = case.notifications()
    assert "REJECTED" in note["subject"] and APPROVERS[1] in note["message"] and "ERASED" not in note["subject"]
    _assert_no_raw_ids(case, request_id, users)


def test_unanswered_approval_times_out_notifies_and_the_link_expires(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case(approval_timeout_seconds=3)
    s3 = aws.client("s3")
    users = _users_with_data(case, 1)
    before = snapshot(s3, case.lake.lake.bucket)
    request_id = case.file(users, "req-timeout")
    link = link_in(case.emails(request_id)[0])
    execution = case.finish(request_id, timeout=60)
    assert execution["status"] == "FAILED" and execution.get("error") == "ApprovalTimedOut"
    [note] = case.notifications()
    assert "APPROVAL_TIMED_OUT" in note["subject"] and "NOTHING was erased" in note["message"]
    late = call_approval("POST", link, "approve")
    assert late["statusCode"] == 410
    assert snapshot(s3, case.lake.lake.bucket) == before
    _assert_no_raw_ids(case, request_id, users)


def test_request_for_unknown_users_ends_as_nothing_found_without_asking_anyone(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case()
    request_id = case.file(["nobody-1", "nobody-2"], "req-nothing")
    execution = case.finish(request_id)
    assert execution["status"] == "SUCCEEDED"
    assert not [m for m in sent_emails() if request_id in m["subject"]]
    [note] = case.notifications()
    assert "NOTHING_FOUND" in note["subject"] and "ERASED" not in note["subject"]


def test_report_changed_before_the_decision_cannot_be_approved(workflow_case: Callable[..., WorkflowCase]) -> None:
    case = workflow_case()
    s3 = aws.client("s3")
    users = _users_with_data(case, 1)
    before = snapshot(s3, case.lake.lake.bucket)
    request_id = case.file(users, "req-tamper-early")
    link = link_in(case.emails(request_id)[0])
    s3.put_object(Bucket="lake-reports", Key=f"reports/{request_id}.json", Body=b'{"objects": []}')
    refused = call_approval("POST", link, "approve")
    assert refused["statusCode"] == 409
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "ReportTampered"
    [note] = case.notifications()
    assert "REPORT_TAMPERED" in note["subject"]
    assert snapshot(s3, case.lake.lake.bucket) == before
