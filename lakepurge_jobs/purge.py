"""Purge entry point: ``spark-submit lakepurge_jobs/purge.py [--config lakepurge.toml|s3://...] --report s3://...
--sha256 HEX [--approved-by WHO] [--approved-at ISO]``.

Refuses a report whose SHA-256 differs from the approved one, erases its objects on executors, verifies every
touched object and writes the certificate. Idempotent: run again after a kill, it finishes the same purge.
Relational tables need the raw ids, which this job never receives: whoever starts it erases them first
(lakepurge.workflow.steps.start_purge, or lakepurge.ops.manual_purge.purge_users from the CLI).

The configuration is a local TOML file, an ``s3://`` (how EMR Serverless jobs get it: launcher.config_uri, the
object the functions' LAKEPURGE_CONFIG_URI names) or ``ssm:`` URI of one, or, without ``--config``, the environment
(``LAKEPURGE_CONFIG_URI`` / ``LAKEPURGE_CONFIG`` / ``LAKEPURGE_CONFIG_TOML``, see lakepurge.runtime).
Exit codes: 0 purged and verified, 1 purged but verification failed, 2 bad arguments or configuration,
3 report refused (its hash differs from the approved one). The last stderr line starting with ``lakepurge:``
says why; nothing this job prints names a user.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.config import ConfigError
from lakepurge.core.logs import object_ref, root_logger
from lakepurge.core.privacy import Pseudonymizer, hash_key
from lakepurge.core.sparkutil import get_session
from lakepurge.purge.job import run_purge
from lakepurge.reports import layout
from lakepurge.reports.report import ReportTampered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="purge", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--report", required=True, help="s3:// URI of the approved report")
    parser.add_argument("--sha256", required=True, help="the approved report's SHA-256")
    parser.add_argument("--approved-by", default=None)
    parser.add_argument("--approved-at", default=None, help="when it was approved (ISO 8601)")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    try:
        settings = runtime.settings_from(args.config)
        key = hash_key(settings.privacy)
    except ConfigError as exc:
        sys.stderr.write(f"lakepurge: purge not started: {exc}\n")
        return 2
    try:
        report, _ = layout.load_report(aws.client("s3"), args.report, args.sha256)
    except ReportTampered as exc:
        sys.stderr.write(f"lakepurge: purge refused: {exc}\n")
        return 3
    result = run_purge(
        get_session("lakepurge-purge"),
        settings,
        report,
        key,
        None,
        args.approved_by,
        args.sha256,
        approved_at=args.approved_at,
    )
    dataset_of = {o.s3path: settings.dataset_named(o.dataset) for o in report.objects}
    pseudonymizer = Pseudonymizer(key)
    failed = [object_ref(o.s3path, dataset_of[o.s3path], pseudonymizer) for o in result.failed]
    summary = {
        "request_id": result.request_id,
        "objects_rewritten": result.objects_rewritten,
        "lines_erased": result.lines_erased,
        "objects_failed": failed,  # keys of one-user-per-object datasets by keyed reference: they may name their user
        "verified": result.verified,
        "certificate": result.certificate,
    }
    sys.stdout.write(orjson.dumps(summary).decode() + "\n")
    sys.stderr.write(
        f"lakepurge: purge {'verified' if result.verified else 'NOT verified'}: {result.lines_erased} line(s) erased"
        f" in {result.objects_rewritten} object(s), {len(result.failed)} failed, certificate {result.certificate}\n"
    )
    return 0 if result.verified else 1


if __name__ == "__main__":
    sys.exit(main())
