"""Vacuum entry point: ``spark-submit spark_jobs/vacuum.py [--config lakepurge.toml|s3://...] [--dataset N]``.

Drops the `{}` placeholders the purge left, re-indexes the objects and deletes their superseded versions.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

import orjson

from lakepurge import runtime
from lakepurge.logs import root_logger
from lakepurge.purge.vacuum import run_vacuum
from lakepurge.sparkutil import get_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vacuum", description=__doc__)
    parser.add_argument("--config", default=None, help="TOML file or s3:// URI (default: LAKEPURGE_CONFIG[_TOML])")
    parser.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    outcomes = run_vacuum(get_session("lakepurge-vacuum"), runtime.settings_from(args.config), args.dataset)
    failed = [asdict(o) for o in outcomes if o.error]
    summary = {"objects": len(outcomes), "lines_removed": sum(o.lines_removed for o in outcomes), "failed": failed}
    sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
