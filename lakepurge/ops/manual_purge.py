"""The operator path: report -> purge -> verify -> certificate, without the approval workflow.

Used by `lakepurge purge` and `lakepurge verify`; the Spark work runs on a local session from the CLI (the same
job code runs on EMR in the workflow).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.logs import object_ref
from lakepurge.core.privacy import Pseudonymizer, hash_key
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import spark_session
from lakepurge.index import open_existing
from lakepurge.indexing import unindexable
from lakepurge.indexing.coverage import IndexIncomplete, dead_letter_count
from lakepurge.indexing.returning import record_erasure, resolve_hashes
from lakepurge.purge.job import PurgeResult, purge_relational, run_purge, verify_everywhere
from lakepurge.purge.launch import inline_fits
from lakepurge.reports import layout
from lakepurge.reports.layout import load_report, write_report
from lakepurge.reports.report import Report, SafetyLimitExceeded, build_report
from lakepurge.tables.iceberg import bound_forms

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

Engine = Literal["auto", "inline", "spark"]


@dataclass(frozen=True)
class OperatorRun:
    request_id: str
    report: Report
    report_uri: str
    report_sha256: str
    result: PurgeResult | None  # None for a dry run
    seconds: float
    refused: str = ""  # a dry run the [purge] limits would refuse: why (its plan is shown all the same)
    failed_objects: tuple[str, ...] = ()  # as the certificate names them (logs.object_ref: keyed references)

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "request_id": self.request_id,
            "dry_run": self.result is None,
            "report": self.report_uri,
            "report_sha256": self.report_sha256,
            "plan": self.report.summary(),
            "seconds": round(self.seconds, 2),
        }
        if self.refused:
            document |= {"status": "REFUSED", "reason": self.refused}
        if self.result is not None:
            document |= {
                "objects_rewritten": self.result.objects_rewritten,
                "lines_erased": self.result.lines_erased,
                "noncurrent_versions_deleted": self.result.versions_deleted,
                "objects_failed": list(self.failed_objects),
                "relational_rows_deleted": sum(int(t["rows_deleted"]) for t in self.result.relational),
                **({"tables": list(self.result.tables)} if self.result.tables else {}),
                "verified": self.result.verified,
                "certificate": self.result.certificate,
            }
        return document


class ReviewedReportMismatch(Exception):
    """`purge --report ID` was given other user ids than the report was made for."""


def plan_lines(report: Report) -> list[str]:
    """The whole plan, as an operator reviews it before --yes: counts per dataset and table, never an id."""
    lines = [
        f"  {report.users_found} of {len(report.user_hashes)} user(s) found in the index;"
        f" {len(report.objects)} object(s), {report.lines} line(s), {report.version_count} noncurrent version(s)"
    ]
    for name, counts in sorted(report.datasets.items()):
        lines.append(f"  dataset {name}: {counts['records']} record(s) in {counts['objects']} object(s)")
    for versions in report.versions:
        lines.append(f"  dataset {versions.dataset}: {len(versions.version_ids)} noncurrent version(s) of one object")
    for table in report.relational:
        lines.append(f"  table {table.name}: {table.rows} of {table.total_rows} row(s)")
    for plan in report.tables:
        lines.append(
            f"  {plan.format} table {plan.dataset} (version {plan.version}): {plan.rows} row(s) in {len(plan.files)}"
            f" file(s) rewritten; history: {len(plan.history)} file(s), {len(plan.log_entries)}"
            + (" metadata object(s) naming the users" if plan.format == "iceberg" else " log entr(y/ies)")
        )
        lines.append(f"    {plan.not_certifiable or plan.time_travel()}")
    return lines + unindexable.plan_lines(unindexable.summary(report.unindexable))


def _reviewed_report(
    s3: S3Client,
    settings: Settings,
    request_id: str,
    sha256: str | None,
    users: list[str],
    pseudonymizer: Pseudonymizer,
) -> tuple[Report, str, str]:
    """The report a dry run wrote, checked: its bytes hash to the reviewed SHA-256 (or the one recorded when it was
    written) and it was made for exactly these users."""
    uri = layout.report(settings, request_id)
    report, expected = load_report(s3, uri, sha256 or None)  # ReportTampered when it changed
    if sorted(report.user_hashes) != sorted(pseudonymizer.many(users)):
        raise ReviewedReportMismatch(f"report {request_id} was made for other user ids than the ones given")
    return report, str(uri), expected


def purge_users(
    settings: Settings,
    users: list[str],
    dry_run: bool = True,
    force: bool = False,
    approved_by: str = "operator",
    say: Callable[[str], None] = print,
    report_id: str | None = None,
    report_sha256: str | None = None,
    engine: Engine = "auto",
    returning: Sequence[str] = (),
) -> OperatorRun:
    """Report -> purge -> verify -> certificate, on one connection to the index. With report_id, the report a dry
    run wrote (and an operator reviewed) is executed exactly, instead of a new one being built. returning: keyed
    hashes of returning users as `lakepurge status` lists them, erased with the users given (UnknownHashes for a hash
    that names no returning user, before anything is read or written)."""
    started = time.monotonic()
    refused = ""
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    key = hash_key(settings.privacy)
    s3 = aws.client("s3")
    store = open_existing(settings.index)
    try:
        if returning:
            found = resolve_hashes(store, pseudonymizer, returning)
            say(f"{len(found)} returning user(s) found by hash")
            users = list(dict.fromkeys([*users, *found]))
        if report_id is not None:
            report, uri, digest = _reviewed_report(s3, settings, report_id, report_sha256, users, pseudonymizer)
            if report.forced and not force:
                raise SafetyLimitExceeded(f"report {report_id} was made with --force: execute it with --force too")
            request_id = report.request_id
        else:
            request_id = f"op-{uuid.uuid4()}"
            dead_letters = dead_letter_count(aws.client("sqs"), settings.indexing.dead_letter_queue_url)
            try:
                report = build_report(
                    store, settings, users, request_id, pseudonymizer, force=force, dead_letters=dead_letters, s3=s3
                )
            except SafetyLimitExceeded as exc:
                if not dry_run:
                    raise
                # The dry run shows what the limits refuse: the operator decides with the whole plan in view.
                refused = str(exc)
                report = build_report(
                    store, settings, users, request_id, pseudonymizer, force=True, dead_letters=dead_letters, s3=s3
                )
            uri, digest = write_report(s3, settings, report)
        say(f"report {uri} (sha256 {digest}):")
        for line in plan_lines(report):
            say(line)
        if report.gaps:
            # The index cannot vouch for these datasets: "nothing found" there may be "never looked".
            raise IndexIncomplete(report.gaps)
        if dry_run:
            execute = f"  lakepurge purge USER... --report {request_id} --sha256 {digest} --yes"
            if refused:
                say(f"REFUSED by the safety limits ([purge] in the configuration): {refused}")
                say("dry run: nothing erased. Check the plan and the user ids; to execute exactly this plan anyway:")
                say(execute + " --force")
            else:
                say("dry run: nothing erased. To erase exactly this plan, run with the same user ids:")
                say(execute)
            return OperatorRun(request_id, report, uri, digest, None, time.monotonic() - started, refused)
        relational = purge_relational(settings, users, report.relational)
        # A small report (workflow.inline_max_objects and inline_max_bytes, the workflow's own rule) is purged in
        # this process: the engine needs milliseconds per object, Spark's start seconds. Nothing found never starts
        # Spark.
        inline = report.empty or (engine == "inline") or (engine == "auto" and inline_fits(settings, report, s3))
        if inline:
            result = run_purge(None, settings, report, key, relational, approved_by, digest)
        else:
            with spark_session("lakepurge-purge") as spark:
                result = run_purge(spark, settings, report, key, relational, approved_by, digest)
        if not result.failed:
            # Erased from every current object: on the suppression list even if old versions were left to a lifecycle
            # rule (the vacuum deletes those that hold suppressed users) and verification could not pass yet.
            record_erasure(store, pseudonymizer, report.user_hashes, request_id)
        for table in result.tables:
            say(
                f"table {table['dataset']}: {table['status']}, {table['rows_erased']} row(s) erased,"
                f" {len(table['files_replaced'])} file(s) replaced, {len(table['objects_deleted'])} object(s) deleted"
                + (f"; {table['error']}" if table["error"] else "")
            )
        say(
            f"erased {result.lines_erased} line(s) in {result.objects_rewritten} object(s) and"
            f" {result.versions_deleted} noncurrent version(s); verification"
            f" {'passed' if result.verified else 'FAILED'}; certificate {result.certificate}"
        )
        failed = tuple(_named(settings, o.s3path, pseudonymizer) for o in result.failed)
        return OperatorRun(request_id, report, uri, digest, result, time.monotonic() - started, "", failed)
    finally:
        store.close()


def _named(settings: Settings, s3path: str, pseudonymizer: Pseudonymizer) -> str:
    uri = S3Uri.parse(s3path) if s3path.startswith("s3://") else None
    dataset = settings.dataset_for(uri.bucket, uri.key) if uri is not None else None
    return s3path if dataset is None else object_ref(s3path, dataset, pseudonymizer)


def verify_users(
    settings: Settings, users: list[str], on: str = "local", say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Is any of these users still anywhere? The index is asked, and every object of every dataset is read,
    with its noncurrent versions, on Spark (local, or ``on="emr-serverless"``: lakepurge_jobs/verify.py, given
    the users' keyed hashes only): an independent check that does not trust the index."""
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    hashes = tuple(pseudonymizer.many(users))
    store = open_existing(settings.index)
    try:
        indexed = store.lookup(users)
        old_versions = store.noncurrent_of(users)
    finally:
        store.close()
    job: dict[str, Any] = {}
    if on == "emr-serverless":
        from lakepurge.ops.remote_jobs import verify_remote

        run, answer = verify_remote(settings, users, say)
        job = run.summary()
        if answer is None:
            raise RemoteJobFailed(
                f"the verify job {run.job_id} ended {run.status.state} ({run.status.detail})"
                f" without a result; logs: {run.logs}"
            )
        checked, remaining = answer["objects_checked"], answer["remaining"]
    else:
        with spark_session("lakepurge-verify") as spark:
            bound = tuple(pseudonymizer.many(f for user in users for f in bound_forms(user)))
            checked, remaining = verify_everywhere(spark, settings, hashes, hash_key(settings.privacy), bound)
    return {
        "users": len(hashes),
        "index_locations": sum(len(v) for v in indexed.values()),
        "index_noncurrent_versions": sum(len(v) for v in old_versions.values()),
        "objects_checked": checked,
        "remaining": remaining,
        "verified": not remaining and not indexed and not old_versions,
        **({"job": job} if job else {}),
    }


class RemoteJobFailed(Exception):
    """A job on EMR Serverless ended without its answer: its state and where its logs are."""
