"""``lakepurge index backfill | reconcile | object``: build the index, bring it up to date with the lake and record
its coverage, or index one object now."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from lakepurge.cli.arguments import (
    Commands,
    Output,
    add_dataset_filter,
    add_engine,
    add_on,
    read_lake_settings,
    run_remote,
)
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from lakepurge.core.s3uri import S3Uri


def register(commands: Commands) -> None:
    index = commands.group("index", help="build or refresh the index")

    backfill = index.add("backfill", cmd_index_backfill, help="index every object (Spark)")
    backfill.add_argument("--force", action="store_true", help="re-index objects already indexed at this ETag")
    add_dataset_filter(backfill)
    add_on(backfill)
    add_engine(backfill)

    reconcile = index.add(
        "reconcile",
        cmd_index_reconcile,
        help="compare the lake's listing with the index, index what differs, record coverage",
    )
    add_dataset_filter(reconcile)
    reconcile.add_argument(
        "--report-only", action="store_true", help="only count the differences (the dataset stays not covered)"
    )
    reconcile.add_argument("--spark", action="store_true", help="index the differences on local Spark")
    add_on(reconcile)

    one = index.add("object", cmd_index_object, help="index one object now")
    one.add_argument("uri", metavar="S3URI")
    one.add_argument("--force", action="store_true")


def cmd_index_backfill(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core.sparkutil import spark_on_demand
    from lakepurge.indexing.backfill import run_backfill
    from lakepurge.ops.remote_jobs import backfill_job

    if args.on == "emr-serverless":
        return run_remote(args, out, backfill_job(args.dataset, args.force))
    settings = read_lake_settings(args, spark=args.engine == "spark")
    chosen = args.dataset or [d.name for d in settings.datasets]
    out.say(f"backfilling {len(chosen)} dataset(s): {', '.join(chosen)}")
    with spark_on_demand("lakepurge-backfill", settings, args.engine) as executors:
        result = run_backfill(executors, settings, force=args.force, datasets=args.dataset)
    if executors.decisions:
        out.say(f"indexed {', then '.join(executors.decisions)}")
    out.say(
        f"objects {result.objects}  read {result.scanned}  noncurrent versions {result.versions}  records"
        f" {result.records}  rows {result.rows}  unindexable lines {result.unindexable}  failed {len(result.failed)}"
    )
    for path, error in result.failed:
        out.say(f"  FAILED {path}: {error}")
    out.result(asdict(result) | {"engine": executors.engine_used})
    return EXIT_FAILED if result.failed else EXIT_OK


def cmd_index_reconcile(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.ops.remote_jobs import reconcile_job

    if args.on == "emr-serverless":
        return run_remote(args, out, reconcile_job(args.dataset, args.report_only))
    settings = read_lake_settings(args, spark=args.spark)
    if args.spark:
        from lakepurge.core.sparkutil import spark_session

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
    return EXIT_FAILED if any(r.drift for r in results) else EXIT_OK


def cmd_index_object(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core import aws
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.index import open_store
    from lakepurge.indexing.indexer import index_object

    try:
        uri = S3Uri.parse(args.uri)
    except ValueError:  # the message would repeat the argument: a key can hold a user id
        raise CliError("bad_uri", "S3URI must be an object's address, s3://bucket/key") from None
    settings = read_lake_settings(args)
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
        return EXIT_OK
    if outcome.action == "failed":  # recorded in the index as failed; `lakepurge status` lists it
        out.say(f"failed: {outcome.s3path}  {outcome.error}")
        out.result(asdict(outcome))
        return EXIT_FAILED
    out.say(f"{outcome.action}: {outcome.s3path}  records {outcome.records}  unindexable {outcome.unindexable}")
    if outcome.returning_users:
        out.say(f"  WARNING: {outcome.returning_users} returning user(s): erased before, in this object again")
    out.result(asdict(outcome))
    # "ignored" without a reason: the object is in no dataset of the configuration (a wrong argument).
    return EXIT_USAGE if outcome.action == "ignored" else EXIT_OK
