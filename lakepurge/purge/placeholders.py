"""The placeholders a blanking purge leaves, recorded so that the vacuum removes exactly those lines.

A purge that blanks records writes, for each object version it produces, one small record in the reports location:
the version it wrote, the version it read, and the spans (first line, number of lines) of every placeholder it
wrote there. Placeholders of earlier purges are still in the new version at the same lines (blanking keeps line
numbers), so the record of the version read, if it has one, holds the rest: the vacuum follows the chain back from
an object's current version. A version written by anyone else has no record and ends the chain.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from lakepurge import layout
from lakepurge.config import Settings

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
        document: dict[str, Any] = orjson.loads(data)
        document["spans"] = tuple((int(first), int(count)) for first, count in document["spans"])
        return cls(**document)


def write_record(s3: Any, settings: Settings, record: PlaceholderRecord) -> None:
    where = layout.placeholder_record(settings, record.s3path, record.etag)
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=orjson.dumps(asdict(record)), ContentType="application/json")


def read_record(s3: Any, settings: Settings, s3path: str, etag: str) -> PlaceholderRecord | None:
    stored = layout.read_or_none(s3, layout.placeholder_record(settings, s3path, etag))
    return None if stored is None else PlaceholderRecord.from_bytes(stored.body)


def placeholder_spans(s3: Any, settings: Settings, s3path: str, etag: str, limit: int = 10_000) -> list[Span]:
    """Every placeholder the purges left in this version of the object: its record's spans and, back through the
    versions each purge read, those of the purges before it."""
    spans: list[Span] = []
    seen: set[str] = set()
    while etag not in seen and len(seen) < limit:
        seen.add(etag)
        record = read_record(s3, settings, s3path, etag)
        if record is None:
            break
        spans.extend(record.spans)
        etag = record.before_etag
    return sorted(set(spans))


def recorded_objects(s3: Any, settings: Settings) -> Iterator[str]:
    """The objects of which a purge recorded placeholders (one record read per object)."""
    prefix = layout.placeholders_prefix(settings)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=prefix.bucket, Prefix=prefix.key, Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            first = s3.list_objects_v2(Bucket=prefix.bucket, Prefix=common["Prefix"], MaxKeys=1).get("Contents", [])
            if first:
                data = s3.get_object(Bucket=prefix.bucket, Key=first[0]["Key"])["Body"].read()
                yield PlaceholderRecord.from_bytes(data).s3path


def forget_records(s3: Any, settings: Settings, s3path: str) -> int:
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
