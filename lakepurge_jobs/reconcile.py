"""Reconciliation entry point (schedule it, e.g. nightly on EMR Serverless):
``spark-submit lakepurge_jobs/reconcile.py [--config lakepurge.toml|s3://...] [--dataset N] [--report-only]``.

Lists each dataset, compares keys, ETags and noncurrent versions with the index, indexes the differences on the
executors and records the dataset's coverage. Exit 1 while any difference is left."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

import orjson

from lakepurge import runtime
from lakepurge.core.logs import root_logger
from lakepurge.core.sparkutil import get_session
from lakepurge.indexing.backfill import run_reconcile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reconcile", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    parser.add_argument("--report-only", action="store_true", help="count the differences, fix nothing")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = runtime.settings_from(args.config)
    results = run_reconcile(get_session("lakepurge-reconcile"), settings, args.dataset, fix=not args.report_only)
    sys.stdout.write(orjson.dumps([asdict(r) for r in results], option=orjson.OPT_INDENT_2).decode() + "\n")
    return 1 if any(r.drift for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
