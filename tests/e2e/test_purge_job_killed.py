"""lakepurge_jobs/purge.py killed half-way (SIGKILL to its process group), then run again, ends where one clean run
does."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, replace
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.local.samples import generate_lake, settings_toml
from lakepurge.reports import layout
from lakepurge.reports.report import build_report
from tests.support.lakes import an_attachment, index_toml
from tests.support.purging import HASH_KEY, index_lake

pytestmark = [pytest.mark.e2e, pytest.mark.spark_job]  # the purge job runs with spark-submit

ROOT = Path(__file__).resolve().parents[2]


def prepare(bucket: str, pg_dsn: str, tmp_path: Path, objects: int = 80):
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.create_bucket(Bucket=f"{bucket}-reports")
    lake = generate_lake(bucket=bucket, objects=objects, users=20, records_per_object=60, seed=3)
    lake.upload(s3)
    toml = settings_toml(bucket, index_toml("postgres", pg_dsn), f"s3://{bucket}-reports/")
    toml = toml.replace(
        "[[datasets]]", "[purge]\nmax_object_fraction = 1.0\nmax_dataset_fraction = 1.0\n\n[[datasets]]", 1
    )
    config = tmp_path / f"{bucket}.toml"
    config.write_text(toml)
    settings = parse_settings(tomllib.loads(toml))
    store = open_store(settings.index)
    index_lake(store, settings, lake)
    report = build_report(store, settings, lake.users[:6], f"req-{bucket}", Pseudonymizer(HASH_KEY.encode()))
    uri, digest = layout.write_report(s3, settings, report)
    return lake, settings, config, uri, digest, len(report.objects)


def job(config: Path, uri: str, digest: str, **environment: str) -> subprocess.Popen:
    env = {**os.environ, "LAKEPURGE_HASH_KEY": HASH_KEY, "PYTHONPATH": str(ROOT), **environment}
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "lakepurge_jobs" / "purge.py"),
            "--config",
            str(config),
            "--report",
            uri,
            "--sha256",
            digest,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes the JVM and Python workers with it
    )


def recorded(bucket: str) -> int:
    page = aws.client("s3").list_objects_v2(Bucket=f"{bucket}-reports", Prefix="results/")
    return page.get("KeyCount", 0)


def content(bucket: str) -> dict[str, object]:
    """Every current object, decoded (gzip streams and Parquet files compared by what they hold)."""
    s3 = aws.client("s3")
    state: dict[str, object] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            if item["Key"].endswith(".gz"):
                body = gzip.decompress(body)
            state[item["Key"]] = (
                pq.read_table(io.BytesIO(body)).to_pylist() if item["Key"].endswith(".parquet") else body
            )
    return state


@pytest.mark.usefixtures("aws")
def test_given_a_purge_job_killed_half_way_when_run_again_then_the_end_state_equals_one_clean_run(pg_dsn, tmp_path):
    clean = prepare("clean-lake", pg_dsn, tmp_path)
    killed = prepare("killed-lake", pg_dsn, tmp_path)
    total = killed[5]

    # The clean run works on its own buckets and index rows: it runs while the other lake's job is killed and run
    # again (it prints one summary line on stdout, read when it ends).
    clean_run = job(*clean[2:5])
    try:
        interrupted = job(*killed[2:5])
        deadline = time.monotonic() + 300
        while recorded("killed-lake") < 5 and interrupted.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(interrupted.pid, signal.SIGKILL)
        interrupted.wait()
        done_before_kill = recorded("killed-lake")
        assert 0 < done_before_kill < total, "the kill must land half-way"

        rerun = job(*killed[2:5])
        out, _ = rerun.communicate(timeout=600)
        assert rerun.returncode == 0
        clean_run.communicate(timeout=600)
    finally:
        if clean_run.poll() is None:  # the test failed before it ended: no job is left running
            os.killpg(clean_run.pid, signal.SIGKILL)
            clean_run.wait()
    assert clean_run.returncode == 0
    summary = orjson.loads(out.splitlines()[-1])
    assert summary["verified"] is True

    killed_lake, clean_lake = content("killed-lake"), content("clean-lake")
    differing = sorted(
        key for key in killed_lake.keys() | clean_lake.keys() if killed_lake.get(key) != clean_lake.get(key)
    )
    assert not differing, f"objects that differ from those of one clean run: {differing}"
    store = open_store(killed[1].index)
    rows = store.dump()
    assert {(u, p.replace("s3://killed-lake/", ""), n) for u, p, n in rows if p.startswith("s3://killed-lake/")} == {
        (u, p.replace("s3://clean-lake/", ""), n) for u, p, n in rows if p.startswith("s3://clean-lake/")
    }
    s3 = aws.client("s3")
    certificates = [
        orjson.loads(s3.get_object(Bucket=f"{b}-reports", Key=f"certificates/req-{b}.json")["Body"].read())
        for b in ("clean-lake", "killed-lake")
    ]
    assert certificates[0]["totals"] == certificates[1]["totals"]
    assert certificates[1]["verification"]["passed"] is True


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize("recorded", ["in a batch of intents", "on its own, as earlier versions did"])
def test_given_a_run_killed_between_a_write_and_its_record_when_run_again_then_the_erasure_is_still_counted(
    pg_dsn, tmp_path, spark, recorded
):
    from lakepurge.purge.engine import ObjectOutcome, PurgeTarget, purge_object
    from lakepurge.purge.job import run_purge
    from lakepurge.purge.placeholders import file_batches

    # What is tested is one object's write and its missing record: a smaller lake than the kill test's will do.
    lake, settings, _, uri, digest, _ = prepare("crashed-lake", pg_dsn, tmp_path, objects=24)
    s3 = aws.client("s3")
    report, _ = layout.load_report(s3, uri, digest)
    first = next(o for o in report.objects if o.erase == "blank")
    intents: list[ObjectOutcome] = []
    store = open_store(settings.index)
    # The first run: the intent is recorded, the object rewritten, then the process dies before the final record.
    done = purge_object(
        s3,
        store,
        settings,
        PurgeTarget(first.s3path, first.dataset, first.etag, first.lines),
        frozenset(lake.users[:6]),
        before_write=intents.append,
    )
    assert done.status == "erased" and done.lines_erased > 0
    prefix = layout.results_prefix(settings, report.request_id)
    if recorded == "in a batch of intents":
        # An earlier intent of the same object (a first attempt) comes first in name order: the later one counts.
        earlier = replace(intents[0], lines_erased=999)
        for name, intent in (("00000000000000000001-a", earlier), ("00000000000000000002-b", intents[0])):
            where = layout.intents_batch(prefix, name)
            s3.put_object(Bucket=where.bucket, Key=where.key, Body=orjson.dumps({"outcomes": [asdict(intent)]}))
    else:
        where = layout.result(prefix, first.s3path)
        s3.put_object(Bucket=where.bucket, Key=where.key, Body=orjson.dumps(asdict(intents[0])))

    result = run_purge(spark, settings, report, HASH_KEY.encode(), report_sha256=digest)

    [settled] = [o for o in result.outcomes if o.s3path == first.s3path]
    assert settled.status == "erased" and settled.committed
    assert settled.lines_erased == done.lines_erased
    assert settled.after_etag == done.after_etag
    assert result.verified
    # The placeholders the killed run left are recorded all the same (from its intent), for the vacuum to remove.
    recorded = file_batches(s3, settings, apply=False)[first.s3path]
    assert [r.spans for r in recorded if r.etag == done.after_etag] == [tuple(done.placeholder_spans or ())]
    assert done.placeholder_spans


class Killed(BaseException):
    """The process dies here (raised where a kill would land; no handler of the engine catches it)."""


@pytest.mark.usefixtures("aws")
def test_given_a_run_killed_between_deleting_an_object_and_its_sidecar_when_run_again_then_the_sidecar_goes_too(
    pg_dsn, tmp_path, spark, monkeypatch
):
    from lakepurge.purge import engine
    from lakepurge.purge.engine import ObjectOutcome, PurgeTarget, purge_object
    from lakepurge.purge.job import run_purge
    from lakepurge.reports.report import object_reference, resolve_references

    lake, settings, _, _, _, _ = prepare("orphan-lake", pg_dsn, tmp_path, objects=24)
    s3 = aws.client("s3")
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    attachment = an_attachment(lake)
    owner = attachment.owner
    report = build_report(open_store(settings.index), settings, [owner], "req-orphan", pseudonymizer)
    _, digest = layout.write_report(s3, settings, report)
    resolved = resolve_references(s3, settings, report, pseudonymizer)
    data_path = f"s3://orphan-lake/{attachment.data_key}"
    [target] = [o for o in resolved.objects if o.s3path == data_path]

    # The first run records its intent and deletes the object; the process dies before the sidecar's delete.
    def killed(*_: object) -> None:
        raise Killed

    monkeypatch.setattr(engine._PurgeStep, "_delete_sidecar", killed)
    intents: list[ObjectOutcome] = []
    with pytest.raises(Killed):
        purge_object(
            s3,
            open_store(settings.index),
            settings,
            PurgeTarget(target.s3path, target.dataset, target.etag, target.lines),
            frozenset([owner]),
            before_write=intents.append,
        )
    monkeypatch.undo()
    stored = replace(intents[0], s3path=object_reference(data_path, pseudonymizer))
    where = layout.intents_batch(layout.results_prefix(settings, report.request_id), "00000000000000000001-a")
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=orjson.dumps({"outcomes": [asdict(stored)]}))

    def versions(key: str) -> list[str]:
        page = s3.list_object_versions(Bucket="orphan-lake", Prefix=key)
        return [v["VersionId"] for v in page.get("Versions", []) if v["Key"] == key]

    assert versions(attachment.data_key) == []
    assert versions(attachment.sidecar_key), "the sidecar, naming the owner, outlived its object"

    result = run_purge(spark, settings, report, HASH_KEY.encode(), report_sha256=digest)

    assert versions(attachment.sidecar_key) == [], "the rerun left the sidecar naming the owner"
    [settled] = [o for o in result.outcomes if o.s3path == data_path]
    assert settled.status == "deleted" and settled.committed
    assert settled.sidecar_versions_deleted
    assert result.verified


@pytest.mark.usefixtures("aws")
def test_given_an_executor_lost_between_a_write_and_its_answer_when_spark_runs_the_task_again_then_it_is_counted(
    pg_dsn, moto_server, tmp_path
):
    from tests.support.faults import FaultProxy, Rule
    from tests.support.faultsuite import DATA, FaultCase, Schedule

    case = FaultCase("postgres", pg_dsn)
    config = tmp_path / "lost-executor.toml"
    config.write_text(case.toml())
    # S3 applies the second rewrite, then the Python worker that sent it is killed: Spark runs its task again (the
    # master allows two attempts), on objects the first attempt already rewrote.
    proxy = FaultProxy(moto_server.endpoint)
    proxy.set_rules(case.rules(Schedule("executor lost", [Rule("kill_client", "PUT", r"^/{lake}" + DATA, (2,))])))
    master = "local[2,2]"
    try:
        run = job(
            config,
            case.report_uri,
            case.digest,
            AWS_ENDPOINT_URL=proxy.endpoint,
            SPARK_MASTER=master,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_SUBMIT_ARGS=f"--master {master} --conf spark.driver.host=127.0.0.1 pyspark-shell",
        )
        out, _ = run.communicate(timeout=600)
    finally:
        proxy.stop()

    assert proxy.fired_kinds() == ["kill_client"]
    assert run.returncode == 0, out
    assert orjson.loads(out.splitlines()[-1])["verified"] is True
    assert case.check_faulty(verified=True) == []
    case.purge(None, case.settings)  # the rerun, without faults
    assert case.check_rerun() == []
