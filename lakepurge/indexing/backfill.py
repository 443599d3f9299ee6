"""Backfill: index every object of the configured datasets on Spark executors and bulk-load the index.

The driver lists keys; each task reads whole objects with boto3 (so line numbers stay exact) and writes its
objects' rows to the index in batches (COPY for PostgreSQL, BatchWriteItem for DynamoDB), with the same
per-object replacement rules as the real-time indexer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import ObjectChanged, ObjectHead, error_code, ever_versioned, head_object, list_noncurrent
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.index import open_store
from lakepurge.index.base import Coverage, IndexStore, NoncurrentVersion, ObjectIndex
from lakepurge.indexing.coverage import forms_indexed
from lakepurge.indexing.indexer import (
    failed_object,
    failure_reason,
    flag_erased_users,
    keep_record_maps,
    scan_object,
    tag_owners,
)
from lakepurge.indexing.table_backfill import TableIndexed, index_tables
from lakepurge.tables.detect import refuse_table_formats

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

# Flush a task's rows to the index once this many are buffered (bounds executor memory).
FLUSH_ROWS = 200_000


@dataclass(frozen=True)
class BackfillResult:
    objects: int
    scanned: int
    records: int
    rows: int
    unindexable: int
    failed: tuple[tuple[str, str], ...]  # (s3path, why) for objects that could not be indexed (failure_reason)
    bytes_read: int
    # CPU time of the indexing tasks (reading, parsing, writing the index; not the JVM): with bytes_read, the
    # throughput per core whatever else shares the machine.
    cpu_seconds: float = 0.0
    versions: int = 0  # noncurrent versions read (versioned buckets)


Row = tuple[str, str, int, int, int, int, str, float]
_TASK_END = "task-end"  # the last row of every task: the CPU time spent after its last object's row


def index_partition(
    settings: Settings, env: dict[str, str], force: bool, items: Iterable[tuple[str, str, str]]
) -> Iterator[Row]:
    """Index a partition's objects; yields (s3path, outcome, records, rows, unindexable, bytes, error, cpu seconds
    since the previous row), an object's row once its index rows are written.

    One object never fails another: an object that cannot be read or parsed, or whose rows cannot be written (after
    its batch's write failed, each of the batch's objects is written on its own), is recorded in the index as failed
    (failed_object: listed by `lakepurge status`, read again by the next backfill) and reported "failed"."""
    cpu = time.process_time()

    def spent() -> float:
        nonlocal cpu
        previous, cpu = cpu, time.process_time()
        return cpu - previous

    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    pseudonymizer = Pseudonymizer.optional(settings.privacy)
    pending: list[tuple[ObjectIndex, Row]] = []
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
            except Exception as exc:  # one unreadable object must not lose the others; it is recorded and reported
                reason = failure_reason(exc)
                log.warning(
                    "object could not be indexed", extra={"object": object_ref(s3path, dataset), "error": reason}
                )
                empty = ObjectIndex(s3path, dataset.name, head.etag, head.version_id, head.last_modified)
                pending.append((failed_object(empty, reason), (s3path, "failed", 0, 0, 0, 0, reason, spent())))
                continue
            flag_erased_users(store, scanned, pseudonymizer, settings)
            rows, unindexable = scanned.row_count, len(scanned.unindexable)
            row = (s3path, "scanned", scanned.records, rows, unindexable, head.size, "", spent())
            pending.append((scanned, row))
            pending_rows += rows
            if pending_rows >= FLUSH_ROWS:
                yield from _write_batch(store, settings, pending, force)
                pending, pending_rows = [], 0
        yield from _write_batch(store, settings, pending, force)
    finally:
        store.close()
    yield "", _TASK_END, 0, 0, 0, 0, "", spent()


def _write_batch(
    store: IndexStore, settings: Settings, pending: list[tuple[ObjectIndex, Row]], force: bool
) -> Iterator[Row]:
    """Write a batch of objects' index rows, and yield their rows. When the batch's write fails, each object is
    written on its own, and one that still fails is recorded as failed instead (its row says so)."""
    if not pending:
        return
    try:
        store.replace_objects([obj for obj, _ in pending], force=force)
    except Exception as exc:
        log.warning(
            "index write of a batch failed; writing its objects one at a time",
            extra={"objects": len(pending), "error": type(exc).__name__},
        )
    else:
        keep_record_maps(store, [(obj.s3path, obj.record_map) for obj, _ in pending])
        yield from (row for _, row in pending)
        return
    for obj, row in pending:
        try:
            store.replace_objects([obj], force=force)
            keep_record_maps(store, [(obj.s3path, obj.record_map)])
        except Exception as exc:
            reason = failure_reason(exc)
            ref = object_ref(obj.s3path, settings.dataset_named(obj.dataset))
            log.warning("index rows of an object could not be written", extra={"object": ref, "error": reason})
            try:
                store.replace_objects([failed_object(obj, reason)], force=force)
            except Exception as again:  # the index itself is failing: the row still reports the object failed
                log.warning(
                    "object could not be recorded as failed", extra={"object": ref, "error": type(again).__name__}
                )
            yield obj.s3path, "failed", 0, 0, 0, 0, reason, row[7]
        else:
            yield row


VersionItem = tuple[str, str, str, str, str, datetime, int]  # dataset, bucket, key, version id, etag, modified, size
_RECORD_VERSIONS = 500  # noncurrent versions recorded per index write


def index_versions_partition(settings: Settings, env: dict[str, str], items: Iterable[VersionItem]) -> Iterator[Row]:
    """Read noncurrent versions and record whose records each holds; yields backfill rows (outcome "version",
    "absent" for a version deleted since it was listed, or "failed")."""
    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    found: list[NoncurrentVersion] = []
    try:
        for name, bucket, key, version_id, etag, last_modified, size in items:
            head = ObjectHead(bucket, key, etag, version_id, last_modified, size)
            try:
                scanned = scan_object(s3, settings, settings.dataset_named(name), head)
            except ObjectChanged:
                yield head.s3path, "absent", 0, 0, 0, 0, "", 0.0
                continue
            except Exception as exc:  # one unreadable version must not lose the others; it is reported
                yield head.s3path, "failed", 0, 0, 0, 0, f"version {version_id}: {type(exc).__name__}", 0.0
                continue
            if scanned.lines_by_user:
                found.append(NoncurrentVersion(head.s3path, name, version_id, tuple(scanned.lines_by_user)))
            if len(found) >= _RECORD_VERSIONS:
                store.record_noncurrent(found)
                found = []
            yield head.s3path, "version", scanned.records, 0, len(scanned.unindexable), size, "", 0.0
        store.record_noncurrent(found)
    finally:
        store.close()


@dataclass
class _Listing:
    """One dataset's objects as listed by a backfill or a reconciliation."""

    dataset: DatasetConfig
    started_at: datetime
    current: dict[str, tuple[str, int]]  # key -> (ETag, size)
    noncurrent: list[ObjectHead]


