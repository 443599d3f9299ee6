"""After a purge: ``lakepurge verify`` reads the lake again for the users (is any of them still anywhere?) and
``lakepurge vacuum`` removes the placeholder lines purges wrote and the old versions still holding erased users."""

from __future__ import annotations

import argparse

from lakepurge.cli.arguments import (
    Commands,
    Output,
    add_dataset_filter,
    add_engine,
    add_on,
    add_users,
    read_lake_settings,
    read_settings,
    read_users,
    run_remote,
    with_typed_ids,
)
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, CliError, check_aws_environment


def register(commands: Commands) -> None:
    verify = commands.add("verify", cmd_verify, help="is any of these users still anywhere?")
    add_users(verify)
    add_on(verify)
    add_engine(verify)

    vacuum = commands.add(
        "vacuum", cmd_vacuum, help="remove the placeholders purges wrote, re-index (dry run unless --yes)"
    )
    add_dataset_filter(vacuum)
    vacuum.add_argument("--yes", action="store_true", help="apply (the default is a dry run that prints the plan)")
    add_on(vacuum)
    add_engine(vacuum)


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.indexing.resolution import ExpansionRefused

    try:
        return _verify(args, out)
    except ExpansionRefused as exc:  # a shared identifier: whose records would be looked for is not hers alone
        out.say(f"lakepurge verify: refused: {exc}")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return EXIT_REFUSED


def _verify(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.ops.manual_purge import RemoteJobFailed, verify_users
    from lakepurge.reports.kept import plan_lines

    users = read_users(args)
    if args.on == "emr-serverless":
        settings = read_settings(args)
        users = with_typed_ids(args, settings, users)
        check_aws_environment()
        try:
            document = verify_users(settings, users, on=args.on, say=out.say)
        except RemoteJobFailed as exc:
            raise CliError("job_failed", str(exc), EXIT_FAILED) from exc
    else:
        settings = read_lake_settings(args, spark=args.engine == "spark")
        document = verify_users(settings, with_typed_ids(args, settings, users), engine=args.engine)
        out.say(f"read {', then '.join(document['ran']) or 'nothing'}")
    out.say(
        f"checked {document['objects_checked']} object(s) and their noncurrent versions:"
        f" {len(document['remaining'])} still hold the users; index locations left: {document['index_locations']}"
    )
    for place in document["remaining"]:
        held = f"{place['lines']} line(s)" if "lines" in place else place.get("reason", "")
        out.say(f"  {place['object']} version {place.get('version_id')}: {held}")
    for request_id in document.get("reports_unread", ()):
        out.say(f"  the report of {request_id}, which erased identifiers of theirs, could not be read: not verified")
    for line in plan_lines(document.get("exemptions", ())):  # kept by right: not read, not left behind
        out.say(line)
    out.result(document)
    return EXIT_OK if document["verified"] else EXIT_FAILED


def cmd_vacuum(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core.sparkutil import spark_on_demand
    from lakepurge.ops.remote_jobs import vacuum_job
    from lakepurge.purge.vacuum import run_vacuum

    if args.on == "emr-serverless":
        return run_remote(args, out, vacuum_job(args.dataset, args.yes))
    settings = read_lake_settings(args, spark=args.engine == "spark")
    with spark_on_demand("lakepurge-vacuum", settings, args.engine) as executors:
        run = run_vacuum(executors, settings, args.dataset, apply=args.yes)
    if executors.decisions:
        out.say(f"vacuumed {', then '.join(executors.decisions)}")
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
    if run.kept:
        out.say(f"  {run.kept} object(s) of kept datasets ([[exemptions]]) left as they are")
    if not run.applied:
        out.say("dry run: nothing changed (run again with --yes to apply)")
    elif run.record:
        out.say(f"record {run.record}")
    out.result(run.summary() | {"engine": executors.engine_used})
    return EXIT_FAILED if run.failed else EXIT_OK
