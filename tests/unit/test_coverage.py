"""Coverage decisions: a request is certified only where the index provably saw the whole dataset."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.base import Coverage, ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.indexing.coverage import IndexIncomplete, assess, describe_gaps
from lakepurge.reports.report import build_report

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
SETTINGS: Settings = parse_settings(
    {
        "index": {"backend": "dynamodb", "table": "never-used"},
        "reports": {"location": "s3://lake-reports/"},
        "datasets": [
            {"name": "reviews", "location": "s3://lake/reviews/", "id_fields": ["user_id"]},
            {"name": "orders", "location": "s3://lake/orders/", "id_fields": ["buyer"]},
        ],
    }
)
REVIEWS = Coverage("reviews", "s3://lake/reviews/", "backfill", T0, T0 + timedelta(minutes=5), 120, 3, 0)
ORDERS = Coverage("orders", "s3://lake/orders/", "reconcile", T0, T0 + timedelta(minutes=1), 40, 0, 0)


def by_name(recorded: dict[str, Coverage], dead_letters: int = 0) -> dict[str, tuple[bool, str, str]]:
    return {c.dataset: (c.complete, c.reason, c.fix) for c in assess(SETTINGS, recorded, dead_letters)}


def test_given_every_dataset_listed_cleanly_when_assessing_then_all_are_complete_with_their_listing() -> None:
    assessed = assess(SETTINGS, {"reviews": REVIEWS, "orders": ORDERS})
    assert [c.dataset for c in assessed] == ["reviews", "orders"]  # in configuration order
    assert all(c.complete and c.reason == "" and c.fix == "" for c in assessed)
    reviews = assessed[0]
    assert (reviews.method, reviews.objects, reviews.versions) == ("backfill", 120, 3)
    assert (reviews.indexed_from, reviews.indexed_at) == ("2026-03-01T12:00:00+00:00", "2026-03-01T12:05:00+00:00")


def test_given_a_dataset_never_listed_when_assessing_then_it_is_incomplete_and_the_fix_is_a_backfill() -> None:
    got = by_name({"reviews": REVIEWS})
    assert got["reviews"][0] is True
    assert got["orders"] == (
        False,
        "never fully indexed (no backfill or reconciliation recorded)",
        "lakepurge index backfill --dataset orders",
    )
    orders = assess(SETTINGS, {})[1]
    assert (orders.method, orders.indexed_at, orders.objects) == (None, None, 0)


def test_given_a_dataset_listed_at_its_old_location_when_assessing_then_it_must_be_backfilled_again() -> None:
    moved = replace(REVIEWS, location="s3://old-lake/reviews/")
    assert by_name({"reviews": moved, "orders": ORDERS})["reviews"] == (
        False,
        "indexed at another location (s3://old-lake/reviews/)",
        "lakepurge index backfill --dataset reviews",
    )


def test_given_objects_that_failed_to_index_when_assessing_then_the_dataset_is_incomplete_until_reconciled() -> None:
    assert by_name({"reviews": replace(REVIEWS, failed=2), "orders": ORDERS})["reviews"] == (
        False,
        "2 object(s) could not be indexed (listed by lakepurge status)",
        "fix or remove them, then lakepurge index reconcile --dataset reviews",
    )


def test_given_unreconciled_drift_when_assessing_then_the_fix_is_a_reconciliation() -> None:
    assert by_name({"reviews": REVIEWS, "orders": replace(ORDERS, drift=3)})["orders"] == (
        False,
        "3 difference(s) between the lake and the index not reconciled",
        "lakepurge index reconcile --dataset orders",
    )


def test_given_events_in_the_dead_letter_queue_when_assessing_then_no_dataset_is_complete() -> None:
    got = by_name({"reviews": REVIEWS, "orders": ORDERS}, dead_letters=4)
    for name in ("reviews", "orders"):
        complete, reason, fix = got[name]
        assert not complete
        assert reason == "4 S3 event(s) in the indexer's dead-letter queue were never indexed"
        assert fix == f"lakepurge index reconcile --dataset {name}, then empty the dead-letter queue"


def test_given_several_problems_when_assessing_then_the_most_fundamental_one_is_reported() -> None:
    everything_wrong = replace(REVIEWS, location="s3://elsewhere/", failed=1, drift=1)
    assert by_name({"reviews": everything_wrong}, dead_letters=1)["reviews"][1].startswith("indexed at another")
    assert by_name({"reviews": replace(REVIEWS, failed=1, drift=1)}, 1)["reviews"][1].startswith("1 object(s)")


def test_given_an_incomplete_dataset_when_reporting_then_the_report_states_the_gap_and_names_the_command() -> None:
    store = MemoryIndexStore()
    store.record_coverage(REVIEWS)
    store.replace_objects([ObjectIndex("s3://lake/reviews/a.jsonl", "reviews", '"a"', None, T0, {"al": [0]}, 100)])
    report = build_report(store, SETTINGS, ["al"], "req-1", Pseudonymizer(b"unit-test-hash-key-0123"))
    assert [g.dataset for g in report.gaps] == ["orders"]
    assert report.summary()["coverage"] == {
        "reviews": "complete",
        "orders": "never fully indexed (no backfill or reconciliation recorded)",
    }
    message = str(IndexIncomplete(report.gaps))
    assert message == describe_gaps(report.gaps)
    assert "dataset orders: never fully indexed" in message
    assert "(run: lakepurge index backfill --dataset orders)" in message
    store.record_coverage(ORDERS)
    assert build_report(store, SETTINGS, ["al"], "req-1", Pseudonymizer(b"unit-test-hash-key-0123")).gaps == []
