"""The Spark jobs other than the purge, run as EMR Serverless runs them: spark-submit of lakepurge_jobs/<script>.py
with the arguments `--on emr-serverless` submits (lakepurge.ops.remote_jobs), the configuration read from its s3://
URI, against the moto lake and PostgreSQL of the session. `make spark35` runs them again on pyspark 3.5, the Spark
of the template's EMR release. Each checks what an operator would: the index, the coverage, the lake's bytes."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pyspark
import pytest

from lakepurge.core import aws
from lakepurge.core.config import LocalLauncherConfig
from lakepurge.index import open_store
from lakepurge.ops.remote_jobs import backfill_job, reconcile_job, vacuum_job
from lakepurge.purge.launch import LocalSparkLauncher, SparkJob
from tests.support.invariant import assert_vacuumed, snapshot
from tests.support.lakes import LakeCase, index_toml
from tests.support.purging import HASH_KEY, index_lake, purge_report, report_for

pytestmark = [pytest.mark.integration, pytest.mark.spark_job]

CONFIG_URI = "s3://lake-artifacts/config/lakepurge.toml"


@pytest.fixture
def job_lake(lake_factory, pg_dsn, monkeypatch) -> LakeCase:
    """A small lake of every format, its PostgreSQL index empty, its configuration published at CONFIG_URI."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    case = lake_factory(index_toml("postgres", pg_dsn), objects=12, users=6)
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="lake-artifacts")
    bucket, key = CONFIG_URI.removeprefix("s3://").split("/", 1)
    s3.put_object(Bucket=bucket, Key=key, Body=case.toml.encode())
    return case


def submit(case: LakeCase, job: SparkJob, tmp_path) -> tuple[int, object]:
    """spark-submit the job's script as EMR Serverless runs it (`--config CONFIG_URI`, then the job's arguments):
    its exit code and the JSON it printed. The configuration is only at CONFIG_URI: none is in its environment."""
    launcher = LocalSparkLauncher(LocalLauncherConfig(), case.settings)
    environment = {k: v for k, v in launcher.environment().items() if not k.startswith("LAKEPURGE_CONFIG")}
    result = subprocess.run(
        launcher.submit_command(job.script, ["--config", CONFIG_URI, *job.arguments]),
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    sys.stderr.write(result.stderr[-4000:] + "\n--- stdout\n" + result.stdout[-4000:])  # shown when it fails
    # the job ran on the Spark these tests import (`make spark35`: 3.5, put first on PYTHONPATH), not another one
    assert f"Running Spark version {pyspark.__version__}" in result.stderr, (
        f"the job (exit code {result.returncode}) did not start Spark {pyspark.__version__}: {result.stdout[-2000:]}"
    )
    for user in case.lake.users:  # the job's output ends in EMR's logs: counts and hashes, never an id
        assert user not in result.stdout and user not in result.stderr
    return result.returncode, last_document(result.stdout)


def last_document(output: str) -> object:
    """The JSON the job printed last: spark-submit merges the Python driver's stderr (its log lines) into stdout."""
    lines = output.splitlines()
    for start in reversed(range(len(lines))):
        if lines[start].startswith(("{", "[")):
            try:
                return orjson.loads("\n".join(lines[start:]))
            except orjson.JSONDecodeError:
                continue
    return None


def dump(case: LakeCase) -> set[tuple[str, str, int]]:
    store = open_store(case.settings.index)
    try:
        return store.dump()
    finally:
        store.close()


def coverage(case: LakeCase) -> dict:
    store = open_store(case.settings.index)
    try:
        return store.coverage()
    finally:
        store.close()


def test_given_an_unindexed_lake_when_build_index_is_spark_submitted_then_the_index_equals_the_ground_truth(
    job_lake, tmp_path
):
    case = job_lake
    assert dump(case) == set()

    code, result = submit(case, backfill_job([], force=False), tmp_path)

    assert code == 0, result
    assert isinstance(result, dict) and result["failed"] == [] and result["unindexable"] == 0
    assert dump(case) == case.lake.truth
    recorded = coverage(case)
    assert set(recorded) == {d.name for d in case.settings.datasets}
    assert {(c.method, c.failed, c.drift) for c in recorded.values()} == {("backfill", 0, 0)}


def test_given_an_index_that_missed_two_changes_when_reconcile_is_spark_submitted_then_both_are_fixed_and_covered(
    job_lake, tmp_path
):
    case = job_lake
    store = open_store(case.settings.index)
    try:
        index_lake(store, case.settings, case.lake, datasets=())  # as the S3 events index it: no listing yet
    finally:
        store.close()
    # GIVEN two changes whose events never reached the indexer: an object copied in, another deleted
    s3 = aws.client("s3")
    copied, deleted = sorted(o.key for o in case.lake.objects if o.key.startswith("reviews/"))[:2]
    added = copied.replace("/part-", "/part-copy-")
    s3.copy_object(Bucket="lake", Key=added, CopySource={"Bucket": "lake", "Key": copied})
    s3.delete_object(Bucket="lake", Key=deleted)
    truth = {(user, path, line) for user, path, line in case.lake.truth if path != f"s3://lake/{deleted}"} | {
        (user, f"s3://lake/{added}", line) for user, path, line in case.lake.truth if path == f"s3://lake/{copied}"
    }
    assert coverage(case) == {} and dump(case) != truth

    code, results = submit(case, reconcile_job([], report_only=False), tmp_path)

    assert code == 0, results
    assert isinstance(results, list)
    by_dataset = {r["dataset"]: r for r in results}
    reviews = by_dataset.pop("reviews")
    counts = ("missing", "gone", "changed", "fixed", "drift")
    assert {k: reviews[k] for k in counts} == {"missing": 1, "gone": 1, "changed": 0, "fixed": 2, "drift": 0}
    assert all(r["missing"] == r["gone"] == r["changed"] == r["drift"] == 0 for r in by_dataset.values())
    assert dump(case) == truth
    recorded = coverage(case)
    assert set(recorded) == {d.name for d in case.settings.datasets}
    assert {(c.method, c.failed, c.drift) for c in recorded.values()} == {("reconcile", 0, 0)}
    assert (
        recorded["reviews"].objects
        == reviews["objects"]
        == sum(1 for o in case.lake.objects if o.key.startswith("reviews/"))
    )


def test_given_placeholders_recorded_by_a_purge_when_vacuum_is_spark_submitted_then_exactly_those_lines_are_removed(
    job_lake, tmp_path
):
    case = job_lake
    s3 = aws.client("s3")
    original = snapshot(s3, "lake")
    erased = set(case.lake.users[:2])
    store = open_store(case.settings.index)
    try:
        index_lake(store, case.settings, case.lake)
        outcomes = purge_report(store, case.settings, report_for(store, case.settings, sorted(erased)), erased)
    finally:
        store.close()
    recorded = {o.s3path: sum(n for _, n in o.placeholder_spans) for o in outcomes if o.placeholder_spans}
    assert recorded, "the purge must have left placeholders in a blank-mode dataset"
    purged = snapshot(s3, "lake")

    code, summary = submit(case, vacuum_job([], apply=True), tmp_path)

    assert code == 0, summary
    assert isinstance(summary, dict) and summary["failed"] == []
    assert (summary["dry_run"], summary["lines_removed"]) == (False, sum(recorded.values()))
    vacuumed = snapshot(s3, "lake")
    assert_vacuumed(case.lake, case.settings, erased, original, vacuumed)
    untouched = {key for key in purged if f"s3://lake/{key}" not in recorded}
    assert {key: vacuumed.get(key) for key in untouched} == {key: purged[key] for key in untouched}
