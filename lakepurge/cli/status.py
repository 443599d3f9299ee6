"""``lakepurge status``: what the index holds, how far it covers each dataset, the lines it cannot read, the erased
users found again and the open requests with their deadlines."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from lakepurge.cli.arguments import DEFAULT_CONFIG, Commands, Output, read_settings
from lakepurge.cli.errors import EXIT_OK
from lakepurge.cli.lookup import tables_status
from lakepurge.core.config import Settings
from lakepurge.core.s3uri import S3Uri

if TYPE_CHECKING:
    from lakepurge.core.privacy import Pseudonymizer


def register(commands: Commands) -> None:
    status = commands.add("status", cmd_status, help="index counts, unindexable lines, requests and deadlines")
    status.add_argument("--limit", type=int, default=50, help="unindexable lines to list")


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core import aws
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.index import open_existing
    from lakepurge.indexing.coverage import dead_letter_count, of_index
    from lakepurge.indexing.returning import purge_again_command, returning_users

    settings = read_settings(args)
    pseudonymizer = Pseudonymizer.optional(settings.privacy)
    store = open_existing(settings.index)
    try:
        status = store.status()
        problems = store.unindexable(limit=args.limit)
        dead_letters = dead_letter_count(aws.client("sqs"), settings.indexing.dead_letter_queue_url)
        coverage = of_index(settings, store, dead_letters)
        tables = tables_status(settings, store)
        returning = (
            returning_users(store, pseudonymizer)
            if pseudonymizer is not None and status.objects_with_returning_users
            else []
        )
    finally:
        store.close()
    for dataset in coverage:
        if dataset.complete:
            out.say(
                f"dataset {dataset.dataset}: covered ({dataset.method} {dataset.indexed_at},"
                f" {dataset.objects} object(s), {dataset.versions} noncurrent version(s))"
            )
        else:
            out.say(f"dataset {dataset.dataset}: NOT COVERED, {dataset.reason} (run: {dataset.fix})")
    for table in tables:
        out.say(table.line())
    out.say(
        f"objects {status.objects}  records {status.records}  users {status.users}  index rows {status.rows}\n"
        f"unindexable lines {status.unindexable_lines} in {status.objects_with_unindexable} object(s)\n"
        f"objects holding returning users (erased, then found again): {status.objects_with_returning_users}"
    )
    if status.objects_with_returning_users:
        out.say("  WARNING: erased users came back (restored backup? replayed pipeline?): purge them again")
    if status.objects_with_returning_users and pseudonymizer is None:
        out.say(f"  set {settings.privacy.hash_key_env} (the hash key) to list them")
    # By keyed hash only: the raw ids are looked up again by `purge --user-hash`, never shown.
    for user in returning:
        where = "whole object" if user.lines == (-1,) else f"{len(user.lines)} line(s)"
        shown = _shown(settings, user.s3path, pseudonymizer)
        out.say(f"  {shown}  user {user.user_hash[:16]}  {where}  erased by {user.request_id}")
    again = purge_again_command([user.user_hash for user in returning], args.config, DEFAULT_CONFIG)
    if again:
        out.say(f"  purge them again: {again}")
    if status.unindexable_lines:
        out.say("  these lines may hold personal data that lakepurge cannot locate; fix or remove them:")
        for path, problem in problems:
            where = "whole object" if problem.line < 0 else f"line {problem.line}"
            out.say(f"  {_shown(settings, path, pseudonymizer)} {where}: {problem.reason}")
    requests = _requests_status(settings, out) if settings.workflow is not None else []
    out.result(
        {
            "index": asdict(status),
            "coverage": [c.to_dict() for c in coverage],
            "unindexable": [
                {"s3path": _shown(settings, p, pseudonymizer), "line": u.line, "reason": u.reason} for p, u in problems
            ],
            "requests": requests,
            "returning": [
                asdict(user) | {"s3path": _shown(settings, user.s3path, pseudonymizer)} for user in returning
            ],
            "returning_command": again,
        }
        | ({"tables": [t.to_dict() for t in tables]} if tables else {})
    )
    return EXIT_OK


def _shown(settings: Settings, s3path: str, pseudonymizer: Pseudonymizer | None) -> str:
    """An object's path as the CLI prints it: in one-user-per-object datasets the key may name its user, so it is
    the object's keyed reference (masked without the hash key)."""
    from lakepurge.core.logs import object_ref

    uri = S3Uri.parse(s3path)
    dataset = settings.dataset_for(uri.bucket, uri.key)
    return s3path if dataset is None else object_ref(s3path, dataset, pseudonymizer)


def _requests_status(settings: Settings, out: Output) -> list[dict[str, Any]]:
    """The deletion requests with their deadlines; open ones past their deadline stand out."""
    from lakepurge.core import aws
    from lakepurge.workflow.store import RequestStore, list_requests

    views = list_requests(RequestStore(settings, aws.client("s3"), aws.client("kms")))
    overdue = [v for v in views if v.overdue]
    out.say(f"requests {len(views)}  open {sum(v.open for v in views)}  overdue {len(overdue)}")
    if views:
        out.table(
            ("REQUEST", "STATE", "DUE", "DAYS LEFT"),
            [
                (v.request_id, v.state + ("  !! OVERDUE" if v.overdue else ""), v.deadline[:10], f"{v.days_left:+d}")
                for v in views
            ],
        )
    return [asdict(v) for v in views]
