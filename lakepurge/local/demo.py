"""``lakepurge demo``: the pipeline on the embedded local stack, needing nothing but Python and Java.

A moto server on 127.0.0.1 stands in for S3, SQS, DynamoDB, KMS, SES, SNS and Step Functions; the approval page
is served on 127.0.0.1 by the same handler API Gateway calls on AWS; Spark runs in local mode. The demo:

1. starts the stack and deploys ``statemachine/purge.asl.json`` with the ``lakepurge_lambdas/`` handlers in-process;
2. configures the lake bucket's notifications (ObjectCreated/ObjectRemoved -> SQS, with a dead-letter queue),
   generates a sample lake and uploads it;
3. indexes it through that S3-event path: SQS batches go to ``lakepurge_lambdas.indexer.handler`` as Lambda's
   event source mapping would hand them (failed records stay in the queue, then reach the DLQ); optionally
   (``backfill``) the Spark backfill rebuilds the index too; both are checked against the generator's ground
   truth; then the index is reconciled with the lake, which records each dataset's coverage: without it the
   request could not be certified and would end INDEX_INCOMPLETE (the empty DLQ is part of that check);
4. files a deletion request for three users (stored encrypted; the execution carries only its id);
5. approves it: automatically (the link fetched with GET, then Approve POSTed, as a browser does) or, interactive,
   by a person clicking the link in a browser;
6. waits for the purge (the Spark job, or inline for a small report), prints the certificate, feeds the purge's
   own S3 events back to the indexer and checks that the erased users are gone from the index.

Human output goes through ``say`` and the progress bars to stderr; the returned dict is the ``--json`` document.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.progress import Progress, track
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_store
from lakepurge.local.samples import SampleLake, generate_lake, settings_toml
from lakepurge.reports import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

log = get_logger()

Say = Callable[[str], None]

LAKE_BUCKET = "lake"
REPORTS_BUCKET = "lake-reports"
EVENTS_QUEUE = "lakepurge-index-events"
EVENTS_DLQ = "lakepurge-index-events-dlq"
INSTALL_HINT = "run `make install` (or `pip install -e '.[local,spark]'` in your virtualenv)"


class DemoError(RuntimeError):
    """A first-run problem the user can fix (no Java, busy port, missing packages); the message says how."""


def check_packages() -> None:
    """moto (with its server) and PySpark come with the [local] and [spark] extras."""
    wanted = {"moto": "moto", "flask": "moto[server]", "pyspark": "pyspark"}
    missing = [name for module, name in wanted.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise DemoError(f"the demo needs {', '.join(missing)}, which are not installed: {INSTALL_HINT}")


def check_java() -> None:
    java = shutil.which("java")
    if java is None:
        raise DemoError(
            "Java 17 or newer is needed for Spark: install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless;"
            " macOS: brew install openjdk@17), or put it on PATH"
        )
    result = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (result.stderr or result.stdout).splitlines()[0] if (result.stderr or result.stdout) else ""
    version = first.split('"')[1] if '"' in first else ""
    major = int(version.split(".")[0]) if version[:2].isdigit() else 0
    if major and major < 17:
        raise DemoError(f"Spark needs Java 17 or newer; found {version} at {java}")


@dataclass
class Step:
    name: str
    seconds: float
    result: str


@dataclass
class DemoRun:
    """What the summary table and the JSON document are made from."""

    steps: list[Step] = field(default_factory=list)

    def add(self, name: str, started: float, result: str) -> None:
        self.steps.append(Step(name, round(time.monotonic() - started, 1), result))

    def table(self) -> list[str]:
        width = max(len(s.name) for s in self.steps)
        lines = [f"    {'step':<{width}}  {'seconds':>7}  result", f"    {'-' * width}  {'-' * 7}  {'-' * 40}"]
        lines += [f"    {s.name:<{width}}  {s.seconds:>7.1f}  {s.result}" for s in self.steps]
        return lines


def run_demo(
    objects: int = 100,
    users: int = 100,
    say: Say = print,
    *,
    interactive: bool = False,
    port: int = 0,
    approval_timeout: int | None = None,
    backfill: bool = False,
    progress: bool = True,
    keep: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The whole demo; returns the --json document. Raises DemoError for problems the user can fix.

    With keep, the stack stays up after the demo: the document gains ``kept`` (the environment, configuration and
    commands to use it), keep is called with it, and the demo waits for Ctrl-C or SIGTERM before tearing down."""
    started = time.monotonic()
    check_packages()
    check_java()
    from lakepurge import runtime
    from lakepurge.local import workflow as local_workflow
    from lakepurge.local.approval_server import ApprovalServer, PortInUse
    from lakepurge.local.moto import start_moto

    timeout = approval_timeout or (900 if interactive else 600)
    bars = sys.stderr if progress else None
    run = DemoRun()
    os.environ.setdefault("LAKEPURGE_HASH_KEY", secrets.token_hex(16))  # a demo key: each run is its own world
    # The in-process handlers' metrics (Powertools EMF) would print on stdout, which is the --json document's alone.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    say("1/6 starting the local stack: moto (S3, SQS, DynamoDB, KMS, SES, SNS, Step Functions), the approval page")
    mark = time.monotonic()
    try:
        page = ApprovalServer(port)
    except PortInUse as exc:
        message = f"the approval page cannot listen: {exc} (--port N picks the port, --port 0 any free one)"
        raise DemoError(message) from None
    try:
        stack = start_moto()
    except BaseException:
        page.stop()
        raise
    # moto's DynamoDB is not thread-safe: a query racing the purge job's writes can fail with a 500 that the client
    # retries; werkzeug would print its traceback. The outcome is verified independently of such retries.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-demo-"))
    try:
        local_workflow.install_lambda_dispatch()
        local_workflow.close_answered_task_tokens()
        local_workflow.enable_execution(stack.endpoint)
        s3 = aws.client("s3")
        for bucket in (LAKE_BUCKET, REPORTS_BUCKET):
            s3.create_bucket(Bucket=bucket)
        deployed, workflow_toml = local_workflow.prepare(
            "lakepurge-demo@example.com", ["dpo@example.com"], page.url, approval_timeout_seconds=timeout
        )
        queue_url = _subscribe_lake_events(s3, aws.client("sqs"))
        toml = settings_toml(LAKE_BUCKET, 'backend = "dynamodb"\ntable = "lakepurge-index"', f"s3://{REPORTS_BUCKET}/")
        # A sample lake of few users (--users 20): three of them are a large share of a dataset, so the dataset limit
        # is relaxed (the object limit and the sentinel ids still apply).
        toml += "\n[purge]\nmax_dataset_fraction = 0.5\n\n" + workflow_toml
        # Events in the DLQ were never indexed: no request is certified while it holds any.
        dlq_url = aws.client("sqs").get_queue_url(QueueName=EVENTS_DLQ)["QueueUrl"]
        toml += f'\n[indexing]\ndead_letter_queue_url = "{dlq_url}"\n'
        config = workdir / "lakepurge.toml"
        config.write_text(toml)
        os.environ["LAKEPURGE_CONFIG"] = str(config)  # what the in-process Lambda handlers read
        os.environ.pop("LAKEPURGE_CONFIG_TOML", None)
        runtime.reset()
        settings = parse_settings(tomllib.loads(toml), "demo configuration")
        say(f"    moto {stack.endpoint}; approval page {page.url}")
        say(f"    state machine {deployed.state_machine_arn} (statemachine/purge.asl.json)")
        say(f"    s3://{LAKE_BUCKET} notifies ObjectCreated/ObjectRemoved to SQS {EVENTS_QUEUE} (DLQ {EVENTS_DLQ})")
        run.add("local stack", mark, f"moto {stack.endpoint}, approval page {page.url}")

        mark = time.monotonic()
        lake = generate_lake(bucket=LAKE_BUCKET, objects=objects, users=users)
        say(
            f"2/6 sample lake: {len(lake.objects)} objects, {lake.total_bytes / 1e6:.1f} MB, {users} users"
            " (JSON Lines, gzip, CSV, Parquet, one-user objects)"
        )
        with track("uploading to s3://lake", len(lake.objects), stream=bars) as bar:
            _upload(s3, lake, bar)
        run.add("sample lake", mark, f"{len(lake.objects)} objects, {lake.total_bytes / 1e6:.1f} MB uploaded")

        say("3/6 indexing through the S3-event path: S3 -> SQS -> lakepurge_lambdas/indexer.py (batches of 10)")
        mark = time.monotonic()
        with track("S3 events indexed", len(lake.objects), stream=bars) as bar:
            events = drain_index_events(aws.client("sqs"), queue_url, bar)
        document = _check_index(settings, lake, events, say)
        run.add(
            "index (S3 events)",
            mark,
            f"{events.records} events, {document['index_rows']} rows, equals ground truth:"
            f" {document['index_matches_ground_truth']}",
        )
        if backfill:
            mark = time.monotonic()
            document["backfill"] = _backfill(settings, lake, say)
            run.add(
                "index (Spark backfill)",
                mark,
                f"{document['backfill']['objects']} objects, equals ground truth: "
                f"{document['backfill']['index_matches_ground_truth']}",
            )
        mark = time.monotonic()
        document["reconcile"] = _reconcile(settings, say)
        run.add(
            "index reconciled",
            mark,
            f"{document['reconcile']['drift']} difference(s) with the lake, coverage recorded for"
            f" {document['reconcile']['datasets']} dataset(s)",
        )

        mark = time.monotonic()
        present = {user for user, _, _ in lake.truth}
        erased = [user for user in lake.users if user in present][:3]  # three users who have data
        document |= _erase_through_workflow(
            settings, lake, erased, say, interactive=interactive, timeout=timeout, bars=bars, run=run
        )
        document["approval"] = "interactive" if interactive else "automatic"

        mark = time.monotonic()
        waiting = _visible_messages(aws.client("sqs"), queue_url)
        with track("purge's S3 events indexed", waiting, stream=bars) as bar:
            after = drain_index_events(aws.client("sqs"), queue_url, bar)
        left = _index_locations(settings, erased)
        document["index_after_purge"] = {"events": after.records, "failed": after.failed, "erased_users_left": left}
        say(
            f"    the purge's {after.records} S3 event(s) went through the indexer: erased users still in the index:"
            f" {left}"
        )
        run.add("index after the purge", mark, f"{after.records} events; erased users left in the index: {left}")

        ok = document.pop("index_ok") and left == 0
        if document["workflow_status"] == "SUCCEEDED" and document["verified"] and ok:
            document["status"] = "SUCCEEDED"
        elif document["outcome"] == "REJECTED" and ok:
            document["status"] = "REJECTED"
        else:
            document["status"] = "FAILED"
        document["seconds"] = round(time.monotonic() - started, 1)
        run.steps.append(Step("total", document["seconds"], document["status"]))
        document["steps"] = [{"step": s.name, "seconds": s.seconds, "result": s.result} for s in run.steps]
        say("summary")
        for line in run.table():
            say(line)
        if keep is not None:
            kept_user = next(u for u in lake.users if u in present and u not in erased)
            document["kept"] = _kept(stack.endpoint, config, page.url, kept_user)
            document["kept"]["operations_page"] = page.ops_url
            document["kept"]["operations_password"] = os.environ["LAKEPURGE_OPS_PASSWORD"]  # the demo's own
            local_workflow.refresh_operations_view()
            for line in _keep_instructions(document["kept"]):
                say(line)
            keep(document)
            _wait_until_stopped(local_workflow.refresh_operations_view)
            say("lakepurge demo: stopping the local stack")
        return document
    finally:
        page.stop()
        stack.stop()
        os.environ.pop("LAKEPURGE_CONFIG", None)
        runtime.reset()
        shutil.rmtree(workdir, ignore_errors=True)


