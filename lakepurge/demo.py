"""``lakepurge demo``: the pipeline on the embedded local stack, needing nothing but Python and Java.

A moto server on 127.0.0.1 stands in for S3 and DynamoDB; Spark runs in local mode. The demo generates a sample
lake, backfills the index with the Spark job, shows the index status and looks one user up.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakepurge import aws
from lakepurge.config import parse_settings
from lakepurge.index import open_store
from lakepurge.logs import user_ref
from lakepurge.samples import generate_lake, settings_toml


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
    say("1/4 starting the local stack (moto server for S3 and DynamoDB on 127.0.0.1)")
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
        say(f"2/4 generated a sample lake: {len(lake.objects)} objects, {lake.total_bytes / 1e6:.1f} MB, {users} users")

        say("3/4 backfilling the index with the Spark job (local[2])")
        with spark_session("lakepurge-demo") as spark:
            result = run_backfill(spark, settings)
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
        say(f"4/4 lookup of one user ({user_ref(user)}): {len(found)} object(s)")
        for location in found[:10]:
            where = "whole object" if location.whole_object else f"lines {list(location.lines)}"
            say(f"    {location.s3path}  {where}")
        return {
            "status": "SUCCEEDED" if exact and not result.failed else "FAILED",
            "objects": result.objects,
            "records": result.records,
            "index_rows": status.rows,
            "unindexable_lines": status.unindexable_lines,
            "index_matches_ground_truth": exact,
            "lookup": {"user": user_ref(user), "objects": len(found)},
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)
