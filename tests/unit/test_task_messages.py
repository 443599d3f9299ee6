"""The Tasks' messages as the state machine passes them: each Task's input built from statemachine/purge.asl.json's
Parameters, handed to the real handler (its step replaced by a fake returning the typed output), and the handler's
JSON return put at the Task's ResultPath, where the next Choice, Wait and Task read it. No network, no AWS.

An output's keys are the contract with the ASL ($.report.coverage_complete, $.job.poll_seconds ...): they are
pinned here, so a renamed, added or newly-null field fails this test before it reaches a deployed state machine.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter

from lakepurge import runtime
from lakepurge.reports import layout
from lakepurge.workflow import steps
from lakepurge.workflow.approval import _send
from lakepurge.workflow.deployment import FUNCTIONS, asl_text
from lakepurge.workflow.events import (
    ApprovalRequested,
    ApprovalTask,
    Approved,
    EndedState,
    ErasedBeforeFailure,
    NoCertificate,
    Notified,
    NotifyTask,
    PurgeStarted,
    PurgeStatus,
    PurgeTask,
    ReportRef,
    ReportSummary,
    RequestTask,
    StatusTask,
    Verification,
    VerifyOutcome,
    VerifyTask,
)
from tests.support.events import LambdaContext

pytestmark = pytest.mark.unit

ASL: dict[str, Any] = json.loads(asl_text())
STATES: dict[str, dict[str, Any]] = ASL["States"]
REQUEST_ID = "req-2026-03-01-7f3a"
SHA = "ab" * 32
REPORT_URI = f"s3://lake-reports/reports/{REQUEST_ID}.json"
CONTEXT = {"Task": {"Token": "AQCEAAAAKgAAAA-token"}, "State": {"EnteredTime": "2026-03-01T12:00:00.123Z"}}

# Each Task: the step behind it and the model its handler parses the event into.
STEPS: dict[str, tuple[str, type[BaseModel]]] = {
    "GenerateReport": ("generate_report", RequestTask),
    "RequestApproval": ("request_approval", ApprovalTask),
    "StartPurge": ("start_purge", PurgeTask),
    "PurgeStatus": ("purge_status", StatusTask),
    "VerifyPurge": ("verify", VerifyTask),
    "Notify": ("notify", NotifyTask),
}

# The keys each output holds, in order: what the state machine and the next Tasks read.
KEYS: dict[type[BaseModel], list[str]] = {
    ReportSummary: [
        "uri",
        "sha256",
        "users_requested",
        "users_found",
        "objects",
        "lines",
        "relational_rows",
        "empty",
        "coverage_complete",
        "coverage_gaps",
        "approval_timeout_seconds",
    ],
    ApprovalRequested: ["emails_sent", "expires_at"],
    Approved: ["decision", "approved_by", "approved_at", "report_sha256"],
    PurgeStarted: ["backend", "id", "state", "poll_seconds"],
    PurgeStatus: ["backend", "id", "state", "poll_seconds", "detail"],
    Verification: [
        "verified",
        "certificate",
        "users_erased",
        "objects_rewritten",
        "lines_erased",
        "relational_rows_deleted",
        "reason",
    ],
    NoCertificate: ["verified", "certificate", "reason"],
}


def report(**changes: Any) -> ReportSummary:
    fields: dict[str, Any] = {
        "uri": REPORT_URI,
        "sha256": SHA,
        "users_requested": 2,
        "users_found": 1,
        "objects": 3,
        "lines": 7,
        "relational_rows": 2,
        "empty": False,
        "coverage_complete": True,
        "coverage_gaps": [],
        "approval_timeout_seconds": 604_800,
    }
    return ReportSummary(**(fields | changes))


APPROVED = Approved(
    decision="approved", approved_by="dpo@example.com", approved_at="2026-03-01T13:00:00+00:00", report_sha256=SHA
)
REQUESTED = ApprovalRequested(emails_sent=2, expires_at="2026-03-08T11:55:00+00:00")
RUNNING = PurgeStarted(backend="emr-serverless", id="00f1abc", state="RUNNING", poll_seconds=30)
VERIFIED = Verification(
    verified=True,
    certificate=f"s3://lake-reports/certificates/{REQUEST_ID}.json",
    users_erased=1,
    objects_rewritten=3,
    lines_erased=7,
    relational_rows_deleted=2,
    reason="",
)


def polled(state: str, detail: str = "") -> PurgeStatus:
    return PurgeStatus(backend=RUNNING.backend, id=RUNNING.id, state=state, poll_seconds=30, detail=detail or state)


@dataclass(frozen=True)
class TaskFailure:
    """A Task that fails with this error (as sanitized_errors or SendTaskFailure name it)."""

    error: str
    cause: str


Result = BaseModel | TaskFailure


# -- a small interpreter of the ASL's JSONPath subset -----------------------------------------------------------------

_MISSING = object()


def resolve(path: str, state: dict[str, Any]) -> Any:
    """``$``, ``$.a.b`` in the state, ``$$.a.b`` in the context object; _MISSING when a key is absent."""
    node: Any = CONTEXT if path.startswith("$$") else state
    for part in path.lstrip("$").split(".")[1:]:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def parameters(template: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    built: dict[str, Any] = {}
    for key, value in template.items():
        if key.endswith(".$"):
            found = resolve(value, state)
            assert found is not _MISSING, f"Parameters {key}: {value} is not in the state (States.Runtime)"
            built[key[:-2]] = found
        elif isinstance(value, dict):
            built[key] = parameters(value, state)
        else:
            built[key] = value
    return built


def put(state: dict[str, Any], result_path: str, value: Any) -> dict[str, Any]:
    assert result_path.count(".") == 1, f"only top-level ResultPaths are modelled: {result_path}"
    return {**state, result_path[2:]: value}


def choose(choice: dict[str, Any], state: dict[str, Any]) -> str:
    for rule in choice["Choices"]:
        found = resolve(rule["Variable"], state)
        if "IsPresent" in rule:
            if (found is not _MISSING) == rule["IsPresent"]:
                return str(rule["Next"])
            continue
        # Comparing an absent or mistyped path fails the execution (States.Runtime): so does this test.
        assert found is not _MISSING, f"Choice reads {rule['Variable']}, absent from the state"
        if "BooleanEquals" in rule:
            assert isinstance(found, bool), f"{rule['Variable']} is {found!r}, not a boolean"
            matched = found == rule["BooleanEquals"]
        else:
            assert isinstance(found, str), f"{rule['Variable']} is {found!r}, not a string"
            matched = found == rule["StringEquals"]
        if matched:
            return str(rule["Next"])
    return str(choice["Default"])


def seconds(state: dict[str, Any], path: str) -> int:
    found = resolve(path, state)
    assert isinstance(found, int) and not isinstance(found, bool) and found > 0, f"{path} is {found!r}"
    return found


# -- the handlers, their steps faked ----------------------------------------------------------------------------------


@dataclass
class Lambdas:
    """The real Task handlers with their steps, clients and runtime replaced: ``results`` says what each Task's step
    returns (a list: one per call), ``calls`` records what each step was given."""

    results: dict[str, list[Result]]
    calls: dict[str, list[tuple[Any, ...]]]

    def step(self, name: str) -> Callable[..., BaseModel]:
        def fake(*args: Any) -> BaseModel:
            self.calls.setdefault(name, []).append(args)
            result = self.results[name].pop(0)
            assert isinstance(result, BaseModel), "a failing Task's step is not called"
            return result

        return fake


@pytest.fixture
def lambdas(monkeypatch: pytest.MonkeyPatch) -> Iterator[Lambdas]:
    faked = Lambdas({}, {})
    monkeypatch.setattr(runtime, "settings", lambda: SimpleNamespace(privacy=None))
    monkeypatch.setattr(runtime, "index_store", lambda create=True: "index")
    monkeypatch.setattr(runtime, "require_pseudonymizer", lambda: "pseudonymizer")
    for function in FUNCTIONS.values():
        module = importlib.import_module(function.handler)
        monkeypatch.setattr(module, "Clients", SimpleNamespace(from_environment=lambda: "clients"))
        if hasattr(module, "aws"):
            monkeypatch.setattr(module, "aws", SimpleNamespace(client=lambda service: service))
        if hasattr(module, "hash_key"):
            monkeypatch.setattr(module, "hash_key", lambda config: b"key")
    for state, (step, _) in STEPS.items():
        monkeypatch.setattr(steps, step, faked.step(state))
    yield faked


def handler_of(state: dict[str, Any]) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    resource = (
        state["Parameters"]["FunctionName"] if "FunctionName" in state.get("Parameters", {}) else state["Resource"]
    )
    [module] = [f.handler for f in FUNCTIONS.values() if resource == "${" + f.substitution + "}"]
    handler: Callable[[dict[str, Any], Any], dict[str, Any]] = importlib.import_module(module).handler
    return handler


def caught(definition: dict[str, Any], failure: TaskFailure) -> tuple[tuple[str, dict[str, str]], str]:
    """The first Catch that matches, as Step Functions picks it: the error at its ResultPath, and where it goes."""
    catch = next(c for c in definition["Catch"] if {failure.error, "States.ALL"} & set(c["ErrorEquals"]))
    return (catch["ResultPath"], {"Error": failure.error, "Cause": failure.cause}), str(catch["Next"])


def run_task(name: str, definition: dict[str, Any], state: dict[str, Any], lambdas: Lambdas) -> tuple[Any, str]:
    """One Task: its input through JSON into the handler, its output through JSON into the state. Returns the
    (ResultPath, value) to put and the next state."""
    waits = definition["Resource"].endswith(".waitForTaskToken")
    event = parameters(definition["Parameters"], state)
    if waits:
        event = event["Payload"]
        seconds(state, definition["TimeoutSecondsPath"])
    event = json.loads(json.dumps(event))
    _, input_model = STEPS[name]
    task = input_model.model_validate(event)
    assert input_model.model_validate_json(task.model_dump_json(by_alias=True)) == task

    planned = lambdas.results[name][0]
    if isinstance(planned, TaskFailure):
        lambdas.results[name].pop(0)
        return caught(definition, planned)
    returned = handler_of(definition)(event, LambdaContext())
    output: Any = json.loads(json.dumps(returned))
    assert output == returned, "the handler's return is not plain JSON"
    adapter: TypeAdapter[Any] = TypeAdapter(VerifyOutcome if name == "VerifyPurge" else type(planned))
    assert adapter.validate_python(output) == planned
    if waits:  # the Lambda only emails the approvers: the Task's result is what the approval page sends back
        decision = lambdas.results["Decision"].pop(0)
        if isinstance(decision, TaskFailure):
            return caught(definition, decision)
        output = json.loads(decision.model_dump_json())  # SendTaskSuccess's output string
        assert Approved.model_validate(output) == decision
    return (definition["ResultPath"], output), str(definition["Next"])


def execute(lambdas: Lambdas, **results: list[Result]) -> tuple[list[str], dict[str, Any]]:
    """Run the state machine from StartAt with the given step results; returns the states entered and the last
    state."""
    lambdas.results = dict(results)
    state: dict[str, Any] = {"request_id": REQUEST_ID}  # the execution's input: the request id only
    name, entered = str(ASL["StartAt"]), []
    while True:
        entered.append(name)
        definition = STATES[name]
        kind = definition["Type"]
        if kind == "Task":
            (path, value), name = run_task(name, definition, state, lambdas)
            state = put(state, path, value)
        elif kind == "Choice":
            name = choose(definition, state)
        elif kind == "Wait":
            seconds(state, definition["SecondsPath"])
            name = str(definition["Next"])
        elif kind == "Pass":
            state = put(state, definition["ResultPath"], definition["Result"])
            name = str(definition["Next"])
        else:
            return entered, state


# -- the paths through the workflow -----------------------------------------------------------------------------------


def approved_and_started() -> dict[str, list[Any]]:
    """The Tasks' answers up to a started purge job: a report with data, approval requested, approved."""
    return {
        "GenerateReport": [report()],
        "RequestApproval": [REQUESTED],
        "Decision": [APPROVED],
        "StartPurge": [RUNNING],
    }


