"""A purge on Spark whose starter holds the raw ids seals them for the executors (lakepurge.core.executor_ids): the
executors open them and check each object by the ids themselves, so a line of a requested user the index missed is
still found before the write and erased; the ids reach nothing Spark ships, logs, keeps (its JVM's heap) or shows
(its UI's REST API, its event log), and the sealed document is gone, every version, once the purge ends."""

from __future__ import annotations

import mmap
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from lakepurge.core import executor_ids
from lakepurge.index import open_store
from lakepurge.index.base import NewVersion
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.ops.manual_purge import purge_users
from lakepurge.reports import layout
from tests.support.lakes import events_lake, events_toml
from tests.support.shipping import record_shipped

pytestmark = pytest.mark.integration

KEY = "sealed-ids-hash-key-" + "k" * 30
# Distinctive ids: found anywhere, they came from this test.
ALICE = "sealed-canary-7f3a1c9e-alice@example.com"
BOB = "sealed-canary-7f3a1c9e-bob@example.com"


def _stale_lake(pg_dsn: str) -> tuple[Any, str, Any, list[str]]:
    """An events lake (reports bucket versioned) of one 400-line object, Alice's at 10 and 300, Bob's at 20, whose
    index missed Alice's line 300 in this very version (its row dropped, the version kept)."""
    s3, bucket, settings = events_lake(pg_dsn, "sealed")
    s3.put_bucket_versioning(Bucket=f"{bucket}-reports", VersioningConfiguration={"Status": "Enabled"})
    owners = [f"other-{n}@example.org" for n in range(400)]
    owners[10] = owners[300] = ALICE
    owners[20] = BOB
    body = b"".join(orjson.dumps({"user_id": user, "n": n}) + b"\n" for n, user in enumerate(owners))
    s3.put_object(Bucket=bucket, Key="events/big.jsonl", Body=body)
    s3.put_object(Bucket=bucket, Key="events/small.jsonl", Body=b'{"user_id":"carol","n":0}\n')
    store = open_store(settings.index)
    for key in ("events/big.jsonl", "events/small.jsonl"):
        index_object(s3, store, settings, bucket, key)
    run_reconcile(None, settings)
    held = store.get_object(f"s3://{bucket}/events/big.jsonl")
    assert held is not None
    same = NewVersion(held.etag, held.version_id, held.last_modified)
    assert store.apply_erasure(held.s3path, held.etag, same, [300])
    store.close()
    return s3, bucket, settings, owners


