"""The operator path: report -> purge -> verify -> certificate, without the approval workflow.

Used by `lakepurge purge` and `lakepurge verify`; the Spark work runs on a local session from the CLI (the same
job code runs on EMR in the workflow).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.logs import object_ref
from lakepurge.core.privacy import Pseudonymizer, hash_key
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import spark_on_demand, spark_session
from lakepurge.index import open_existing
from lakepurge.index.base import WHOLE_OBJECT, IndexStore, hits_from_locations
from lakepurge.indexing import resolution, unindexable
from lakepurge.indexing.coverage import IndexIncomplete, dead_letter_count, of_index
from lakepurge.indexing.returning import record_erasure, resolve_hashes
from lakepurge.protection import shred
from lakepurge.purge.certificate import PurgeResult
from lakepurge.purge.job import delete_sealed_ids, purge_relational, run_purge, verify_everywhere
from lakepurge.purge.launch import inline_fits, write_sealed_ids
from lakepurge.reports import kept, layout
from lakepurge.reports.layout import load_report, write_report
from lakepurge.reports.report import NOT_SEARCHED, Report, ReportObject, SafetyLimitExceeded, build_report
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
    replaced_versions: int = 0  # the report's objects in versioned buckets: their version read becomes noncurrent

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "request_id": self.request_id,
            "dry_run": self.result is None,
            "report": self.report_uri,
            "report_sha256": self.report_sha256,
            "plan": self.report.summary()
            | {
                "noncurrent_versions_explained": {
                    "named_by_index": self.report.version_count,
                    "replaced_by_rewrite": self.replaced_versions,
                }
            },
            "seconds": round(self.seconds, 2),
        }
        if self.result is None:
            # The whole plan, as the report holds it: every object with its lines, every noncurrent version.
            document |= {
                "objects": [
                    {
                        "object": o.s3path,
                        "dataset": o.dataset,
                        "etag": o.etag,
                        "lines": "whole-object" if o.lines == (WHOLE_OBJECT,) else list(o.lines),
                    }
                    for o in self.report.objects
                ],
                "noncurrent_versions": [
                    {"object": v.s3path, "dataset": v.dataset, "version_ids": list(v.version_ids)}
                    for v in self.report.versions
                ],
            }
        if self.refused:
            document |= {"status": "REFUSED", "reason": self.refused}
        if self.result is not None:
            document |= {
                "objects_rewritten": self.result.objects_rewritten,
                "lines_erased": self.result.lines_erased,
                "noncurrent_versions_deleted": self.result.versions_deleted,
                "noncurrent_versions_deleted_by_cause": deleted_versions_by_cause(self.report, self.result),
                "objects_failed": list(self.failed_objects),
                "relational_rows_deleted": sum(int(t["rows_deleted"]) for t in self.result.relational),
                **({"tables": list(self.result.tables)} if self.result.tables else {}),
                **({"crypto_shred": self.result.shred} if self.result.shred else {}),
                "verified": self.result.verified,
                "certificate": self.result.certificate,
            }
        return document


class ReviewedReportMismatch(Exception):
    """`purge --report ID` was given other user ids than the report was made for."""


class StaleReport(Exception):
    """`purge --report ID --yes` on a report older than [purge] max_report_age_minutes, or naming an object that
    changed since it was made (without --force)."""


def versions_explained(named: int, replaced: int) -> str:
    """What the noncurrent versions of a plan are, in the words the result uses (deleted_versions_by_cause)."""
    text = f"noncurrent versions: {named} named by the index as holding the users"
    if replaced:
        text += (
            f"; in a versioned bucket the version read of each of the {replaced} object(s) becomes noncurrent when it"
            " is rewritten, and is deleted too, with any other old version found holding the users"
        )
    return text


def deleted_versions_by_cause(report: Report, result: PurgeResult) -> dict[str, int]:
    """The versions a purge deleted, by why: the versions its rewrites replaced, those the report named (the index),
    and others it found holding the users while listing each key's versions."""
    named = {v.s3path: set(v.version_ids) for v in report.versions}
    causes = {"replaced_by_rewrite": 0, "named_by_index": 0, "found_holding_users": 0}
    for outcome in result.outcomes:
        for version in outcome.deleted_versions:
            if outcome.before_version is not None and version == outcome.before_version:
                causes["replaced_by_rewrite"] += 1
            elif version in named.get(outcome.s3path, ()):
                causes["named_by_index"] += 1
            else:
                causes["found_holding_users"] += 1
    return causes


