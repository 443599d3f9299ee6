"""The operations page in headless Chromium, served by the local stack's HTTP server (the approval API handler, GET
/ops), with requests in several states on the deployed workflow: one erased, one waiting for approval, one past its
deadline. The scheduled RequestMetrics run stores the page's view; the page asks for the operations password, then
lists the overdue one first, shows the counts `lakepurge requests` reads from the same evidence, and no user id;
the workflow's functions publish their metrics as EMF (captured from stdout)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests

from lakepurge.core import aws
from lakepurge.core.aws import Clients
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.ops.history import list_history
from lakepurge.workflow.intake import file_request
from tests.support.browser import screenshot
from tests.support.purging import HASH_KEY
from tests.support.workflow import WorkflowCase

pytestmark = pytest.mark.e2e


@pytest.fixture
def local_page() -> Iterator[Any]:
    from lakepurge.local.approval_server import ApprovalServer

    server = ApprovalServer()
    yield server
    server.stop()


def _emf(text: str) -> dict[str, float]:
    """Every EMF metric printed, name -> summed value."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == "lakepurge"
            for metric in directive["Metrics"]:
                values = document[metric["Name"]]
                found[metric["Name"]] = found.get(metric["Name"], 0) + sum(
                    values if isinstance(values, list) else [values]
                )
    return found


def test_given_erased_waiting_and_overdue_requests_when_the_ops_page_loads_then_overdue_is_first_and_counts_match(
    browser: Any,
    workflow_case: Callable[..., WorkflowCase],
    local_page: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from selenium.webdriver.common.by import By

    case = workflow_case(objects=12, users=10)
    users = sorted({user for user, _, _ in case.lake.lake.truth})
    erased = case.file(users[:2], "req-ops-erased")
    case.approve_and_finish(erased)
    waiting = case.file(users[2:3], "req-ops-waiting")
    case.emails(waiting)
    overdue = "req-ops-overdue"

    class FortyFiveDaysAgo(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) - timedelta(days=45)

    # received 45 days ago by the intake's own clock (a sender cannot state it): past its one-month deadline
    monkeypatch.setattr("lakepurge.workflow.intake.datetime", FortyFiveDaysAgo)
    file_request(
        case.settings,
        Clients.from_environment(),
        case.sfn,
        Pseudonymizer(HASH_KEY.encode()),
        users[3:4],
        "privacy-portal",
        overdue,
    )
    monkeypatch.undo()
    case.emails(overdue)
    workflow_metrics = _emf(capsys.readouterr().out)
    from lakepurge.local.workflow import refresh_operations_view

    assert refresh_operations_view() == {"open": 2, "overdue": 1}  # the hourly schedule's run: the view is stored
    scheduled_metrics = _emf(capsys.readouterr().out)

    refused = requests.get(local_page.ops_url, timeout=30)
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
    password = os.environ["LAKEPURGE_OPS_PASSWORD"]  # the local stack's own (lakepurge demo --keep prints it)
    browser.get(local_page.ops_url.replace("http://", f"http://ops:{password}@"))
    assert browser.title == "lakepurge operations", browser.page_source[:2000]
    html = browser.page_source
    screenshot(browser, "operations-page")

    records = list_history(case.settings, aws.client("s3"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#requests tr[data-request]")
    assert rows[0].get_attribute("data-request") == overdue
    assert {r.get_attribute("data-request") for r in rows} == {r.request_id for r in records}
    assert "OVERDUE" in rows[0].text and "OVERDUE" not in " ".join(r.text for r in rows[1:])
    shown = {ident: int(browser.find_element(By.ID, ident).text) for ident in ("open-count", "overdue-count")}
    assert shown == {"open-count": sum(r.open for r in records), "overdue-count": sum(r.overdue for r in records)}
    assert shown == {"open-count": 2, "overdue-count": 1}
    lines = sum(r.lines_erased or 0 for r in records if r.state == "ERASED")
    assert lines > 0 and int(browser.find_element(By.ID, "lines-erased").text) == lines
    assert browser.find_element(By.ID, "state-chart") and browser.find_element(By.ID, "erased-chart")
    for user in users:
        assert user not in html, "a raw user id is on the operations page"

    # the functions' metrics: LinesErased from VerifyPurge, RequestsOpen/RequestsOverdue from the scheduled count
    assert workflow_metrics.get("LinesErased") == lines
    assert (scheduled_metrics["RequestsOpen"], scheduled_metrics["RequestsOverdue"]) == (2, 1)
