"""Purge entry point: ``spark-submit spark_jobs/purge.py --config lakepurge.toml --report s3://... --sha256 HEX``.

Refuses a report whose SHA-256 differs from the approved one, erases its objects on executors, verifies every
touched object and writes the certificate. Idempotent: run again after a kill, it finishes the same purge.
Relational tables need the raw ids, which this job never receives: the caller erases them (see lakepurge.operator).
"""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import aws
from lakepurge.config import load_settings
from lakepurge.logs import root_logger
from lakepurge.privacy import hash_key
from lakepurge.purge.job import run_purge
from lakepurge.report import ReportTampered, read_report
from lakepurge.sparkutil import get_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="purge", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--report", required=True, help="s3:// URI of the approved report")
    parser.add_argument("--sha256", required=True, help="the approved report's SHA-256")
    parser.add_argument("--approved-by", default=None)
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = load_settings(args.config)
    try:
        report = read_report(aws.client("s3"), args.report, args.sha256)
    except ReportTampered as exc:
        sys.stderr.write(f"purge refused: {exc}\n")
        return 3
    key = hash_key(settings.privacy)
    result = run_purge(get_session("lakepurge-purge"), settings, report, key, (), args.approved_by, args.sha256)
    summary = {
        "request_id": result.request_id,
        "objects_rewritten": result.objects_rewritten,
        "lines_erased": result.lines_erased,
        "objects_failed": [o.s3path for o in result.failed],
        "verified": result.verified,
        "certificate": result.certificate,
    }
    sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    return 0 if result.verified else 1


if __name__ == "__main__":
    sys.exit(main())
