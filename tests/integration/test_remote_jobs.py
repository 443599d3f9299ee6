"""Heavy commands on EMR Serverless from the CLI (`--on emr-serverless`): what is submitted, how it is followed,
and, for `verify`, that the job's own code produces the answer the CLI prints, with no raw id in the run record.

moto's EMR Serverless records the runs and reports them finished; it runs nothing. For `verify` the test plays
EMR's part: when the CLI first asks the run's state, the submitted job (lakepurge_jobs/verify.py, with exactly the
arguments of the run record) is run in this process on the shared Spark session against the moto lake.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from botocore.stub import Stubber

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.ops.remote_jobs import emr_launcher, run_remote, vacuum_job
from tests.support.cli import cli
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_lake_in_its_index

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
LOG_URI = "s3://lake-logs/emr/"
CONFIG_URI = "s3://lake-artifacts/config/lakepurge.toml"


def launcher_toml(application_id: str) -> str:
    return f"""
[workflow]
kms_key_id = "alias/lakepurge"
sender = "lakepurge@example.com"
approvers = ["dpo@example.com"]
approval_url = "https://approve.example.com/"
topic_arn = "arn:aws:sns:us-east-1:{ACCOUNT}:lakepurge"

[workflow.launcher]
kind = "emr-serverless"
application_id = "{application_id}"
execution_role_arn = "arn:aws:iam::{ACCOUNT}:role/lakepurge-jobs"
entry_point = "s3://lake-artifacts/spark/purge.py"
archive = "s3://lake-artifacts/spark/lakepurge-env.tar.gz"
config_uri = "s3://lake-artifacts/config/lakepurge.toml"
log_uri = "{LOG_URI}"
"""


@pytest.fixture
def emr_lake(lake_factory, pg_dsn, tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    aws.configure(cli=True)  # the CLI's clients: the test's hooks go on the same ones
    emr = aws.client("emr-serverless")
    application_id = emr.create_application(name="lakepurge", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
    case = lake_factory(index_toml("postgres", pg_dsn), objects=8, users=12)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml + launcher_toml(application_id))
    yield case, str(config), emr, application_id
    aws.configure(cli=False)


def runs(emr, application_id: str) -> list[dict]:
    emr.get_application(applicationId=application_id)  # it exists ...
    try:
        listed = emr.list_job_runs(applicationId=application_id)["jobRuns"]
    except emr.exceptions.ResourceNotFoundException:
        return []  # ... and moto 5.2.5 answers "does not exist" for an application that has no runs yet
    return [emr.get_job_run(applicationId=application_id, jobRunId=r["id"])["jobRun"] for r in listed]


def test_given_emr_configured_when_backfill_runs_on_emr_then_build_index_is_submitted_and_followed_to_its_end(
    emr_lake, capsys
):
    _, config, emr, application_id = emr_lake

    code, document = cli(
        capsys, "index", "backfill", "--on", "emr-serverless", "--dataset", "reviews", "--config", config
    )

    assert code == 0, document
    assert document["state"] == "SUCCEEDED"
    (run,) = runs(emr, application_id)
    assert run["jobRunId"] == document["job_id"]
    submit = run["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://lake-artifacts/spark/build_index.py"
    assert submit["entryPointArguments"] == ["--config", CONFIG_URI, "--dataset", "reviews"]
    assert document["logs"].startswith(f"{LOG_URI}applications/{application_id}/jobs/{document['job_id']}/")


def test_given_an_unknown_dataset_when_vacuum_runs_on_emr_then_nothing_is_submitted(emr_lake, capsys):
    _, config, emr, application_id = emr_lake
    code, document = cli(capsys, "vacuum", "--on", "emr-serverless", "--dataset", "nope", "--config", config)
    assert code == 2
    assert "reviews" in document["error"]  # the names that exist
    assert runs(emr, application_id) == []


def test_given_a_failed_emr_run_when_followed_then_the_command_fails_with_the_state_detail_and_the_logs():
    client = aws.client("emr-serverless")
    settings = Settings.model_validate(
        {
            "index": {"backend": "dynamodb", "table": "t"},
            "reports": {"location": "s3://r/"},
            "workflow": {
                "kms_key_id": "k",
                "sender": "a@example.com",
                "approvers": ["b@example.com"],
                "approval_url": "https://x/",
                "topic_arn": f"arn:aws:sns:us-east-1:{ACCOUNT}:t",
                "launcher": {
                    "kind": "emr-serverless",
                    "application_id": "00fabc",
                    "execution_role_arn": f"arn:aws:iam::{ACCOUNT}:role/r",
                    "entry_point": "s3://a/spark/purge.py",
                    "archive": "s3://a/spark/env.tar.gz",
                    "config_uri": "s3://a/config/lakepurge.toml",
                },
            },
        }
    )
    launcher = emr_launcher(settings, client)
    said: list[str] = []
    job_run = {
        "applicationId": "00fabc",
        "jobRunId": "run-7",
        "arn": f"arn:aws:emr-serverless:us-east-1:{ACCOUNT}:/applications/00fabc/jobruns/run-7",
        "createdBy": f"arn:aws:iam::{ACCOUNT}:role/x",
        "createdAt": "2026-11-23T10:00:00Z",
        "updatedAt": "2026-11-23T10:01:00Z",
        "executionRole": f"arn:aws:iam::{ACCOUNT}:role/r",
        "releaseLabel": "emr-7.1.0",
        "jobDriver": {"sparkSubmit": {"entryPoint": "s3://a/spark/vacuum.py"}},
    }
    with Stubber(client) as stub:
        stub.add_response("start_job_run", {"applicationId": "00fabc", "jobRunId": "run-7", "arn": job_run["arn"]})
        for state, detail in (("PENDING", "waiting for capacity"), ("RUNNING", "running"), ("FAILED", "exit 1")):
            stub.add_response("get_job_run", {"jobRun": {**job_run, "state": state, "stateDetails": detail}})
        run = run_remote(settings, vacuum_job(["reviews"], apply=False), said.append, poll_seconds=0, launcher=launcher)

    assert run.status.state == "FAILED" and not run.succeeded
    assert "exit 1" in run.status.detail
    assert [line.split(": ", 1)[1] for line in said if line.startswith("  ") and "logs" not in line] == [
        "waiting for capacity",
        "running",
        "exit 1",
    ]
    assert "get-dashboard-for-job-run" in run.logs  # no log_uri configured: how to find the logs anyway


def test_given_a_purged_user_when_verified_on_emr_then_the_job_reads_hashes_only_and_the_cli_reports_its_answer(
    emr_lake, capsys, spark
):
    from lakepurge_jobs import verify as verify_job

    case, config, emr, application_id = emr_lake
    index_lake_in_its_index(case.settings, case.lake)
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="lake-artifacts")
    s3.put_object(Bucket="lake-artifacts", Key="config/lakepurge.toml", Body=Path(config).read_bytes())
    kept, erased = case.lake.users[0], case.lake.users[1]
    code, purged = cli(capsys, "purge", erased, "--yes", "--force", "--engine", "inline", "--config", config)
    assert code == 0 and purged["verified"] is True, purged

    submitted: list[list[str]] = []

    def run_the_job_as_emr_would(params, **_):  # the first status request: EMR has run the job by now
        if submitted and submitted[-1]:
            with contextlib.redirect_stdout(io.StringIO()):  # the driver's stdout goes to EMR's logs
                assert verify_job.main(submitted[-1]) == 0
            submitted.append([])

    def record_submission(params, **_):
        submitted.append(params["jobDriver"]["sparkSubmit"]["entryPointArguments"])

    emr.meta.events.register("provide-client-params.emr-serverless.StartJobRun", record_submission)
    emr.meta.events.register("provide-client-params.emr-serverless.GetJobRun", run_the_job_as_emr_would)
    try:
        code_kept, kept_doc = cli(capsys, "verify", kept, "--on", "emr-serverless", "--config", config)
        code_erased, erased_doc = cli(capsys, "verify", erased, "--on", "emr-serverless", "--config", config)
    finally:
        emr.meta.events.unregister("provide-client-params.emr-serverless.StartJobRun", record_submission)
        emr.meta.events.unregister("provide-client-params.emr-serverless.GetJobRun", run_the_job_as_emr_would)

    assert code_kept == 1 and kept_doc["verified"] is False and kept_doc["remaining"], kept_doc
    assert code_erased == 0 and erased_doc["verified"] is True and erased_doc["remaining"] == [], erased_doc
    _, local_doc = cli(capsys, "verify", kept, "--engine", "spark", "--config", config)  # the same check on local Spark
    where = {"job", "engine", "ran"}  # where each ran, not what it found
    assert {k: v for k, v in kept_doc.items() if k not in where} == {
        k: v for k, v in local_doc.items() if k not in where
    }
    assert erased_doc["objects_checked"] == kept_doc["objects_checked"] > 0
    verify_runs = runs(emr, application_id)
    assert len(verify_runs) == 2
    for run in verify_runs:
        assert run["jobDriver"]["sparkSubmit"]["entryPoint"] == "s3://lake-artifacts/spark/verify.py"
        recorded = json.dumps(run, default=str)
        assert kept not in recorded and erased not in recorded, "no raw id in an EMR run record"
    for item in s3.list_objects_v2(Bucket="lake-reports", Prefix="verifications/").get("Contents", []):
        body = s3.get_object(Bucket="lake-reports", Key=item["Key"])["Body"].read()
        assert kept.encode() not in body and erased.encode() not in body, "hashes only in the job's documents"