def plan_lines(report: Report, replaced: int = 0) -> list[str]:
    """The whole plan, as an operator reviews it before --yes: counts per dataset and table, never an id. replaced:
    the objects in versioned buckets, whose version read the rewrite turns into a noncurrent version to delete."""
    lines = [
        f"  {report.users_found} of {len(report.user_hashes)} user(s) found in the index;"
        f" {len(report.objects)} object(s), {report.lines} line(s), {report.version_count} noncurrent version(s)",
        f"  {versions_explained(report.version_count, replaced)}",
    ]
    for name, counts in sorted(report.datasets.items()):
        lines.append(f"  dataset {name}: {counts['records']} record(s) in {counts['objects']} object(s)")
    for entry in report.not_searched:
        lines.append(f"  dataset {entry['dataset']}: {NOT_SEARCHED.format(**entry)}")
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
    shredded = shred.plan_lines(report.shred.summary(report.rewritten_datasets) if report.shred else None)
    identifiers = resolution.plan_lines(report.summary().get("identifiers"))
    lines += unindexable.plan_lines(unindexable.summary(report.unindexable)) + shredded + identifiers
    return lines + kept.plan_lines(report.exemptions)


def _reviewed_report(
    s3: S3Client,
    settings: Settings,
    request_id: str,
    sha256: str | None,
    users: list[str],
    pseudonymizer: Pseudonymizer,
    force: bool = False,
) -> tuple[Report, str, str]:
    """The report a dry run wrote, checked: its bytes hash to the reviewed SHA-256 (or the one recorded when it was
    written), it was made for exactly these users and, unless forced, it is still fresh (:func:`_check_fresh`)."""
    uri = layout.report(settings, request_id)
    report, expected = load_report(s3, uri, sha256 or None)  # ReportTampered when it changed
    if sorted(report.requested_hashes) != sorted(pseudonymizer.many(users)):
        raise ReviewedReportMismatch(f"report {request_id} was made for other user ids than the ones given")
    if not force:
        _check_fresh(s3, settings, report, pseudonymizer)
    return report, str(uri), expected


