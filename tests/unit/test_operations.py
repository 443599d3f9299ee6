"""The operations page's view model (lakepurge.ops.dashboard) and its HTML, from plain values; the request counts'
metrics as Powertools writes them (EMF on stdout); who may read the page (the operations password, HTTP Basic)."""

from __future__ import annotations

import base64
import json
import tomllib
from datetime import UTC, datetime
from typing import Any

import pytest

from lakepurge.core.config import parse_settings
from lakepurge.index.base import IndexStatus
from lakepurge.indexing.coverage import DatasetCoverage
from lakepurge.ops.dashboard import PageLocked, assemble, may_read
from lakepurge.ops.dashboard_page import operations_page
from lakepurge.ops.history import RequestRecord
from lakepurge.workflow.store import AWAITING_APPROVAL, FINAL_STATES, PURGING, RECEIVED, RequestState

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _record(request_id: str, state: str, created: str, deadline: str | None, overdue: bool = False, **kw: Any) -> Any:
    days = None if deadline is None else (datetime.fromisoformat(deadline) - NOW).days
    values: dict[str, Any] = {"users": 2, "objects": 3, "lines_erased": None, "verified": None, "certificate": None}
    values.update(kw)
    kind = "workflow" if deadline else "operator"
    return RequestRecord(request_id, kind, state, created, deadline, days, overdue, **values)  # type: ignore[arg-type]


RECORDS = [
    _record(
        "req-erased-1",
        "ERASED",
        "2026-11-20T09:00:00+00:00",
        "2026-12-20T09:00:00+00:00",
        lines_erased=7,
        verified=True,
        objects=2,
    ),
    _record(
        "req-erased-2",
        "ERASED",
        "2026-11-20T10:00:00+00:00",
        "2026-12-20T10:00:00+00:00",
        lines_erased=5,
        verified=True,
        objects=1,
    ),
    _record("op-erased", "ERASED", "2026-11-22T10:00:00+00:00", None, lines_erased=4, verified=True, objects=4),
    _record("req-waiting-late", "AWAITING_APPROVAL", "2026-11-21T10:00:00+00:00", "2026-12-21T10:00:00+00:00"),
    _record("req-waiting-soon", "AWAITING_APPROVAL", "2026-11-01T10:00:00+00:00", "2026-12-01T10:00:00+00:00"),
    _record("req-overdue", "INDEX_INCOMPLETE", "2026-10-01T10:00:00+00:00", "2026-10-31T10:00:00+00:00", True),
    _record("req-rejected", "REJECTED", "2026-11-22T11:00:00+00:00", "2026-12-22T11:00:00+00:00"),
]
STATUS = IndexStatus(
    objects=40,
    records=900,
    users=30,
    rows=900,
    unindexable_lines=3,
    objects_with_unindexable=2,
    objects_with_returning_users=1,
)
COVERAGE = [
    DatasetCoverage("reviews", True, "", "", "reconcile", None, "2026-11-22T10:00:00+00:00", 30, 0),
    DatasetCoverage("clicks", False, "never fully indexed", "lakepurge index backfill --dataset clicks"),
]


def test_given_requests_in_several_states_when_assembled_then_overdue_comes_first_then_open_by_deadline() -> None:
    view = assemble(RECORDS, STATUS, COVERAGE, returning_users=2, now=NOW)

    order = [r.request_id for r in view.requests]
    assert order[:3] == ["req-overdue", "req-waiting-soon", "req-waiting-late"]
    assert order[3:] == ["req-rejected", "op-erased", "req-erased-2", "req-erased-1"]  # ended: newest first
    assert (view.open, view.overdue) == (3, 1)
    assert view.by_state == {"AWAITING_APPROVAL": 2, "ERASED": 3, "INDEX_INCOMPLETE": 1, "REJECTED": 1}


def test_given_dry_runs_never_executed_when_assembled_then_they_are_counted_apart_not_listed_as_requests() -> None:
    plans = [_record(f"op-plan-{i}", "PLANNED", "2026-11-22T12:00:00+00:00", None) for i in range(3)]

    view = assemble([*RECORDS, *plans], STATUS, COVERAGE, returning_users=2, now=NOW)

    assert view.plans == 3
    assert not any(r.request_id.startswith("op-plan") for r in view.requests)
    assert "PLANNED" not in view.by_state
    html = operations_page(view)
    assert "op-plan" not in html
    assert "3 dry run(s) never executed (plans: nothing erased) are not listed" in html


def test_given_an_answered_access_request_when_counted_then_it_is_closed_as_status_counts_each_workflow_state() -> None:
    exported = _record("req-exported", "EXPORTED", "2026-11-22T12:00:00+00:00", "2026-12-22T12:00:00+00:00")

    view = assemble([*RECORDS, exported], STATUS, COVERAGE, returning_users=2, now=NOW)

    assert not exported.open
    assert view.open == 3 and [r.request_id for r in view.requests][3] == "req-exported"  # first of the ended
    for state in (*FINAL_STATES, RECEIVED, AWAITING_APPROVAL, PURGING):
        record = _record("req", state, "2026-11-22T12:00:00+00:00", "2026-12-22T12:00:00+00:00")
        assert record.open == RequestState(state, NOW.isoformat()).open, state
    # only an answer closes a request: a failed ending leaves the legal deadline running
    closed = {state for state in FINAL_STATES if not RequestState(state, NOW.isoformat()).open}
    assert closed == {"ERASED", "EXPORTED", "NOTHING_FOUND", "REJECTED"}