def _recording_seals(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The sealed documents the starter writes, as written."""
    sealed: list[bytes] = []
    seal = executor_ids.seal

    def recording(hash_key: bytes, request_id: str, ids: Any) -> bytes:
        sealed.append(seal(hash_key, request_id, ids))
        return sealed[-1]

    monkeypatch.setattr(executor_ids, "seal", recording)
    return sealed


def test_given_a_spark_purge_and_a_stale_index_when_executors_open_the_sealed_ids_then_the_line_goes_and_no_id_leaks(
    aws: object, pg_dsn: str, spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    s3, bucket, settings, owners = _stale_lake(pg_dsn)
    caplog.set_level("INFO")
    shipped = record_shipped(monkeypatch)
    sealed = _recording_seals(monkeypatch)

    run = purge_users(settings, [ALICE, BOB], dry_run=False, force=True, engine="spark", say=lambda _line: None)

    assert run.result is not None and run.result.verified
    written = s3.get_object(Bucket=bucket, Key="events/big.jsonl")["Body"].read().splitlines()
    assert [n for n, line in enumerate(written) if line == b"{}"] == [10, 20, 300]  # the missed line went too
    assert [line for n, line in enumerate(written) if n not in (10, 20, 300)] == [
        orjson.dumps({"user_id": user, "n": n}) for n, user in enumerate(owners) if n not in (10, 20, 300)
    ]
    # The starter sealed exactly the ids, for this request and key; the executors checked by them (the tasks' count,
    # as the driver logs it), the driver never opened them and shipped only where they are.
    assert len(sealed) == 1
    assert executor_ids.unseal(sealed[0], KEY.encode(), run.request_id) == (ALICE, BOB)
    assert executor_ids.unseal(sealed[0], KEY.encode(), "another-request") is None
    counted = [r for r in caplog.records if r.getMessage() == "objects checked by the sealed ids"]
    assert [(r.objects, r.checked_by_ids) for r in counted] == [(1, 1)]  # type: ignore[attr-defined]
    where = layout.executor_ids(layout.results_prefix(settings, run.request_id))
    assert any(where.key.encode() in pickled for pickled in shipped["closures"])  # the search finds what is there
    assert not any(sealed[0][13:] in pickled for pickled in [*shipped["closures"], *shipped["items"]])
    # Gone once the purge ended: no version, no delete marker, in a versioned bucket.
    versions = s3.list_object_versions(Bucket=where.bucket, Prefix=where.key)
    assert versions.get("Versions", []) == [] and versions.get("DeleteMarkers", []) == []
    # Every record with its fields (what a JSON log line shows): the request id is there, no id.
    logged = "\n".join(str(record.__dict__) for record in caplog.records)
    assert "sealed ids deleted" in caplog.messages
    assert run.request_id in logged
    for user in (ALICE, BOB):
        assert user.encode() not in sealed[0]
        assert user not in logged
        assert not any(user.encode() in pickled for pickled in [*shipped["closures"], *shipped["items"]])


def _holds(dump: Path, text: str) -> bool:
    """Whether the heap dump holds text as UTF-8 (a compact Java string is Latin-1: the same bytes for these ids) or
    UTF-16 in either byte order."""
    with dump.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as heap:
        return any(heap.find(text.encode(form)) >= 0 for form in ("utf-8", "utf-16-be", "utf-16-le"))


def test_given_a_spark_purge_with_sealed_ids_when_the_spark_jvm_is_dumped_then_its_heap_holds_no_requested_id(
    aws: object, pg_dsn: str, spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    _, _, settings, _ = _stale_lake(pg_dsn)

    run = purge_users(settings, [ALICE, BOB], dry_run=False, force=True, engine="spark", say=lambda _line: None)
    # A test-only string put in a task closure just before the dump: what a closure holds, the dump shows.
    control = f"closure-control-{uuid.uuid4().hex}"
    assert spark.sparkContext.parallelize([1], 1).map(lambda n: (control, n)).count() == 1
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    dump = tmp_path / "driver.hprof"
    # -all: unreachable objects too (what a job dropped but the heap still holds); local mode: executors live here.
    subprocess.run(["jcmd", str(pid), "GC.heap_dump", "-all", str(dump)], check=True, capture_output=True)
    try:
        assert run.result is not None and run.result.verified
        assert _holds(dump, control)
        assert _holds(dump, layout.executor_ids(layout.results_prefix(settings, run.request_id)).key)
        assert not _holds(dump, ALICE) and not _holds(dump, BOB)
        assert not _holds(dump, "sealed-canary-7f3a1c9e")
    finally:
        dump.unlink()  # about 100 MB


def test_given_a_spark_purge_with_the_ui_and_event_log_on_when_searched_then_no_surface_holds_a_requested_id(
    aws: object, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In a process of its own (tests/support/spark_surfaces.py): its stdout and stderr (the JVM's warnings, the
    Python logs), the JVM's log at INFO, the event log and the UI's REST API (jobs, stages with their tasks,
    environment, executors, SQL)."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    _, bucket, _, _ = _stale_lake(pg_dsn)
    config = tmp_path / "lakepurge.toml"
    config.write_text(events_toml(bucket, pg_dsn))
    control = f"surface-control-{uuid.uuid4().hex}"
    out = tmp_path / "surfaces"

    ran = subprocess.run(
        [sys.executable, "-m", "tests.support.spark_surfaces", str(config), str(out), control, ALICE, BOB],
        capture_output=True,
        check=False,
        timeout=300,
    )

    assert ran.returncode == 0, ran.stderr.decode(errors="replace")[-3000:]
    request_id = (out / "request_id").read_text()
    events = b"".join(path.read_bytes() for path in (out / "events").rglob("*") if path.is_file())
    rest = {path.name: path.read_bytes() for path in out.glob("rest-*.json")}
    output = ran.stdout + ran.stderr
    jvm_log = (out / "jvm.log").read_bytes()
    # Each surface is there and shows what is put in it.
    assert control.encode() in events and control.encode() in rest["rest-environment.json"]
    assert b"SparkListenerTaskEnd" in events and b'"jobId"' in rest["rest-jobs.json"]
    assert b'"taskId"' in rest["rest-stages.json"]  # the stages with their tasks
    assert b" INFO SparkContext: Submitted application: lakepurge-sealed-surfaces" in jvm_log  # the JVM's, at INFO
    assert b" INFO DAGScheduler: Job " in jvm_log and b"WARN" in ran.stderr  # its jobs; its warnings on stderr
    assert request_id.encode() in output and b"sealed ids written for the executors" in output  # the Python logs
    for user in (ALICE, BOB):
        assert user.encode() not in output
        assert user.encode() not in jvm_log
        assert user.encode() not in events
        for name, body in rest.items():
            assert user.encode() not in body, name
    assert b"sealed-canary-7f3a1c9e" not in output + jvm_log + events + b"".join(rest.values())