def test_given_an_approved_request_when_the_workflow_runs_then_each_task_reads_what_the_previous_wrote(
    lambdas: Lambdas,
) -> None:
    entered, state = execute(
        lambdas,
        **approved_and_started(),
        PurgeStatus=[polled("RUNNING"), polled("SUCCEEDED")],
        VerifyPurge=[VERIFIED],
        Notify=[Notified(outcome="ERASED")],
    )
    assert entered[-4:] == ["ErasedOutcome", "Notify", "Ended", "Erased"]
    assert entered.count("PurgeStatus") == 2 and entered.count("WaitForPurge") == 2
    # what Step Functions holds: the typed outputs, dumped once, key for key
    assert state["report"] == report().model_dump(mode="json") and list(state["report"]) == KEYS[ReportSummary]
    assert state["approval"] == APPROVED.model_dump(mode="json")
    assert state["job"] == polled("SUCCEEDED").model_dump(mode="json") and list(state["job"]) == KEYS[PurgeStatus]
    assert list(state["verification"]) == KEYS[Verification]
    assert state["notified"] == {"outcome": "ERASED"}
    # and each step was given typed messages, parsed from the state's JSON
    calls = lambdas.calls
    assert calls["GenerateReport"][0][-1] == REQUEST_ID
    _, _, _, request_id, ref, token, began = calls["RequestApproval"][0]
    assert (request_id, ref, token) == (REQUEST_ID, ReportRef(uri=REPORT_URI, sha256=SHA), CONTEXT["Task"]["Token"])
    assert began.isoformat() == "2026-03-01T12:00:00.123000+00:00"
    # ... and the invocation's time left (the context's), for as long as it may hold the purge it starts
    assert calls["StartPurge"][0][2:] == (REQUEST_ID, ReportRef(uri=REPORT_URI, sha256=SHA), APPROVED, 300.0)
    first_poll, second_poll = calls["PurgeStatus"]
    assert first_poll[2] == RUNNING and second_poll[2] == RUNNING  # the previous poll's detail is not read
    assert calls["VerifyPurge"][0][3:] == ("pseudonymizer", REQUEST_ID, ReportRef(uri=REPORT_URI, sha256=SHA))
    *_, outcome, ended = calls["Notify"][0]
    assert outcome == "ERASED" and isinstance(ended, EndedState)
    assert ended.report is not None and ended.report.uri == REPORT_URI and ended.report.users_requested == 2
    assert ended.verification is not None and ended.verification.lines_erased == 7 and ended.error is None


