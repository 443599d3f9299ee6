"""The operator path: report -> purge -> verify -> certificate, without the approval workflow.

Used by `lakepurge purge` and `lakepurge verify`; the Spark work runs on a local session from the CLI (the same
job code runs on EMR in the workflow).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakepurge import aws
from lakepurge.config import Settings
from lakepurge.index import open_store
from lakepurge.privacy import Pseudonymizer, hash_key
from lakepurge.purge.job import PurgeResult, purge_relational, run_purge, verify_everywhere
from lakepurge.report import Report, build_report, write_report
from lakepurge.sparkutil import spark_session


@dataclass(frozen=True)
class OperatorRun:
    request_id: str
    report: Report
    report_uri: str
    report_sha256: str
    result: PurgeResult | None  # None for a dry run
    seconds: float

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "request_id": self.request_id,
            "dry_run": self.result is None,
            "report": self.report_uri,
            "report_sha256": self.report_sha256,
            "plan": self.report.summary(),
            "seconds": round(self.seconds, 2),
        }
        if self.result is not None:
            document |= {
                "objects_rewritten": self.result.objects_rewritten,
                "lines_erased": self.result.lines_erased,
                "objects_failed": [o.s3path for o in self.result.failed],
                "relational_rows_deleted": sum(int(t["rows_deleted"]) for t in self.result.relational),
                "verified": self.result.verified,
                "certificate": self.result.certificate,
            }
        return document


def purge_users(
    settings: Settings,
    users: list[str],
    dry_run: bool = True,
    force: bool = False,
    approved_by: str = "operator",
    say: Callable[[str], None] = print,
) -> OperatorRun:
    started = time.monotonic()
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    key = hash_key(settings.privacy)
    request_id = f"op-{uuid.uuid4()}"
    s3 = aws.client("s3")
    store = open_store(settings.index)
    try:
        report = build_report(store, settings, users, request_id, pseudonymizer, force=force)
        uri, digest = write_report(s3, settings, report)
        say(
            f"report {uri}: {len(report.objects)} object(s), {report.lines} line(s),"
            f" {sum(t.rows for t in report.relational)} relational row(s); {report.users_found} of"
            f" {len(users)} user(s) found"
        )
        if dry_run:
            say("dry run: nothing erased (run again with --yes to erase)")
            return OperatorRun(request_id, report, uri, digest, None, time.monotonic() - started)
        relational = purge_relational(settings, users, report.relational)
        with spark_session("lakepurge-purge") as spark:
            result = run_purge(spark, settings, report, key, relational, approved_by, digest)
        if result.verified:
            store.record_erased(list(report.user_hashes), request_id)
        say(
            f"erased {result.lines_erased} line(s) in {result.objects_rewritten} object(s);"
            f" verification {'passed' if result.verified else 'FAILED'}; certificate {result.certificate}"
        )
        return OperatorRun(request_id, report, uri, digest, result, time.monotonic() - started)
    finally:
        store.close()


def verify_users(settings: Settings, users: list[str]) -> dict[str, Any]:
    """Is any of these users still anywhere? The index is asked, and every object of every dataset is read,
    with its noncurrent versions, on Spark: an independent check that does not trust the index."""
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    hashes = tuple(pseudonymizer.many(users))
    store = open_store(settings.index)
    try:
        indexed = store.lookup(users)
    finally:
        store.close()
    with spark_session("lakepurge-verify") as spark:
        checked, remaining = verify_everywhere(spark, settings, hashes, hash_key(settings.privacy))
    return {
        "users": len(hashes),
        "index_locations": sum(len(v) for v in indexed.values()),
        "objects_checked": checked,
        "remaining": remaining,
        "verified": not remaining and not indexed,
    }
