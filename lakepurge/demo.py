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
    from lakepurge.local import workflow as local_workflow
    from lakepurge.local.approval_server import ApprovalServer
    from lakepurge.local.moto import start_moto
    from lakepurge.sparkutil import spark_session

    started = time.monotonic()
    check_java()
    os.environ.setdefault("LAKEPURGE_HASH_KEY", secrets.token_hex(16))  # a demo key: each run is its own world
    say("1/6 starting the local stack: moto (S3, DynamoDB, KMS, SES, SNS, Step Functions) and the approval page")
    stack = start_moto()
    page = ApprovalServer()
    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-demo-"))
    try:
        local_workflow.install_lambda_dispatch()
        local_workflow.enable_execution(stack.endpoint)
        s3 = aws.client("s3")
        for bucket in ("lake", "lake-reports"):
            s3.create_bucket(Bucket=bucket)
        deployed, workflow_toml = local_workflow.prepare(
            "lakepurge-demo@example.com", ["dpo@example.com"], page.url, approval_timeout_seconds=600
        )
        say(f"    state machine {deployed.state_machine_arn} (statemachine/purge.asl.json)")
        lake = generate_lake(bucket="lake", objects=objects, users=users)
        lake.upload(s3)
        toml = settings_toml("lake", 'backend = "dynamodb"\ntable = "lakepurge-index"', "s3://lake-reports/")
        # A sample lake is small: three users are a large share of a dataset, so the dataset limit is relaxed.
        toml += "\n[purge]\nmax_dataset_fraction = 0.5\n\n" + workflow_toml
        config = workdir / "lakepurge.toml"
        config.write_text(toml)
        os.environ["LAKEPURGE_CONFIG"] = str(config)  # what the in-process Lambda handlers read
        settings = parse_settings(tomllib.loads(toml), "demo configuration")
        say(f"2/6 generated a sample lake: {len(lake.objects)} objects, {lake.total_bytes / 1e6:.1f} MB, {users} users")

        say("3/6 backfilling the index with the Spark job (local[2])")
        with spark_session("lakepurge-demo") as spark:
            result = run_backfill(spark, settings)
        document = _look_up(settings, lake, result, say)
        document |= _erase_through_workflow(settings, deployed, lake.users[:3], say)
        document["status"] = (
            "SUCCEEDED"
            if document.pop("index_ok") and document["workflow_status"] == ("SUCCEEDED") and document["verified"]
            else "FAILED"
        )
        document["seconds"] = round(time.monotonic() - started, 1)
        return document
    finally:
        page.stop()
        stack.stop()
        os.environ.pop("LAKEPURGE_CONFIG", None)
        shutil.rmtree(workdir, ignore_errors=True)


def _look_up(settings: Settings, lake: SampleLake, result: BackfillResult, say: Say) -> dict[str, Any]:
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
    say(f"4/6 lookup of one user ({user_ref(user)}): {len(found)} object(s)")
    for location in found[:8]:
        where = "whole object" if location.whole_object else f"lines {list(location.lines)}"
        uri = S3Uri.parse(location.s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        say(f"    {object_ref(location.s3path, dataset) if dataset else location.s3path}  {where}")
    return {
        "index_ok": exact and not result.failed,
        "objects": result.objects,
        "records": result.records,
        "index_rows": status.rows,
        "unindexable_lines": status.unindexable_lines,
        "index_matches_ground_truth": exact,
        "lookup": {"user": user_ref(user), "objects": len(found)},
    }


_POLL_LOOP = ("WaitForPurge", "PurgeStatus", "PurgeFinished")


def _erase_through_workflow(settings: Settings, deployed: Any, users: list[str], say: Say) -> dict[str, Any]:
    import uuid

    from lakepurge.local.workflow import sent_emails
    from lakepurge.privacy import Pseudonymizer
    from lakepurge.workflow.intake import file_request
    from lakepurge.workflow.steps import Clients

    sfn = aws.client("stepfunctions")
    request_id = f"req-demo-{uuid.uuid4().hex[:12]}"
    say(f"5/6 deletion request {request_id} for {len(users)} user(s) -> Step Functions (ids encrypted, not in input)")
    filed = file_request(
        settings,
        Clients(aws.client("s3"), aws.client("kms")),
        sfn,
        Pseudonymizer.from_config(settings.privacy),
        users,
        "lakepurge demo",
        request_id,
    )
    seen = polls = 0
    approved = False
    while True:
        execution = sfn.describe_execution(executionArn=filed.execution_arn)
        events = sfn.get_execution_history(executionArn=filed.execution_arn)["events"]
        for event in events[seen:]:
            if event["type"].endswith("StateEntered"):
                name = event["stateEnteredEventDetails"]["name"]
                polls += name == "PurgeStatus"
                if name not in _POLL_LOOP or (name == "WaitForPurge" and polls == 0):
                    say(
                        f"    -> {name}"
                        + (
                            " (polling the Spark job: Wait -> PurgeStatus -> PurgeFinished)"
                            if name in _POLL_LOOP
                            else ""
                        )
                    )
        seen = len(events)
        mails = [m for m in sent_emails() if request_id in m["subject"]]
        if mails and not approved:
            _show_and_approve(mails[0], say)
            approved = True
        if execution["status"] != "RUNNING":
            break
        time.sleep(0.3)
    say(f"6/6 execution {execution['status']} (the purge job was polled {polls} time(s))")
    output = orjson.loads(execution.get("output") or "{}")
    verification = output.get("verification") or {}
    if verification.get("certificate"):
        certificate = _read_certificate(verification["certificate"])
        say(f"    certificate {verification['certificate']}:")
        say(
            f"      request {certificate['request_id']}, approved by {certificate['approved_by']}"
            f" at {certificate['approved_at']}, objects rewritten {certificate['totals']['objects_rewritten']},"
            f" lines erased {certificate['totals']['lines_erased']},"
            f" verification {'passed' if certificate['verification']['passed'] else 'FAILED'}"
        )
        for entry in certificate["objects"][:5]:
            say(f"      {entry['object']}: {entry['status']}, {entry['lines_erased']} line(s)")
    return {
        "request_id": request_id,
        "workflow_status": execution["status"],
        "outcome": output.get("outcome"),
        "users_erased": int(verification.get("users_erased", 0)),
        "objects_rewritten": int(verification.get("objects_rewritten", 0)),
        "lines_erased": int(verification.get("lines_erased", 0)),
        "verified": bool(verification.get("verified", False)),
        "certificate": verification.get("certificate"),
    }


def _show_and_approve(mail: dict[str, Any], say: Say) -> None:
    """Print the approver's email and answer it as a browser would: open the link (GET), press Approve (POST)."""
    import re
    from urllib.parse import parse_qsl, urlsplit

    import requests

    say(f"    email to {', '.join(mail['to'])}: {mail['subject']}")
    for line in mail["body"].splitlines():
        say(f"      | {line}")
    link = re.search(r"https?://\S+", mail["body"])
    if link is None:
        raise DemoError("the approval email has no link")
    page = requests.get(link.group(0), timeout=30)
    say(f"    approval page: HTTP {page.status_code}; approving automatically (POST)")
    form = dict(parse_qsl(urlsplit(link.group(0)).query)) | {"decision": "approve"}
    decided = requests.post(link.group(0), data=form, timeout=60)
    say(f"    decision: HTTP {decided.status_code}")


def _read_certificate(uri: str) -> dict[str, Any]:
    location = S3Uri.parse(uri)
    document: dict[str, Any] = orjson.loads(
        aws.client("s3").get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    )
    return document
