"""``lakepurge pseudonymise``: convert a dataset into a protected one (its ids pseudonymised, its personal fields
encrypted under each person's key in the vault), declared ``protection = "crypto-shred"``
(lakepurge.protection.convert)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakepurge.cli.arguments import Commands, Output, read_lake_settings
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, CliError


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def register(commands: Commands) -> None:
    command = commands.add(
        "pseudonymise",
        cmd_pseudonymise,
        help="convert a dataset into a crypto-shred one (--dataset D --to s3://...)",
    )
    # dest "source": the shared `args.dataset` is a list of dataset names (lakepurge.cli.arguments.known_datasets)
    command.add_argument("--dataset", dest="source", metavar="D", required=True, help="the dataset to convert")
    command.add_argument(
        "--to", metavar="S3URI", required=True, help="an empty s3://bucket/prefix/ for the protected dataset"
    )
    command.add_argument(
        "--personal",
        type=_names,
        default=[],
        metavar="F,G",
        help="the personal fields, encrypted under each person's key (the id field becomes the pseudonym)",
    )
    command.add_argument(
        "--deterministic",
        type=_names,
        default=[],
        metavar="F",
        help="personal fields encrypted deterministically (AES-SIV), only where equality joins on them are needed",
    )
    command.add_argument("--name", help="the protected dataset's name (default: D_protected)")
    command.add_argument(
        "--out", metavar="FILE", help="write its [[datasets]] entry to FILE instead of stdout (append it to --config)"
    )


def cmd_pseudonymise(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.protection.convert import ConversionRefused

    settings = read_lake_settings(args, spark=True)
    try:
        return _convert(args, out, settings)
    except ConversionRefused as exc:
        raise CliError("refused", str(exc), EXIT_REFUSED) from None


def _convert(args: argparse.Namespace, out: Output, settings: Any) -> int:
    from lakepurge.core.sparkutil import spark_session
    from lakepurge.protection.convert import pseudonymise_dataset

    with spark_session("lakepurge-pseudonymise") as spark:
        run = pseudonymise_dataset(
            spark, settings, args.source, args.to, args.personal, args.deterministic, name=args.name
        )
    for failed in run.failed:
        out.say(f"  FAILED {failed.source}: {failed.error}")
    records, converted = sum(o.records for o in run.objects), len(run.objects) - len(run.failed)
    out.say(f"pseudonymised {records} record(s) in {converted} of {len(run.objects)} object(s)")
    if run.manifest is None:
        out.say("NOT declared protected: every object must convert first (fix them, empty --to, run again)")
        out.result(run.summary())
        return EXIT_FAILED
    out.say(f"declared protected: {run.manifest}")
    _write_entry(args, out, run.entry)
    out.result(run.summary())
    return EXIT_OK


def _write_entry(args: argparse.Namespace, out: Output, entry: str) -> None:
    if args.out:
        try:
            with open(args.out, "x", encoding="utf-8") as handle:
                handle.write(entry)
        except FileExistsError:
            raise CliError("file_exists", f"{args.out} exists already: name a new file") from None
        out.say(f"wrote its [[datasets]] entry to {args.out}: append it to {args.config}")
    elif not out.as_json:
        sys.stdout.write(entry)
        out.say(f"add this [[datasets]] entry to {args.config}: requests then erase it by crypto-shredding")
