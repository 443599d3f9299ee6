"""Purge job launchers: a real detached spark-submit, EMR Serverless requests, and the inline purge of small reports.

The local launcher runs lakepurge_jobs/purge.py through pyspark's spark-submit against the moto server and PostgreSQL
of the session; the job reads its configuration from the LAKEPURGE_CONFIG_TOML it inherits.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from botocore.stub import Stubber

from lakepurge.core import aws
from lakepurge.core.config import EmrServerlessLauncherConfig, LocalLauncherConfig, Settings, WorkflowConfig
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_store
from lakepurge.purge.launch import (
    EmrServerlessLauncher,
    JobStatus,
    LocalSparkLauncher,
    PurgeJobSpec,
    bytes_to_read,
    inline_fits,
    launcher_for,
    run_inline,
)
from lakepurge.reports.layout import write_report
from lakepurge.reports.report import Report, ReportTampered, build_report
from tests.support.invariant import assert_invariant, snapshot
from tests.support.lakes import LakeCase, an_attachment, index_toml
from tests.support.purging import HASH_KEY, index_lake_in_its_index

pytestmark = pytest.mark.integration

APPROVER = "dpo@example.com"
APPROVED_AT = "2026-05-04T09:30:00+00:00"
ACCOUNT = "123456789012"  # moto's default account: StartJobRun refuses a role of another account
APPLICATION_ARN = f"arn:aws:emr-serverless:us-east-1:{ACCOUNT}:/applications/00fabc"


def with_workflow(
    settings: Settings, launcher: object, inline_max_objects: int = 20, inline_max_bytes: int = 256 << 20
) -> Settings:
    workflow = WorkflowConfig(
        kms_key_id="alias/lakepurge",
        sender="lakepurge@example.com",
        approvers=(APPROVER,),
        approval_url="http://127.0.0.1/approve",
        topic_arn=f"arn:aws:sns:us-east-1:{ACCOUNT}:lakepurge",
        inline_max_objects=inline_max_objects,
        inline_max_bytes=inline_max_bytes,
        launcher=launcher,  # type: ignore[arg-type]
    )
    return settings.model_copy(update={"workflow": workflow})


@pytest.fixture
def hash_key_env(monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)


@pytest.fixture
def small_lake(lake_factory, pg_dsn, hash_key_env) -> LakeCase:
    """A lake of every format, indexed in PostgreSQL; its configuration is in LAKEPURGE_CONFIG_TOML."""
    case = lake_factory(index_toml("postgres", pg_dsn), objects=20, users=8)
    index_lake_in_its_index(case.settings, case.lake)
    return case


def approved_spec(case: LakeCase, users: list[str], request_id: str) -> PurgeJobSpec:
    """The report of the users, written as the operator path writes it, and its approval."""
    store = open_store(case.settings.index)
    try:
        report = build_report(store, case.settings, users, request_id, Pseudonymizer(HASH_KEY.encode()), force=True)
    finally:
        store.close()
    assert report.objects, "the users must own records in the lake"
    uri, digest = write_report(aws.client("s3"), case.settings, report)
    return PurgeJobSpec(request_id, uri, digest, APPROVER, APPROVED_AT)


def tamper(spec: PurgeJobSpec) -> None:
    """Rewrite the report object after its hash was approved: one more line number for the first object."""
    bucket, key = spec.report_uri.removeprefix("s3://").split("/", 1)
    s3 = aws.client("s3")
    document = orjson.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    document["objects"][0]["lines"].append(1)
    s3.put_object(Bucket=bucket, Key=key, Body=orjson.dumps(document))


def certificate(case: LakeCase, request_id: str) -> dict:
    body = aws.client("s3").get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")["Body"].read()
    document: dict = orjson.loads(body)
    return document


def wait_until_done(launcher: LocalSparkLauncher, job_id: str, timeout: float = 120) -> JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = launcher.status(job_id)
        if status.state != "RUNNING":
            return status
        time.sleep(0.1)
    pytest.fail(f"job {job_id} still running after {timeout} s: {launcher.status(job_id)}")


def assert_no_user_id(text: str, case: LakeCase) -> None:
    for user in case.lake.users:
        assert user not in text


# -- local spark-submit ------------------------------------------------------------------------------------------------


@pytest.mark.spark_job
def test_given_an_approved_report_when_the_local_launcher_runs_it_then_spark_submit_erases_exactly_the_users(
    small_lake, tmp_path
):
    case = small_lake
    users = case.lake.users[:2]
    spec = approved_spec(case, users, "req-local-ok")
    settings = with_workflow(case.settings, LocalLauncherConfig(work_dir=str(tmp_path / "jobs")))
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")

    launcher = launcher_for(settings)
    assert isinstance(launcher, LocalSparkLauncher) and launcher.backend == "local"
    job_id = launcher.start(spec)
    json.dumps(job_id)  # the id travels in Step Functions state
    assert launcher.start(spec) == job_id, "a retried start while the job runs must not start a second purge"
    assert launcher.status(job_id).state == "RUNNING"

    # Later invocations build their own launcher: the job's state lives in its directory, not in memory.
    status = wait_until_done(launcher_for(settings), job_id)

    assert status == JobStatus("SUCCEEDED", "exit code 0")
    assert_invariant(case.lake, case.settings, set(users), before, snapshot(s3, "lake"))
    document = certificate(case, "req-local-ok")
    assert document["approved_by"] == APPROVER
    assert document["approved_at"] == APPROVED_AT
    assert document["report_sha256"] == spec.report_sha256
    assert document["verification"]["passed"] is True
    # Another process (the next Lambda invocation) reads the same status from the job's directory.
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from lakepurge.core.config import LocalLauncherConfig as C; from lakepurge.purge.launch import"
            " LocalSparkLauncher as L; print(L(C(work_dir=sys.argv[1]), None).status(sys.argv[2]).state)",  # type: ignore[arg-type]
            str(tmp_path / "jobs"),
            job_id,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert other.stdout.strip() == "SUCCEEDED"
    assert_no_user_id((tmp_path / "jobs" / job_id / "job.log").read_text(), case)


@pytest.mark.spark_job
def test_given_a_report_changed_after_approval_when_the_local_job_runs_then_it_fails_and_nothing_is_erased(
    small_lake, tmp_path
):
    case = small_lake
    spec = approved_spec(case, case.lake.users[:2], "req-local-tampered")
    tamper(spec)
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")
    launcher = LocalSparkLauncher(LocalLauncherConfig(work_dir=str(tmp_path)), case.settings)

    status = wait_until_done(launcher, launcher.start(spec))

    assert status.state == "FAILED"
    assert status.detail.startswith("exit code 3: lakepurge: purge refused"), status.detail
    assert snapshot(s3, "lake") == before
    assert "certificates/req-local-tampered.json" not in snapshot(s3, "lake-reports")


@pytest.mark.spark_job
def test_given_a_running_local_job_when_its_process_is_killed_then_the_status_is_failed_and_nothing_is_left_running(
    small_lake, tmp_path
):
    case = small_lake
    spec = approved_spec(case, case.lake.users[:2], "req-local-killed")
    launcher = LocalSparkLauncher(LocalLauncherConfig(work_dir=str(tmp_path)), case.settings)
    job_id = launcher.start(spec)
    pid = launcher.pid(job_id)
    assert pid is not None
    time.sleep(2)  # spark-submit has started its JVM
    assert launcher.status(job_id).state == "RUNNING"

    os.kill(pid, signal.SIGKILL)  # the wrapper that would record the exit code
    status = wait_until_done(launcher, job_id, timeout=10)

    assert status.state == "FAILED"
    assert status.detail.startswith("lost:"), status.detail
    # The JVM and workers of its process group are ended too (a loaded 2-core machine takes seconds to reap them).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not _live_members(pid):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the killed job's process group is still running")
    assert launcher.status(job_id).state == "FAILED"  # and stays so


def _live_members(pgid: int) -> list[int]:
    """Processes of the group that still run: a killed process left as a zombie (not yet reaped by its new
    parent on a loaded machine) runs nothing and holds nothing."""
    live = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(entry))
    return live


# -- EMR Serverless ----------------------------------------------------------------------------------------------------


def emr_config(application_id: str, log_uri: str | None = "s3://lake-logs/emr/") -> EmrServerlessLauncherConfig:
    return EmrServerlessLauncherConfig(
        kind="emr-serverless",
        application_id=application_id,
        execution_role_arn=f"arn:aws:iam::{ACCOUNT}:role/lakepurge-purge",
        entry_point="s3://lake-artifacts/lakepurge_jobs/purge.py",
        archive="s3://lake-artifacts/lakepurge-env.tar.gz",
        config_uri="s3://lake-artifacts/lakepurge.toml",
        log_uri=log_uri,
        spark_submit_parameters="--conf spark.executor.cores=2",
    )


@pytest.mark.usefixtures("aws")
def test_given_an_emr_serverless_launcher_when_starting_then_the_job_run_carries_the_report_hash_and_environment():
    client = aws.client("emr-serverless")
    application_id = client.create_application(name="lakepurge", releaseLabel="emr-7.1.0", type="SPARK")[
        "applicationId"
    ]
    base = Settings.model_validate({"index": {"backend": "dynamodb", "table": "t"}, "reports": {"location": "s3://r/"}})
    launcher = launcher_for(with_workflow(base, emr_config(application_id)))
    assert isinstance(launcher, EmrServerlessLauncher) and launcher.backend == "emr-serverless"
    spec = PurgeJobSpec("req-emr-1", "s3://lake-reports/reports/req-emr-1.json", "ab" * 32, APPROVER, APPROVED_AT)

    job_id = launcher.start(spec)

    run = client.get_job_run(applicationId=application_id, jobRunId=job_id)["jobRun"]
    assert run["executionRole"] == f"arn:aws:iam::{ACCOUNT}:role/lakepurge-purge"
    assert run["name"] == "lakepurge-purge-req-emr-1"
    submit = run["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://lake-artifacts/lakepurge_jobs/purge.py"
    assert submit["entryPointArguments"] == [
        "--config",
        "s3://lake-artifacts/lakepurge.toml",
        "--report",
        "s3://lake-reports/reports/req-emr-1.json",
        "--sha256",
        "ab" * 32,
        "--approved-by",
        APPROVER,
        "--approved-at",
        APPROVED_AT,
    ]
    parameters = submit["sparkSubmitParameters"].split()
    assert "spark.archives=s3://lake-artifacts/lakepurge-env.tar.gz#environment" in parameters
    assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python" in parameters
    assert "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python" in parameters
    assert "spark.executor.cores=2" in parameters  # the configured extra parameters come along
    assert run["configurationOverrides"]["monitoringConfiguration"]["s3MonitoringConfiguration"] == {
        "logUri": "s3://lake-logs/emr/"
    }
    assert not any(HASH_KEY in str(value) for value in run.values()), "the hash key is never put in a request"
    assert launcher.status(job_id).state in ("RUNNING", "SUCCEEDED")  # moto reports its runs as finished


def test_given_the_same_request_when_started_twice_on_emr_then_both_starts_send_one_client_token():
    client = aws.client("emr-serverless")
    launcher = EmrServerlessLauncher(emr_config("00fabc", log_uri=None), client=client)
    sent: list[dict] = []
    spec = PurgeJobSpec("req-emr-2", "s3://lake-reports/reports/req-emr-2.json", "cd" * 32)
    with Stubber(client) as stub:
        for run_id in ("run-1", "run-1", "run-2"):
            stub.add_response(
                "start_job_run",
                {"applicationId": "00fabc", "jobRunId": run_id, "arn": f"{APPLICATION_ARN}/jobruns/{run_id}"},
                None,
            )
        client.meta.events.register(
            "provide-client-params.emr-serverless.StartJobRun", lambda params, **_: sent.append(params)
        )
        try:
            launcher.start(spec)
            launcher.start(spec)
            launcher.start(PurgeJobSpec("req-emr-2", spec.report_uri, "ef" * 32))  # a new report: a new run
        finally:
            client.meta.events.unregister("provide-client-params.emr-serverless.StartJobRun")
    assert sent[0]["clientToken"] == sent[1]["clientToken"] != sent[2]["clientToken"]
    assert all(len(p["clientToken"]) <= 64 for p in sent)
    assert "configurationOverrides" not in sent[0]  # no log URI configured
    assert "--approved-by" not in sent[0]["jobDriver"]["sparkSubmit"]["entryPointArguments"]


@pytest.mark.parametrize(
    ("emr_state", "expected"),
    [
        ("SUBMITTED", "RUNNING"),
        ("PENDING", "RUNNING"),
        ("SCHEDULED", "RUNNING"),
        ("RUNNING", "RUNNING"),
        ("QUEUED", "RUNNING"),
        ("SUCCESS", "SUCCEEDED"),
        ("FAILED", "FAILED"),
        ("CANCELLING", "FAILED"),
        ("CANCELLED", "FAILED"),
        ("SOMETHING_NEW", "FAILED"),
    ],
)
def test_given_an_emr_job_run_state_when_asking_the_status_then_it_maps_to_the_workflow_state(emr_state, expected):
    client = aws.client("emr-serverless")
    launcher = EmrServerlessLauncher(emr_config("00fabc"), client=client)
    details = f"Job run {emr_state.lower()} (detail)"
    job_run = {
        "applicationId": "00fabc",
        "jobRunId": "run-9",
        "arn": f"{APPLICATION_ARN}/jobruns/run-9",
        "createdBy": "arn:aws:iam::123456789012:role/x",
        "createdAt": "2026-05-04T10:00:00Z",
        "updatedAt": "2026-05-04T10:01:00Z",
        "executionRole": "arn:aws:iam::123456789012:role/lakepurge-purge",
        "state": emr_state,
        "stateDetails": details,
        "releaseLabel": "emr-7.1.0",
        "jobDriver": {"sparkSubmit": {"entryPoint": "s3://lake-artifacts/lakepurge_jobs/purge.py"}},
    }
    with Stubber(client) as stub:
        stub.add_response("get_job_run", {"jobRun": job_run}, {"applicationId": "00fabc", "jobRunId": "run-9"})
        status = launcher.status("run-9")
    assert status.state == expected
    assert details in status.detail


# -- inline ------------------------------------------------------------------------------------------------------------


def test_given_a_small_approved_report_when_purged_inline_then_exactly_the_users_are_erased_without_spark(
    small_lake, caplog
):
    case = small_lake
    users = case.lake.users[:2]
    spec = approved_spec(case, users, "req-inline-ok")
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")

    from pyspark.sql import SparkSession

    session_before = SparkSession.getActiveSession()
    with caplog.at_level(logging.DEBUG, logger="lakepurge"):
        result = run_inline(case.settings, spec)
    assert SparkSession.getActiveSession() is session_before, "the inline purge must not start Spark"

    assert result.verified and not result.failed
    assert_invariant(case.lake, case.settings, set(users), before, snapshot(s3, "lake"))
    document = certificate(case, "req-inline-ok")
    assert (document["approved_by"], document["approved_at"]) == (APPROVER, APPROVED_AT)
    assert document["verification"]["passed"] is True
    assert document["totals"]["lines_erased"] == result.lines_erased > 0
    assert_no_user_id("\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records), case)


def test_given_a_report_changed_after_approval_when_purged_inline_then_it_is_refused_before_any_write(small_lake):
    case = small_lake
    spec = approved_spec(case, case.lake.users[:2], "req-inline-tampered")
    tamper(spec)
    s3 = aws.client("s3")
    before = snapshot(s3, "lake")

    with pytest.raises(ReportTampered):
        run_inline(case.settings, spec)

    assert snapshot(s3, "lake") == before


def _report_of(case: LakeCase, users: list[str], request_id: str) -> Report:
    store = open_store(case.settings.index)
    try:
        return build_report(store, case.settings, users, request_id, Pseudonymizer(HASH_KEY.encode()), force=True)
    finally:
        store.close()


def _bytes_read(case: LakeCase, report: Report) -> int:
    """What the purge reads of the lake's objects the report names: those of delete-object datasets are not read."""
    read = {o.s3path for o in report.objects if case.settings.dataset_named(o.dataset).erase != "delete-object"}
    return sum(len(o.body) for o in case.lake.objects if f"s3://{case.lake.bucket}/{o.key}" in read)


