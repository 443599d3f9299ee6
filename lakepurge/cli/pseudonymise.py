"""``lakepurge pseudonymise``: convert a dataset into a protected one (its ids pseudonymised, its personal fields
encrypted under each person's key in the vault), declared ``protection = "crypto-shred"``; ``--check D`` measures how
identifying the columns left in clear are (lakepurge.protection.convert and quasi)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lakepurge.cli.arguments import Commands, Output, add_on, check_aws_environment, read_lake_settings, read_settings
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
    add_on(command)  # the conversion only: --check reads a sample, on local Spark


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
    if args.on == "emr-serverless" and args.check is not None:
        raise CliError("usage", "--check runs on local Spark (it analyses a sample): leave out --on emr-serverless")
    from lakepurge.core.sparkutil import spark_session
    from lakepurge.protection.convert import ConversionRefused, check_dataset, protection_for, source_dataset

    try:
        if args.on == "emr-serverless":
            return _convert_remote(args, out, options)
        settings = read_lake_settings(args, spark=True)
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


def _convert_remote(args: argparse.Namespace, out: Output, options: dict[str, Any]) -> int:
    """The conversion as lakepurge_jobs/pseudonymise.py on EMR Serverless, followed to its end; what it declared is
    read back from the manifest it wrote under --to."""
    from lakepurge.core import aws
    from lakepurge.ops.remote_jobs import minute_token, run_remote
    from lakepurge.protection.convert import MANIFEST, destination, protection_for, read_manifest, source_dataset
    from lakepurge.purge.launch import SparkJob

    settings = read_settings(args)
    check_aws_environment()
    protection_for(source_dataset(settings, args.source), args.personal, args.deterministic)
    destination(settings, args.to, aws.client("s3"))  # refused here rather than in the job
    arguments = ["--dataset", args.source, "--to", args.to]
    for flag, values in (("--personal", args.personal), ("--deterministic", args.deterministic)):
        if values:
            arguments += [flag, ",".join(values)]
    if args.columns:
        arguments += ["--columns", ",".join(args.columns)]
    if args.name:
        arguments += ["--name", args.name]
    if args.force:
        arguments.append("--force")
    for option, value in options.items():
        arguments += [f"--{option.replace('_', '-')}", str(value)]
    run = run_remote(settings, SparkJob("pseudonymise", tuple(arguments), minute_token()), out.say)
    out.say(f"pseudonymise: {run.status.state.lower()} ({run.status.detail}); logs: {run.logs}")
    manifest = read_manifest(aws.client("s3"), args.to) if run.succeeded else None
    if manifest is None:
        out.say("NOT declared protected: the job's logs say why (every object must convert, the check must pass)")
        out.result({**run.summary(), "declared_protected": False})
        return EXIT_FAILED
    out.say(f"declared protected: {args.to}{MANIFEST}")
    _write_entry(args, out, manifest["dataset_entry"])
    out.result({**run.summary(), "declared_protected": True, "entry": manifest["dataset_entry"]})
    return EXIT_OK