def _kept(endpoint: str, config: Path, approval_page: str, user: str) -> dict[str, Any]:
    """How to use the stack the demo left running: the variables every other command needs, and what to try."""
    from lakepurge.local.moto import DUMMY_CREDENTIALS

    env = {"AWS_ENDPOINT_URL": endpoint} | {k: DUMMY_CREDENTIALS[k] for k in sorted(DUMMY_CREDENTIALS)}
    env["LAKEPURGE_HASH_KEY"] = os.environ["LAKEPURGE_HASH_KEY"]  # the demo's own key, not a secret of anyone's
    return {
        "env": env,
        "config": str(config),
        "approval_page": approval_page,
        "user": user,  # a synthetic id of the sample lake who was not erased: something to look up
        "try": [
            f"lakepurge status --config {config}",
            f"lakepurge lookup {user} --config {config}",
            f"lakepurge purge {user} --config {config}",
            f"lakepurge requests --config {config}",
        ],
    }


def _keep_instructions(kept: dict[str, Any]) -> list[str]:
    exports = " ".join(f"{name}={value}" for name, value in kept["env"].items())
    return [
        "the local stack is still running (moto, the approval page); in another shell:",
        f"    approval page {kept['approval_page']}",
        *(
            [
                f"    operations page {kept['operations_page']} (open it in a browser: user ops, password"
                f" {kept['operations_password']}; its view is refreshed every minute here, hourly on AWS)"
            ]
            if "operations_page" in kept
            else []
        ),
        f"    export {exports}",
        *(f"    {command}" for command in kept["try"]),
        "Ctrl-C (or SIGTERM) here stops it and removes everything it held",
    ]


