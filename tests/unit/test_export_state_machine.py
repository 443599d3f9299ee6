"""statemachine/export.asl.json (access requests, GDPR Art. 15): the purge's report, approval and notification
functions, ExportArchive instead of the purge, Retry/Catch on every Task, every end notified, nothing erased."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from lakepurge.workflow.deployment import (
    EXPORT_ASL_RESOURCE,
    EXPORT_FUNCTIONS,
    EXPORT_SHARED,
    FUNCTIONS,
    TOPIC_SUBSTITUTION,
    asl_text,
)

pytestmark = pytest.mark.unit

TEXT = asl_text(EXPORT_ASL_RESOURCE)
STATES: dict[str, dict[str, Any]] = json.loads(TEXT)["States"]


def _targets(state: dict[str, Any]) -> set[str]:
    found = {state.get("Next"), state.get("Default")}
    found |= {c["Next"] for c in state.get("Catch", [])}
    found |= {c["Next"] for c in state.get("Choices", [])}
    return {t for t in found if t}


def test_it_calls_the_shared_functions_and_export_archive_never_a_purge() -> None:
    used = set(re.findall(r"\$\{(\w+)\}", TEXT))
    shared = {FUNCTIONS[name].substitution for name in EXPORT_SHARED}
    assert used == shared | {f.substitution for f in EXPORT_FUNCTIONS.values()} | {TOPIC_SUBSTITUTION}
    assert "StartPurge" not in STATES and "VerifyPurge" not in STATES


def test_every_task_retries_and_catches_everything_and_every_end_is_notified() -> None:
    for name, state in STATES.items():
        if state["Type"] == "Task":
            assert state.get("Retry"), f"{name} has no Retry"
            assert "States.ALL" in [e for c in state.get("Catch", []) for e in c["ErrorEquals"]], name
    ends = {name for name, s in STATES.items() if s["Type"] in ("Succeed", "Fail")}
    for name, state in STATES.items():
        assert not (_targets(state) & ends) or name in ("Ended", "NotifyFallback"), f"{name} ends unnotified"
    assert STATES["Notify"]["Catch"][0]["Next"] == "NotifyFallback"


def test_only_an_approved_complete_report_is_exported() -> None:
    assert STATES["IndexComplete"]["Default"] == "IndexIncompleteOutcome"
    assert STATES["RequestApproval"]["Next"] == "ExportArchive"
    reaching = {name for name, state in STATES.items() if "ExportArchive" in _targets(state)}
    assert reaching == {"RequestApproval"}
    assert STATES["ExportArchive"]["Next"] == "ExportedOutcome"
    assert STATES["ExportedOutcome"]["Result"] == "EXPORTED"
    succeeding = {c["StringEquals"] for c in STATES["Ended"]["Choices"] if STATES[c["Next"]]["Type"] == "Succeed"}
    assert succeeding == {"EXPORTED", "NOTHING_FOUND"}
