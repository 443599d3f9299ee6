"""``lakepurge pseudonymise``: convert a dataset into a protected one (its ids pseudonymised, its personal fields
encrypted under each person's key in the vault), declared ``protection = "crypto-shred"``; ``--check D`` measures how
identifying the columns left in clear are (lakepurge.protection.convert and quasi)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakepurge.cli.arguments import Commands, Output, read_lake_settings
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, CliError
from lakepurge.protection.quasi import (
    DEFAULT_MAX_COLUMNS,
    DEFAULT_MAX_UNIQUE_SHARE,
    DEFAULT_MIN_K,
    DEFAULT_SAMPLE_ROWS,
)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def register(commands: Commands) -> None:
    command = commands.add(
        "pseudonymise",
        cmd_pseudonymise,
        help="convert a dataset into a crypto-shred one (--dataset D --to s3://...), or --check how identifying its"
        " clear columns are",
    )
    what = command.add_mutually_exclusive_group(required=True)
    # dest "source": the shared `args.dataset` is a list of dataset names (lakepurge.cli.arguments.known_datasets)
    what.add_argument("--dataset", dest="source", metavar="D", help="the dataset to convert (with --to)")
    what.add_argument("--check", metavar="D", help="only measure how identifying D's clear columns are")
    command.add_argument("--to", metavar="S3URI", help="an empty s3://bucket/prefix/ for the protected dataset")
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
    command.add_argument(
        "--force", action="store_true", help="convert even though the check flags clear columns that single rows out"
    )
    command.add_argument("--columns", type=_names, default=[], metavar="A,B", help="check only these clear columns")
    command.add_argument("--max-columns", type=int, default=DEFAULT_MAX_COLUMNS, help="largest column set checked")
    command.add_argument(
        "--max-unique-share",
        type=float,
        default=DEFAULT_MAX_UNIQUE_SHARE,
        help="flag a column set when more than this share of rows is unique on it (default %(default)s)",
    )
    command.add_argument(
        "--min-k", type=int, default=DEFAULT_MIN_K, help="flag a column set whose smallest group is smaller than k"
    )
    command.add_argument("--sample-rows", type=int, default=DEFAULT_SAMPLE_ROWS, help="rows the check analyses at most")


def _check_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.max_columns < 1 or args.sample_rows < 1 or args.min_k < 1 or not 0 <= args.max_unique_share < 1:
        raise CliError(
            "usage", "--max-columns, --sample-rows and --min-k are at least 1, --max-unique-share between 0 and 1"
        )
    return {
        "sample_rows": args.sample_rows,
        "max_columns": args.max_columns,
        "max_unique_share": args.max_unique_share,
        "min_k": args.min_k,
    }


def cmd_pseudonymise(args: argparse.Namespace, out: Output) -> int:
    options = _check_options(args)
    if args.check is None and args.to is None:
        raise CliError("usage", "--dataset D needs --to s3://bucket/prefix/: where the protected dataset is written")
    from lakepurge.core.sparkutil import spark_session
    from lakepurge.protection.convert import ConversionRefused, check_dataset, protection_for, source_dataset

    settings = read_lake_settings(args, spark=True)
    try:
        if args.check is not None:
            dataset = source_dataset(settings, args.check)
            protection_for(dataset, args.personal, args.deterministic)
            with spark_session("lakepurge-pseudonymise-check") as spark:
                report = check_dataset(spark, settings, dataset, args.personal, args.columns, **options)
            for line in report.lines():
                out.say(line)
            out.result(report.summary())
            return EXIT_FAILED if report.flagged else EXIT_OK
        return _convert(args, out, settings, options)
    except ConversionRefused as exc:
        raise CliError("refused", str(exc), EXIT_REFUSED) from None


def _convert(args: argparse.Namespace, out: Output, settings: Any, options: dict[str, Any]) -> int:
    from lakepurge.core.sparkutil import spark_session
    from lakepurge.protection.convert import QuasiIdentifiersFound, pseudonymise_dataset

    try:
        with spark_session("lakepurge-pseudonymise") as spark:
            run = pseudonymise_dataset(
                spark,
                settings,
                args.source,
                args.to,
                args.personal,
                args.deterministic,
                name=args.name,
                force=args.force,
                check_columns=args.columns,
                **options,
            )
    except QuasiIdentifiersFound as exc:
        for line in exc.report.lines():
            out.say(line)
        raise
    for line in run.check.lines():
        out.say(line)
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