def _wait_until_stopped(every_minute: Callable[[], Any] | None = None) -> None:
    """Block until Ctrl-C or SIGTERM, running ``every_minute`` (the local stand-in for a schedule) meanwhile."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    seconds = 0
    try:
        while not stopped.wait(1):
            seconds += 1
            if every_minute is not None and seconds % 60 == 0:
                try:
                    every_minute()
                except Exception as exc:  # the stack keeps serving; the page shows the last view
                    log.warning("scheduled run failed: %s", exc)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _subscribe_lake_events(s3: S3Client, sqs: SQSClient) -> str:
    """ObjectCreated/ObjectRemoved of the lake bucket -> an SQS queue with a dead-letter queue (maxReceiveCount 5),
    as infra/ deploys it; returns the queue's URL."""
    dlq_url = sqs.create_queue(QueueName=EVENTS_DLQ)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = orjson.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}).decode()
    queue_url = sqs.create_queue(
        QueueName=EVENTS_QUEUE, Attributes={"VisibilityTimeout": "5", "RedrivePolicy": redrive}
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=LAKE_BUCKET,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]
        },
    )
    return str(queue_url)


def _visible_messages(sqs: SQSClient, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _upload(s3: S3Client, lake: SampleLake, bar: Progress) -> None:
    for obj in lake.objects:
        extra: dict[str, Any] = {}
        if obj.tags:
            extra["Tagging"] = "&".join(f"{k}={v}" for k, v in obj.tags.items())
        s3.put_object(Bucket=lake.bucket, Key=obj.key, Body=obj.body, **extra)
        bar.advance()


@dataclass
class EventRun:
    messages: int = 0  # SQS messages handed to the indexer
    records: int = 0  # S3 event records in them (one object each)
    failed: int = 0  # messages the indexer reported as failed (left for SQS to retry, then the DLQ)


def drain_index_events(sqs: SQSClient, queue_url: str, bar: Progress | None = None, batch: int = 10) -> EventRun:
    """Hand the queue's S3 notifications to lakepurge_lambdas.indexer.handler in SQS batches, as Lambda's event source
    mapping does: records the handler reports in batchItemFailures stay in the queue; the others are deleted.
    Stops when the queue has nothing visible left."""
    from lakepurge.local.workflow import LocalContext, handler

    indexer = handler("lakepurge-indexer")

    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    region = queue_arn.split(":")[3]
    run = EventRun()
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=batch, AttributeNames=["All"], WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            return run
        event = {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": queue_arn,
                    "awsRegion": region,
                }
                for m in messages
            ]
        }
        context = LocalContext("lakepurge-indexer", str(uuid.uuid4()))
        with contextlib.redirect_stdout(io.StringIO()):  # its CloudWatch metrics (EMF lines): not for this terminal
            response = indexer(event, context)
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(done)],
            )
        records = sum(len(orjson.loads(m["Body"]).get("Records", [])) for m in done)
        run.messages += len(messages)
        run.records += records
        run.failed += len(failed)
        if bar is not None:
            bar.advance(records)


