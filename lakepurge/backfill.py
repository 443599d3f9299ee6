"""Backfill: index every object of the configured datasets on Spark executors and bulk-load the index.

The driver lists keys; each task reads whole objects with boto3 (so line numbers stay exact) and writes its
objects' rows to the index in batches (COPY for PostgreSQL, BatchWriteItem for DynamoDB), with the same
per-object replacement rules as the real-time indexer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from lakepurge import aws
from lakepurge.config import DatasetConfig, Settings
from lakepurge.index import open_store
from lakepurge.index.base import ObjectIndex
from lakepurge.indexer import flag_erased_users, scan_object
from lakepurge.logs import get_logger
from lakepurge.privacy import Pseudonymizer
from lakepurge.s3io import ObjectChanged, head_object
from lakepurge.sparkutil import apply_job_environment, job_environment, on_executors

log = get_logger(__name__)

# Flush a task's rows to the index once this many are buffered (bounds executor memory).
FLUSH_ROWS = 200_000


@dataclass(frozen=True)
class BackfillResult:
    objects: int
    scanned: int
    records: int
    rows: int
    unindexable: int
    failed: tuple[tuple[str, str], ...]  # (s3path, error class) for objects that could not be read
    bytes_read: int
    # CPU time of the indexing tasks (reading, parsing, writing the index; not the JVM): with bytes_read, the
    # throughput per core whatever else shares the machine.
    cpu_seconds: float = 0.0


def list_objects(s3: Any, dataset: DatasetConfig) -> Iterator[tuple[str, str, int]]:
    """(bucket, key, size) of every data object of a dataset (sidecars excluded)."""
    uri = dataset.uri
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for item in page.get("Contents", []):
            key = item["Key"]
            if not key.endswith("/") and not dataset.is_sidecar(key):
                yield uri.bucket, key, item["Size"]


Row = tuple[str, str, int, int, int, int, str, float]
_TASK_END = "task-end"  # the last row of every task: the CPU time spent after its last object's row


def index_partition(
    settings: Settings, env: dict[str, str], force: bool, items: Iterable[tuple[str, str, str]]
) -> Iterator[Row]:
    """Index a partition's objects; yields (s3path, outcome, records, rows, unindexable, bytes, error, cpu seconds
    since the previous row)."""
    cpu = time.process_time()

    def spent() -> float:
        nonlocal cpu
        previous, cpu = cpu, time.process_time()
        return cpu - previous

    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    pseudonymizer = Pseudonymizer.optional(settings.privacy)
    pending: list[ObjectIndex] = []
    pending_rows = 0
    try:
        for dataset_name, bucket, key in items:
            dataset = settings.dataset_named(dataset_name)
            s3path = f"s3://{bucket}/{key}"
            head = head_object(s3, bucket, key)
            if head is None:
                store.remove_object(s3path)
                yield s3path, "absent", 0, 0, 0, 0, "", spent()
                continue
            try:
                scanned = scan_object(s3, settings, dataset, head)
            except ObjectChanged:
                # Overwritten while listed: its ObjectCreated event re-indexes the new version.
                yield s3path, "changed", 0, 0, 0, 0, "", spent()
                continue
            except Exception as exc:  # one unreadable object must not lose the others; it is reported
                yield s3path, "failed", 0, 0, 0, 0, type(exc).__name__, spent()
                continue
            flag_erased_users(store, scanned, pseudonymizer)
            pending.append(scanned)
            pending_rows += scanned.row_count
            rows, unindexable = scanned.row_count, len(scanned.unindexable)
            yield s3path, "scanned", scanned.records, rows, unindexable, head.size, "", spent()
            if pending_rows >= FLUSH_ROWS:
                store.replace_objects(pending, force=force)
                pending, pending_rows = [], 0
        store.replace_objects(pending, force=force)
    finally:
        store.close()
    yield "", _TASK_END, 0, 0, 0, 0, "", spent()


def run_backfill(spark: Any, settings: Settings, force: bool = False, datasets: Iterable[str] = ()) -> BackfillResult:
    s3 = aws.client("s3")
    wanted = set(datasets)
    keys = [
        (dataset.name, bucket, key, size)
        for dataset in settings.datasets
        if not wanted or dataset.name in wanted
        for bucket, key, size in list_objects(s3, dataset)
    ]
    open_store(settings.index).close()  # create the schema once, on the driver
    if not keys:
        return BackfillResult(0, 0, 0, 0, 0, (), 0)
    # Largest objects first: dealt round-robin, no task ends up with all the big ones.
    keys.sort(key=lambda item: -item[3])
    ordered = [(name, bucket, key) for name, bucket, key, _ in keys]
    env = job_environment(settings)
    rows = on_executors(spark, ordered, lambda items: index_partition(settings, env, force, items))
    results = [r for r in rows if r[1] != _TASK_END]
    failed = tuple((r[0], r[6]) for r in results if r[1] == "failed")
    scanned = [r for r in results if r[1] == "scanned"]
    result = BackfillResult(
        objects=len(results),
        scanned=len(scanned),
        records=sum(r[2] for r in scanned),
        rows=sum(r[3] for r in scanned),
        unindexable=sum(r[4] for r in scanned),
        failed=failed,
        bytes_read=sum(r[5] for r in scanned),
        cpu_seconds=round(sum(r[7] for r in rows), 3),
    )
    log.info(
        "backfill done",
        extra={"objects": result.objects, "records": result.records, "failed": len(failed)},
    )
    return result
