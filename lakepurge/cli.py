"""The ``lakepurge`` command line.

Human output goes to stderr; ``--json`` prints exactly one JSON document on stdout for scripts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import orjson

from lakepurge.config import ConfigError, Settings, load_settings
from lakepurge.s3uri import S3Uri

DEFAULT_CONFIG = "lakepurge.toml"
# The index does not cover every dataset (lakepurge.coverage): nothing can be certified until it does.
EXIT_NOT_CERTIFIABLE = 4


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def say(self, text: str) -> None:
        print(text, file=sys.stderr)

    def result(self, document: Any) -> None:
        if self.as_json:
            sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def _lake_settings(args: argparse.Namespace) -> Settings:
    """The configuration of a command that reads or writes the lake: a dataset holding a Delta, Iceberg or Hudi
    table is refused (a configuration error, exit 2) before anything is touched."""
    from lakepurge import aws
    from lakepurge.tableformats import refuse_table_formats

    settings = _settings(args)
    refuse_table_formats(aws.client("s3"), settings.datasets)
    return settings


def cmd_index_backfill(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.backfill import run_backfill
    from lakepurge.sparkutil import spark_session

    settings = _lake_settings(args)
    out.say(f"backfilling {len(settings.datasets)} dataset(s) on local Spark ...")
    with spark_session("lakepurge-backfill") as spark:
        result = run_backfill(spark, settings, force=args.force, datasets=args.dataset)
    out.say(
        f"objects {result.objects}  read {result.scanned}  noncurrent versions {result.versions}  records"
        f" {result.records}  rows {result.rows}  unindexable lines {result.unindexable}  failed {len(result.failed)}"
    )
    for path, error in result.failed:
        out.say(f"  FAILED {path}: {error}")
    out.result(asdict(result))
    return 1 if result.failed else 0


def cmd_index_reconcile(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.backfill import run_reconcile

    settings = _lake_settings(args)
    if args.spark:
        from lakepurge.sparkutil import spark_session

        with spark_session("lakepurge-reconcile") as spark:
            results = run_reconcile(spark, settings, args.dataset, fix=not args.report_only)
    else:
        results = run_reconcile(None, settings, args.dataset, fix=not args.report_only)
    for r in results:
        out.say(
            f"{r.dataset}: {r.objects} object(s) listed, {r.versions} noncurrent version(s) read;"
            f" missing {r.missing}  changed {r.changed}  gone {r.gone}  fixed {r.fixed}  left {r.drift}"
        )
        for path, error in r.failed:
            out.say(f"  FAILED {path}: {error}")
    out.result({"datasets": [asdict(r) for r in results]})
    return 1 if any(r.drift for r in results) else 0


def cmd_index_object(args: argparse.Namespace, out: Output) -> int:
    from lakepurge import aws
    from lakepurge.index import open_store
    from lakepurge.indexer import index_object
    from lakepurge.privacy import Pseudonymizer

    settings = _lake_settings(args)
    uri = S3Uri.parse(args.uri)
    store = open_store(settings.index)
    try:
        outcome = index_object(
            aws.client("s3"),
            store,
            settings,
            uri.bucket,
            uri.key,
            force=args.force,
            pseudonymizer=Pseudonymizer.optional(settings.privacy),
        )
    finally:
        store.close()
    if outcome.reason is not None:
        out.say(f"skipped: {outcome.reason}: {outcome.s3path} is not data (nothing indexed)")
        out.result(asdict(outcome))
        return 0
    if outcome.action == "failed":  # recorded in the index as failed; `lakepurge status` lists it
        out.say(f"failed: {outcome.s3path}  {outcome.error}")
        out.result(asdict(outcome))
        return 1
    out.say(f"{outcome.action}: {outcome.s3path}  records {outcome.records}  unindexable {outcome.unindexable}")
    if outcome.reappeared:
        out.say(f"  WARNING: {outcome.reappeared} user(s) erased before are in this object again")
    out.result(asdict(outcome))
    return 2 if outcome.action == "ignored" else 0


def _read_users(args: argparse.Namespace) -> list[str]:
    """The user ids exactly as given: the index matches ids exactly, so nothing is trimmed or normalised (an id
    stored as " bob" must be erasable). --users-file holds one id per line; only the line terminator (LF or
    CR LF) is removed and empty lines are skipped."""
    users = list(args.users)
    if getattr(args, "users_file", None):
        try:
            with open(args.users_file, "rb") as handle:
                text = handle.read().decode("utf-8-sig")  # a byte order mark is the file's, not an id's
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--users-file {args.users_file}: {exc}") from None
        *terminated, last = text.split("\n")
        for user in [line.removesuffix("\r") for line in terminated] + [last]:
            if user:
                users.append(user)
    if not users:
        raise ConfigError("name at least one user id (or --users-file)")
    return list(dict.fromkeys(users))


def cmd_lookup(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.coverage import assess
    from lakepurge.index import open_store

    settings = _settings(args)
    users = _read_users(args)
    store = open_store(settings.index)
    try:
        found = store.lookup(users)
        old_versions = {user: store.noncurrent_of([user]) for user in users}
        gaps = [c for c in assess(settings, store.coverage()) if not c.complete]
    finally:
        store.close()
    document: dict[str, Any] = {}
    for user in users:
        locations = found.get(user, [])
        document[user] = [
            {"s3path": loc.s3path, "etag": loc.etag, "lines": "whole-object" if loc.whole_object else list(loc.lines)}
            for loc in locations
        ] + [
            {"s3path": path, "noncurrent_versions": sorted(versions)}
            for path, versions in sorted(old_versions[user].items())
        ]
        records = sum(0 if loc.whole_object else len(loc.lines) for loc in locations)
        versions = sum(len(v) for v in old_versions[user].values())
        out.say(f"{user}: {len(locations)} object(s), {records} record(s), {versions} noncurrent version(s)")
        for loc in locations:
            where = "whole object" if loc.whole_object else "lines " + ",".join(map(str, loc.lines))
            out.say(f"  {loc.s3path}  {where}")
        for path, ids in sorted(old_versions[user].items()):
            out.say(f"  {path}  noncurrent version(s) {', '.join(sorted(ids))}")
    for gap in gaps:
        out.say(f"WARNING: dataset {gap.dataset} is {gap.reason}: its records may be missing here (run: {gap.fix})")
    out.result({"users": document, "coverage_gaps": [g.to_dict() for g in gaps]})
    return 0


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    from lakepurge import aws
    from lakepurge.coverage import assess, dead_letter_count
    from lakepurge.index import open_store

    settings = _settings(args)
    store = open_store(settings.index)
    try:
        status = store.status()
        problems = store.unindexable(limit=args.limit)
        recorded = store.coverage()
    finally:
        store.close()
    coverage = assess(settings, recorded, dead_letter_count(aws.client("sqs"), settings.indexing.dead_letter_queue_url))
    for dataset in coverage:
        if dataset.complete:
            out.say(
                f"dataset {dataset.dataset}: covered ({dataset.method} {dataset.indexed_at},"
                f" {dataset.objects} object(s), {dataset.versions} noncurrent version(s))"
            )
        else:
            out.say(f"dataset {dataset.dataset}: NOT COVERED, {dataset.reason} (run: {dataset.fix})")
    out.say(
        f"objects {status.objects}  records {status.records}  users {status.users}  index rows {status.rows}\n"
        f"unindexable lines {status.unindexable_lines} in {status.objects_with_unindexable} object(s)\n"
        f"objects holding erased users again: {status.objects_with_erased_users}"
    )
    if status.objects_with_erased_users:
        out.say("  WARNING: erased users came back (restored backup? replayed pipeline?): purge them again")
    if status.unindexable_lines:
        out.say("  these lines may hold personal data that lakepurge cannot locate; fix or remove them:")
        for path, problem in problems:
            where = "whole object" if problem.line < 0 else f"line {problem.line}"
            out.say(f"  {path} {where}: {problem.reason}")
    requests = _requests_status(settings, out) if settings.workflow is not None else []
    out.result(
        {
            "index": asdict(status),
            "coverage": [c.to_dict() for c in coverage],
            "unindexable": [{"s3path": p, "line": u.line, "reason": u.reason} for p, u in problems],
            "requests": requests,
        }
    )
    return 0


def _requests_status(settings: Settings, out: Output) -> list[dict[str, Any]]:
    """The deletion requests with their deadlines; open ones past their deadline stand out."""
    from lakepurge import aws
    from lakepurge.workflow.store import RequestStore, list_requests

    views = list_requests(RequestStore(settings, aws.client("s3"), aws.client("kms")))
    overdue = [v for v in views if v.overdue]
    out.say(f"requests {len(views)}  open {sum(v.open for v in views)}  overdue {len(overdue)}")
    for view in views:
        flag = "  !! OVERDUE" if view.overdue else ""
        out.say(f"  {view.request_id:<44} {view.state:<20} due {view.deadline[:10]} ({view.days_left:+d} days){flag}")
    return [asdict(v) for v in views]


def cmd_request(args: argparse.Namespace, out: Output) -> int:
    import uuid

    from lakepurge import aws
    from lakepurge.privacy import Pseudonymizer
    from lakepurge.workflow.intake import file_request
    from lakepurge.workflow.steps import Clients

    settings = _lake_settings(args)
    users = _read_users(args)
    request_id = args.request_id or f"req-{uuid.uuid4()}"
    filed = file_request(
        settings,
        Clients.from_environment(),
        aws.client("stepfunctions"),
        Pseudonymizer.from_config(settings.privacy),
        users,
        args.requester,
        request_id,
    )
    out.say(f"request {filed.request_id} filed for {len(users)} user(s); due {filed.deadline}")
    out.say(f"  execution {filed.execution_arn}: the approvers get an email once the report is ready")
    out.result({"request_id": filed.request_id, "execution_arn": filed.execution_arn, "deadline": filed.deadline})
    return 0


def cmd_purge(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.coverage import IndexIncomplete
    from lakepurge.operator_purge import ReviewedReportMismatch, purge_users
    from lakepurge.report import ReportTampered, SafetyLimitExceeded

    settings = _lake_settings(args)
    users = _read_users(args)
    try:
        run = purge_users(
            settings,
            users,
            dry_run=not args.yes,
            force=args.force,
            say=out.say,
            report_id=args.report,
            report_sha256=args.sha256,
            engine=args.engine,
        )
    except SafetyLimitExceeded as exc:
        out.say(f"lakepurge purge: refused by the safety limits ([purge] in the configuration): {exc}")
        out.say("  check the user ids; to erase anyway, run again with --force")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return 3
    except (ReportTampered, ReviewedReportMismatch) as exc:
        out.say(f"lakepurge purge: refused, nothing erased: {exc}")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return 3
    except IndexIncomplete as exc:
        out.say(f"lakepurge purge: NOT CERTIFIABLE, nothing erased: the index does not cover every dataset: {exc}")
        out.result(
            {
                "status": "INDEX_INCOMPLETE",
                "reason": str(exc),
                "datasets": [{"dataset": g.dataset, "reason": g.reason, "fix": g.fix} for g in exc.gaps],
            }
        )
        return EXIT_NOT_CERTIFIABLE
    document = run.summary()
    out.result(document)
    if run.result is None:
        return 0
    return 0 if run.result.verified else 1


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.operator_purge import verify_users

    settings = _lake_settings(args)
    document = verify_users(settings, _read_users(args))
    out.say(
        f"checked {document['objects_checked']} object(s) and their noncurrent versions:"
        f" {len(document['remaining'])} still hold the users; index locations left: {document['index_locations']}"
    )
    for place in document["remaining"]:
        out.say(f"  {place['object']} version {place['version_id']}: {place['lines']} line(s)")
    out.result(document)
    return 0 if document["verified"] else 1


def cmd_vacuum(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.purge.vacuum import run_vacuum
    from lakepurge.sparkutil import spark_session

    settings = _lake_settings(args)
    with spark_session("lakepurge-vacuum") as spark:
        run = run_vacuum(spark, settings, args.dataset, apply=args.yes)
    verb = "removed" if run.applied else "would remove"
    for outcome in run.outcomes:
        if outcome.error and outcome.error != "gone":
            out.say(f"  FAILED {outcome.s3path}: {outcome.error}")
        elif outcome.placeholders or outcome.versions_deleted:
            out.say(
                f"  {outcome.s3path}: {outcome.placeholders} placeholder line(s),"
                f" {len(outcome.versions_deleted)} version(s) holding erased users"
            )
    out.say(
        f"vacuum {verb} {run.placeholders} placeholder line(s) from {len(run.outcomes) - len(run.failed)} object(s)"
        f" and {'deleted' if run.applied else 'would delete'} {run.versions} noncurrent version(s) holding erased"
        f" users; {len(run.failed)} failed"
    )
    if not run.applied:
        out.say("dry run: nothing changed (run again with --yes to apply)")
    elif run.record:
        out.say(f"record {run.record}")
    out.result(run.summary())
    return 1 if run.failed else 0


def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.local.demo import DemoError, run_demo

    if args.objects < 1 or args.users < 1:
        raise ConfigError("--objects and --users must be at least 1")
    if not 0 <= args.port <= 65535:
        raise ConfigError("--port must be between 0 (any free port) and 65535")
    try:
        document = run_demo(
            objects=args.objects,
            users=args.users,
            say=out.say,
            interactive=args.interactive,
            port=args.port,
            approval_timeout=args.approval_timeout,
            backfill=args.backfill,
        )
    except DemoError as exc:
        out.say(f"lakepurge demo: {exc}")
        return 1
    except KeyboardInterrupt:
        out.say("lakepurge demo: stopped (the local stack is gone with it; nothing outside it was touched)")
        return 130
    out.result(document)
    return 0 if document["status"] in ("SUCCEEDED", "REJECTED") else 1


def build_parser() -> argparse.ArgumentParser:
    # --config and --json are accepted before or after the command (`lakepurge --config F lookup U`); SUPPRESS
    # keeps a subcommand's unset option from overwriting the value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=f"TOML configuration (default: {DEFAULT_CONFIG})")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="one JSON document on stdout")

    parser = argparse.ArgumentParser(prog="lakepurge", description="Right to erasure for S3 data lakes.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="TOML configuration (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", parents=[common], help="the whole pipeline on an embedded local stack")
    demo.add_argument("--objects", type=int, default=100, help="objects in the sample lake (default: %(default)s)")
    demo.add_argument("--users", type=int, default=100, help="users in the sample lake (default: %(default)s)")
    demo.add_argument(
        "--interactive",
        action="store_true",
        help="print the approval link and wait for a person to press Approve or Reject in a browser"
        " (default: the demo approves by itself, on a terminal or not)",
    )
    demo.add_argument(
        "--port", type=int, default=0, help="port of the approval page on 127.0.0.1 (default: any free port)"
    )
    demo.add_argument(
        "--approval-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="how long the request waits for a decision (default: 900 with --interactive, else 600)",
    )
    demo.add_argument(
        "--backfill", action="store_true", help="also rebuild the index with the Spark backfill and compare"
    )
    demo.set_defaults(run=cmd_demo)

    index = commands.add_parser("index", help="build or refresh the index")
    index_commands = index.add_subparsers(dest="index_command", required=True)
    backfill = index_commands.add_parser("backfill", parents=[common], help="index every object (Spark)")
    backfill.add_argument("--force", action="store_true", help="re-index objects already indexed at this ETag")
    backfill.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    backfill.set_defaults(run=cmd_index_backfill)
    reconcile = index_commands.add_parser(
        "reconcile",
        parents=[common],
        help="compare the lake's listing with the index, index what differs, record coverage",
    )
    reconcile.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    reconcile.add_argument(
        "--report-only", action="store_true", help="only count the differences (the dataset stays not covered)"
    )
    reconcile.add_argument("--spark", action="store_true", help="index the differences on local Spark")
    reconcile.set_defaults(run=cmd_index_reconcile)
    one = index_commands.add_parser("object", parents=[common], help="index one object now")
    one.add_argument("uri", metavar="S3URI")
    one.add_argument("--force", action="store_true")
    one.set_defaults(run=cmd_index_object)

    lookup = commands.add_parser("lookup", parents=[common], help="where each user's records are")
    lookup.add_argument("users", nargs="*", metavar="USER")
    lookup.add_argument("--users-file")
    lookup.set_defaults(run=cmd_lookup)

    request = commands.add_parser("request", parents=[common], help="file a deletion request (approval workflow)")
    request.add_argument("users", nargs="*", metavar="USER")
    request.add_argument("--users-file")
    request.add_argument("--requester", default="cli", help="who asked (kept encrypted with the ids)")
    request.add_argument("--request-id", help="idempotency key: filing the same id twice files it once")
    request.set_defaults(run=cmd_request)

    purge = commands.add_parser("purge", parents=[common], help="report, erase, verify, certify (dry run unless --yes)")
    purge.add_argument("users", nargs="*", metavar="USER")
    purge.add_argument("--users-file")
    mode = purge.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only write the report (the default)")
    mode.add_argument("--yes", action="store_true", help="erase for real")
    purge.add_argument("--force", action="store_true", help="go past the [purge] safety limits")
    purge.add_argument(
        "--engine",
        choices=("auto", "inline", "spark"),
        default="auto",
        help="auto: in this process when the report has at most workflow.inline_max_objects objects (20 by"
        " default), else local Spark",
    )
    purge.add_argument(
        "--report",
        metavar="REQUEST_ID",
        help="execute exactly the report a dry run wrote (give the same user ids), instead of building a new one",
    )
    purge.add_argument("--sha256", help="with --report: the SHA-256 the dry run printed; a changed report is refused")
    purge.set_defaults(run=cmd_purge)

    verify = commands.add_parser("verify", parents=[common], help="is any of these users still anywhere?")
    verify.add_argument("users", nargs="*", metavar="USER")
    verify.add_argument("--users-file")
    verify.set_defaults(run=cmd_verify)

    vacuum = commands.add_parser(
        "vacuum", parents=[common], help="remove the placeholders purges wrote, re-index (dry run unless --yes)"
    )
    vacuum.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    vacuum.add_argument("--yes", action="store_true", help="apply (the default is a dry run that prints the plan)")
    vacuum.set_defaults(run=cmd_vacuum)

    status = commands.add_parser(
        "status", parents=[common], help="index counts, unindexable lines, requests and deadlines"
    )
    status.add_argument("--limit", type=int, default=50, help="unindexable lines to list")
    status.set_defaults(run=cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Library loggers read their level when created; commands talk to people on stderr, so logs stay quiet
    # unless asked for (POWERTOOLS_LOG_LEVEL=INFO).
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    args = build_parser().parse_args(argv)
    out = Output(args.json)
    run: Callable[[argparse.Namespace, Output], int] = args.run
    from lakepurge.logs import root_logger

    root_logger(level=os.environ["POWERTOOLS_LOG_LEVEL"], stream=sys.stderr)
    try:
        return run(args, out)
    except ConfigError as exc:
        out.say(f"lakepurge: configuration error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
