"""Workflow rules without AWS: when approval links expire, and what each ending tells the topic."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, get_args

import pytest

from lakepurge.indexing.coverage import DatasetCoverage
from lakepurge.workflow.approval import expiry
from lakepurge.workflow.events import EndedState, ErasedBeforeFailure, Outcome
from lakepurge.workflow.steps import _ended

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_given_the_default_week_long_wait_when_computing_expiry_then_links_stop_five_minutes_before_it_ends() -> None:
    assert expiry(T0, 604_800) == T0 + timedelta(days=7) - timedelta(minutes=5)


def test_given_a_short_wait_when_computing_expiry_then_the_margin_is_a_tenth_of_it() -> None:
    assert expiry(T0, 600) == T0 + timedelta(seconds=540)
    assert expiry(T0, 10) == T0 + timedelta(seconds=9)
    assert expiry(T0, 3000) == T0 + timedelta(seconds=2700)  # the tenth reaches the 5-minute cap exactly
    assert expiry(T0, 3001) == T0 + timedelta(seconds=2701)


@pytest.mark.parametrize("timeout", [1, 59, 600, 3600, 86_400, 604_800, 31_536_000])
def test_given_any_wait_when_computing_expiry_then_links_expire_strictly_inside_the_wait(timeout: int) -> None:
    ends = expiry(T0, timeout)
    assert T0 < ends < T0 + timedelta(seconds=timeout)


def test_given_a_wait_begun_in_another_time_zone_when_computing_expiry_then_the_instant_is_the_same() -> None:
    paris = T0.astimezone(timezone(timedelta(hours=1)))
    assert expiry(paris, 3600) == expiry(T0, 3600)


# -- endings --------------------------------------------------------------------------------------------------------

RAW_ID = "alice.martin@example.com"
REQUEST_ID = "req-2026-03-01-7f3a"
HASH = hmac.new(b"unit-test-key", RAW_ID.encode(), hashlib.sha256).hexdigest()
REPORT_URI = f"s3://lake-reports/reports/{REQUEST_ID}.json"
GAP = DatasetCoverage(
    "orders", False, "never fully indexed (no backfill or reconciliation recorded)", "lakepurge index backfill"
)


def ended_state() -> dict[str, Any]:
    """The execution's state at an ending, as Step Functions holds it: hashes and counts, never a raw id."""
    return {
        "report": {
            "uri": REPORT_URI,
            "sha256": "ab" * 32,
            "users_requested": 1,
            "user_hashes": [HASH],
            "coverage_gaps": ["orders"],
        },
        "job": {"backend": "emr-serverless", "detail": "job run 00f1 FAILED: executor lost"},
        "verification": {
            "lines_erased": 7,
            "objects_rewritten": 3,
            "relational_rows_deleted": 2,
            "certificate": f"s3://lake-reports/certificates/{REQUEST_ID}.json",
            "reason": "1 object still holds a user",
        },
        "error": {"Error": "States.TaskFailed", "Cause": "x" * 1000},
    }


def message(outcome: Outcome) -> str:
    state = EndedState.model_validate(ended_state())  # as Notify's handler parses it: hashes are not read
    return _ended(REQUEST_ID, outcome, state, "dpo@example.com", [GAP], "2026-03-31")


@pytest.mark.parametrize("outcome", get_args(Outcome))
def test_given_any_ending_when_notifying_then_its_message_names_the_request_and_never_a_raw_id(
    outcome: Outcome,
) -> None:
    text = message(outcome)
    assert REQUEST_ID in text
    assert RAW_ID not in text
    assert "alice" not in text.lower()
    assert HASH not in text  # not even the keyed hash: a message is read by people


def test_given_every_ending_when_notifying_then_each_has_its_own_message() -> None:
    texts = {outcome: message(outcome) for outcome in get_args(Outcome)}
    assert len(set(texts.values())) == len(texts)


def test_given_endings_where_nothing_was_erased_when_notifying_then_the_message_says_so() -> None:
    for outcome in ("NOTHING_FOUND", "INDEX_INCOMPLETE", "REJECTED", "APPROVAL_TIMED_OUT", "REPORT_TAMPERED"):
        assert "nothing" in message(outcome).lower(), outcome
    assert "nothing is reported erased" in message("FAILED")


def test_given_the_specific_endings_when_notifying_then_each_states_what_the_reader_acts_on() -> None:
    assert "7 record(s) in 3 object(s) and 2 relational row(s)" in message("ERASED")
    assert f"s3://lake-reports/certificates/{REQUEST_ID}.json" in message("ERASED")
    assert "REJECTED by dpo@example.com" in message("REJECTED")
    incomplete = message("INDEX_INCOMPLETE")
    assert "dataset orders: never fully indexed" in incomplete
    assert "(run: lakepurge index backfill)" in incomplete
    assert "(2026-03-31)" in incomplete
    assert "did NOT pass (1 object still holds a user)" in message("VERIFICATION_FAILED")
    assert "emr-serverless: job run 00f1 FAILED: executor lost" in message("JOB_FAILED")
    assert REPORT_URI in message("REPORT_TAMPERED")
    failed = message("FAILED")
    assert "States.TaskFailed: " + "x" * 300 in failed and "x" * 301 not in failed  # the cause is cut short


def test_given_a_failed_step_after_the_report_when_notifying_then_what_was_erased_is_counted_or_said_unknown() -> None:
    state = EndedState.model_validate(ended_state())
    erased = ErasedBeforeFailure(objects_erased=2, objects_verified=2, objects_planned=5)

    counted = _ended(REQUEST_ID, "FAILED", state, None, erased=erased)
    unknown = _ended(REQUEST_ID, "FAILED", state, None, uncounted="EndpointConnectionError")

    assert "Of 5 object(s) planned, 2 were erased before the failure (2 re-read now" in counted
    assert "could not be counted now (EndpointConnectionError)" in unknown
    assert not any("nothing" in text for text in (counted, unknown))


def test_given_an_ending_without_decision_or_gaps_when_notifying_then_the_message_still_reads() -> None:
    assert "REJECTED by an approver" in _ended(REQUEST_ID, "REJECTED", EndedState(), None)
    incomplete = _ended(REQUEST_ID, "INDEX_INCOMPLETE", EndedState(), None)
    assert "no dataset's coverage is stated" in incomplete
    assert "see lakepurge status" in incomplete
