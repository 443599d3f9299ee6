"""Pseudonymise entry point (``lakepurge pseudonymise --dataset D --to s3://... --on emr-serverless`` starts it):
``spark-submit lakepurge_jobs/pseudonymise.py [--config lakepurge.toml|s3://...] --dataset D --to s3://... --personal
F,G [--deterministic F] [--columns A,B] [--name N] [--force]`` and the check's limits. Prints its summary as JSON;
the converted dataset's ``[[datasets]]`` entry is in the manifest it writes under --to (``_lakepurge_protection.json``),
which the CLI reads back."""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import runtime
from lakepurge.core.logs import root_logger
from lakepurge.core.sparkutil import get_session
from lakepurge.protection.convert import pseudonymise_dataset


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pseudonymise", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--personal", type=_names, default=[])
    parser.add_argument("--deterministic", type=_names, default=[])
    parser.add_argument("--columns", type=_names, default=[])
    parser.add_argument("--name")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--sample-rows", type=int, required=True)
    parser.add_argument("--max-columns", type=int, required=True)
    parser.add_argument("--max-unique-share", type=float, required=True)
    parser.add_argument("--min-k", type=int, required=True)
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = runtime.settings_from(args.config)
    run = pseudonymise_dataset(
        get_session("lakepurge-pseudonymise"),
        settings,
        args.dataset,
        args.to,
        args.personal,
        args.deterministic,
        name=args.name,
        force=args.force,
        check_columns=args.columns,
        sample_rows=args.sample_rows,
        max_columns=args.max_columns,
        max_unique_share=args.max_unique_share,
        min_k=args.min_k,
    )
    sys.stdout.write(orjson.dumps(run.summary(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
