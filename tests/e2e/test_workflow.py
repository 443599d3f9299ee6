"""The purge workflow executed from statemachine/purge.asl.json by moto, with the real handlers in-process.

Every path ends in its own SNS notification; the approval email and the execution history never hold a raw user id;
a GET on the approval link decides nothing and a replayed POST is refused."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_store
from lakepurge.indexing.indexer import index_object
from lakepurge.local.workflow import sent_emails
from lakepurge.reports import layout
from tests.support.events import load
from tests.support.invariant import assert_invariant, snapshot
from tests.support.lakes import LakeCase
from tests.support.purging import HASH_KEY
from tests.support.workflow import APPROVERS, RecordList, WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e


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


def _case_with_a_crm_table(workflow_case: Callable[..., WorkflowCase], pg_dsn: str) -> tuple[WorkflowCase, list[str]]:
    """A workflow over the sample lake and a [[relational]] CRM table holding 3 rows of two users with data (their
    ids) and one of someone else."""
    import psycopg

    relational = f'[[relational]]\nname = "crm"\ndsn = "{pg_dsn}"\ntable = "crm_customers"\ncolumn = "user_id"\n'
    case = workflow_case(extra_toml=relational)
    users = _users_with_data(case, 2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS crm_customers (user_id text, plan text)")
        conn.execute("TRUNCATE crm_customers")
        for user in [*users, users[0], "someone-else"]:
            conn.execute("INSERT INTO crm_customers VALUES (%s, 'pro')", (user,))
    return case, users


def test_approved_request_is_erased_verified_certified_and_notified(
    workflow_case: Callable[..., WorkflowCase], pg_dsn: str, service_logs: RecordList
) -> None:
    import psycopg

    case, users = _case_with_a_crm_table(workflow_case, pg_dsn)
    s3 = aws.client("s3")
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
    assert certificate["totals"]["relational_rows_deleted"] == 3
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT user_id FROM crm_customers").fetchall() == [("someone-else",)]
    [note] = case.notifications()
    assert "ERASED" in note["subject"] and f"s3://lake-reports/{certificate_key}" in note["message"]

    replay = call_approval("POST", link, "approve")  # the same approver's decision again: it stands, nothing more
    assert replay["statusCode"] == 200 and "the decision stands" in replay["body"], replay["body"]
    other = call_approval("POST", link_in(mails[1]), "reject")
    assert other["statusCode"] == 409, "a second approver could still decide"
    _assert_no_raw_ids(case, request_id, users)
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in service_logs.records)
    assert "req-approve" in logged, "the handlers' logs were not captured"
    for user in users:
        assert user not in logged, "a raw user id was logged"


def test_a_start_purge_delivered_again_while_the_first_runs_erases_once_and_ends_erased_with_exact_counts(
    workflow_case: Callable[..., WorkflowCase], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step Functions retries a Task whose call failed (Lambda.SdkClientException: the connection dropped while an
    # inline purge ran), and acts on the retry's answer; the first delivery runs on. Here the retry arrives while
    # the first deletes the relational rows.
    from lakepurge.workflow import steps
    from lakepurge_lambdas import start_purge

    case, users = _case_with_a_crm_table(workflow_case, pg_dsn)
    s3 = aws.client("s3")
    before = snapshot(s3, case.lake.lake.bucket)
    handler, erase_rows = start_purge.handler, steps.purge_relational
    answers: dict[str, Any] = {}
    retry: list[Callable[[], None]] = []

    def deliver(name: str, event: dict[str, Any], context: Any) -> Any:
        try:
            answers[name] = handler(json.loads(json.dumps(event)), context)
        except Exception as exc:  # what Step Functions records for that delivery
            answers[name] = exc
        return answers[name]

    def delivered_twice(event: dict[str, Any], context: Any) -> Any:
        retry.append(lambda: deliver("retry", event, context))
        deliver("first", event, context)
        if isinstance(answers["retry"], Exception):  # the retry's answer is the one Step Functions acts on
            raise answers["retry"]
        return answers["retry"]

    def retried_meanwhile(*args: Any) -> Any:
        while retry:
            retry.pop()()
        return erase_rows(*args)

    monkeypatch.setattr(start_purge, "handler", delivered_twice)
    monkeypatch.setattr(steps, "purge_relational", retried_meanwhile)
    request_id = case.file(users, "req-twice")
    execution = case.approve_and_finish(request_id)

    assert not [name for name, answer in answers.items() if isinstance(answer, Exception)], answers
    assert (answers["first"]["state"], answers["retry"]["state"]) == ("SUCCEEDED", "RUNNING")  # one purge ran
    assert json.loads(execution["output"])["outcome"] == "ERASED"
    assert_invariant(case.lake.lake, case.lake.settings, set(users), before, snapshot(s3, case.lake.lake.bucket))
    stored = {
        name: s3.get_object(Bucket="lake-reports", Key=f"{name}s/{request_id}.json")
        for name in ("report", "certificate")
    }
    report, certificate = (orjson.loads(stored[name]["Body"].read()) for name in ("report", "certificate"))
    assert certificate["verification"]["passed"] is True
    assert certificate["totals"]["relational_rows_deleted"] == 3
    assert certificate["totals"]["lines_erased"] == sum(len(o["lines"]) for o in report["objects"])
    [note] = case.notifications()
    assert "ERASED" in note["subject"]


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


def test_an_id_with_spaces_held_only_by_an_old_version_is_erased_from_every_version_and_certified(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    from lakepurge.indexing.indexer import index_object

    case = workflow_case(versioned=True)
    s3 = aws.client("s3")
    bucket, key = case.lake.lake.bucket, "reviews/dt=2026-01/compacted.jsonl"
    spaced = " spaced id "  # stored with its spaces: it must be erased exactly as it is

    def put(*users: str) -> str:
        body = b"".join(orjson.dumps({"user_id": u, "text": "synthetic"}) + b"\n" for u in users)
        version: str = s3.put_object(Bucket=bucket, Key=key, Body=body)["VersionId"]
        index_object(s3, runtime.index_store(), case.settings, bucket, key)  # what the S3 event does
        return version

    old = put(spaced, "bystander")
    kept = put("bystander")  # a compaction drops the record; S3 keeps the old version
    request_id = case.file([spaced], "req-old-version")
    decided = call_approval("POST", link_in(case.emails(request_id)[0]), "approve")
    assert decided["statusCode"] == 200, decided["body"]

    assert case.finish(request_id)["status"] == "SUCCEEDED"
    versions = {v["VersionId"] for v in s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", [])}
    assert versions == {kept}, "the old version holding the user is still there, or another version went"
    certificate = orjson.loads(
        s3.get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")["Body"].read()
    )
    assert certificate["verification"]["passed"] is True
    deleted = [v for o in certificate["objects"] for v in o["deleted_version_ids"]]
    assert old in deleted


def test_late_approval_the_link_still_accepts_never_rewrites_the_timed_out_ending(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    """A decision that reaches the page after the wait timed out (a clock ahead of the state machine's) is not taken:
    the execution's history says so, the claim is recorded as not taken (never as delivered) and the ending stays
    APPROVAL_TIMED_OUT."""
    from lakepurge.workflow import signing
    from lakepurge.workflow.store import APPROVED, RequestStore, StateIsFinal, workflow_settings

    case = workflow_case(approval_timeout_seconds=3)
    users = _users_with_data(case, 1)
    request_id = case.file(users, "req-late")
    link = link_in(case.emails(request_id)[0])
    assert case.finish(request_id, timeout=60)["status"] == "FAILED"
    store = RequestStore(case.settings, aws.client("s3"), aws.client("kms"))
    approval = store.approval(request_id)
    assert approval is not None
    # The clock ahead: the link still looks valid. Re-signed with the stack's key (an unsigned rewrite is refused).
    key = signing.signing_key(workflow_settings(case.settings))
    later = approval.model_copy(update={"expires_at": "2999-01-01T00:00:00+00:00"})
    store.put_document(request_id, "approval.json", signing.sign(key, request_id, "approval.json", later))

    late = call_approval("POST", link, "approve")

    assert late["statusCode"] == 410, late["body"]
    recorded = store.decision(request_id)
    assert recorded is not None and recorded.not_taken and recorded.delivered_at is None
    assert store.state(request_id).state == "APPROVAL_TIMED_OUT"
    with pytest.raises(StateIsFinal):
        store.set_state(request_id, APPROVED)
    assert store.state(request_id).state == "APPROVAL_TIMED_OUT"


def test_approval_links_expire_before_the_wait_counted_from_when_it_began(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    from datetime import datetime

    from lakepurge.workflow.store import RequestStore

    case = workflow_case(approval_timeout_seconds=600)
    request_id = case.file(_users_with_data(case, 1), "req-expiry")
    case.emails(request_id)
    store = RequestStore(case.settings, aws.client("s3"), aws.client("kms"))
    approval = store.document(request_id, "approval.json")
    assert approval is not None
    entered = [
        e
        for e in case.history(request_id)
        if e["type"] == "TaskStateEntered" and "RequestApproval" in json.dumps(e, default=str)
    ]
    began = entered[0]["timestamp"]
    expires = datetime.fromisoformat(approval["expires_at"])
    assert 0 < (began.timestamp() + 600) - expires.timestamp() <= 61, "no margin before the wait times out"
    case.sfn.stop_execution(executionArn=case.execution_arn(request_id))


def test_a_decision_hit_by_a_transient_error_is_completed_by_the_same_approvers_retry(
    workflow_case: Callable[..., WorkflowCase], monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import ClientError

    case = workflow_case()
    users = _users_with_data(case, 1)
    request_id = case.file(users, "req-transient")
    link = link_in(case.emails(request_id)[0])
    real_client = aws.client
    failures = []

    class Flaky:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def send_task_success(self, **kwargs: Any) -> Any:
            if not failures:
                failures.append(1)
                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendTaskSuccess")
            return self._inner.send_task_success(**kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    monkeypatch.setattr(
        aws,
        "client",
        lambda name, **kw: Flaky(real_client(name, **kw)) if name == "stepfunctions" else real_client(name, **kw),
    )
    with pytest.raises(ClientError):
        call_approval("POST", link, "approve")
    assert case.sfn.describe_execution(executionArn=case.execution_arn(request_id))["status"] == "RUNNING"

    retried = call_approval("POST", link, "approve")

    assert retried["statusCode"] == 200, retried["body"]
    assert case.finish(request_id)["status"] == "SUCCEEDED"
    other = call_approval("POST", link_in(case.emails(request_id)[1]), "reject")
    assert other["statusCode"] == 409


def test_given_a_returning_user_when_a_request_erases_them_then_no_object_is_flagged_for_them_any_more(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case()
    [user] = _users_with_data(case, 1)
    holding = sorted({path for owner, path, _ in case.lake.lake.truth if owner == user})
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    s3 = aws.client("s3")
    store = open_store(case.settings.index)
    try:
        # Erased by an earlier request, the user came back with a restored backup: the indexer flags their objects.
        store.record_erased([pseudonymizer(user)], "req-earlier")
        for path in holding:
            uri = S3Uri.parse(path)
            index_object(s3, store, case.settings, uri.bucket, uri.key, force=True, pseudonymizer=pseudonymizer)
        assert store.returning_user_objects() == holding
    finally:
        store.close()

    request_id = case.file([user], "req-returning")
    case.approve_and_finish(request_id)

    store = open_store(case.settings.index)
    try:
        assert store.returning_user_objects() == [], "the erased user's objects are still flagged as holding them"
        assert store.status().objects_with_returning_users == 0
    finally:
        store.close()


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


def _datasets_of(lake: LakeCase, user: str) -> set[str]:
    """The datasets holding records of a user, from the generator's ground truth."""
    names = set()
    for who, s3path, _ in lake.lake.truth:
        uri = S3Uri.parse(s3path)
        dataset = lake.settings.dataset_for(uri.bucket, uri.key)
        if who == user and dataset is not None:
            names.add(dataset.name)
    return names


def _first_user(lake: LakeCase) -> str:
    return min(user for user, _, _ in lake.lake.truth)


def _unindexed_datasets_of_first_user(lake: LakeCase) -> set[str]:
    return _datasets_of(lake, _first_user(lake))


def test_request_for_a_user_in_never_indexed_datasets_ends_index_incomplete_never_nothing_found(
    workflow_case: Callable[..., WorkflowCase], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from lakepurge.cli import main
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.workflow.store import RequestStore

    # GIVEN every dataset holding the user's records never indexed: the index has no row of the user and no
    # coverage of those datasets; the others are indexed and reconciled
    case = workflow_case(unindexed=_unindexed_datasets_of_first_user)
    user = _first_user(case.lake)
    missing = _datasets_of(case.lake, user)
    covered = {d.name for d in case.settings.datasets} - missing
    assert missing and covered
    store = open_store(case.settings.index)
    try:
        assert store.lookup([user]) == {}, "the lookup alone would answer: nothing found"
        assert set(store.coverage()) == covered
    finally:
        store.close()
    s3 = aws.client("s3")
    before = snapshot(s3, case.lake.lake.bucket)

    # WHEN a request is filed for the user
    request_id = case.file([user], "req-incomplete")
    execution = case.finish(request_id)

    # THEN it ends INDEX_INCOMPLETE, asking nobody and changing nothing
    assert execution["status"] == "FAILED" and execution.get("error") == "IndexIncomplete", case.failures(request_id)
    entered = [
        e["stateEnteredEventDetails"]["name"] for e in case.history(request_id) if "stateEnteredEventDetails" in e
    ]
    assert "AnythingToErase" not in entered and "NothingFoundOutcome" not in entered
    assert not [m for m in sent_emails() if request_id in m["subject"]]
    assert snapshot(s3, case.lake.lake.bucket) == before
    [report_exit] = [
        json.loads(e["stateExitedEventDetails"]["output"])["report"]
        for e in case.history(request_id)
        if e["type"] == "TaskStateExited" and e["stateExitedEventDetails"]["name"] == "GenerateReport"
    ]
    assert report_exit["coverage_complete"] is False and set(report_exit["coverage_gaps"]) == missing
    # the SNS message names each uncovered dataset, why, and the command; says nothing was erased and the
    # deadline still runs; names no covered dataset and no user
    [note] = case.notifications()
    assert note["outcome"] == "INDEX_INCOMPLETE" and "INDEX_INCOMPLETE" in note["subject"]
    message = note["message"]
    for name in missing:
        assert f"dataset {name}: never fully indexed" in message, message
        assert f"lakepurge index backfill --dataset {name}" in message, message
    for name in covered:
        assert f"dataset {name}:" not in message, message
    assert "NOTHING was erased" in message and "still open against its legal deadline" in message
    assert "NOTHING_FOUND" not in note["subject"] and user not in message
    _assert_no_raw_ids(case, request_id, [user])
    # the request ended INDEX_INCOMPLETE, still open: status shows it
    requests = RequestStore(case.settings, s3, aws.client("kms"))
    state = requests.state(request_id)
    assert state.state == "INDEX_INCOMPLETE" and state.final and state.open
    assert set(state.detail["coverage_gaps"]) == missing
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    assert main(["status", "--config", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    [shown] = [r for r in orjson.loads(captured.out)["requests"] if r["request_id"] == request_id]
    assert shown["state"] == "INDEX_INCOMPLETE" and shown["open"] and not shown["overdue"]
    assert "INDEX_INCOMPLETE" in captured.err and "open 1" in captured.err

    # once the datasets are reconciled (indexed, coverage recorded), the request filed again is erased
    run_reconcile(None, case.settings, sorted(missing))
    again = case.file([user], "req-incomplete-again")
    case.approve_and_finish(again)
    [note] = case.notifications()
    assert note["outcome"] == "ERASED"
    assert_invariant(case.lake.lake, case.lake.settings, {user}, before, snapshot(s3, case.lake.lake.bucket))


def test_events_in_the_indexer_dead_letter_queue_end_requests_index_incomplete_until_it_is_empty(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    sqs = aws.client("sqs")
    dead_letters = sqs.create_queue(QueueName="lakepurge-index-dlq")["QueueUrl"]
    # GIVEN a lake indexed and reconciled, but an S3 event in the indexer's dead-letter queue
    case = workflow_case(extra_toml=f'\n[indexing]\ndead_letter_queue_url = "{dead_letters}"\n')
    sqs.send_message(QueueUrl=dead_letters, MessageBody=json.dumps(load("sqs_s3_notification.json")["Records"][0]))
    s3 = aws.client("s3")
    users = _users_with_data(case, 1)
    before = snapshot(s3, case.lake.lake.bucket)

    # WHEN a request is filed for a user with records, and one for unknown users
    found = case.file(users, "req-dlq-found")
    unknown = case.file(["nobody-1"], "req-dlq-unknown")

    # THEN both end INDEX_INCOMPLETE (never NOTHING_FOUND), naming the queue's events and the command
    for request_id in (found, unknown):
        execution = case.finish(request_id)
        assert execution["status"] == "FAILED" and execution.get("error") == "IndexIncomplete", case.failures(
            request_id
        )
        assert not [m for m in sent_emails() if request_id in m["subject"]]
    notes = case.notifications(wait_for=2)
    assert sorted(n["outcome"] for n in notes) == ["INDEX_INCOMPLETE", "INDEX_INCOMPLETE"]
    for note in notes:
        assert "S3 event(s) in the indexer's dead-letter queue were never indexed" in note["message"]
        for dataset in case.settings.datasets:
            assert (
                f"lakepurge index reconcile --dataset {dataset.name}, then empty the dead-letter queue"
                in note["message"]
            )
        assert "NOTHING was erased" in note["message"] and users[0] not in note["message"]
    assert snapshot(s3, case.lake.lake.bucket) == before
    from lakepurge.workflow.store import RequestStore

    requests = RequestStore(case.settings, s3, aws.client("kms"))
    assert {requests.state(r).state for r in (found, unknown)} == {"INDEX_INCOMPLETE"}

    # once the queue is empty, a request for unknown users can be certified: nothing found
    sqs.purge_queue(QueueUrl=dead_letters)
    execution = case.finish(case.file(["nobody-1"], "req-dlq-empty"))
    assert execution["status"] == "SUCCEEDED"
    [note] = case.notifications()
    assert note["outcome"] == "NOTHING_FOUND"


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


def _started_job(case: WorkflowCase, request_id: str) -> dict[str, Any]:
    event = case.wait_for_event(
        request_id,
        lambda e: e["type"] == "TaskStateExited" and e["stateExitedEventDetails"]["name"] == "StartPurge",
    )
    job: dict[str, Any] = json.loads(event["stateExitedEventDetails"]["output"])["job"]
    assert job["backend"] == "local", "the report should have gone to the Spark job"
    return job


def test_report_changed_after_approval_is_refused_by_the_spark_job(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case(inline_max_objects=0)
    s3 = aws.client("s3")
    users = _users_with_data(case, 1)
    before = snapshot(s3, case.lake.lake.bucket)
    request_id = case.file(users, "req-tamper-late")
    assert call_approval("POST", link_in(case.emails(request_id)[0]), "approve")["statusCode"] == 200
    _started_job(case, request_id)
    # The job's JVM takes seconds to start: the report is swapped before the job reads it.
    s3.put_object(Bucket="lake-reports", Key=f"reports/{request_id}.json", Body=b'{"objects": []}')
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "ReportTampered", case.failures(request_id)
    [note] = case.notifications()
    assert "REPORT_TAMPERED" in note["subject"]
    assert snapshot(s3, case.lake.lake.bucket) == before


def _wait_for_first_erasure(case: WorkflowCase, s3: Any, request_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout

    def erased() -> bool:  # an intent or an outcome (StartPurge sealed the ids there before the job started)
        listed = s3.list_objects_v2(Bucket="lake-reports", Prefix=f"results/{request_id}/").get("Contents", [])
        return any(not item["Key"].endswith(layout.EXECUTOR_IDS) for item in listed)

    while time.monotonic() < deadline:
        if erased():
            return
        ended = case.sfn.describe_execution(executionArn=case.execution_arn(request_id))["status"] != "RUNNING"
        if ended and not erased():  # the job ended before erasing anything: none will come, say why now
            raise AssertionError(f"the execution ended before the job erased anything: {case.failures(request_id)}")
        time.sleep(0.05)
    raise AssertionError("the purge job erased nothing in time")


def test_killed_spark_job_ends_as_job_failed_listing_what_was_already_erased(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    from lakepurge.purge.launch import launcher_for

    case = workflow_case(inline_max_objects=0)
    s3 = aws.client("s3")
    users = _users_with_data(case, 3)
    before = snapshot(s3, case.lake.lake.bucket)
    request_id = case.file(users, "req-job-fails")
    assert call_approval("POST", link_in(case.emails(request_id)[0]), "approve")["statusCode"] == 200
    job = _started_job(case, request_id)
    # StartPurge, which may open the sealed request, sealed the ids for the job's executors (no id readable in them)
    sealed_key = f"results/{request_id}/{layout.EXECUTOR_IDS}"
    sealed = s3.get_object(Bucket="lake-reports", Key=sealed_key)["Body"].read()
    assert sealed and not any(user.encode() in sealed for user in users)
    launcher = launcher_for(case.settings)
    pid = launcher.pid(job["id"])  # type: ignore[attr-defined]
    assert pid is not None
    _wait_for_first_erasure(case, s3, request_id)
    os.killpg(pid, signal.SIGKILL)
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "PurgeJobFailed", case.failures(request_id)
    [note] = case.notifications()
    assert "JOB_FAILED" in note["subject"]
    changed = sum(1 for key, body in snapshot(s3, case.lake.lake.bucket).items() if before.get(key) != body)
    changed += sum(1 for key in before if key not in snapshot(s3, case.lake.lake.bucket))
    assert changed >= 1
    assert f"{changed} were erased before the failure ({changed} re-read now and verified clean)" in note["message"]
    assert "ERASED" not in note["subject"]
    # Whether or not the killed driver reached its finally, the request's ending deletes them (Notify shreds).
    listed = s3.list_object_versions(Bucket="lake-reports", Prefix=sealed_key)
    assert listed.get("Versions", []) == [] and listed.get("DeleteMarkers", []) == []


def test_an_inline_purge_whose_invocation_dies_half_way_ends_failed_counting_what_was_erased(
    workflow_case: Callable[..., WorkflowCase], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A StartPurge invocation that raises or runs out of its 900 s half-way through an inline purge answers
    # nothing: the request ends FAILED, and the message counts the objects its recorded outcomes say are erased.
    from dataclasses import replace

    from lakepurge.workflow import steps

    case = workflow_case()
    users = _users_with_data(case, 3)
    purge = steps.run_inline

    def dies_after_two_objects(settings: Any, spec: Any, report: Any, requested: Any) -> Any:
        purge(settings, spec, replace(report, objects=report.objects[:2], versions=()), requested)
        raise TimeoutError("the invocation ran out of time")

    monkeypatch.setattr(steps, "run_inline", dies_after_two_objects)
    request_id = case.file(users, "req-inline-dies")
    assert call_approval("POST", link_in(case.emails(request_id)[0]), "approve")["statusCode"] == 200
    execution = case.finish(request_id)

    assert execution["status"] == "FAILED"
    [note] = case.notifications()
    assert "FAILED" in note["subject"] and "nothing is reported erased" not in note["message"]
    planned = len(
        orjson.loads(
            aws.client("s3").get_object(Bucket="lake-reports", Key=f"reports/{request_id}.json")["Body"].read()
        )["objects"]
    )
    assert planned > 2
    assert f"Of {planned} object(s) planned, 2 were erased before the failure (2 re-read now" in note["message"]


def test_eventbridge_request_is_stored_encrypted_and_started_once_with_its_id_only(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    from datetime import UTC, datetime, timedelta

    from lakepurge.workflow.store import RequestStore
    from lakepurge_lambdas import intake
    from tests.support.events import LambdaContext, load

    case = workflow_case()
    user = _users_with_data(case, 1)[0]
    event = load("eventbridge_deletion_requested.json")
    event["detail"]["user_ids"] = [user]
    first = intake.handler(event, LambdaContext())
    again = intake.handler(event, LambdaContext())  # EventBridge delivers at least once
    assert first["request_id"] == again["request_id"] == f"req-{event['id']}"
    executions = case.sfn.list_executions(stateMachineArn=case.deployed.state_machine_arn)["executions"]
    assert len(executions) == 1
    described = case.sfn.describe_execution(executionArn=executions[0]["executionArn"])
    assert json.loads(described["input"]) == {"request_id": first["request_id"]}
    stored = aws.client("s3").get_object(Bucket="lake-reports", Key=f"requests/{first['request_id']}/request.json")
    assert user.encode() not in stored["Body"].read(), "the raw id is stored in clear"
    store = RequestStore(case.settings, aws.client("s3"), aws.client("kms"))
    request = store.get(first["request_id"])
    assert store.open(request) == ([user], "privacy-portal")
    assert request.stated_received_at == "2026-11-21T08:59:30+00:00"  # the sender's time, kept as information
    received = datetime.fromisoformat(request.received_at)  # the intake's own clock: the deadline runs from it
    assert abs(datetime.now(UTC) - received) < timedelta(minutes=5)
    assert datetime.fromisoformat(request.deadline) == received + timedelta(days=30)
    call_approval("POST", link_in(case.emails(first["request_id"])[0]), "reject")
    case.finish(first["request_id"])


def test_cli_files_a_request_and_status_shows_deadlines_with_overdue_ones_standing_out(
    workflow_case: Callable[..., WorkflowCase], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime, timedelta

    from lakepurge.cli import main
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.workflow.store import RequestStore

    case = workflow_case()
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    assert main(["request", "nobody-at-all", "--config", str(config), "--json", "--request-id", "req-cli"]) == 0
    filed = orjson.loads(capsys.readouterr().out)
    assert filed["request_id"] == "req-cli"
    assert case.finish("req-cli")["status"] == "SUCCEEDED"  # nothing found
    # A request received 40 days ago and still waiting: overdue.
    store = RequestStore(case.settings, aws.client("s3"), aws.client("kms"))
    old = datetime.now(UTC) - timedelta(days=40)
    store.create("req-old", ["someone"], "cli", old, Pseudonymizer(HASH_KEY.encode()))
    # ended INDEX_INCOMPLETE 40 days ago: the execution is over, the request is not answered
    store.create("req-old-incomplete", ["someone"], "cli", old, Pseudonymizer(HASH_KEY.encode()))
    store.set_state("req-old-incomplete", "INDEX_INCOMPLETE", coverage_gaps=["reviews"])
    assert main(["status", "--config", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    requests = {r["request_id"]: r for r in orjson.loads(captured.out)["requests"]}
    assert requests["req-cli"]["state"] == "NOTHING_FOUND" and not requests["req-cli"]["overdue"]
    assert requests["req-old"]["overdue"] and requests["req-old"]["days_left"] < 0
    assert requests["req-old-incomplete"]["overdue"] and requests["req-old-incomplete"]["open"]
    assert not requests["req-cli"]["open"] and "open 2" in captured.err
    assert "req-old" in captured.err and "OVERDUE" in captured.err
    assert "someone" not in captured.err + captured.out
