"""``lakepurge demo``: the pipeline on the embedded local stack, needing nothing but Python and Java.

A moto server on 127.0.0.1 stands in for S3 and DynamoDB; Spark runs in local mode. The demo generates a sample
lake, backfills the index with the Spark job, looks one user up, erases a few users through the operator path
(report, Spark purge, verification) and shows the erasure certificate.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from lakepurge import aws
from lakepurge.backfill import BackfillResult
from lakepurge.config import Settings, parse_settings
from lakepurge.index import open_store
from lakepurge.logs import object_ref, user_ref
from lakepurge.s3uri import S3Uri
from lakepurge.samples import SampleLake, generate_lake, settings_toml

Say = Callable[[str], None]


class DemoError(RuntimeError):
    """A first-run problem the user can fix (no Java, busy port); the message says how."""


def check_java() -> None:
    java = shutil.which("java")
    if java is None:
        raise DemoError("Java 17 or newer is needed for Spark: install it (Debian: apt-get install openjdk-17-jre)")
    result = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (result.stderr or result.stdout).splitlines()[0] if (result.stderr or result.stdout) else ""
    version = first.split('"')[1] if '"' in first else ""
    major = int(version.split(".")[0]) if version[:2].isdigit() else 0
    if major and major < 17:
        raise DemoError(f"Spark needs Java 17 or newer; found {version}")


def run_demo(objects: int = 200, users: int = 60, say: Callable[[str], None] = print) -> dict[str, Any]:
    from lakepurge.backfill import run_backfill
    from lakepurge.local.moto import start_moto
    from lakepurge.sparkutil import spark_session

    started = time.monotonic()
    check_java()
    os.environ.setdefault("LAKEPURGE_HASH_KEY", secrets.token_hex(16))  # a demo key: each run is its own world
    say("1/5 starting the local stack (moto server for S3 and DynamoDB on 127.0.0.1)")
    stack = start_moto()
    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-demo-"))
    try:
        s3 = aws.client("s3")
        for bucket in ("lake", "lake-reports"):
            s3.create_bucket(Bucket=bucket)
        lake = generate_lake(bucket="lake", objects=objects, users=users)
        lake.upload(s3)
        toml = settings_toml("lake", 'backend = "dynamodb"\ntable = "lakepurge-index"', "s3://lake-reports/")
        (workdir / "lakepurge.toml").write_text(toml)
        settings = parse_settings(tomllib.loads(toml), "demo configuration")
        say(f"2/5 generated a sample lake: {len(lake.objects)} objects, {lake.total_bytes / 1e6:.1f} MB, {users} users")

        say("3/5 backfilling the index with the Spark job (local[2])")
        with spark_session("lakepurge-demo") as spark:
            result = run_backfill(spark, settings)
            document = _look_up_and_erase(settings, lake, result, say)
        document["seconds"] = round(time.monotonic() - started, 1)
        return document
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _look_up_and_erase(settings: Settings, lake: SampleLake, result: BackfillResult, say: Say) -> dict[str, Any]:
    from lakepurge.operator import purge_users

    store = open_store(settings.index)
    try:
        status = store.status()
        user = lake.users[0]
        found = store.lookup([user]).get(user, [])
        exact = store.dump() == lake.truth
    finally:
        store.close()
    say(
        f"    indexed {result.scanned} objects, {result.records} records, {status.rows} index rows;"
        f" unindexable lines: {status.unindexable_lines}; index equals ground truth: {exact}"
    )
    say(f"4/5 lookup of one user ({user_ref(user)}): {len(found)} object(s)")
    for location in found[:8]:
        where = "whole object" if location.whole_object else f"lines {list(location.lines)}"
        uri = S3Uri.parse(location.s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        say(f"    {object_ref(location.s3path, dataset) if dataset else location.s3path}  {where}")
    erased = lake.users[:3]
    say(f"5/5 erasing {len(erased)} users: report -> Spark purge -> verification -> certificate")
    run = purge_users(settings, erased, dry_run=False, force=True, approved_by="demo", say=lambda t: say("    " + t))
    if run.result is None:
        raise DemoError("the purge ran as a dry run")
    certificate = _read_certificate(run.result.certificate)
    say(f"    certificate {run.result.certificate}:")
    say(
        f"      request {certificate['request_id']}, objects rewritten {certificate['totals']['objects_rewritten']},"
        f" lines erased {certificate['totals']['lines_erased']},"
        f" verification {'passed' if certificate['verification']['passed'] else 'FAILED'}"
    )
    for entry in certificate["objects"][:5]:
        say(f"      {entry['object']}: {entry['status']}, {entry['lines_erased']} line(s)")
    ok = exact and not result.failed and run.result.verified
    return {
        "status": "SUCCEEDED" if ok else "FAILED",
        "objects": result.objects,
        "records": result.records,
        "index_rows": status.rows,
        "unindexable_lines": status.unindexable_lines,
        "index_matches_ground_truth": exact,
        "lookup": {"user": user_ref(user), "objects": len(found)},
        "request_id": run.request_id,
        "users_erased": len(erased),
        "objects_rewritten": run.result.objects_rewritten,
        "lines_erased": run.result.lines_erased,
        "verified": run.result.verified,
        "certificate": run.result.certificate,
    }


def _read_certificate(uri: str) -> dict[str, Any]:
    location = S3Uri.parse(uri)
    document: dict[str, Any] = orjson.loads(
        aws.client("s3").get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    )
    return document
