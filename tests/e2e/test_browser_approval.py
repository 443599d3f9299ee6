"""A person approves or rejects in a real browser: headless Chromium opens the link of the approval email, the
page is screenshotted (test-artifacts/browser/, git-ignored), the button is clicked, the decided page shows, and
the state machine ends accordingly.

1. `lakepurge demo --interactive` as a first-time user runs it: the link it prints, Approve, the request erased.
2. The workflow on the tests' moto server with the approval page on 127.0.0.1: Reject, nothing changed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from lakepurge import runtime
from lakepurge.core import aws
from tests.support.browser import screenshot
from tests.support.invariant import snapshot
from tests.support.lakes import LakeCase, index_toml
from tests.support.purging import HASH_KEY
from tests.support.workflow import APPROVAL_URL, APPROVERS, deploy_case, link_in

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r">>> (http://127\.0\.0\.1:\d+/approval\?\S+)")


def _click(session: Any, button: str, expected_title: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    session.find_element(By.ID, button).click()
    WebDriverWait(session, 30).until(expected_conditions.title_is(expected_title))
    text: str = session.find_element(By.ID, "outcome").text
    return text


def _confirmation_page(session: Any, link: str, name: str) -> str:
    from selenium.webdriver.common.by import By

    session.get(link)
    assert session.title == "Approve an erasure request", session.page_source[:2000]
    body: str = session.find_element(By.TAG_NAME, "body").text
    assert "Records to erase" in body and "Report SHA-256" in body
    assert session.find_element(By.ID, "approve").is_displayed() and session.find_element(By.ID, "reject")
    screenshot(session, name)
    return body


class _Lines:
    """The demo's stderr, read on a thread (it blocks waiting for the click, so it is read while it runs)."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, pattern: re.Pattern[str], process: subprocess.Popen[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := pattern.search(line):
                    return match
            if process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError("the demo printed no approval link:\n" + "".join(self.lines)[-4000:])

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


def test_interactive_demo_is_approved_in_chromium_and_erases_the_users(browser: Any) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT", "LAKEPURGE_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "lakepurge.cli", "demo", "--interactive", "--json", "--objects", "30", "--users", "40"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stderr = _Lines(process.stderr)
        link = stderr.wait_for(LINK, process, timeout=240).group(1)
        assert "waiting for your decision until" in "".join(stderr.lines)
        _confirmation_page(browser, link, "demo-approval-page")
        outcome = _click(browser, "approve", "Request approved")
        assert outcome.startswith("Approved: the erasure starts now")
        screenshot(browser, "demo-approved")
        browser.get(link)  # the link decided once: it is spent
        assert browser.title == "Nothing was decided"
        out, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr.text()[-4000:]
    summary = orjson.loads(out)
    assert summary["approval"] == "interactive"
    assert summary["status"] == "SUCCEEDED" and summary["workflow_status"] == "SUCCEEDED"
    assert summary["outcome"] == "ERASED" and summary["users_erased"] == 3 and summary["verified"] is True
    assert summary["objects_rewritten"] > 0 and summary["index_after_purge"]["erased_users_left"] == 0


@pytest.fixture
def local_page() -> Iterator[Any]:
    from lakepurge.local.approval_server import ApprovalServer

    server = ApprovalServer()
    yield server
    server.stop()


def test_rejected_in_chromium_fails_the_execution_as_rejected_and_changes_nothing(
    browser: Any,
    lake_factory: Callable[..., LakeCase],
    pg_dsn: str,
    local_page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    lake = lake_factory(index_toml("postgres", pg_dsn), objects=12, users=10)
    case = deploy_case(lake)
    monkeypatch.setenv("LAKEPURGE_CONFIG_TOML", case.toml)
    runtime.reset()
    s3 = aws.client("s3")
    users = sorted({user for user, _, _ in lake.lake.truth})[:2]
    before = snapshot(s3, lake.lake.bucket)

    request_id = case.file(users, "req-browser-reject")
    mails = case.emails(request_id)
    approver = next(m for m in mails if m["to"] == [APPROVERS[1]])
    # The email links to the deployed API; locally the same handler answers on 127.0.0.1.
    link = link_in(approver).replace(APPROVAL_URL, local_page.url)
    body = _confirmation_page(browser, link, "workflow-approval-page")
    assert APPROVERS[1] in body
    for user in users:
        assert user not in browser.page_source, "a raw user id is on the approval page"
    assert snapshot(s3, lake.lake.bucket) == before, "opening the page changed the lake"
    outcome = _click(browser, "reject", "Request rejected")
    assert outcome.startswith("Rejected: nothing will be erased")
    screenshot(browser, "workflow-rejected")

    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "Rejected", case.failures(request_id)
    assert snapshot(s3, lake.lake.bucket) == before
    [note] = case.notifications()
    assert "REJECTED" in note["subject"] and APPROVERS[1] in note["message"]
    decision = orjson.loads(
        s3.get_object(Bucket="lake-reports", Key=f"requests/{request_id}/decision.json")["Body"].read()
    )
    assert decision["decision"] == "rejected" and decision["rejected_by"] == APPROVERS[1]
