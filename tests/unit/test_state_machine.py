"""statemachine/purge.asl.json as a reviewer reads it: substitutions, Retry/Catch, every end notified."""

from __future__ import annotations

import json
import re
from typing import Any, get_args

import pytest

from lakepurge.workflow.deployment import FUNCTIONS, TOPIC_SUBSTITUTION, asl_text
from lakepurge.workflow.events import Outcome

pytestmark = pytest.mark.unit

ASL: dict[str, Any] = json.loads(asl_text())
STATES: dict[str, dict[str, Any]] = ASL["States"]


def _targets(state: dict[str, Any]) -> set[str]:
    found = {state.get("Next"), state.get("Default")}
    found |= {c["Next"] for c in state.get("Catch", [])}
    found |= {c["Next"] for c in state.get("Choices", [])}
    return {t for t in found if t}


def test_every_substitution_in_the_asl_is_one_the_deployments_provide() -> None:
    used = set(re.findall(r"\$\{(\w+)\}", asl_text()))
    provided = {function.substitution for function in FUNCTIONS.values()} | {TOPIC_SUBSTITUTION}
    assert used == provided


def test_every_task_retries_transient_errors_and_catches_everything() -> None:
    for name, state in STATES.items():
        if state["Type"] != "Task":
            continue
        assert state.get("Retry"), f"{name} has no Retry"
        caught = [e for c in state.get("Catch", []) for e in c["ErrorEquals"]]
        assert "States.ALL" in caught, f"{name} does not catch every error"


def test_every_end_of_the_workflow_comes_after_a_notification() -> None:
    ends = {name for name, s in STATES.items() if s["Type"] in ("Succeed", "Fail")}
    for name, state in STATES.items():
        reaching = _targets(state) & ends
        assert not reaching or name in ("Ended", "NotifyFallback"), f"{name} ends the execution without notifying"
    assert STATES["NotifyFallback"]["Resource"] == "arn:aws:states:::sns:publish"
    assert STATES["Notify"]["Catch"][0]["Next"] == "NotifyFallback"


def test_only_the_erased_and_nothing_found_outcomes_end_in_success() -> None:
    succeeding = {c["StringEquals"] for c in STATES["Ended"]["Choices"] if STATES[c["Next"]]["Type"] == "Succeed"}
    assert succeeding == {"ERASED", "NOTHING_FOUND"}
    assert STATES[STATES["Ended"]["Default"]]["Type"] == "Fail"


def test_only_a_completely_indexed_report_can_end_nothing_found_or_go_on_to_erase() -> None:
    assert STATES["GenerateReport"]["Next"] == "IndexComplete"
    gate = STATES["IndexComplete"]
    assert gate["Type"] == "Choice" and gate["Default"] == "IndexIncompleteOutcome"
    # a missing flag is incomplete; only an explicit true goes on
    assert gate["Choices"][0] == {
        "Variable": "$.report.coverage_complete",
        "IsPresent": False,
        "Next": "IndexIncompleteOutcome",
    }
    assert [c for c in gate["Choices"] if c["Next"] == "AnythingToErase"] == [
        {"Variable": "$.report.coverage_complete", "BooleanEquals": True, "Next": "AnythingToErase"}
    ]
    reaching = {name for name, state in STATES.items() if "AnythingToErase" in _targets(state)}
    assert reaching == {"IndexComplete"}
    assert STATES["IndexIncompleteOutcome"]["Result"] == "INDEX_INCOMPLETE"
    [route] = [c for c in STATES["Ended"]["Choices"] if c["StringEquals"] == "INDEX_INCOMPLETE"]
    assert STATES[route["Next"]]["Type"] == "Fail"


def test_every_outcome_is_set_by_a_pass_state_and_routed_to_an_ending_of_its_own() -> None:
    outcomes = set(get_args(Outcome)) - {"EXPORTED"}  # only the export state machine ends EXPORTED
    assert {s["Result"] for s in STATES.values() if s["Type"] == "Pass"} == outcomes
    routed = [c["StringEquals"] for c in STATES["Ended"]["Choices"]]
    assert set(routed) == outcomes - {"FAILED"} and len(routed) == len(set(routed))
    assert len({c["Next"] for c in STATES["Ended"]["Choices"]} | {STATES["Ended"]["Default"]}) == len(outcomes)


def test_the_approval_waits_for_its_token_with_a_timeout_and_routes_each_ending() -> None:
    approval = STATES["RequestApproval"]
    assert approval["Resource"].endswith(".waitForTaskToken")
    assert "TimeoutSecondsPath" in approval or "TimeoutSeconds" in approval
    routes = {c["ErrorEquals"][0]: c["Next"] for c in approval["Catch"]}
    assert routes["States.Timeout"] == "ApprovalTimedOutOutcome"
    assert routes["Rejected"] == "RejectedOutcome"
    assert all("States.Timeout" not in r["ErrorEquals"] for r in approval["Retry"])


def test_the_asl_uses_jsonpath_only() -> None:
    assert ASL.get("QueryLanguage", "JSONPath") == "JSONPath"
    assert "{%" not in asl_text(), "JSONata expressions are not allowed"
