"""Running a purge in tests without the Spark job: the same report and engine, object by object."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.local.samples import SampleLake
from lakepurge.purge.certificate import purge_targets
from lakepurge.purge.engine import ObjectOutcome, purge_object
from lakepurge.purge.placeholders import recorded_from, write_batch
from lakepurge.reports.report import Report, build_report, resolve_references

HASH_KEY = "test-hash-key-0123456789"


def index_lake_in_its_index(settings: Settings, lake: SampleLake) -> None:
    """:func:`index_lake` into the index the settings name, opened and closed here."""
    store = open_store(settings.index)
    try:
        index_lake(store, settings, lake)
    finally:
        store.close()


def index_lake(
    store: IndexStore, settings: Settings, lake: SampleLake, datasets: Collection[str] | None = None
) -> None:
    """Index every object as the S3 events would, then reconcile (which finds nothing missed and records the
    coverage a certified purge needs) the given datasets, or all of them."""
    s3 = aws.client("s3")
    for obj in lake.objects:
        index_object(s3, store, settings, lake.bucket, obj.key)
    names = list(datasets) if datasets is not None else [d.name for d in settings.datasets]
    if names:  # run_reconcile with no dataset named reconciles them all
        run_reconcile(None, settings, names)


def index_keys(settings: Settings, bucket: str, keys: Collection[str]) -> None:
    """Index the given objects of a hand-made lake as their events would, then reconcile every dataset (the coverage
    a certified purge needs)."""
    s3 = aws.client("s3")
    store = open_store(settings.index)
    try:
        for key in keys:
            index_object(s3, store, settings, bucket, key)
    finally:
        store.close()
    run_reconcile(None, settings, [d.name for d in settings.datasets])


def report_for(store: IndexStore, settings: Settings, users: list[str], request_id: str = "req-test") -> Report:
    """The report as the purge sees it: objects named by reference resolved to their paths in the lake."""
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    report = build_report(store, settings, users, request_id, pseudonymizer, force=True)
    return resolve_references(aws.client("s3"), settings, report, pseudonymizer)


def purge_report(
    store: IndexStore, settings: Settings, report: Report, users: set[str], s3: Any = None
) -> list[ObjectOutcome]:
    s3 = s3 or aws.client("s3")
    resolved = resolve_references(s3, settings, report, Pseudonymizer(HASH_KEY.encode()))
    outcomes = [purge_object(s3, store, settings, target, frozenset(users)) for target in purge_targets(resolved)]
    write_batch(s3, settings, recorded_from(outcomes))  # as the job records the placeholders, for the vacuum
    return outcomes