def test_given_a_report_without_users_data_when_the_workflow_runs_then_it_ends_nothing_found(lambdas: Lambdas) -> None:
    entered, state = execute(
        lambdas, GenerateReport=[report(empty=True, users_found=0)], Notify=[Notified(outcome="NOTHING_FOUND")]
    )
    assert entered[1:4] == ["IndexComplete", "AnythingToErase", "NothingFoundOutcome"]
    assert entered[-1] == "NothingToErase"
    assert state["notified"] == {"outcome": "NOTHING_FOUND"}


def test_given_an_incompletely_indexed_lake_when_the_workflow_runs_then_it_ends_index_incomplete(
    lambdas: Lambdas,
) -> None:
    incomplete = report(coverage_complete=False, coverage_gaps=["orders"])
    entered, state = execute(
        lambdas,
        GenerateReport=[incomplete],
        Notify=[Notified(outcome="INDEX_INCOMPLETE", coverage_gaps=["orders"])],
    )
    assert entered[1:3] == ["IndexComplete", "IndexIncompleteOutcome"] and entered[-1] == "IndexIncomplete"
    assert state["report"]["coverage_gaps"] == ["orders"]
    assert state["notified"] == {"outcome": "INDEX_INCOMPLETE", "coverage_gaps": ["orders"]}
    ended = lambdas.calls["Notify"][0][-1]
    assert ended.report.coverage_gaps == ["orders"]