def _check_fresh(s3: S3Client, settings: Settings, report: Report, pseudonymizer: Pseudonymizer) -> None:
    """A reviewed report still describes the lake: made at most [purge] max_report_age_minutes ago, and every object
    it names (by path: those named by reference are resolved at purge time) still at the ETag it planned for."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime

    from lakepurge.core.privacy import OBJECT_REFERENCE
    from lakepurge.core.s3io import head_object

    limit = settings.purge.max_report_age_minutes
    minutes = (datetime.now(UTC) - datetime.fromisoformat(report.created_at)).total_seconds() / 60
    again = "make a new dry run, or add --force to execute it anyway"
    if minutes > limit:
        raise StaleReport(
            f"report {report.request_id} was made {minutes:.0f} minute(s) ago, more than [purge]"
            f" max_report_age_minutes = {limit}: {again}"
        )
    named = [o for o in report.objects if not o.s3path.startswith(OBJECT_REFERENCE)]

    def changed(obj: ReportObject) -> bool:
        uri = S3Uri.parse(obj.s3path)
        head = head_object(s3, uri.bucket, uri.key)
        return head is None or head.etag != obj.etag

    with ThreadPoolExecutor(max_workers=8) as pool:
        moved = [obj for obj, differs in zip(named, pool.map(changed, named), strict=True) if differs]
    if moved:
        first = _named(settings, moved[0].s3path, pseudonymizer)
        raise StaleReport(
            f"{len(moved)} of the {len(named)} object(s) of report {report.request_id} changed since it was made"
            f" (first: {first}): the users' lines may have moved, or been erased another way; {again}"
        )


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
    no_expand: Sequence[str] = (),
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
            report, uri, digest = _reviewed_report(s3, settings, report_id, report_sha256, users, pseudonymizer, force)
            if report.forced and not force:
                raise SafetyLimitExceeded(f"report {report_id} was made with --force: execute it with --force too")
            request_id = report.request_id
        else:
            request_id = f"op-{uuid.uuid4()}"
            dead_letters = dead_letter_count(aws.client("sqs"), settings.indexing.dead_letter_queue_url)
            try:
                report = build_report(
                    store,
                    settings,
                    users,
                    request_id,
                    pseudonymizer,
                    force=force,
                    dead_letters=dead_letters,
                    s3=s3,
                    no_expand=no_expand,
                )
            except SafetyLimitExceeded as exc:
                if not dry_run:
                    raise
                # The dry run shows what the limits refuse: the operator decides with the whole plan in view.
                refused = str(exc)
                report = build_report(
                    store,
                    settings,
                    users,
                    request_id,
                    pseudonymizer,
                    force=True,
                    dead_letters=dead_letters,
                    s3=s3,
                    no_expand=no_expand,
                )
            uri, digest = write_report(s3, settings, report)
        replaced = _in_versioned_buckets(s3, settings, report)
        say(f"report {uri} (sha256 {digest}):")
        for line in plan_lines(report, replaced):
            say(line)
        if report.gaps:
            # The index cannot vouch for these datasets: "nothing found" there may be "never looked".
            raise IndexIncomplete(report.gaps)
        kept.check_unchanged(settings, report.rewritten_datasets, report.exemptions, datetime.now(UTC).date())
        if dry_run:
            if refused:
                say(f"REFUSED by the safety limits ([purge] in the configuration): {refused}")
            seconds = time.monotonic() - started
            return OperatorRun(request_id, report, uri, digest, None, seconds, refused, replaced_versions=replaced)
        relational = purge_relational(settings, users, report.relational)
        # A small report (workflow.inline_max_objects and inline_max_bytes, the workflow's own rule) is purged in
        # this process: the engine needs milliseconds per object, Spark's start seconds. Nothing found never starts
        # Spark.
        inline = report.empty or (engine == "inline") or (engine == "auto" and inline_fits(settings, report, s3))
        if inline:  # this process holds the ids: its check before each write looks them up instead of hashing
            result = run_purge(None, settings, report, key, relational, approved_by, digest, requested=users)
        else:  # executors open the ids sealed for them; the driver never holds them (lakepurge.core.executor_ids)
            write_sealed_ids(s3, settings, report, users)
            try:
                with spark_session("lakepurge-purge") as spark:
                    result = run_purge(spark, settings, report, key, relational, approved_by, digest)
            finally:  # run_purge deletes them too, unless Spark never started; here even when the start returned
                # None (a PUT that S3 applied, its answer lost)
                delete_sealed_ids(s3, layout.results_prefix(settings, request_id), request_id)
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
        if result.shred is not None:
            shredded, checked = result.shred, result.shred["verification"]
            say(
                f"crypto-shredded {', '.join(shredded['datasets'])}: {shredded['keys_destroyed']} key(s) destroyed,"
                f" no object of theirs rewritten; the vault's copies are gone by {checked['copies_gone_by']}"
                + "".join(f"; {problem}" for problem in checked["problems"])
            )
        causes = deleted_versions_by_cause(report, result)
        say(
            f"erased {result.lines_erased} line(s) in {result.objects_rewritten} object(s); deleted"
            f" {result.versions_deleted} noncurrent version(s): {causes['replaced_by_rewrite']} replaced by the"
            f" rewrites, {causes['named_by_index']} named by the index, {causes['found_holding_users']} more found"
            f" holding the users; verification {'passed' if result.verified else 'FAILED'}; certificate"
            f" {result.certificate}"
        )
        failed = tuple(_named(settings, o.s3path, pseudonymizer) for o in result.failed)
        seconds = time.monotonic() - started
        return OperatorRun(request_id, report, uri, digest, result, seconds, "", failed, replaced)
    finally:
        store.close()


def _in_versioned_buckets(s3: S3Client, settings: Settings, report: Report) -> int:
    """How many of the report's objects are in a bucket that has had versioning on (one question per bucket)."""
    from lakepurge.core.s3io import ever_versioned

    names = {d.name: d for d in settings.datasets}
    buckets = {o.dataset: names[o.dataset].uri.bucket for o in report.objects if o.dataset in names}
    versioned = {bucket: ever_versioned(s3, bucket) for bucket in set(buckets.values())}
    return sum(versioned[buckets[o.dataset]] for o in report.objects if o.dataset in buckets)


def _named(settings: Settings, s3path: str, pseudonymizer: Pseudonymizer) -> str:
    uri = S3Uri.parse(s3path) if s3path.startswith("s3://") else None
    dataset = settings.dataset_for(uri.bucket, uri.key) if uri is not None else None
    return s3path if dataset is None else object_ref(s3path, dataset, pseudonymizer)


