"""``lakepurge purge USER ...``: the operator path, report -> erase -> verify -> certificate, without the approval
workflow (lakepurge.ops.manual_purge). A dry run unless --yes."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from lakepurge.cli.arguments import (
    DEFAULT_CONFIG,
    Commands,
    Output,
    add_no_expand,
    add_users,
    read_lake_settings,
    read_typed_ids,
    read_users,
    typed_texts,
    with_typed_ids,
)
from lakepurge.cli.errors import EXIT_FAILED, EXIT_NOT_CERTIFIABLE, EXIT_OK, EXIT_REFUSED, CliError
from lakepurge.records.identifiers import kind_of


def register(commands: Commands) -> None:
    purge = commands.add("purge", cmd_purge, help="report, erase, verify, certify (dry run unless --yes)")
    add_users(purge)
    add_no_expand(purge)
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
    from lakepurge.indexing.resolution import ExpansionRefused
    from lakepurge.indexing.returning import UnknownHashes
    from lakepurge.ops.manual_purge import ReviewedReportMismatch, StaleReport, purge_users
    from lakepurge.reports.kept import ExemptionsChanged
    from lakepurge.reports.report import ReportTampered, SafetyLimitExceeded

    hashes = _user_hashes(args)
    users = read_users(args, required=not hashes)
    settings = read_lake_settings(args)
    users = with_typed_ids(args, settings, users)
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
            no_expand=read_typed_ids(args, settings, "no_expand"),
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
    except (ReportTampered, ReviewedReportMismatch, StaleReport, ExpansionRefused, ExemptionsChanged) as exc:
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
    if run.result is None:
        forced = bool(run.refused) or args.force  # a report made with --force is executed with --force only
        command = execute_command(args, users, hashes, run.request_id, run.report_sha256, forced)
        if run.refused:
            out.say("dry run: nothing erased. Check the plan and the user ids; to execute exactly this plan anyway:")
        else:
            out.say("dry run: nothing erased. To erase exactly this plan:")
        out.say(f"  {command}")
        out.result(document | {"execute": command})
        return EXIT_REFUSED if run.refused else EXIT_OK
    if args.report:
        forget_users_file(args.users_file, args.report)
        forget_users_file(args.ids_file, args.report, ".ids")
    out.result(document)
    return EXIT_OK if run.result.verified else EXIT_FAILED


def users_file_of(request_id: str) -> Path:
    """Where a dry run keeps the ids given on its command line for the command it prints: a directory of this user's
    own (0700), the file 0600, removed once that command ran."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"lakepurge-{os.getuid()}" / f"{request_id}.users"


def execute_command(
    args: argparse.Namespace, users: list[str], hashes: list[str], request_id: str, sha256: str, forced: bool
) -> str:
    """The command that executes exactly the report a dry run wrote, to paste as it is: the ids come from the
    --users-file given, or from a file the dry run writes (users_file_of), never printed and never a placeholder."""
    words = ["lakepurge", "purge"]
    users = [user for user in users if kind_of(user) is None]  # the typed ones: _typed_ids_file
    if args.users and any("\n" in user or user.endswith("\r") for user in users):
        # such an id cannot be a line of a file: the operator gives the ids again as they gave them
        words.append("<the same user ids>")
    elif args.users:
        words += ["--users-file", _private_file(users_file_of(request_id), users)]
    elif args.users_file:
        words += ["--users-file", str(Path(args.users_file).resolve())]
    words += _typed_ids_file(args, request_id)
    for user_hash in hashes:
        words += ["--user-hash", user_hash]
    words += ["--report", request_id, "--sha256", sha256, "--yes"]
    if forced:
        words.append("--force")
    if args.config != DEFAULT_CONFIG:
        words += ["--config", str(Path(args.config).resolve())]
    return shlex.join(words)


def _typed_ids_file(args: argparse.Namespace, request_id: str) -> list[str]:
    """The typed ids of the command to paste: those of --id in a file the dry run writes, beside the untyped ids'."""
    if not args.typed_ids:
        return ["--ids-file", str(Path(args.ids_file).resolve())] if args.ids_file else []
    texts = typed_texts(args)
    if any("\n" in text or text.endswith("\r") for text in texts):
        return ["<the same --id ids>"]
    return ["--ids-file", _private_file(users_file_of(request_id).with_suffix(".ids"), texts)]


def _private_file(path: Path, lines: list[str]) -> str:
    """The lines written to a file only this user can read (0600, in a 0700 directory)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.chmod(0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
        handle.write("".join(f"{line}\n" for line in lines))
    return str(path)


def forget_users_file(users_file: str | None, request_id: str, suffix: str = ".users") -> None:
    """The ids file a dry run wrote for this report goes once the report was executed (a file of the user's stays)."""
    if users_file and Path(users_file).resolve() == users_file_of(request_id).with_suffix(suffix).resolve():
        Path(users_file).unlink(missing_ok=True)


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