def _check_index(settings: Settings, lake: SampleLake, events: EventRun, say: Say) -> dict[str, Any]:
    store = open_store(settings.index)
    try:
        status = store.status()
        user = lake.users[0]
        found = store.lookup([user]).get(user, [])
        exact = store.dump() == lake.truth
    finally:
        store.close()
    say(
        f"    {events.records} S3 event(s) in {events.messages} SQS message(s), {events.failed} failed;"
        f" {status.objects} objects, {status.records} records, {status.rows} index rows;"
        f" unindexable lines: {status.unindexable_lines}"
    )
    say(f"    index equals the generator's ground truth: {exact}")
    # The keyed pseudonym reports, certificates and the suppression list use: the demo names nobody.
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    reference = "u:" + pseudonymizer(user)[:12]
    say(f"    lookup of one user ({reference}): {len(found)} object(s)")
    for location in found[:5]:
        where = "whole object" if location.whole_object else f"lines {list(location.lines)}"
        uri = S3Uri.parse(location.s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        say(f"      {object_ref(location.s3path, dataset, pseudonymizer) if dataset else location.s3path}  {where}")
    return {
        "index_ok": exact and not events.failed,
        "objects": status.objects,
        "records": status.records,
        "index_rows": status.rows,
        "unindexable_lines": status.unindexable_lines,
        "index_matches_ground_truth": exact,
        "indexing": {"path": "s3-events", "events": events.records, "failed": events.failed},
        "lookup": {"user": reference, "objects": len(found)},
    }


def _backfill(settings: Settings, lake: SampleLake, say: Say) -> dict[str, Any]:
    """The existing-lake path: the Spark backfill re-reads every object (forced) and must give the same index."""
    from lakepurge.core.sparkutil import spark_session
    from lakepurge.indexing.backfill import run_backfill

    say("    and through the Spark backfill (local[2], --force): the path for a lake that existed before the events")
    with spark_session("lakepurge-demo") as spark:
        result = run_backfill(spark, settings, force=True)
    store = open_store(settings.index)
    try:
        exact = store.dump() == lake.truth
    finally:
        store.close()
    say(f"    backfill read {result.scanned} objects, {result.records} records; index equals ground truth: {exact}")
    return {"objects": result.scanned, "failed": len(result.failed), "index_matches_ground_truth": exact}


def _reconcile(settings: Settings, say: Say) -> dict[str, Any]:
    """Compare the lake's listing with the index (reading only what differs) and record every dataset's coverage:
    what lets the request be certified. A lake indexed only through events is not known to be complete."""
    from lakepurge.indexing.backfill import run_reconcile

    results = run_reconcile(None, settings)
    found = sum(r.missing + r.changed + r.gone for r in results)
    failed = sum(len(r.failed) for r in results)
    say(
        f"    reconciled with the lake: {sum(r.objects for r in results)} objects listed in {len(results)} dataset(s),"
        f" {found} difference(s) found, {failed} failed; coverage recorded (lakepurge index reconcile)"
    )
    return {"datasets": len(results), "found": found, "failed": failed, "drift": sum(r.drift for r in results)}


def _index_locations(settings: Settings, users: list[str]) -> int:
    store = open_store(settings.index)
    try:
        return sum(len(locations) for locations in store.lookup(users).values())
    finally:
        store.close()


_POLL_LOOP = ("WaitForPurge", "PurgeStatus", "PurgeFinished")


def _erase_through_workflow(
    settings: Settings,
    lake: SampleLake,
    users: list[str],
    say: Say,
    *,
    interactive: bool,
    timeout: int,
    bars: TextIO | None,
    run: DemoRun,
) -> dict[str, Any]:
    from lakepurge.local.workflow import sent_emails
    from lakepurge.workflow.intake import file_request

    sfn = aws.client("stepfunctions")
    s3 = aws.client("s3")
    request_id = f"req-demo-{uuid.uuid4().hex[:12]}"
    say(f"4/6 deletion request {request_id} for {len(users)} user(s) -> Step Functions (ids encrypted, not in input)")
    mark = time.monotonic()
    filed = file_request(
        settings,
        aws.Clients.from_environment(),
        sfn,
        Pseudonymizer.from_config(settings.privacy),
        users,
        "lakepurge demo",
        request_id,
    )
    results = layout.results_prefix(settings, request_id)
    seen = polls = report_objects = 0
    asked = False
    bar: Progress | None = None
    held: list[str] = []  # states entered while the progress bar owns the line: printed when it closes
    while True:
        execution = sfn.describe_execution(executionArn=filed.execution_arn)
        events = sfn.get_execution_history(executionArn=filed.execution_arn)["events"]
        for event in events[seen:]:
            if event["type"] == "TaskStateExited" and event["stateExitedEventDetails"]["name"] == "GenerateReport":
                report = orjson.loads(event["stateExitedEventDetails"]["output"]).get("report") or {}
                report_objects = int(report.get("objects", 0))
            if not event["type"].endswith("StateEntered"):
                continue
            name = event["stateEnteredEventDetails"]["name"]
            polls += name == "PurgeStatus"
            if name == "StartPurge":
                run.add("request, report, approval", mark, f"{report_objects} objects in the report, approved")
                mark = time.monotonic()
                say("6/6 purge: the Spark job (spark-submit, polled by Wait -> PurgeStatus -> PurgeFinished),")
                say("    or inline in the StartPurge Task when the report is small ([workflow] inline_max_objects)")
                say("    -> StartPurge")
                bar = Progress("objects purged", report_objects, stream=bars)
            elif bar is not None:
                if name not in _POLL_LOOP:
                    held.append(name)
            else:
                say(f"    -> {name}")
        seen = len(events)
        if not asked:
            mails = [m for m in sent_emails() if request_id in m["subject"]]
            if mails:
                asked = True
                _show_email(mails[0], say)
                if interactive:
                    _ask_a_person(mails[0], timeout, say)
                else:
                    _approve_automatically(mails[0], say)
        if bar is not None:
            bar.update(
                report_objects
                if "VerifyPurge" in held
                else s3.list_objects_v2(Bucket=results.bucket, Prefix=results.key).get("KeyCount", 0)
            )
        if execution["status"] != "RUNNING":
            break
        time.sleep(0.5)
    if bar is not None:
        bar.close()
        for name in held:
            say(f"    -> {name}")
        run.add("purge, verification, notification", mark, f"execution {execution['status']}")
    else:
        run.add("request, report, approval", mark, f"execution {execution['status']}")
    output = orjson.loads(execution.get("output") or "{}")
    outcome = output.get("outcome") or _failed_outcome(execution)
    say(f"    execution {execution['status']}: {outcome} (the purge job was polled {polls} time(s))")
    verification = output.get("verification") or {}
    if verification.get("certificate"):
        _show_certificate(verification["certificate"], say)
    return {
        "request_id": request_id,
        "workflow_status": execution["status"],
        "outcome": outcome,
        "users_erased": int(verification.get("users_erased", 0)),
        "objects_rewritten": int(verification.get("objects_rewritten", 0)),
        "lines_erased": int(verification.get("lines_erased", 0)),
        "verified": bool(verification.get("verified", False)),
        "certificate": verification.get("certificate"),
    }


_FAILURES = {"Rejected": "REJECTED", "ApprovalTimedOut": "APPROVAL_TIMED_OUT", "IndexIncomplete": "INDEX_INCOMPLETE"}


def _failed_outcome(execution: dict[str, Any]) -> str | None:
    error = execution.get("error")
    return _FAILURES.get(error, error) if error else None


def _link(mail: dict[str, Any]) -> str:
    link = re.search(r"https?://\S+", mail["body"])
    if link is None:
        raise DemoError("the approval email has no link")
    return link.group(0)


def _show_email(mail: dict[str, Any], say: Say) -> None:
    say(f"5/6 approval: email to {', '.join(mail['to'])}: {mail['subject']}")
    for line in mail["body"].splitlines():
        say(f"      | {line}")


def _ask_a_person(mail: dict[str, Any], timeout: int, say: Say) -> None:
    until = (datetime.now(UTC) + timedelta(seconds=timeout)).astimezone()
    say("")
    say("    >>> Open this link in a browser on this machine, read the report and press Approve erasure or Reject:")
    say(f"    >>> {_link(mail)}")
    say(
        f"    >>> waiting for your decision until {until:%H:%M:%S} (the approval timeout, {timeout // 60} min);"
        " without one the request ends as APPROVAL_TIMED_OUT and nothing is erased. Ctrl-C stops the demo."
    )
    say("")


def _approve_automatically(mail: dict[str, Any], say: Say) -> None:
    """Answer the email as a browser would: open the link (GET), press Approve (POST)."""
    from urllib.parse import parse_qsl, urlsplit

    import requests

    link = _link(mail)
    page = requests.get(link, timeout=30)
    say(f"    approval page: HTTP {page.status_code}; approving automatically (POST; --interactive lets you click)")
    form = dict(parse_qsl(urlsplit(link).query)) | {"decision": "approve"}
    decided = requests.post(link, data=form, timeout=60)
    say(f"    decision: HTTP {decided.status_code}")


def _show_certificate(uri: str, say: Say) -> None:
    certificate = layout.read_certificate(aws.client("s3"), uri)
    if certificate is None:
        say(f"    certificate {uri}: not found")
        return
    say(f"    certificate {uri}:")
    say(
        f"      request {certificate.request_id}, approved by {certificate.approved_by}"
        f" at {certificate.approved_at}, objects rewritten {certificate.totals.objects_rewritten},"
        f" lines erased {certificate.totals.lines_erased},"
        f" verification {'passed' if certificate.verification.passed else 'FAILED'}"
    )
    for entry in certificate.objects[:5]:
        say(f"      {entry.object}: {entry.status}, {entry.lines_erased} line(s)")
