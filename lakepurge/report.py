"""The purge report: exactly what a request will erase, written once per request and bound to its SHA-256.

An approver approves a report's hash and the purge refuses a report whose bytes hash differently, so what was
approved is what is erased. The report names users only by keyed hashes.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from lakepurge.config import Settings
from lakepurge.index.base import WHOLE_OBJECT, IndexStore
from lakepurge.logs import object_ref
from lakepurge.privacy import Pseudonymizer
from lakepurge.s3uri import S3Uri

REPORT_VERSION = 1


class SafetyLimitExceeded(Exception):
    """The request would erase more than the configured share of an object or dataset. The message names objects
    as logs do (keys that name a user are masked)."""


class ReportTampered(Exception):
    """The report's bytes do not hash to the approved SHA-256."""


@dataclass(frozen=True)
class ReportObject:
    s3path: str
    dataset: str
    format: str
    erase: str
    etag: str
    lines: tuple[int, ...]


@dataclass(frozen=True)
class ReportTable:
    name: str
    table: str
    column: str
    rows: int


@dataclass(frozen=True)
class Report:
    request_id: str
    created_at: str
    user_hashes: tuple[str, ...]
    users_found: int
    objects: tuple[ReportObject, ...]
    relational: tuple[ReportTable, ...] = ()
    version: int = REPORT_VERSION
    forced: bool = False
    datasets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(0 if o.lines == (WHOLE_OBJECT,) else len(o.lines) for o in self.objects)

    @property
    def empty(self) -> bool:
        return not self.objects and not any(t.rows for t in self.relational)

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)

    @classmethod
    def from_bytes(cls, data: bytes) -> Report:
        document: dict[str, Any] = orjson.loads(data)
        document["user_hashes"] = tuple(document["user_hashes"])
        document["objects"] = tuple(ReportObject(**{**o, "lines": tuple(o["lines"])}) for o in document["objects"])
        document["relational"] = tuple(ReportTable(**t) for t in document["relational"])
        return cls(**document)

    def summary(self) -> dict[str, Any]:
        """What an approver sees: counts per dataset and table, never an id."""
        return {
            "request_id": self.request_id,
            "users_requested": len(self.user_hashes),
            "users_found": self.users_found,
            "objects": len(self.objects),
            "lines": self.lines,
            "datasets": self.datasets,
            "relational_rows": {t.name: t.rows for t in self.relational},
        }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_relational(settings: Settings, users: list[str]) -> tuple[ReportTable, ...]:
    import psycopg
    from psycopg import sql

    tables = []
    for table in settings.relational:
        with psycopg.connect(table.dsn, autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FROM {} WHERE {} = ANY(%s)").format(
                sql.Identifier(*table.table.split(".")), sql.Identifier(table.column)
            )
            row = conn.execute(query, (users,)).fetchone()
        tables.append(ReportTable(table.name, table.table, table.column, int(row[0]) if row else 0))
    return tuple(tables)


def build_report(
    store: IndexStore,
    settings: Settings,
    users: list[str],
    request_id: str,
    pseudonymizer: Pseudonymizer,
    force: bool = False,
) -> Report:
    """Look the users up and plan the erasure, refusing one that breaks a safety limit unless forced."""
    hits = store.lookup_objects(users)
    objects = []
    for s3path in sorted(hits.objects):
        hit = hits.objects[s3path]
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is None:
            continue  # indexed under a dataset since removed from the configuration
        objects.append(
            ReportObject(
                s3path=s3path,
                dataset=dataset.name,
                format=dataset.format,
                erase=dataset.erase,
                etag=hit.etag,
                lines=hit.lines,
            )
        )
    datasets = _check_limits(store, settings, objects, force)
    return Report(
        request_id=request_id,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        user_hashes=tuple(pseudonymizer.many(users)),
        users_found=hits.users_found,
        objects=tuple(objects),
        relational=count_relational(settings, users) if settings.relational else (),
        forced=force,
        datasets=datasets,
    )


def _check_limits(
    store: IndexStore, settings: Settings, objects: list[ReportObject], force: bool
) -> dict[str, dict[str, int]]:
    limits = settings.purge
    per_dataset: dict[str, dict[str, int]] = defaultdict(lambda: {"objects": 0, "records": 0})
    problems = []
    for obj in objects:
        erased = 1 if obj.lines == (WHOLE_OBJECT,) else len(obj.lines)
        per_dataset[obj.dataset]["objects"] += 1
        per_dataset[obj.dataset]["records"] += erased
        if obj.lines != (WHOLE_OBJECT,) and limits.max_object_fraction < 1:
            indexed = store.get_object(obj.s3path)
            if indexed is not None and indexed.records and erased / indexed.records > limits.max_object_fraction:
                where = object_ref(obj.s3path, settings.dataset_named(obj.dataset))
                problems.append(
                    f"{where}: {erased} of {indexed.records} records (max_object_fraction {limits.max_object_fraction})"
                )
    totals = store.dataset_records()
    for name, counts in per_dataset.items():
        total = totals.get(name, 0)
        if total and counts["records"] / total > limits.max_dataset_fraction:
            problems.append(
                f"dataset {name}: {counts['records']} of {total} records"
                f" (max_dataset_fraction {limits.max_dataset_fraction})"
            )
    if problems and not force:
        raise SafetyLimitExceeded("; ".join(problems[:20]) + ("; ..." if len(problems) > 20 else ""))
    return dict(per_dataset)


def report_uri(settings: Settings, request_id: str) -> S3Uri:
    base = S3Uri.parse(settings.reports.location)
    return S3Uri(base.bucket, f"{base.key}reports/{request_id}.json")


def write_report(s3: Any, settings: Settings, report: Report) -> tuple[str, str]:
    """Store the report (SSE-KMS when the bucket's default says so; never overwritten). Returns (uri, sha256)."""
    data = report.to_bytes()
    uri = report_uri(settings, report.request_id)
    s3.put_object(
        Bucket=uri.bucket,
        Key=uri.key,
        Body=data,
        ContentType="application/json",
        Metadata={"sha256": sha256(data)},
        IfNoneMatch="*",
    )
    return str(uri), sha256(data)


def read_report(s3: Any, uri: str, expected_sha256: str) -> Report:
    location = S3Uri.parse(uri)
    data = s3.get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    actual = sha256(data)
    if actual != expected_sha256:
        raise ReportTampered(f"report {uri} hashes to {actual[:12]}..., approved {expected_sha256[:12]}...")
    return Report.from_bytes(data)
