"""``lakepurge request`` files a deletion (or access) request into the approval workflow; ``lakepurge requests``
lists every request, workflow and operator, from the evidence: state, deadline, certificate."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from lakepurge.cli.arguments import Commands, Output, add_users, read_lake_settings, read_settings, read_users
from lakepurge.cli.errors import EXIT_OK, CliError, check_aws_environment


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


def cmd_request(args: argparse.Namespace, out: Output) -> int:
    import uuid

    from lakepurge.core import aws
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.workflow.intake import file_request
    from lakepurge.workflow.store import RequestRefused

    users = read_users(args)  # a wrong argument is reported before anything is touched
    settings = read_lake_settings(args)
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
        )
    except RequestRefused as exc:
        raise CliError("request_refused", str(exc)) from None
    out.say(f"request {filed.request_id} filed for {len(users)} user(s); due {filed.deadline}")
    out.say(f"  execution {filed.execution_arn}: the approvers get an email once the report is ready")
    out.result({"request_id": filed.request_id, "execution_arn": filed.execution_arn, "deadline": filed.deadline})
    return EXIT_OK


def cmd_requests(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.core import aws
    from lakepurge.ops.history import list_history

    settings = read_settings(args)
    check_aws_environment()
    records = list_history(settings, aws.client("s3"), aws.client("kms"))
    shown = records[: args.limit]
    out.say(
        f"requests {len(records)}  open {sum(r.open for r in records)}  overdue {sum(r.overdue for r in records)}"
        + (f"  (showing {len(shown)}; --limit N for more)" if len(shown) < len(records) else "")
    )
    for r in shown:
        due = f"due {r.deadline[:10]} ({r.days_left:+d} days)" if r.deadline and r.days_left is not None else ""
        erased = f"{r.lines_erased} line(s) erased" if r.lines_erased is not None else ""
        flag = "  !! OVERDUE" if r.overdue else ""
        out.say(f"  {r.request_id:<44} {r.kind:<8} {r.state:<20} {r.created_at[:16]:<16} {due} {erased}{flag}")
        if r.certificate:
            out.say(f"      certificate {r.certificate}")
    out.result({"requests": [asdict(r) | {"open": r.open} for r in shown], "total": len(records)})
    return EXIT_OK