def verify_users(
    settings: Settings,
    users: list[str],
    on: str = "local",
    say: Callable[[str], None] = print,
    engine: Engine = "auto",
) -> dict[str, Any]:
    """Is any of these users still anywhere? The index is asked, and every object of every dataset is read,
    with its noncurrent versions: in this process when that is within [jobs]' thresholds, else on local Spark
    (``engine`` forces either), or ``on="emr-serverless"`` (lakepurge_jobs/verify.py, given the users' keyed hashes
    only): an independent check that does not trust the index."""
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    store = open_existing(settings.index)
    try:
        users, erased_before, unread = _every_identifier(settings, store, users, pseudonymizer)
        hashes = tuple(dict.fromkeys([*pseudonymizer.many(users), *erased_before]))
        indexed, old_versions = store.lookup(users), store.noncurrent_of(users)
        coverage = [c.to_dict() for c in of_index(settings, store)] if settings.exemptions else []
    finally:
        store.close()
    # The kept datasets ([[exemptions]] in force) hold the users by right: verification neither reads them nor counts
    # them as left behind, and states them, as a certificate does.
    hits = hits_from_locations(indexed).objects
    exemptions = kept.statements(settings, datetime.now(UTC).date(), hits, old_versions, coverage)
    held = kept.kept_datasets(exemptions)
    left = [loc for locs in indexed.values() for loc in locs if _dataset_name(settings, loc.s3path) not in held]
    old_versions = {path: v for path, v in old_versions.items() if _dataset_name(settings, path) not in held}
    job: dict[str, Any] = {}
    ran: dict[str, Any] = {"engine": "emr-serverless"}
    if on == "emr-serverless":
        from lakepurge.ops.remote_jobs import verify_remote

        run, answer = verify_remote(settings, users, say, more_hashes=erased_before)
        job = run.summary()
        if answer is None:
            raise RemoteJobFailed(
                f"the verify job {run.job_id} ended {run.status.state} ({run.status.detail})"
                f" without a result; logs: {run.logs}"
            )
        checked, remaining = answer["objects_checked"], answer["remaining"]
    else:
        with spark_on_demand("lakepurge-verify", settings, engine) as executors:
            bound = tuple(pseudonymizer.many(f for user in users for f in bound_forms(user)))
            checked, remaining = verify_everywhere(executors, settings, hashes, hash_key(settings.privacy), bound)
        ran = {"engine": executors.engine_used, "ran": executors.decisions}
    return {
        "users": len(hashes),
        "index_locations": len(left),
        "index_noncurrent_versions": sum(len(v) for v in old_versions.values()),
        "objects_checked": checked,
        "remaining": remaining,
        "verified": not remaining and not left and not old_versions and not unread,
        **({"reports_unread": unread} if unread else {}),
        **({"exemptions": list(exemptions)} if exemptions else {}),
        **ran,
        **({"job": job} if job else {}),
    }


def _every_identifier(
    settings: Settings, store: IndexStore, users: list[str], pseudonymizer: Pseudonymizer
) -> tuple[list[str], list[str], list[str]]:
    """Every identifier of the person a typed request names (an untyped one is the users as given): those resolved
    now (records and link tables), and, as keyed hashes, every identifier the erasures of any of them erased. A link
    in records goes with the record it is in, so after a purge only that purge's report still knows her customer id
    or her name and birth date. Returns (forms, earlier hashes, request ids whose report could not be read)."""
    if not resolution.expands(settings, users):
        return users, [], []
    forms = resolution.resolve(store, settings, users, pseudonymizer=pseudonymizer).forms
    s3 = aws.client("s3")
    earlier: list[str] = []
    unread: list[str] = []
    for request_id in sorted(set(store.erased_requests(pseudonymizer.many(forms)).values())):
        found = layout.find_report(s3, settings, request_id)
        if found is None:
            unread.append(request_id)  # what it erased is unknown: verification cannot say she is gone
        else:
            earlier.extend(found[0].user_hashes)
    return forms, earlier, unread


def _dataset_name(settings: Settings, s3path: str) -> str | None:
    uri = S3Uri.parse(s3path)
    dataset = settings.dataset_for(uri.bucket, uri.key)
    return dataset.name if dataset is not None else None


class RemoteJobFailed(Exception):
    """A job on EMR Serverless ended without its answer: its state and where its logs are."""
