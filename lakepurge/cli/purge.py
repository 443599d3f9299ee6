"""``lakepurge purge USER ...``: the operator path, report -> erase -> verify -> certificate, without the approval
workflow (lakepurge.ops.manual_purge). A dry run unless --yes."""

from __future__ import annotations

import argparse

from lakepurge.cli.arguments import Commands, Output, add_users, read_lake_settings, read_users
from lakepurge.cli.errors import EXIT_FAILED, EXIT_NOT_CERTIFIABLE, EXIT_OK, EXIT_REFUSED, CliError


def register(commands: Commands) -> None:
    purge = commands.add("purge", cmd_purge, help="report, erase, verify, certify (dry run unless --yes)")
    add_users(purge)
    purge.add_argument(
        "--user-hash",
        action="append",
        default=[],
        metavar="HASH",
        help="an erased user found again, by the keyed hash `lakepurge status` lists (repeatable)",
    )
    mode = purge.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only write the report (the default)")
    mode.add_argument("--yes", action="store_true", help="erase for real")
    purge.add_argument("--force", action="store_true", help="go past the [purge] safety limits")
    purge.add_argument(
        "--engine",
        choices=("auto", "inline", "spark"),
        default="auto",
        help="auto: in this process when the report has at most workflow.inline_max_objects objects (20 by"
        " default) and workflow.inline_max_bytes bytes to read (256 MiB), else local Spark",
    )
    purge.add_argument(
        "--verify",
        choices=("checksum", "full"),
        help="checksum: the bytes are verified before the write and S3 must store their CRC64NVME; full: every"
        " version is read again after the purge (default: [purge] verify, checksum)",
    )
    purge.add_argument(
        "--report",
        metavar="REQUEST_ID",
        help="execute exactly the report a dry run wrote (give the same user ids), instead of building a new one",
    )
    purge.add_argument("--sha256", help="with --report: the SHA-256 the dry run printed; a changed report is refused")


def cmd_purge(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.indexing.coverage import IndexIncomplete
    from lakepurge.indexing.returning import UnknownHashes
    from lakepurge.ops.manual_purge import ReviewedReportMismatch, purge_users
    from lakepurge.reports.report import ReportTampered, SafetyLimitExceeded

    hashes = _user_hashes(args)
    users = read_users(args, required=not hashes)
    settings = read_lake_settings(args)
    if args.verify is not None:
        settings = settings.model_copy(update={"purge": settings.purge.model_copy(update={"verify": args.verify})})
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
            returning=hashes,  # resolved on the purge's own connection to the index
        )
    except UnknownHashes as exc:
        raise CliError(
            "unknown_user_hash", f"{exc}: run `lakepurge status` for the hashes of the erased users found again"
        ) from None
    except SafetyLimitExceeded as exc:
        out.say(f"lakepurge purge: refused by the safety limits ([purge] in the configuration): {exc}")
        out.say("  check the user ids; the dry run (without --yes) prints the whole plan; to erase anyway, add --force")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return EXIT_REFUSED
    except (ReportTampered, ReviewedReportMismatch) as exc:
        out.say(f"lakepurge purge: refused, nothing erased: {exc}")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return EXIT_REFUSED
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
        return EXIT_REFUSED if run.refused else EXIT_OK
    return EXIT_OK if run.result.verified else EXIT_FAILED


def _user_hashes(args: argparse.Namespace) -> list[str]:
    """The --user-hash values, each a keyed hash (64 hex characters) or a usage error."""
    hashes = list(dict.fromkeys(h.strip().lower() for h in args.user_hash))
    for user_hash in hashes:
        if len(user_hash) != 64 or any(c not in "0123456789abcdef" for c in user_hash):
            # Not echoed: a raw id given here by mistake must not be printed.
            raise CliError(
                "bad_user_hash", "--user-hash takes a keyed hash, 64 hex characters, as `lakepurge status` prints it"
            )
    return hashes
