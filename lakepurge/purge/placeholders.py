"""The placeholders a blanking purge leaves, recorded so that the vacuum removes exactly those lines.

For each object version a blanking purge produces there is one small record in the reports location: the version
it wrote, the version it read, and the spans (first line, number of lines) of every placeholder it wrote there.
Placeholders of earlier purges are still in the new version at the same lines (blanking keeps line numbers), so the
record of the version read, if it has one, holds the rest: the vacuum follows the chain back from an object's
current version. A version written by anyone else has no record and ends the chain.

The purge job writes the records of many objects in one batch, with their outcomes (a request per object was a
fifth of the erase path's requests); the vacuum files each batch's records under their objects before it starts.
A job killed before its batch is written loses none: the spans are in each object's intent, recorded before the
write, and the rerun's settled outcome carries them into its own batch.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from lakepurge.core.config import Settings
from lakepurge.reports import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from lakepurge.purge.engine import ObjectOutcome

Span = tuple[int, int]  # first line, number of lines


@dataclass(frozen=True)
class PlaceholderRecord:
    s3path: str
    etag: str  # the version the purge wrote
    version_id: str | None
    before_etag: str  # the version it read
    spans: tuple[Span, ...]

    @classmethod
    def from_bytes(cls, data: bytes) -> PlaceholderRecord:
        return cls.from_document(orjson.loads(data))

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> PlaceholderRecord:
        return cls(**{**document, "spans": tuple(map(_span, document["spans"]))})


def recorded_from(outcomes: Iterable[ObjectOutcome]) -> list[PlaceholderRecord]:
    """The records of the versions the outcomes' blanking writes produced."""
    return [
        # Spans come back from JSON (a rerun's intent) as lists.
        PlaceholderRecord(
            o.s3path, o.after_etag, o.after_version, o.before_etag, tuple(map(_span, o.placeholder_spans))
        )
        for o in outcomes
        if o.status == "erased" and o.placeholder_spans is not None and o.after_etag and o.before_etag
    ]


def _span(pair: Iterable[int]) -> Span:
    first, count = pair
    return int(first), int(count)


def write_batch(s3: S3Client, settings: Settings, records: list[PlaceholderRecord]) -> None:
    if records:
        where = layout.placeholder_batch(settings, uuid.uuid4().hex)
        body = orjson.dumps({"records": records})  # orjson writes a dataclass as asdict would, without its deep copy
        s3.put_object(Bucket=where.bucket, Key=where.key, Body=body, ContentType="application/json")


def file_batches(s3: S3Client, settings: Settings, apply: bool) -> dict[str, list[PlaceholderRecord]]:
    """The records purge jobs wrote in batches, by object. Applied, each is first filed under its object (where
    placeholder_spans and forget_records find it) and its batch deleted; a dry run only reads them."""
    pending: dict[str, list[PlaceholderRecord]] = defaultdict(list)
    prefix = layout.placeholder_batches_prefix(settings)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=prefix.bucket, Prefix=prefix.key):
        for item in page.get("Contents", []):
            data = s3.get_object(Bucket=prefix.bucket, Key=item["Key"])["Body"].read()
            records = [PlaceholderRecord.from_document(r) for r in orjson.loads(data)["records"]]
            if apply:
                for record in records:
                    write_record(s3, settings, record)
                s3.delete_object(Bucket=prefix.bucket, Key=item["Key"])
            else:
                for record in records:
                    pending[record.s3path].append(record)
    return dict(pending)


def write_record(s3: S3Client, settings: Settings, record: PlaceholderRecord) -> None:
    where = layout.placeholder_record(settings, record.s3path, record.etag)
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=orjson.dumps(record), ContentType="application/json")


def read_record(s3: S3Client, settings: Settings, s3path: str, etag: str) -> PlaceholderRecord | None:
    stored = layout.read_or_none(s3, layout.placeholder_record(settings, s3path, etag))
    return None if stored is None else PlaceholderRecord.from_bytes(stored.body)


def placeholder_spans(
    s3: S3Client,
    settings: Settings,
    s3path: str,
    etag: str,
    pending: Iterable[PlaceholderRecord] = (),
    limit: int = 10_000,
) -> list[Span]:
    """Every placeholder the purges left in this version of the object: its record's spans and, back through the
    versions each purge read, those of the purges before it. pending: the object's records still in batches (a dry
    run's, file_batches)."""
    batched = {record.etag: record for record in pending}
    spans: list[Span] = []
    seen: set[str] = set()
    while etag not in seen and len(seen) < limit:
        seen.add(etag)
        record = batched.get(etag) or read_record(s3, settings, s3path, etag)
        if record is None:
            break
        spans.extend(record.spans)
        etag = record.before_etag
    return sorted(set(spans))


def recorded_objects(s3: S3Client, settings: Settings) -> Iterator[str]:
    """The objects of which a purge recorded placeholders (one record read per object)."""
    prefix = layout.placeholders_prefix(settings)
    batches = layout.placeholder_batches_prefix(settings).key
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=prefix.bucket, Prefix=prefix.key, Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            if common["Prefix"] == batches:
                continue  # not an object's folder: file_batches reads those
            first = s3.list_objects_v2(Bucket=prefix.bucket, Prefix=common["Prefix"], MaxKeys=1).get("Contents", [])
            if first:
                data = s3.get_object(Bucket=prefix.bucket, Key=first[0]["Key"])["Body"].read()
                yield PlaceholderRecord.from_bytes(data).s3path


def forget_records(s3: S3Client, settings: Settings, s3path: str) -> int:
    """Drop an object's records once the vacuum removed its placeholders (the versions they describe are gone)."""
    folder = layout.placeholders_prefix(settings, s3path)
    keys = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=folder.bucket, Prefix=folder.key)
        for item in page.get("Contents", [])
    ]
    for key in keys:
        s3.delete_object(Bucket=folder.bucket, Key=key)
    return len(keys)
