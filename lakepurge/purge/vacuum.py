"""Vacuum: drop the `{}` placeholders (and blanked CSV rows) the purge left, re-index, delete superseded versions.

Blanking keeps line numbers valid so the index needs no shifting between purges; the vacuum, run offline, pays
that debt back: objects get smaller and readers stop seeing placeholders.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from lakepurge import aws
from lakepurge.backfill import list_objects
from lakepurge.config import DatasetConfig, Settings
from lakepurge.formats import GzipReader, iter_lines
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.indexer import index_object
from lakepurge.logs import get_logger, object_ref
from lakepurge.purge.engine import LastByte, file_chunks, gzip_chunks, noncurrent_versions, stage
from lakepurge.purge.s3write import WriteConflict, preserved_attributes, write_in_place
from lakepurge.s3io import ObjectChanged, head_object, open_body
from lakepurge.s3uri import S3Uri
from lakepurge.sparkutil import apply_job_environment, job_environment, on_executors

log = get_logger(__name__)


@dataclass(frozen=True)
class VacuumOutcome:
    s3path: str
    lines_removed: int
    versions_deleted: int
    error: str = ""


def _is_placeholder(line: bytes, csv: bool) -> bool:
    content = line.rstrip(b"\r").strip()
    if csv:
        return not content.strip(b",")
    return content in (b"{}", b"")


def _without_placeholders(source: LastByte, csv: bool, max_bytes: int, removed: list[int]) -> Iterator[bytes]:
    batch: list[bytes] = []
    for number, line in iter_lines(source, max_bytes):
        if line is None:
            raise ValueError(f"line {number} is longer than max_record_bytes; cannot rewrite it safely")
        if (number > 0 or not csv) and _is_placeholder(line, csv):  # a CSV header is never a placeholder
            removed.append(number)
            continue
        batch.append(line + b"\n")
        if len(batch) >= 4096:
            yield b"".join(batch)
            batch.clear()
    if batch and source.last != b"\n":
        batch[-1] = batch[-1][:-1]  # the object had no final newline: neither has the vacuumed one
    yield b"".join(batch)


def vacuum_object(
    s3: Any, store: IndexStore, settings: Settings, dataset: DatasetConfig, bucket: str, key: str
) -> VacuumOutcome:
    s3path = f"s3://{bucket}/{key}"
    for _ in range(5):
        head = head_object(s3, bucket, key)
        if head is None:
            return VacuumOutcome(s3path, 0, 0)
        removed: list[int] = []
        gz = key.endswith(".gz")
        body = open_body(s3, head)
        try:
            source = LastByte(GzipReader(body) if gz else body)
            lines = _without_placeholders(source, dataset.format == "csv", settings.indexing.max_record_bytes, removed)
            staged = stage(gzip_chunks(lines) if gz else lines)
        except ObjectChanged:
            continue
        finally:
            body.close()
        if not removed:
            staged.close()
            return VacuumOutcome(s3path, 0, 0)
        try:
            written = write_in_place(s3, head, file_chunks(staged), preserved_attributes(s3, head))
        except WriteConflict:
            continue
        index_object(s3, store, settings, bucket, key, force=True)
        deleted = 0
        uri = S3Uri(bucket, key)
        for version in list(noncurrent_versions(s3, uri)):
            if version.version_id != written.version_id:
                s3.delete_object(Bucket=bucket, Key=key, VersionId=version.version_id)
                deleted += 1
        return VacuumOutcome(s3path, len(removed), deleted)
    return VacuumOutcome(s3path, 0, 0, "kept changing under concurrent writes")


def _vacuum_partition(
    settings: Settings, env: dict[str, str], items: Iterable[tuple[str, str, str]]
) -> Iterator[VacuumOutcome]:
    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    try:
        for dataset_name, bucket, key in items:
            dataset = settings.dataset_named(dataset_name)
            try:
                yield vacuum_object(s3, store, settings, dataset, bucket, key)
            except Exception as exc:  # reported per object, like the purge
                log.exception(
                    "vacuum of an object failed", extra={"object": object_ref(f"s3://{bucket}/{key}", dataset)}
                )
                yield VacuumOutcome(f"s3://{bucket}/{key}", 0, 0, type(exc).__name__)
    finally:
        store.close()


def run_vacuum(spark: Any, settings: Settings, datasets: Iterable[str] = ()) -> list[VacuumOutcome]:
    """Vacuum every object of the line-based datasets that erase by blanking."""
    wanted = set(datasets)
    s3 = aws.client("s3")
    items = [
        (dataset.name, bucket, key)
        for dataset in settings.datasets
        if dataset.erase == "blank" and dataset.format in ("jsonl", "csv") and (not wanted or dataset.name in wanted)
        for bucket, key, _ in list_objects(s3, dataset)
    ]
    env = job_environment(settings)
    return on_executors(spark, items, lambda part: _vacuum_partition(settings, env, part))
