"""`lakepurge demo --json` as a first-time user runs it: its own stack, the workflow, one JSON summary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import requests

pytestmark = [pytest.mark.e2e, pytest.mark.spark_job]  # its purge job runs with spark-submit

ROOT = Path(__file__).resolve().parents[2]


def run_demo(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """`lakepurge demo` as from a shell, with no endpoint or lakepurge setting leaking in from the test run."""
    return subprocess.run(
        [sys.executable, "-m", "lakepurge.cli", "demo", *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def clean_env() -> dict[str, str]:
    """The environment of a shell with no endpoint or lakepurge setting leaking in from the test run."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT", "LAKEPURGE_"))}


def first_json_document(stream, deadline: float) -> dict:
    """Read a pipe until what it has written parses as one JSON document (the demo then keeps running)."""
    text = ""
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        text += line
        if line.startswith("}"):
            return orjson.loads(text)
    raise AssertionError(f"no JSON document on stdout: {text[-2000:]!r}")


def test_demo_runs_a_request_through_the_workflow_prints_one_json_summary_and_keeps_the_stack_for_lookup(
    tmp_path: Path,
) -> None:
    """`demo --keep --json`: the summary, then the stack stays up for the other commands until Ctrl-C."""
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        demo = subprocess.Popen(
            [sys.executable, "-m", "lakepurge.cli", "demo", "--json", "--keep", "--objects", "40", "--users", "20"],
            cwd=ROOT,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            summary = first_json_document(demo.stdout, time.monotonic() + 600)
            kept = summary["kept"]
            lookup = subprocess.run(
                [sys.executable, "-m", "lakepurge.cli", "lookup", kept["user"], "--json", "--config", kept["config"]],
                cwd=tmp_path,
                env=clean_env() | kept["env"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            ops_refused = requests.get(kept["operations_page"], timeout=30)
            ops_shown = requests.get(kept["operations_page"], auth=("ops", kept["operations_password"]), timeout=30)
        finally:
            demo.send_signal(signal.SIGINT)
            code = demo.wait(timeout=120)
    stderr_text = stderr_path.read_text()

    assert code == 0, stderr_text[-3000:]
    assert lookup.returncode == 0, lookup.stderr[-2000:]
    found = orjson.loads(lookup.stdout)["users"]
    assert len(found) == 1 and next(iter(found.values())), "the kept user's records are found in the kept stack"
    assert kept["env"]["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    assert "the local stack is still running" in stderr_text and "Ctrl-C" in stderr_text
    # the operations page asks for the password the demo printed, then shows the view its stand-in schedule stored
    assert ops_refused.status_code == 401 and kept["operations_password"] in stderr_text
    assert ops_shown.status_code == 200 and "lakepurge operations" in ops_shown.text, ops_shown.text[:500]
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(kept["env"]["AWS_ENDPOINT_URL"], timeout=5)  # stopped: nothing left listening
    assert not Path(kept["config"]).exists(), "the demo's files are removed when it stops"

    assert summary["status"] == "SUCCEEDED"
    assert summary["request_id"].startswith("req-demo-")
    assert summary["users_erased"] == 3 and summary["verified"] is True
    assert summary["objects_rewritten"] > 0 and summary["lines_erased"] >= summary["objects_rewritten"]
    assert summary["certificate"] == f"s3://lake-reports/certificates/{summary['request_id']}.json"
    assert summary["seconds"] > 0
    assert "-> RequestApproval" in stderr_text and "-> Erased" in stderr_text
    assert "approval page: HTTP 200" in stderr_text and "decision: HTTP 200" in stderr_text
    # Indexed through S3 notifications -> SQS -> the indexer handler, exactly the generator's ground truth.
    indexing = summary["indexing"]
    assert indexing["path"] == "s3-events" and indexing["failed"] == 0
    assert indexing["events"] >= summary["objects"]  # one per upload; sidecars are uploads, not indexed objects
    assert summary["index_matches_ground_truth"] is True
    # Then reconciled with the lake, recording every dataset's coverage: the request can be certified.
    assert summary["reconcile"] == {"datasets": 7, "found": 0, "failed": 0, "drift": 0}
    assert "reconciled with the lake" in stderr_text and "INDEX_INCOMPLETE" not in stderr_text
    # The purge's own S3 events went back through the indexer and the erased users stayed out of the index.
    assert summary["index_after_purge"]["events"] >= summary["objects_rewritten"]
    assert summary["index_after_purge"]["erased_users_left"] == 0
    assert summary["approval"] == "automatic"
    assert [s["step"] for s in summary["steps"]][-1] == "total" and "summary" in stderr_text


def test_demo_says_how_to_fix_a_busy_approval_port() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = run_demo("--port", str(port), "--json", timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    assert f"port {port} on 127.0.0.1 is in use" in run.stderr and "--port" in run.stderr