def test_given_verified_erasures_when_assembled_then_lines_and_objects_are_summed_per_day() -> None:
    view = assemble(RECORDS, STATUS, COVERAGE, returning_users=2, now=NOW)

    assert [(d.day, d.requests, d.objects, d.lines) for d in view.erased] == [
        ("2026-11-20", 2, 3, 12),
        ("2026-11-22", 1, 4, 4),
    ]
    assert (view.lines_erased, view.objects_erased) == (16, 7)
    assert (view.unindexable_lines, view.returning_users, view.objects_with_returning) == (3, 2, 1)
    assert view.datasets_covered == 1 and len(view.coverage) == 2


def test_given_a_view_when_rendered_then_the_page_lists_the_overdue_request_first_with_svg_charts_and_no_script() -> (
    None
):
    html = operations_page(assemble(RECORDS, STATUS, COVERAGE, returning_users=2, now=NOW))

    assert html.index("req-overdue") < html.index("req-waiting-soon") < html.index("req-erased-1")
    assert "<svg id='state-chart'" in html and "<svg id='erased-chart'" in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "id='overdue-count' class='bad'>1<" in html
    assert "never fully indexed" in html


def test_given_request_counts_when_the_metrics_handler_runs_then_emf_carries_open_and_overdue(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lakepurge_lambdas import request_metrics
    from tests.support.events import LambdaContext

    monkeypatch.setattr(request_metrics.runtime, "settings", lambda: None)
    monkeypatch.setattr(request_metrics.runtime, "index_store", lambda create=True: None)
    monkeypatch.setattr(request_metrics.aws, "client", lambda name: None)
    view = assemble(RECORDS, STATUS, COVERAGE, returning_users=2, now=NOW)
    monkeypatch.setattr(request_metrics, "refresh_view", lambda settings, s3, store, sqs: view)

    result = request_metrics.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())

    assert result == {"open": 3, "overdue": 1}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    [document] = emf
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "lakepurge"
    assert {m["Name"] for m in directive["Metrics"]} == {"RequestsOpen", "RequestsOverdue"}
    assert (document["RequestsOpen"], document["RequestsOverdue"], document["service"]) == ([3.0], [1.0], "lakepurge")


OPS_TOML = """\
[index]
backend = "dynamodb"
table = "index"

[reports]
location = "s3://lake-reports/"

[workflow]
kms_key_id = "k"
sender = "privacy-bot@example.com"
approvers = ["dpo@example.com"]
approval_url = "https://example.com/approval"
topic_arn = "arn:aws:sns:us-east-1:123456789012:outcomes"
operations_password_env = "TEST_OPS_PASSWORD"
"""
PASSWORD = "correct horse battery staple"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("authorization", "allowed"),
    [
        (None, False),
        ("", False),
        (_basic("ops", PASSWORD), True),
        (_basic("anyone", PASSWORD), True),  # any user name
        ("basic " + _basic("ops", PASSWORD).split()[1], True),  # the scheme is case-insensitive
        (_basic("ops", PASSWORD + "x"), False),
        (_basic("ops", PASSWORD[:-1]), False),
        (_basic(PASSWORD, ""), False),  # the password in the user name's place
        ("Bearer " + PASSWORD, False),
        ("Basic not-base64!", False),
        ("Basic " + base64.b64encode(PASSWORD.encode()).decode(), False),  # no colon
    ],
)
def test_given_an_authorization_header_when_the_operations_page_is_asked_then_only_the_password_opens_it(
    monkeypatch: pytest.MonkeyPatch, authorization: str | None, allowed: bool
) -> None:
    settings = parse_settings(tomllib.loads(OPS_TOML))
    monkeypatch.setenv("TEST_OPS_PASSWORD", PASSWORD)

    assert may_read(settings, authorization, jwt_subject=None) is allowed


def test_given_a_token_the_jwt_authorizer_checked_when_asked_then_the_page_opens_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = parse_settings(tomllib.loads(OPS_TOML))
    monkeypatch.setenv("TEST_OPS_PASSWORD", PASSWORD)

    assert may_read(settings, None, jwt_subject="approver-7") is True


@pytest.mark.parametrize("configured", [None, "too short"])
def test_given_no_usable_password_when_the_operations_page_is_asked_then_it_is_locked_for_everyone(
    monkeypatch: pytest.MonkeyPatch, configured: str | None
) -> None:
    settings = parse_settings(tomllib.loads(OPS_TOML))
    if configured is None:
        monkeypatch.delenv("TEST_OPS_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("TEST_OPS_PASSWORD", configured)

    with pytest.raises(PageLocked, match="TEST_OPS_PASSWORD"):
        may_read(settings, _basic("ops", ""), jwt_subject=None)