def _list_dataset(s3: S3Client, dataset: DatasetConfig, versioned: bool) -> _Listing:
    started = datetime.now(UTC)
    uri = dataset.uri
    current: dict[str, tuple[str, int]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for item in page.get("Contents", []):
            key = item["Key"]
            if not dataset.is_sidecar(key) and dataset.skip_reason(key) is None:
                current[key] = (item["ETag"], item["Size"])
    noncurrent = list(list_noncurrent(s3, dataset)) if versioned else []
    return _Listing(dataset, started, current, noncurrent)


def _index_listed(
    spark: Any,
    settings: Settings,
    force: bool,
    objects: list[tuple[str, str, str, int]],
    versions: list[ObjectHead],
    dataset: str | None = None,
) -> list[Row]:
    """Index current objects (dataset, bucket, key, size) and noncurrent versions on the executors; the progress bars
    name the dataset when there is one."""
    named = f"{dataset}: " if dataset else ""
    env = job_environment(settings)
    # Largest objects first: dealt round-robin, no task ends up with all the big ones.
    objects = sorted(objects, key=lambda item: -item[3])
    ordered = [(name, bucket, key) for name, bucket, key, _ in objects]
    sizes = {(bucket, key): size for _, bucket, key, size in objects}
    rows = on_executors(
        spark,
        ordered,
        lambda items: index_partition(settings, env, force, items),
        label=f"{named}objects indexed",
        size=lambda item: sizes[item[1], item[2]],
    )
    if versions:
        names = {(v.bucket, v.key): settings.dataset_for(v.bucket, v.key) for v in versions}
        version_items: list[VersionItem] = [
            (names[v.bucket, v.key].name, v.bucket, v.key, v.version_id or "null", v.etag, v.last_modified, v.size)  # type: ignore[union-attr]
            for v in sorted(versions, key=lambda v: -v.size)
        ]
        rows += on_executors(
            spark,
            version_items,
            lambda items: index_versions_partition(settings, env, items),
            label=f"{named}noncurrent versions indexed",
            size=lambda item: item[6],
        )
    return rows


def _failed_per_dataset(settings: Settings, failed: Iterable[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s3path, _ in failed:
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is not None:
            counts[dataset.name] = counts.get(dataset.name, 0) + 1
    return counts


def _chosen(settings: Settings, datasets: Iterable[str]) -> list[DatasetConfig]:
    return [settings.dataset_named(name) for name in dict.fromkeys(datasets)] or list(settings.datasets)


def run_backfill(spark: Any, settings: Settings, force: bool = False, datasets: Iterable[str] = ()) -> BackfillResult:
    """Index every object, and every noncurrent version in a versioned bucket, of the datasets; then record each
    dataset's coverage (what lets a request be certified)."""
    s3 = aws.client("s3")
    chosen = _chosen(settings, datasets)
    refuse_table_formats(s3, chosen)
    tables = index_tables(spark, settings, [d for d in chosen if d.is_table], "backfill", force=True)
    chosen = [d for d in chosen if not d.is_table]
    versioned = {bucket: ever_versioned(s3, bucket) for bucket in {d.uri.bucket for d in chosen}}
    listings = [_list_dataset(s3, dataset, versioned[dataset.uri.bucket]) for dataset in chosen]
    store = open_store(settings.index)  # creates the schema once, on the driver
    try:
        recorded = store.coverage()
        objects = [
            (listing.dataset.name, listing.dataset.uri.bucket, key, size)
            for listing in listings
            for key, (_, size) in listing.current.items()
        ]
        rows = _index_listed(spark, settings, force, objects, [v for listing in listings for v in listing.noncurrent])
        result = _with_tables(_result(rows), tables)
        failed = _failed_per_dataset(settings, result.failed)
        finished = datetime.now(UTC)
        for listing in listings:
            store.record_coverage(
                Coverage(
                    dataset=listing.dataset.name,
                    location=listing.dataset.location,
                    method="backfill",
                    started_at=listing.started_at,
                    finished_at=finished,
                    objects=len(listing.current),
                    versions=len(listing.noncurrent),
                    failed=failed.get(listing.dataset.name, 0),
                    id_forms=forms_indexed(listing.dataset, recorded.get(listing.dataset.name), force),
                )
            )
    finally:
        store.close()
    log.info(
        "backfill done",
        extra={"objects": result.objects, "records": result.records, "failed": len(result.failed)},
    )
    return result


def _with_tables(result: BackfillResult, tables: list[TableIndexed]) -> BackfillResult:
    """A backfill's totals with its tables': live files count as objects, history holders as versions."""
    return BackfillResult(
        objects=result.objects + sum(t.files for t in tables),
        scanned=result.scanned + sum(t.files_read for t in tables),
        records=result.records + sum(t.records for t in tables),
        rows=result.rows + sum(t.records for t in tables),
        unindexable=result.unindexable,
        failed=result.failed + tuple(f for t in tables for f in t.failed),
        bytes_read=result.bytes_read + sum(t.bytes_read for t in tables),
        cpu_seconds=result.cpu_seconds,
        versions=result.versions + sum(t.history for t in tables),
    )


def _result(rows: list[Row]) -> BackfillResult:
    results = [r for r in rows if r[1] != _TASK_END]
    scanned = [r for r in results if r[1] == "scanned"]
    return BackfillResult(
        objects=sum(r[1] != "version" for r in results),
        scanned=len(scanned),
        records=sum(r[2] for r in scanned),
        rows=sum(r[3] for r in scanned),
        unindexable=sum(r[4] for r in scanned),
        failed=tuple((r[0], r[6]) for r in results if r[1] == "failed"),
        bytes_read=sum(r[5] for r in scanned),
        cpu_seconds=round(sum(r[7] for r in rows), 3),
        versions=sum(r[1] == "version" for r in results),
    )


@dataclass(frozen=True)
class ReconcileResult:
    """How one dataset's listing compared with the index, and what was done about it."""

    dataset: str
    objects: int  # current objects listed
    versions: int  # noncurrent versions read (all of them the first time, else those of drifted keys)
    missing: int  # listed, not indexed
    changed: int  # indexed at another ETag than the one listed (or failed before), or another owner tag
    gone: int  # indexed, no longer listed (deleted without its event reaching the indexer)
    fixed: int
    failed: tuple[tuple[str, str], ...]
    drift: int  # differences left (report-only, or failed to fix)


def run_reconcile(
    spark: Any, settings: Settings, datasets: Iterable[str] = (), fix: bool = True
) -> list[ReconcileResult]:
    """Compare each dataset's listing (keys, ETags, noncurrent versions) with the index, index what differs (or only
    report it), and record the dataset's coverage. Only the differences are read, so a healthy index costs one
    listing; a tag-owned dataset also costs one GetObjectTagging per object, since tagging keeps the ETag and only
    the owner tag tells a re-tagged object. Objects the index holds as owner unknown (one-user datasets) are read
    again too: a sidecar or tag whose event was lost may have arrived. spark None does the work in this process."""
    s3 = aws.client("s3")
    chosen = _chosen(settings, datasets)
    refuse_table_formats(s3, chosen)
    results = [
        _table_reconciled(t) for t in index_tables(spark, settings, [d for d in chosen if d.is_table], "reconcile")
    ]
    chosen = [d for d in chosen if not d.is_table]
    versioned = {bucket: ever_versioned(s3, bucket) for bucket in {d.uri.bucket for d in chosen}}
    store = open_store(settings.index)
    try:
        indexed = store.indexed_objects()
        recorded = store.coverage()
        for dataset in chosen:
            listing = _list_dataset(s3, dataset, versioned[dataset.uri.bucket])
            bucket = dataset.uri.bucket
            mine = {
                S3Uri.parse(path).key: etag
                for path, etag in indexed.items()
                if dataset.contains(*_bucket_key(path)) and not dataset.is_sidecar(S3Uri.parse(path).key)
            }
            missing = [k for k in listing.current if k not in mine]
            changed = [k for k, (etag, _) in listing.current.items() if k in mine and mine[k] != etag]
            gone = [k for k in mine if k not in listing.current]
            # Same ETag, other owner: read again whatever ETag the index holds (forced).
            retagged = _retagged(s3, store, dataset, [k for k in listing.current if k in mine and k not in changed])
            drifted = {*missing, *changed, *retagged, *gone}
            # Never fully listed before: every noncurrent version is unknown. Otherwise the event stream kept the
            # old versions of every key it saw change; only keys it missed can hide versions the index never saw.
            first = dataset.name not in recorded or recorded[dataset.name].location != dataset.location
            versions = [v for v in listing.noncurrent if first or v.key in drifted]
            failures: tuple[tuple[str, str], ...] = ()
            if fix:
                for key in gone:
                    store.remove_object(f"s3://{bucket}/{key}")
                objects = [(dataset.name, bucket, key, listing.current[key][1]) for key in [*missing, *changed]]
                failures = _result(_index_listed(spark, settings, False, objects, versions, dataset.name)).failed
                again = [*retagged, *(k for k in _unowned(store, dataset) if k in listing.current and k not in drifted)]
                if again:
                    forced = [(dataset.name, bucket, key, listing.current[key][1]) for key in again]
                    failures += _result(_index_listed(spark, settings, True, forced, [], dataset.name)).failed
            left = len(failures) if fix else len(drifted)
            store.record_coverage(
                Coverage(
                    dataset=dataset.name,
                    location=dataset.location,
                    method="reconcile",
                    started_at=listing.started_at,
                    finished_at=datetime.now(UTC),
                    objects=len(listing.current),
                    versions=len(listing.noncurrent),
                    failed=len(failures),
                    drift=0 if fix else left,
                    id_forms=forms_indexed(dataset, recorded.get(dataset.name), False),
                )
            )
            results.append(
                ReconcileResult(
                    dataset=dataset.name,
                    objects=len(listing.current),
                    versions=len(versions),
                    missing=len(missing),
                    changed=len(changed) + len(retagged),
                    gone=len(gone),
                    fixed=max(len(drifted) - left, 0) if fix else 0,
                    failed=failures,
                    drift=left,
                )
            )
            log.info(
                "reconciled",
                extra={
                    "dataset": dataset.name,
                    "missing": len(missing),
                    "changed": len(changed) + len(retagged),
                    "gone": len(gone),
                },
            )
    finally:
        store.close()
    return results


_TAGGING_THREADS = 16


def _retagged(s3: S3Client, store: IndexStore, dataset: DatasetConfig, keys: list[str]) -> list[str]:
    """The keys of a tag-owned dataset whose owner tag names other users than the index holds (tagging keeps the
    ETag), or that vanished while being compared; empty for other datasets."""
    if dataset.id_tag is None or not keys:
        return []
    bucket = dataset.uri.bucket
    indexed = store.object_owners(dataset.name)

    def differs(key: str) -> bool:
        try:
            return tag_owners(s3, dataset, bucket, key) != indexed.get(f"s3://{bucket}/{key}", frozenset())
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404", "MethodNotAllowed", "405"):
                return True  # deleted since the listing: indexing it removes it
            raise

    with ThreadPoolExecutor(max_workers=_TAGGING_THREADS, thread_name_prefix="lakepurge-tags") as pool:
        return [key for key, different in zip(keys, pool.map(differs, keys), strict=True) if different]


def _unowned(store: IndexStore, dataset: DatasetConfig) -> list[str]:
    """The keys of a one-user dataset's objects the index holds as read, owner unknown."""
    if not dataset.per_object:
        return []
    problems = store.problems().get(dataset.name)
    if problems is None or not problems.unowned:
        return []
    found = store.problem_objects(dataset.name, limit=problems.objects, lines=1)
    return [S3Uri.parse(o.s3path).key for o in found if o.whole and o.etag]


def _table_reconciled(table: TableIndexed) -> ReconcileResult:
    """A table's reconciliation in the terms of a dataset's: live files not indexed were missing, files that left
    the table were gone; the table's version is indexed whole either way, so nothing is left but failures."""
    missing = table.files_read
    return ReconcileResult(
        dataset=table.dataset,
        objects=table.files,
        versions=table.history,
        missing=missing,
        changed=0,
        gone=table.left,
        fixed=missing + table.left - len(table.failed),
        failed=tuple(table.failed),
        drift=len(table.failed),
    )


def _bucket_key(s3path: str) -> tuple[str, str]:
    uri = S3Uri.parse(s3path)
    return uri.bucket, uri.key
