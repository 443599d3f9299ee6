"""Backfill entry point:
``spark-submit lakepurge_jobs/build_index.py [--config lakepurge.toml|s3://...] [--force] [--dataset N]``."""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import runtime
from lakepurge.core.logs import root_logger
from lakepurge.core.sparkutil import get_session
from lakepurge.indexing.backfill import run_backfill


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_index", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--force", action="store_true", help="re-index objects whose ETag is already indexed")
    parser.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = runtime.settings_from(args.config)
    result = run_backfill(get_session("lakepurge-build-index"), settings, args.force, args.dataset)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