def test_given_an_inline_purge_that_failed_when_the_workflow_runs_then_it_ends_job_failed_with_its_progress(
    lambdas: Lambdas,
) -> None:
    progress = ErasedBeforeFailure(objects_erased=1, objects_verified=1, objects_planned=3)
    entered, state = execute(
        lambdas,
        GenerateReport=[report()],
        RequestApproval=[REQUESTED],
        Decision=[APPROVED],
        StartPurge=[PurgeStarted(backend="inline", id=REQUEST_ID, state="FAILED", poll_seconds=30)],
        Notify=[Notified(outcome="JOB_FAILED", **dict(progress))],
    )
    assert entered[-4:] == ["JobFailedOutcome", "Notify", "Ended", "PurgeJobFailed"]
    assert list(state["job"]) == KEYS[PurgeStarted]
    assert state["notified"] == {"outcome": "JOB_FAILED", **dict(progress)}
    ended = lambdas.calls["Notify"][0][-1]
    assert ended.job.backend == "inline" and ended.job.detail == ""  # a job never polled has no detail


def test_given_a_purge_without_certificate_when_verifying_then_it_ends_verification_failed_with_a_null_certificate(
    lambdas: Lambdas,
) -> None:
    entered, state = execute(
        lambdas,
        **approved_and_started(),
        PurgeStatus=[polled("SUCCEEDED")],
        VerifyPurge=[NoCertificate(reason="no certificate was written")],
        Notify=[Notified(outcome="VERIFICATION_FAILED")],
    )
    assert entered[-4:] == ["VerificationFailedOutcome", "Notify", "Ended", "VerificationFailed"]
    assert state["verification"] == {"verified": False, "certificate": None, "reason": "no certificate was written"}
    ended = lambdas.calls["Notify"][0][-1]
    assert ended.verification.certificate is None and ended.verification.reason == "no certificate was written"


