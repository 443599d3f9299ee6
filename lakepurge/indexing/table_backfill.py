"""Backfill and reconciliation of table datasets (format = "delta" or "iceberg"): the table's live files and its history
holders (lakepurge.tables.index) read on Spark executors, the version indexed and the dataset's coverage recorded
by the driver.

A backfill reads every live file; a reconciliation reads only the live files the index does not hold at their
ETag (a data file never changes once committed), moves the files that left the table to history, and reads the
history holders again (every data-file version under the location that is not live: few, between VACUUMs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import ObjectChanged, error_code
from lakepurge.core.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.index import open_store
from lakepurge.index.base import Coverage, IndexStore
from lakepurge.indexing.indexer import content_error, failure_reason
from lakepurge.tables.base import TableError, TableFile
from lakepurge.tables.index import (
    HistoryItem,
    history_items,
    is_marker,
    open_table,
    read_history,
    record_version,
    scan_live_file,
    store_history,
    store_live,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

TableItem = tuple[str, TableFile | HistoryItem]  # (dataset name, a live file or a history holder)
Done = tuple[str, str, int, int, str]  # (s3path, "live" | "history" | "failed", records, bytes read, error)


@dataclass
class TableIndexed:
    """One table's backfill or reconciliation."""

    dataset: str
    version: int
    files: int  # live files of the version indexed
    files_read: int
    history: int  # history holders read (file versions under the location that are not live)
    left: int  # files the index held as live that are no longer (moved to history)
    records: int
    bytes_read: int
    failed: list[tuple[str, str]] = field(default_factory=list)


def _index_partition(settings: Settings, env: dict[str, str], items: Iterable[TableItem]) -> Iterator[Done]:
    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    tables: dict[str, Any] = {}
    try:
        for name, item in items:
            dataset = settings.dataset_named(name)
            table = tables.setdefault(name, open_table(s3, dataset))
            path = item.path if isinstance(item, TableFile) else item.s3path
            try:
                if isinstance(item, TableFile):
                    scanned = scan_live_file(s3, settings, table, item)
                    store_live(store, table, scanned)
                    yield path, "live", scanned.entry.records, scanned.bytes_read, ""
                else:
                    store_history(store, dataset, item.head(), read_history(s3, settings, table, item))
                    yield path, "history", 0, item.size, ""
            except ObjectChanged:
                continue  # vacuumed (or replaced) since listed: the next listing sees what is there
            except ClientError as exc:
                if error_code(exc) not in ("NoSuchKey", "NoSuchVersion", "404"):
                    raise
            except Exception as exc:
                if not isinstance(exc, TableError) and not content_error(exc, dataset):
                    raise
                yield path, "failed", 0, 0, failure_reason(exc)
    finally:
        store.close()


def index_tables(
    spark: Any, settings: Settings, datasets: Iterable[DatasetConfig], method: str, force: bool = False
) -> list[TableIndexed]:
    """Index each table's current version whole (backfill, force=True) or only what the index lacks (reconcile),
    with every history holder; then record the version indexed and the dataset's coverage."""
    s3 = aws.client("s3")
    store = open_store(settings.index)
    results = []
    try:
        for dataset in datasets:
            results.append(_index_table(spark, s3, store, settings, dataset, method, force))
    finally:
        store.close()
    return results


def _index_table(
    spark: Any, s3: S3Client, store: IndexStore, settings: Settings, dataset: DatasetConfig, method: str, force: bool
) -> TableIndexed:
    started = datetime.now(UTC)
    table = open_table(s3, dataset)
    state = table.state()
    root = f"s3://{dataset.uri.bucket}/{dataset.uri.key}"
    indexed = {p: etag for p, etag in store.indexed_objects().items() if p.startswith(root) and not is_marker(p)}
    to_read = [f for f in state.files.values() if force or f.path not in indexed or not indexed[f.path]]
    left = sorted(set(indexed) - set(state.files))
    for path in left:
        # No longer in the table: what it held is history while it is on storage (read again below).
        store.remove_object(path)
    history = history_items(s3, table, state.files)
    items: list[TableItem] = [(dataset.name, f) for f in sorted(to_read, key=lambda f: -f.size)]
    items += [(dataset.name, h) for h in sorted(history, key=lambda h: -h.size)]
    env = job_environment(settings)
    done = on_executors(
        spark,
        items,
        lambda part: _index_partition(settings, env, part),
        label="table files indexed",
        size=lambda item: item[1].size,
    )
    failed = [(path, error) for path, kind, _, _, error in done if kind == "failed"]
    records = sum(store.object_records(list(state.files)).values()) if state.files else 0
    record_version(store, dataset, state, records)
    store.record_coverage(
        Coverage(
            dataset=dataset.name,
            location=dataset.location,
            method=method,
            started_at=started,
            finished_at=datetime.now(UTC),
            objects=len(state.files),
            versions=len(history),
            failed=len(failed),
        )
    )
    log.info("table indexed", extra={"dataset": dataset.name, "version": state.version, "files": len(to_read)})
    return TableIndexed(
        dataset=dataset.name,
        version=state.version,
        files=len(state.files),
        files_read=sum(kind == "live" for _, kind, _, _, _ in done),
        history=sum(kind == "history" for _, kind, _, _, _ in done),
        left=len(left),
        records=records,
        bytes_read=sum(read for _, _, _, read, _ in done),
        failed=failed,
    )
