"""`lakepurge demo --json` as a first-time user runs it: its own stack, the workflow, one JSON summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def run_demo(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """`lakepurge demo` as from a shell, with no endpoint or lakepurge setting leaking in from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT", "LAKEPURGE_"))}
    return subprocess.run(
        [sys.executable, "-m", "lakepurge.cli", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_runs_a_request_through_the_workflow_and_prints_one_json_summary() -> None:
    run = run_demo("--json", "--objects", "40", "--users", "20", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = orjson.loads(run.stdout)
    assert summary["status"] == "SUCCEEDED"
    assert summary["request_id"].startswith("req-demo-")
    assert summary["users_erased"] == 3 and summary["verified"] is True
    assert summary["objects_rewritten"] > 0 and summary["lines_erased"] >= summary["objects_rewritten"]
    assert summary["certificate"] == f"s3://lake-reports/certificates/{summary['request_id']}.json"
    assert summary["seconds"] > 0
    assert "-> RequestApproval" in run.stderr and "-> Erased" in run.stderr
    assert "approval page: HTTP 200" in run.stderr and "decision: HTTP 200" in run.stderr
    # Indexed through S3 notifications -> SQS -> the indexer handler, exactly the generator's ground truth.
    indexing = summary["indexing"]
    assert indexing["path"] == "s3-events" and indexing["failed"] == 0
    assert indexing["events"] >= summary["objects"]  # one per upload; sidecars are uploads, not indexed objects
    assert summary["index_matches_ground_truth"] is True
    # Then reconciled with the lake, recording every dataset's coverage: the request can be certified.
    assert summary["reconcile"] == {"datasets": 7, "found": 0, "failed": 0, "drift": 0}
    assert "reconciled with the lake" in run.stderr and "INDEX_INCOMPLETE" not in run.stderr
    # The purge's own S3 events went back through the indexer and the erased users stayed out of the index.
    assert summary["index_after_purge"]["events"] >= summary["objects_rewritten"]
    assert summary["index_after_purge"]["erased_users_left"] == 0
    assert summary["approval"] == "automatic"
    assert [s["step"] for s in summary["steps"]][-1] == "total" and "summary" in run.stderr


def test_demo_says_how_to_fix_a_busy_approval_port() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = run_demo("--port", str(port), "--json", timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    assert f"port {port} on 127.0.0.1 is in use" in run.stderr and "--port" in run.stderr