def test_given_the_inline_thresholds_when_sizing_a_report_then_only_reports_within_both_count_and_bytes_fit(
    small_lake,
):
    case = small_lake
    report = _report_of(case, case.lake.users[:2], "req-size")
    s3 = aws.client("s3")
    objects, read = len(report.objects), _bytes_read(case, report)
    assert read > 0 and bytes_to_read(s3, case.settings, report) == read
    local = LocalLauncherConfig()

    def fits(max_objects: int, max_bytes: int) -> bool:
        return inline_fits(with_workflow(case.settings, local, max_objects, max_bytes), report, s3)

    assert fits(objects, read)
    assert not fits(objects, read - 1)  # few objects, but too many bytes for one Lambda
    assert not fits(objects - 1, read)
    assert not fits(0, read)
    assert inline_fits(case.settings, report, s3) == (objects <= 20)  # no [workflow]: the defaults (256 MiB)


def test_given_a_versioned_lake_when_sizing_a_report_then_every_version_of_its_keys_counts(lake_factory, pg_dsn):
    # The purge rewrites the current version and reads each noncurrent one for the users: all of them take its time.
    case = lake_factory(index_toml("postgres", pg_dsn), objects=10, users=6, versioned=True)
    index_lake_in_its_index(case.settings, case.lake)
    report = _report_of(case, case.lake.users[:1], "req-size-versions")
    s3 = aws.client("s3")
    rewritten = next(o for o in report.objects if case.settings.dataset_named(o.dataset).erase != "delete-object")
    where = S3Uri.parse(rewritten.s3path)
    newer = s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read() + b"\n"
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=newer)

    assert bytes_to_read(s3, case.settings, report) == _bytes_read(case, report) + len(newer)


