"""Verify entry point: is any of these users still anywhere in the lake?
``spark-submit lakepurge_jobs/verify.py [--config lakepurge.toml|s3://...] --hashes s3://... --result s3://...``.

Reads every object of every dataset (and its noncurrent versions) for the users whose keyed hashes the --hashes
document lists (``{"hashes": [...]}``, written by ``lakepurge verify --on emr-serverless``: the raw ids never reach
the job or its run record), and writes ``{"objects_checked": N, "remaining": [...]}`` to --result.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.logs import root_logger
from lakepurge.core.privacy import hash_key
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import get_session
from lakepurge.purge.job import verify_everywhere


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="verify", description=__doc__)
    parser.add_argument(
        "--config",
        default=None,
        help="TOML file, s3:// or ssm: URI (default: LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG[_TOML])",
    )
    parser.add_argument("--hashes", required=True, help="s3:// URI of the users' keyed hashes")
    parser.add_argument("--result", required=True, help="s3:// URI to write the result to")
    args = parser.parse_args(argv)
    root_logger(stream=sys.stderr)
    settings = runtime.settings_from(args.config)
    s3 = aws.client("s3")
    source, target = S3Uri.parse(args.hashes), S3Uri.parse(args.result)
    document = orjson.loads(s3.get_object(Bucket=source.bucket, Key=source.key)["Body"].read())
    hashes, bound = tuple(document["hashes"]), tuple(document.get("bound_hashes", ()))
    spark = get_session("lakepurge-verify")
    checked, remaining = verify_everywhere(spark, settings, hashes, hash_key(settings.privacy), bound)
    result = {"objects_checked": checked, "remaining": remaining}
    s3.put_object(Bucket=target.bucket, Key=target.key, Body=orjson.dumps(result), ContentType="application/json")
    sys.stdout.write(orjson.dumps({"objects_checked": checked, "places_remaining": len(remaining)}).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
