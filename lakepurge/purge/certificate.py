"""What a purge did (PurgeResult, over the report's targets) and the erasure certificate that states it: what was
erased, where, when, verified how, with hashed ids only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from lakepurge.core.config import Settings
from lakepurge.core.logs import object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.indexing.resolution import certified
from lakepurge.purge.engine import ObjectOutcome, PurgeTarget
from lakepurge.reports import layout
from lakepurge.reports.report import Report


@dataclass(frozen=True)
class PurgeResult:
    request_id: str
    outcomes: tuple[ObjectOutcome, ...]
    remaining: tuple[dict[str, Any], ...]
    certificate: str
    relational: tuple[dict[str, Any], ...] = ()
    coverage_gaps: tuple[str, ...] = ()  # datasets the index did not fully cover: never certified as verified
    tables: tuple[dict[str, Any], ...] = ()  # each table dataset's erasure (lakepurge.purge.tables.TableOutcome)
    shred: dict[str, Any] | None = None  # the crypto-shred datasets' erasure (lakepurge.purge.shredding)

    @property
    def failed(self) -> tuple[ObjectOutcome, ...]:
        return tuple(o for o in self.outcomes if o.status == "failed")

    @property
    def tables_failed(self) -> tuple[str, ...]:
        return tuple(t["dataset"] for t in self.tables if t["status"] == "failed")

    @property
    def verified(self) -> bool:
        tables = all(t["verified"] for t in self.tables)
        shredded = self.shred is None or self.shred["verification"]["passed"]
        return not self.remaining and not self.failed and not self.coverage_gaps and tables and shredded

    @property
    def lines_erased(self) -> int:
        return sum(o.lines_erased for o in self.outcomes)

    @property
    def objects_rewritten(self) -> int:
        # A failed object counts when its rewrite or delete happened before the failure (engine._failed).
        return sum(o.status in ("erased", "deleted") or o.lines_erased > 0 for o in self.outcomes)

    @property
    def versions_deleted(self) -> int:
        return sum(len(o.deleted_versions) for o in self.outcomes)


VERSIONS_CHECKED = {
    "checksum": "every current and noncurrent version of each object: those this purge wrote by their CRC64NVME and"
    " version id (the bytes were read for the users before the write; asked by HEAD or named by the listing of the"
    " versions) or, in a bucket without versioning, by a listing's ETag equal to the write's MD5 ETag, those it read"
    " by version id, the others read again",
    "full": "every current and noncurrent version of each object, read again",
}


def purge_targets(report: Report) -> list[PurgeTarget]:
    """The report's objects, then the keys of which only noncurrent versions hold the users (each key once)."""
    versions = {v.s3path: v for v in report.versions}
    targets = [
        PurgeTarget(
            o.s3path,
            o.dataset,
            o.etag,
            o.lines,
            version_ids=versions[o.s3path].version_ids if o.s3path in versions else (),
        )
        for o in report.objects
    ]
    current = {o.s3path for o in report.objects}
    targets += [
        PurgeTarget(v.s3path, v.dataset, "", (), versions_only=True, version_ids=v.version_ids)
        for v in report.versions
        if v.s3path not in current
    ]
    return targets


def verification_proof(outcome: ObjectOutcome, covered: bool) -> dict[str, Any] | None:
    """What verification may take instead of reading an object again: the purge's outcome, unless the object was
    spliced and its copied ranges are not proven (docs/ARCHITECTURE.md, "Server-side splice"): with verify = "full",
    or when that proof rests on the index and the report found the dataset's coverage incomplete."""
    if outcome.splice is not None and proven_by(outcome.splice, covered) == READ_AGAIN:
        return None
    return outcome.as_dict()


READ_AGAIN = "verification's full read of the new version"


def proven_by(splice: dict[str, Any], covered: bool) -> str:
    """How a spliced object's copied ranges are shown to hold none of the users, as the certificate states it."""
    if splice.get("verify") == "changed-ranges":
        if splice.get("basis") == "read":
            return "changed-ranges: this purge read the version whole (the users' lines found by the indexer's reader)"
        if covered:
            return "changed-ranges: the index read the version whole (the dataset's coverage, stated above)"
    return READ_AGAIN


