"""``lakepurge request`` files a deletion (or access) request into the approval workflow; ``lakepurge requests``
lists every request, workflow and operator, from the evidence: state, deadline, certificate."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import TYPE_CHECKING

from lakepurge.cli.arguments import (
    Commands,
    Output,
    add_users,
    read_lake_settings,
    read_settings,
    read_users,
    typed_texts,
    with_typed_ids,
)
from lakepurge.cli.errors import EXIT_OK, CliError, check_aws_environment

if TYPE_CHECKING:
    from lakepurge.ops.history import RequestRecord


def register(commands: Commands) -> None:
    request = commands.add("request", cmd_request, help="file a deletion request (approval workflow)")
    add_users(request)
    request.add_argument("--requester", default="cli", help="who asked (kept encrypted with the ids)")
    request.add_argument("--request-id", help="idempotency key: filing the same id twice files it once")
    request.add_argument(
        "--access",
        action="store_true",
        help="an access request (GDPR Art. 15): approved, it exports the users' records instead of erasing them",
    )

    history = commands.add(
        "requests", cmd_requests, help="every request, workflow and operator: state, deadline, certificate"
    )
    history.add_argument("--limit", type=int, default=50, help="how many to list (default: %(default)s)")
    history.add_argument(
        "--all",
        action="store_true",
        help="also list the dry runs never executed (plans: nothing was erased), apart from the requests",
    )


def cmd_request(args: argparse.Namespace, out: Output) -> int:
    import uuid

    from lakepurge.core import aws
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.workflow.intake import file_request
    from lakepurge.workflow.store import RequestRefused

    users = read_users(args)  # a wrong argument is reported before anything is touched
    settings = read_lake_settings(args)
    named = with_typed_ids(args, settings, users)  # every id checked here; the typed ones filed as given
    typed = [text.partition("=")[::2] for text in typed_texts(args)]
    request_id = args.request_id or f"req-{uuid.uuid4()}"
    try:
        filed = file_request(
            settings,
            aws.Clients.from_environment(),
            aws.client("stepfunctions"),
            Pseudonymizer.from_config(settings.privacy),
            users,
            args.requester,
            request_id,
            kind="access" if args.access else "erasure",
            typed_ids=typed,
        )
    except RequestRefused as exc:
        raise CliError("request_refused", str(exc)) from None
    out.say(f"request {filed.request_id} filed for {len(named)} user(s); due {filed.deadline}")
    out.say(f"  execution {filed.execution_arn}: the approvers get an email once the report is ready")
    out.result({"request_id": filed.request_id, "execution_arn": filed.execution_arn, "deadline": filed.deadline})
    return EXIT_OK


def cmd_requests(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core import aws
    from lakepurge.ops.history import list_history, split_plans

    settings = read_settings(args)
    check_aws_environment()
    records, plans = split_plans(list_history(settings, aws.client("s3"), aws.client("kms")))
    shown = records[: args.limit]
    out.say(
        f"requests {len(records)}  open {sum(r.open for r in records)}  overdue {sum(r.overdue for r in records)}"
        + (f"  (showing {len(shown)}; --limit N for more)" if len(shown) < len(records) else "")
    )
    if shown:
        out.table(REQUEST_COLUMNS, [_request_row(r) for r in shown])
    if plans and args.all:
        out.say(f"dry runs never executed (plans: nothing was erased) {len(plans)}")
        out.table(PLAN_COLUMNS, [(p.request_id, p.created_at[:16], _count(p.users), _count(p.objects)) for p in plans])
    elif plans:
        out.say(f"{len(plans)} dry run(s) never executed are not listed (plans, nothing erased): --all lists them")
    document = {"requests": [asdict(r) | {"open": r.open} for r in shown], "total": len(records)}
    document |= {"plans": [asdict(p) for p in plans]} if args.all else {"plans_not_listed": len(plans)}
    out.result(document)
    return EXIT_OK


REQUEST_COLUMNS = ("REQUEST", "KIND", "STATE", "CREATED", "DUE", "DAYS LEFT", "LINES ERASED", "CERTIFICATE")
PLAN_COLUMNS = ("PLAN", "CREATED", "USERS", "OBJECTS")


def _request_row(r: RequestRecord) -> tuple[str, ...]:
    return (
        r.request_id,
        r.kind,
        r.state + (" !! OVERDUE" if r.overdue else ""),
        r.created_at[:16],
        (r.deadline or "")[:10] or "-",
        _count(r.days_left, signed=True),
        _count(r.lines_erased),
        r.certificate or "-",
    )


def _count(value: int | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+d}" if signed else str(value)