def test_given_a_rejection_when_the_workflow_runs_then_notify_reads_the_caught_error(lambdas: Lambdas) -> None:
    entered, state = execute(
        lambdas,
        GenerateReport=[report()],
        RequestApproval=[REQUESTED],
        Decision=[TaskFailure("Rejected", "rejected by an approver")],
        Notify=[Notified(outcome="REJECTED")],
    )
    assert entered[-4:] == ["RejectedOutcome", "Notify", "Ended", "Rejected"]
    assert "approval" not in state
    ended = lambdas.calls["Notify"][0][-1]
    assert ended.error is not None and (ended.error.error, ended.error.cause) == ("Rejected", "rejected by an approver")


def test_given_a_failed_first_step_when_the_workflow_runs_then_notify_reads_a_state_without_report(
    lambdas: Lambdas,
) -> None:
    entered, state = execute(
        lambdas,
        GenerateReport=[TaskFailure("TaskFailed", "RequestNotFound")],
        Notify=[Notified(outcome="FAILED")],
    )
    assert entered == ["GenerateReport", "FailedOutcome", "Notify", "Ended", "Failed"]
    assert "report" not in state and state["error"] == {"Error": "TaskFailed", "Cause": "RequestNotFound"}
    ended = lambdas.calls["Notify"][0][-1]
    assert ended.report is None and ended.job is None and ended.error.error == "TaskFailed"


# -- the messages themselves ------------------------------------------------------------------------------------------

OUTPUTS: list[BaseModel] = [
    report(),
    report(coverage_complete=False, coverage_gaps=["orders", "events"], empty=True),
    REQUESTED,
    APPROVED,
    RUNNING,
    polled("FAILED", "job run 00f1 FAILED: executor lost"),
    VERIFIED,
    Verification(**(dict(VERIFIED) | {"verified": False, "users_erased": 0, "reason": "1 object still holds a user"})),
    NoCertificate(reason="no certificate was written"),
]


