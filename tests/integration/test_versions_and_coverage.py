"""Complete erasure in a versioned lake, and no certificate for an index that does not cover the lake.

Every check reads the lake itself (every version of every key), never the index's opinion of it."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lakepurge.cli import main
from lakepurge.cli.errors import EXIT_NOT_CERTIFIABLE
from lakepurge.core import aws as clients
from lakepurge.core.config import parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_backfill, run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.purge.job import run_purge
from lakepurge.reports.report import build_report
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

KEY = HASH_KEY.encode()


def jsonl(*users: str) -> bytes:
    return b"".join(orjson.dumps({"user_id": u, "n": i, "note": "synthetic"}) + b"\n" for i, u in enumerate(users))


@pytest.fixture(params=["postgres", "dynamodb"])
def vlake(request, aws, tmp_path, monkeypatch):
    """A versioned bucket with one JSON Lines dataset, its configuration (as a file for the CLI) and an index."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    if request.param == "postgres":
        index = index_toml("postgres", request.getfixturevalue("pg_dsn"))
    else:
        index = index_toml("dynamodb", table=f"index-{uuid.uuid4().hex[:8]}")
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="vlake")
    s3.create_bucket(Bucket="vlake-reports")
    s3.put_bucket_versioning(Bucket="vlake", VersioningConfiguration={"Status": "Enabled"})
    toml = (
        f'[index]\n{index}\n\n[reports]\nlocation = "s3://vlake-reports/"\n\n[purge]\nmax_dataset_fraction = 1.0\n\n'
        '[[datasets]]\nname = "events"\nlocation = "s3://vlake/events/"\nformat = "jsonl"\nid_fields = ["user_id"]\n'
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    cfg = parse_settings(tomllib.loads(toml))
    store = open_store(cfg.index)
    yield s3, cfg, store, str(config)
    store.close()


def every_version(s3, bucket: str) -> dict[tuple[str, str], bytes]:
    """(key, version id) -> bytes of every version in the bucket (delete markers hold nothing)."""
    found = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            found[version["Key"], version["VersionId"]] = body
    return found


def holders(versions: dict[tuple[str, str], bytes], user: str) -> set[tuple[str, str]]:
    needle = orjson.dumps(user)
    return {place for place, body in versions.items() if needle in body}


def put(s3, key: str, body: bytes) -> str:
    return s3.put_object(Bucket="vlake", Key=key, Body=body)["VersionId"]


def event(s3, store, cfg, key: str) -> None:
    """What the S3-event path does for a key (ObjectCreated or ObjectRemoved alike)."""
    index_object(s3, store, cfg, "vlake", key)


def compaction_and_delete(s3, store, cfg, via_events: bool) -> dict[str, str]:
    """A holds alice and bob, then is compacted to bob only; C holds alice, then is deleted; B never held alice."""
    versions = {"a1": put(s3, "events/a.jsonl", jsonl("alice", "bob", "carol"))}
    versions["b1"] = put(s3, "events/b.jsonl", jsonl("bob", "dave"))
    versions["c1"] = put(s3, "events/c.jsonl", jsonl("erin", "alice"))
    if via_events:
        for key in ("events/a.jsonl", "events/b.jsonl", "events/c.jsonl"):
            event(s3, store, cfg, key)
    versions["a2"] = put(s3, "events/a.jsonl", jsonl("bob", "carol"))
    versions["b2"] = put(s3, "events/b.jsonl", jsonl("bob", "dave", "frank"))  # an old version of others only
    s3.delete_object(Bucket="vlake", Key="events/c.jsonl")
    if via_events:
        for key in ("events/a.jsonl", "events/b.jsonl", "events/c.jsonl"):
            event(s3, store, cfg, key)
    return versions


def purge(store, cfg, users: list[str]):
    report = build_report(store, cfg, users, f"req-{uuid.uuid4().hex[:8]}", Pseudonymizer(KEY), force=True)
    return report, run_purge(None, cfg, report, KEY)


@pytest.mark.parametrize("via_events", [True, False], ids=["s3-events", "backfill"])
def test_given_alice_only_in_noncurrent_versions_when_purged_then_every_version_is_gone_and_certified(
    vlake, via_events, spark
):
    s3, cfg, store, _ = vlake
    versions = compaction_and_delete(s3, store, cfg, via_events)
    if via_events:
        run_reconcile(None, cfg)  # nothing missed: records the coverage the S3 events kept
    else:
        run_backfill(spark, cfg)
    before = every_version(s3, "vlake")
    assert holders(before, "alice") == {("events/a.jsonl", versions["a1"]), ("events/c.jsonl", versions["c1"])}
    assert store.lookup(["alice"]) == {}  # no current version holds her: only the old versions do

    report, result = purge(store, cfg, ["alice"])

    assert {(v.s3path, v.version_ids) for v in report.versions} == {
        ("s3://vlake/events/a.jsonl", (versions["a1"],)),
        ("s3://vlake/events/c.jsonl", (versions["c1"],)),
    }
    after = every_version(s3, "vlake")
    assert holders(after, "alice") == set()
    # Nothing else changed: every version that never held alice is still there, byte for byte.
    assert after == {place: body for place, body in before.items() if b'"alice"' not in body}
    assert result.verified
    certificate = orjson.loads(
        s3.get_object(Bucket="vlake-reports", Key=f"certificates/{report.request_id}.json")["Body"].read()
    )
    deleted = {(o["object"], tuple(o["deleted_version_ids"])) for o in certificate["objects"]}
    assert deleted == {
        ("s3://vlake/events/a.jsonl", (versions["a1"],)),
        ("s3://vlake/events/c.jsonl", (versions["c1"],)),
    }
    assert certificate["verification"]["passed"] is True
    assert store.noncurrent_of(["alice"]) == {}


def test_given_a_dataset_never_indexed_when_purged_by_the_cli_then_refused_not_certified_and_nothing_changes(
    vlake, capsys
):
    s3, _, _, config = vlake
    put(s3, "events/a.jsonl", jsonl("alice", "bob"))
    before = every_version(s3, "vlake")

    capsys.readouterr()
    code = main(["purge", "alice", "--yes", "--config", config, "--json"])
    captured = capsys.readouterr()

    assert code == EXIT_NOT_CERTIFIABLE
    document = orjson.loads(captured.out)
    assert document["status"] == "INDEX_INCOMPLETE"
    assert document["datasets"][0]["dataset"] == "events"
    assert "lakepurge index backfill --dataset events" in document["datasets"][0]["fix"]
    assert "NOT CERTIFIABLE" in captured.err
    assert every_version(s3, "vlake") == before
    assert not list(s3.list_objects_v2(Bucket="vlake-reports", Prefix="certificates/").get("Contents", []))


def test_given_a_missed_event_when_reconciled_report_only_then_not_covered_until_fixed(vlake, capsys):
    s3, cfg, store, config = vlake
    put(s3, "events/a.jsonl", jsonl("alice", "bob"))
    run_reconcile(None, cfg)
    put(s3, "events/late.jsonl", jsonl("alice"))  # its event never reached the indexer

    capsys.readouterr()
    assert main(["index", "reconcile", "--report-only", "--config", config, "--json"]) == 1
    drift = orjson.loads(capsys.readouterr().out)["datasets"][0]
    assert (drift["missing"], drift["drift"]) == (1, 1)
    assert main(["purge", "alice", "--config", config, "--json"]) == EXIT_NOT_CERTIFIABLE
    capsys.readouterr()

    assert main(["index", "reconcile", "--config", config, "--json"]) == 0
    fixed = orjson.loads(capsys.readouterr().out)["datasets"][0]
    assert (fixed["fixed"], fixed["drift"]) == (1, 0)
    assert {loc.s3path for loc in store.lookup(["alice"])["alice"]} == {
        "s3://vlake/events/a.jsonl",
        "s3://vlake/events/late.jsonl",
    }
    assert main(["status", "--config", config, "--json"]) == 0
    status = orjson.loads(capsys.readouterr().out)
    assert [c["complete"] for c in status["coverage"]] == [True]


def test_given_events_in_the_dead_letter_queue_when_reporting_then_no_dataset_is_covered(vlake, tmp_path):
    s3, cfg, _, config = vlake
    put(s3, "events/a.jsonl", jsonl("alice"))
    run_reconcile(None, cfg)
    sqs = clients.client("sqs")
    queue = sqs.create_queue(QueueName="indexer-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody='{"Records": []}')
    with_queue = (
        Path(config).read_text().replace("[purge]", f'[indexing]\ndead_letter_queue_url = "{queue}"\n\n[purge]')
    )
    path = tmp_path / "with-dlq.toml"
    path.write_text(with_queue)

    assert main(["purge", "alice", "--config", str(path)]) == EXIT_NOT_CERTIFIABLE
    assert main(["purge", "alice", "--config", config]) == 0  # the same index, no queue configured


def test_given_nothing_found_in_a_covered_lake_when_purged_then_certified_without_spark(vlake, capsys, monkeypatch):
    s3, cfg, _, config = vlake
    put(s3, "events/a.jsonl", jsonl("bob"))
    run_reconcile(None, cfg)

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started for a report with nothing to erase")

    monkeypatch.setattr("lakepurge.ops.manual_purge.spark_session", no_spark)
    capsys.readouterr()
    assert main(["purge", "alice", "--yes", "--config", config, "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["verified"] is True
    assert summary["lines_erased"] == 0


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    history=st.lists(
        st.tuples(
            st.sampled_from(["put", "delete"]), st.integers(0, 3), st.lists(st.sampled_from("abcdef"), max_size=5)
        ),
        min_size=1,
        max_size=12,
    ),
    erased=st.sets(st.sampled_from("abcdef"), min_size=1, max_size=2),
)
def test_given_any_versioned_history_of_overwrites_and_deletes_when_purged_then_no_version_holds_the_users(
    vlake, history, erased
):
    """The invariant on versioned buckets: after erasing U, no version of any key holds U; every version that held
    only other people's data is still there, byte for byte; current versions keep every other line."""
    s3, cfg, store, _ = vlake
    for version in s3.list_object_versions(Bucket="vlake").get("Versions", []) + s3.list_object_versions(
        Bucket="vlake"
    ).get("DeleteMarkers", []):
        s3.delete_object(Bucket="vlake", Key=version["Key"], VersionId=version["VersionId"])
    store.truncate()
    for action, number, users in history:
        key = f"events/o{number}.jsonl"
        if action == "put":
            put(s3, key, jsonl(*(f"user-{u}" for u in users)))
        else:
            s3.delete_object(Bucket="vlake", Key=key)
        event(s3, store, cfg, key)
    run_reconcile(None, cfg)
    targets = sorted(f"user-{u}" for u in erased)
    before = every_version(s3, "vlake")

    _, result = purge(store, cfg, targets)

    after = every_version(s3, "vlake")
    for user in targets:
        assert holders(after, user) == set()
    untouched = {place: body for place, body in before.items() if not any(holders({place: body}, u) for u in targets)}
    assert {place: after[place] for place in untouched if place in after} == untouched
    assert set(untouched) <= set(after), "a version holding only other people's data was deleted"
    assert result.verified
    assert store.noncurrent_of(targets) == {}
    assert store.lookup(targets) == {}


@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "unversioned"])
def test_given_a_sidecar_naming_the_user_when_the_object_is_purged_then_every_version_of_both_is_gone(
    aws, pg_dsn, versioned, monkeypatch
):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="slake")
    s3.create_bucket(Bucket="slake-reports")
    if versioned:
        s3.put_bucket_versioning(Bucket="slake", VersioningConfiguration={"Status": "Enabled"})
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://slake-reports/"\n\n'
        '[purge]\nmax_dataset_fraction = 1.0\n\n[[datasets]]\nname = "files"\nlocation = "s3://slake/files/"\n'
        'id_sidecar = { suffix = ".meta.json", field = "owner" }\nerase = "delete-object"\n'
    )
    cfg = parse_settings(tomllib.loads(toml))
    s3.put_object(Bucket="slake", Key="files/a.pdf", Body=b"%PDF alice's scan")
    s3.put_object(Bucket="slake", Key="files/a.pdf.meta.json", Body=b'{"owner": "alice", "v": 1}')
    s3.put_object(Bucket="slake", Key="files/a.pdf.meta.json", Body=b'{"owner": "alice", "v": 2}')
    s3.put_object(Bucket="slake", Key="files/b.pdf", Body=b"%PDF bob's scan")
    s3.put_object(Bucket="slake", Key="files/b.pdf.meta.json", Body=b'{"owner": "bob"}')
    run_reconcile(None, cfg)
    store = open_store(cfg.index)
    try:
        report, result = purge(store, cfg, ["alice"])
    finally:
        store.close()

    left = every_version(s3, "slake")
    assert {key for key, _ in left} == {"files/b.pdf", "files/b.pdf.meta.json"}
    assert result.verified
    certificate = orjson.loads(
        s3.get_object(Bucket="slake-reports", Key=f"certificates/{report.request_id}.json")["Body"].read()
    )
    (entry,) = certificate["objects"]
    assert entry["status"] == "deleted"
    assert len(entry["sidecar_versions_deleted"]) == (2 if versioned else 1)
