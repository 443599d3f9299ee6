"""GET /ops, the operations page, over real HTTP from the local approval server (the same handler as the deployed
API): refused without the operations password (401 and a Basic challenge, so a browser asks for it), and served
from the view the hourly RequestMetrics function stored, without reading the index."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.index import open_store
from lakepurge.reports import layout
from tests.support.events import LambdaContext
from tests.support.lakes import LakeCase, index_toml
from tests.support.purging import index_lake

pytestmark = pytest.mark.integration

PASSWORD = "an operations password for the tests"
WORKFLOW_TOML = """
[workflow]
kms_key_id = "unused"
sender = "privacy-bot@example.com"
approvers = ["dpo@example.com"]
approval_url = "http://127.0.0.1/approval"
topic_arn = "arn:aws:sns:us-east-1:123456789012:outcomes"
"""


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from lakepurge.local.approval_server import ApprovalServer

    monkeypatch.setenv("LAKEPURGE_OPS_PASSWORD", PASSWORD)
    server = ApprovalServer()
    yield server
    server.stop()


def _indexed_lake(lake_factory: Callable[..., LakeCase]) -> Any:
    lake = lake_factory(index_toml("dynamodb"), objects=6, users=8)
    toml = lake.toml + WORKFLOW_TOML
    os.environ["LAKEPURGE_CONFIG_TOML"] = toml  # (lake_factory removes it after the test)
    runtime.reset()
    settings = parse_settings(tomllib.loads(toml))
    store = open_store(settings.index)
    try:
        index_lake(store, settings, lake.lake)
        return settings, store.status()
    finally:
        store.close()


def test_given_no_or_a_wrong_password_when_the_operations_page_is_asked_then_it_is_refused_with_a_challenge(
    lake_factory: Callable[..., LakeCase], page: Any
) -> None:
    _indexed_lake(lake_factory)
    from lakepurge_lambdas import request_metrics

    request_metrics.handler({"source": "aws.events"}, LambdaContext())  # a view exists: only the password is missing

    for auth in (None, ("ops", "not the password"), ("ops", "")):
        refused = requests.get(page.ops_url, auth=auth, timeout=30)
        assert refused.status_code == 401, (auth, refused.text[:500])
        assert refused.headers["WWW-Authenticate"].startswith('Basic realm="lakepurge operations"')
        assert "open requests" not in refused.text and "Coverage" not in refused.text
    assert requests.get(page.ops_url, auth=("ops", PASSWORD), timeout=30).status_code == 200


def test_given_the_stored_view_when_the_operations_page_is_opened_then_it_shows_it_without_reading_the_index(
    lake_factory: Callable[..., LakeCase], page: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, status = _indexed_lake(lake_factory)
    from lakepurge_lambdas import request_metrics

    before = requests.get(page.ops_url, auth=("ops", PASSWORD), timeout=30)
    assert before.status_code == 503 and "hourly" in before.text, before.text[:500]

    assert request_metrics.handler({"source": "aws.events"}, LambdaContext()) == {"open": 0, "overdue": 0}
    stored = layout.read_or_none(aws.client("s3"), layout.operations_view(settings))
    assert stored is not None

    def no_index() -> None:
        raise AssertionError("the operations page read the index")

    monkeypatch.setattr(runtime, "index_store", no_index)
    shown = requests.get(page.ops_url, auth=("ops", PASSWORD), timeout=30)

    assert shown.status_code == 200, shown.text[:500]
    assert f"{status.objects} object(s), {status.records} record(s), {status.users} user(s)" in shown.text
    assert status.objects > 0