@pytest.mark.parametrize("message", OUTPUTS, ids=lambda m: type(m).__name__)
def test_given_an_output_when_dumped_to_json_then_it_reads_back_equal_with_exactly_its_keys(message: BaseModel) -> None:
    dumped = json.loads(json.dumps(message.model_dump(mode="json")))
    assert list(dumped) == KEYS[type(message)]
    assert [k for k, v in dumped.items() if v is None] == (
        ["certificate"] if isinstance(message, NoCertificate) else []
    )
    assert type(message).model_validate(dumped) == message
    if isinstance(message, Verification | NoCertificate):
        assert TypeAdapter(VerifyOutcome).validate_python(dumped) == message


@pytest.mark.parametrize(
    ("notified", "expected"),
    [
        (Notified(outcome="ERASED"), {"outcome": "ERASED"}),
        (
            Notified(outcome="INDEX_INCOMPLETE", coverage_gaps=["orders"]),
            {"outcome": "INDEX_INCOMPLETE", "coverage_gaps": ["orders"]},
        ),
        (
            Notified(outcome="JOB_FAILED", objects_erased=2, objects_verified=1, objects_planned=5),
            {"outcome": "JOB_FAILED", "objects_erased": 2, "objects_verified": 1, "objects_planned": 5},
        ),
    ],
)
def test_given_a_notification_when_dumped_at_the_edge_then_an_ending_has_only_its_own_details(
    notified: Notified, expected: dict[str, Any]
) -> None:
    dumped = json.loads(json.dumps(notified.model_dump(mode="json", exclude_none=True)))
    assert dumped == expected and list(dumped) == list(expected)
    assert Notified.model_validate(dumped) == notified


def test_given_a_state_from_an_older_version_when_notifying_then_its_missing_fields_are_defaults() -> None:
    # a report from before coverage was recorded, a job never polled, a caught error without a cause
    event = {
        "request_id": REQUEST_ID,
        "outcome": "FAILED",
        "state": {
            "request_id": REQUEST_ID,
            "report": {"uri": REPORT_URI, "sha256": SHA, "users_requested": 1, "empty": False},
            "job": {"backend": "local", "id": "j-1", "state": "RUNNING", "poll_seconds": 30},
            "error": {"Error": "States.Timeout"},
            "outcome": "FAILED",
        },
    }
    task = NotifyTask.model_validate(json.loads(json.dumps(event)))
    assert task.state.report is not None and task.state.report.coverage_gaps == []
    assert task.state.job is not None and task.state.job.detail == ""
    assert task.state.error is not None and (task.state.error.error, task.state.error.cause) == ("States.Timeout", None)
    assert task.state.verification is None


def test_given_an_approval_when_the_page_wakes_the_waiting_task_then_its_output_is_what_start_purge_reads() -> None:
    sent: dict[str, Any] = {}
    sfn = SimpleNamespace(send_task_success=lambda **call: sent.update(call))
    approval = layout.ApprovalDocument(
        report_uri=REPORT_URI,
        report_sha256=SHA,
        task_token=CONTEXT["Task"]["Token"],
        opened_at="2026-03-01T12:00:01+00:00",
        expires_at="2026-03-08T11:55:00+00:00",
        approvers=(),
    )
    record = layout.DecisionDocument(
        decision="approved",
        approved_by=APPROVED.approved_by,
        by=APPROVED.approved_by,
        decided_at=APPROVED.approved_at,
        report_uri=REPORT_URI,
        report_sha256=SHA,
    )
    _send(sfn, approval, record)
    output = json.loads(sent["output"])  # SendTaskSuccess: the Task's result, at $.approval
    assert sent["taskToken"] == CONTEXT["Task"]["Token"]
    assert list(output) == KEYS[Approved] and Approved.model_validate(output) == APPROVED
    event = {"request_id": REQUEST_ID, "report": report().model_dump(mode="json"), "approval": output}
    assert PurgeTask.model_validate(event).approval == APPROVED
