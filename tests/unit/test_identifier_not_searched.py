"""A request naming no id of a typed dataset's kind finds nothing there (an untyped id never matches a typed
dataset): the report states each such dataset as not searched, and the approval page shows it as its own line, so
the gap is approved, never silent (issue 31, lead's decision)."""

from __future__ import annotations

import tomllib

import pytest

from lakepurge.core.config import parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.records.identifiers import request_form
from lakepurge.reports.report import Report, build_report
from lakepurge.workflow.approval import PendingApproval
from lakepurge.workflow.pages import confirmation_page
from lakepurge.workflow.store import ErasureRequest

pytestmark = pytest.mark.unit

CONFIG = """
[index]
backend = "postgres"
dsn = "postgresql://x@localhost/db"
[reports]
location = "s3://reports/r/"
[identifiers.email]
[identifiers.customer_id]
[[datasets]]
name = "signups"
location = "s3://lake/signups/"
id_fields = ["email"]
id_kind = "email"
[[datasets]]
name = "orders"
location = "s3://lake/orders/"
id_fields = ["customer"]
id_kind = "customer_id"
[[datasets]]
name = "events"
location = "s3://lake/events/"
id_fields = ["user_id"]
"""
PSEUDONYMIZER = Pseudonymizer(b"k" * 16)


def report_for(users: list[str]) -> Report:
    settings = parse_settings(tomllib.loads(CONFIG), "lakepurge.toml")
    users = [request_form(u[3:], settings.identifier_kinds) if u.startswith("id:") else u for u in users]
    return build_report(MemoryIndexStore(), settings, users, "req-1", PSEUDONYMIZER)


def test_given_an_untyped_request_when_reported_then_every_typed_dataset_is_stated_not_searched():
    report = report_for(["wanda@example.com"])
    assert report.not_searched == (
        {"dataset": "signups", "kind": "email"},
        {"dataset": "orders", "kind": "customer_id"},
    )
    assert report.summary()["not_searched"] == {
        "signups": "not searched: the request names no email",
        "orders": "not searched: the request names no customer_id",
    }
    assert Report.from_bytes(report.to_bytes()) == report  # kept in the report the approver approves


def test_given_a_request_naming_an_email_when_reported_then_only_the_customer_id_dataset_is_not_searched():
    report = report_for(["id:email=wanda@example.com", "u-1"])
    assert report.not_searched == ({"dataset": "orders", "kind": "customer_id"},)
    request = ErasureRequest("req-1", "2026-11-26T00:00:00+00:00", "2026-12-26T00:00:00+00:00", report.user_hashes, "k")
    view = PendingApproval(request, report, "0" * 64, "dpo@example.com", "2026-12-01T00:00:00+00:00")

    page = confirmation_page(view, "0", "secret", "/approval")

    assert "<li>dataset orders: not searched: the request names no customer_id</li>" in page
    assert "signups: not searched" not in page and "wanda" not in page