def _splice_statement(outcome: ObjectOutcome, covered: bool, by_checksum: bool) -> dict[str, Any]:
    """A spliced object in the certificate: what moved, and what proves the ranges copied inside S3 (nothing for an
    object rewritten whole)."""
    if outcome.splice is None:
        return {}
    proof = proven_by(outcome.splice, covered) if by_checksum else READ_AGAIN
    return {"splice": {**outcome.splice, "copied_ranges_proven_by": proof}}


def write_certificate(
    s3: Any,
    settings: Settings,
    report: Report,
    result: PurgeResult,
    started: datetime,
    approved_by: str | None,
    report_sha256: str,
    approved_at: str | None = None,
    pseudonymizer: Pseudonymizer | None = None,
) -> str:
    """The erasure certificate: what was erased, where, when, verified how; hashed ids only. Objects whose key may
    name their user are named by their keyed reference (logs.object_ref): the certificate is kept for years."""
    datasets = {d.name: d for d in settings.datasets}
    targets = purge_targets(report)
    gaps = {g.dataset for g in report.gaps}
    certificate = layout.CertificateDocument.model_validate(
        {
            "certificate_version": 1,
            "request_id": report.request_id,
            "user_hashes": list(report.user_hashes),
            "report_sha256": report_sha256,
            "approved_by": approved_by,
            "approved_at": approved_at,
            "started_at": started.isoformat(timespec="seconds"),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "coverage": list(report.coverage),
            "unindexable": list(report.unindexable),
            "not_searched": list(report.not_searched),
            "objects": [
                {
                    "object": object_ref(o.s3path, datasets[r.dataset], pseudonymizer),
                    "dataset": r.dataset,
                    "erase": "noncurrent-versions" if r.versions_only else datasets[r.dataset].erase,
                    "status": o.status,
                    "before": {"etag": o.before_etag, "version_id": o.before_version},
                    "after": {"etag": o.after_etag, "version_id": o.after_version},
                    "lines_erased": o.lines_erased,
                    "stale_index": o.stale_index,
                    "noncurrent_versions_deleted": o.noncurrent_versions_deleted,
                    "deleted_version_ids": o.deleted_versions,
                    "sidecar_versions_deleted": o.sidecar_versions_deleted,
                    "error": o.error,
                    **_splice_statement(o, r.dataset not in gaps, settings.purge.verify == "checksum"),
                }
                for o, r in zip(result.outcomes, targets, strict=True)
            ],
            "relational": list(result.relational),
            "tables": list(result.tables),
            "identifiers": certified(report.identifiers),
            **(
                {
                    "crypto_shred": result.shred,
                    "erasure_methods": {
                        "crypto-shred": result.shred["datasets"],
                        "rewrite": result.shred["rewritten_datasets"],
                    },
                }
                if result.shred is not None
                else {}
            ),
            **({"exemptions": list(report.exemptions)} if report.exemptions else {}),
            "totals": {
                "objects_rewritten": result.objects_rewritten,
                "lines_erased": result.lines_erased,
                "objects_failed": len(result.failed),
                "noncurrent_versions_deleted": result.versions_deleted,
                "relational_rows_deleted": sum(int(t.get("rows_deleted", 0)) for t in result.relational),
            },
            "verification": {
                "passed": result.verified,
                "objects_checked": len(targets),
                "versions_checked": VERSIONS_CHECKED[settings.purge.verify],
                "remaining": list(result.remaining),
                "coverage_gaps": list(result.coverage_gaps),
            },
        }
    )
    uri = layout.certificate(settings, report.request_id)
    s3.put_object(
        Bucket=uri.bucket,
        Key=uri.key,
        Body=orjson.dumps(certificate.to_json(), option=orjson.OPT_INDENT_2),
        ContentType="application/json",
    )
    return str(uri)
