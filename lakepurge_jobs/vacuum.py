"""Vacuum entry point:
``spark-submit lakepurge_jobs/vacuum.py [--config lakepurge.toml|s3://...] [--dataset N] [--yes]``.

Removes the placeholders the purges recorded writing, re-indexes those objects and deletes the noncurrent versions
that hold erased users (lakepurge.purge.vacuum). A dry run unless --yes.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import runtime
from lakepurge.core.logs import root_logger
from lakepurge.core.sparkutil import get_session
from lakepurge.purge.vacuum import run_vacuum


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vacuum", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    parser.add_argument("--yes", action="store_true", help="apply (the default is a dry run)")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = runtime.settings_from(args.config)
    run = run_vacuum(get_session("lakepurge-vacuum"), settings, args.dataset, apply=args.yes)
    sys.stdout.write(orjson.dumps(run.summary()).decode() + "\n")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