def test_given_no_configuration_in_the_environment_when_starting_locally_then_it_fails_before_starting_a_jvm(
    small_lake, tmp_path, monkeypatch
):
    monkeypatch.delenv("LAKEPURGE_CONFIG_TOML")
    monkeypatch.delenv("LAKEPURGE_CONFIG", raising=False)
    launcher = LocalSparkLauncher(LocalLauncherConfig(work_dir=str(tmp_path)), small_lake.settings)
    from lakepurge.core.config import ConfigError

    with pytest.raises(ConfigError, match="LAKEPURGE_CONFIG"):
        launcher.start(PurgeJobSpec("req-x", "s3://lake-reports/reports/req-x.json", "00" * 32))
    assert not any(Path(tmp_path).iterdir())


def test_given_a_per_object_object_deleted_by_someone_else_after_approval_when_purged_then_it_fails_not_certified(
    small_lake,
):
    """The report names it by reference only; nothing in the lake resolves it any more (neither the object nor a
    sidecar), and this purge never recorded erasing it, so it cannot be counted erased: the object fails and the
    request is not certified."""
    from lakepurge.core.s3uri import S3Uri
    from lakepurge.purge.job import UNRESOLVED

    case = small_lake
    per_object = {d.name for d in case.settings.datasets if d.per_object}

    def dataset_of(s3path: str) -> str | None:
        uri = S3Uri.parse(s3path)
        found = case.settings.dataset_for(uri.bucket, uri.key)
        return found.name if found is not None else None

    owned = sorted((user, s3path) for user, s3path, _ in case.lake.truth if dataset_of(s3path) in per_object)
    if not owned:
        pytest.skip("no sample user owns one-user-per-object data")
    user, s3path = owned[0]
    spec = approved_spec(case, [user], "req-inline-unresolved")
    uri = S3Uri.parse(s3path)
    aws.client("s3").delete_object(Bucket=uri.bucket, Key=uri.key)
    dataset = case.settings.dataset_for(uri.bucket, uri.key)
    assert dataset is not None
    if dataset.id_sidecar is not None:
        aws.client("s3").delete_object(Bucket=uri.bucket, Key=uri.key + dataset.id_sidecar.suffix)

    result = run_inline(case.settings, spec)

    assert not result.verified
    assert [o.error for o in result.failed] == [UNRESOLVED]
    assert certificate(case, "req-inline-unresolved")["verification"]["passed"] is False


def test_given_an_object_deleted_by_someone_else_but_not_its_sidecar_when_purged_then_the_sidecar_goes_too(
    small_lake,
):
    """The sidecar still names the owner, and resolves the report's reference: the purge deletes it, and checks
    every version of the object and of the sidecar, so the request can be certified."""
    case = small_lake
    s3 = aws.client("s3")
    attachment = an_attachment(case.lake)
    spec = approved_spec(case, [attachment.owner], "req-inline-orphaned-sidecar")
    s3.delete_object(Bucket="lake", Key=attachment.data_key)

    result = run_inline(case.settings, spec)

    assert "Contents" not in s3.list_objects_v2(Bucket="lake", Prefix=attachment.sidecar_key)
    [outcome] = [o for o in result.outcomes if o.s3path == f"s3://lake/{attachment.data_key}"]
    assert outcome.status == "gone" and outcome.sidecar_versions_deleted == ["null"]
    assert result.verified
    assert certificate(case, "req-inline-orphaned-sidecar")["verification"]["passed"] is True
