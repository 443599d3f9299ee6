"""Tag changes are events: an object of a tag-owned dataset tagged (or re-tagged) after upload is indexed under its
owner, by its tagging event or by the reconciliation.

Each case goes through the paths a deployment uses (the indexer Lambda fed SQS batches built from the real-shaped
fixtures in tests/events/ or drained from a queue moto's bucket notification filled, `lakepurge` on the command
line, the GenerateReport step), on both index backends, and checks the lake itself."""

from __future__ import annotations

import io
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge import aws as clients
from lakepurge import runtime
from lakepurge.backfill import run_reconcile
from lakepurge.cli import main
from lakepurge.config import Settings, parse_settings
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.privacy import Pseudonymizer
from lakepurge.report import build_report
from lakepurge_lambdas import indexer as indexer_lambda
from tests.support.events import LambdaContext, drained, retargeted, s3_notification, s3_record, sqs_event
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

KEY = HASH_KEY.encode()
BUCKET = "glake"
DATASETS = f"""
[[datasets]]
name = "events"
location = "s3://{BUCKET}/events/"
format = "jsonl"
id_fields = ["user_id"]

[[datasets]]
name = "tables"
location = "s3://{BUCKET}/tables/"
format = "parquet"
id_fields = ["user_id"]

[[datasets]]
name = "avatars"
location = "s3://{BUCKET}/avatars/"
id_tag = "owner"
erase = "delete-object"

[[datasets]]
name = "attachments"
location = "s3://{BUCKET}/attachments/"
id_sidecar = {{ suffix = ".meta.json", field = "owner" }}
erase = "delete-object"
"""


@dataclass
class GapLake:
    s3: Any
    settings: Settings
    store: IndexStore
    config: str  # the configuration file, for the CLI
    toml: str

    def put(self, key: str, body: bytes, owner: str | None = None) -> None:
        extra = {"Tagging": f"owner={owner}"} if owner else {}
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=body, **extra)

    def deliver(self, event: dict[str, Any]) -> None:
        """One SQS batch through the indexer Lambda, as the queue hands it over."""
        assert indexer_lambda.handler(event, LambdaContext())["batchItemFailures"] == []

    def created(self, *keys: str) -> None:
        self.deliver(sqs_event(*(s3_notification(s3_record(BUCKET, key)) for key in keys)))

    def tag(self, key: str, owner: str) -> None:
        self.s3.put_object_tagging(Bucket=BUCKET, Key=key, Tagging={"TagSet": [{"Key": "owner", "Value": owner}]})

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
        capsys.readouterr()
        code = main([*args, "--config", self.config, "--json"])
        captured = capsys.readouterr()
        return code, orjson.loads(captured.out), captured.err

    def owners(self, user: str) -> set[str]:
        return {location.s3path for location in self.store.lookup([user]).get(user, [])}

    def lake_keys(self) -> set[str]:
        return {o["Key"] for o in self.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def jsonl(*users: str) -> bytes:
    return b"".join(orjson.dumps({"user_id": u, "note": "synthetic"}) + b"\n" for u in users)


def parquet(*users: str) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": list(users), "note": ["synthetic"] * len(users)}), sink)
    return sink.getvalue()


@pytest.fixture(params=["postgres", "dynamodb"])
def glake(
    request: pytest.FixtureRequest, aws: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GapLake]:
    """An unversioned lake with a JSON Lines, a Parquet and a tag-owned dataset, indexed by events and reconciled
    (every dataset covered); its configuration is the indexer Lambda's and the CLI's."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    if request.param == "postgres":
        index = index_toml("postgres", request.getfixturevalue("pg_dsn"))
    else:
        index = index_toml("dynamodb", table=f"index-{uuid.uuid4().hex[:8]}")
    s3 = clients.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=f"{BUCKET}-reports")
    toml = (
        f'[index]\n{index}\n\n[reports]\nlocation = "s3://{BUCKET}-reports/"\n\n'
        f"[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n{DATASETS}"
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    monkeypatch.setenv("LAKEPURGE_CONFIG_TOML", toml)
    runtime.reset()
    settings = parse_settings(tomllib.loads(toml))
    store = open_store(settings.index)
    lake = GapLake(s3, settings, store, str(config), toml)
    lake.put("events/a.jsonl", jsonl("alice", "bob"))
    lake.put("tables/t.parquet", parquet("carol", "alice"))
    lake.put("avatars/dave.png", b"\x89PNG synthetic", owner="dave")
    lake.created("events/a.jsonl", "tables/t.parquet", "avatars/dave.png")
    run_reconcile(None, settings)
    assert _gaps(lake) == []
    yield lake
    store.close()
    runtime.reset()


def _gaps(lake: GapLake) -> list[str]:
    """The datasets a request's report finds not covered (the request names nobody the lake holds)."""
    report = build_report(lake.store, lake.settings, ["nobody"], f"req-{uuid.uuid4().hex[:8]}", Pseudonymizer(KEY))
    return [gap.dataset for gap in report.gaps]


# -- tag changes are events ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture",
    ["sqs_s3_object_tagging_put.json", "sqs_eventbridge_s3_object_tags_added.json"],
    ids=["s3-notification", "eventbridge"],
)
def test_given_an_object_tagged_after_upload_when_its_tagging_event_arrives_then_the_owner_is_indexed_and_purged(
    glake: GapLake, capsys: pytest.CaptureFixture[str], fixture: str
) -> None:
    # GIVEN an avatar uploaded untagged, indexed (owner unknown), then tagged owner=alice
    key = "avatars/upload 1.png"
    glake.put(key, b"\x89PNG synthetic")
    glake.created(key)
    glake.tag(key, "alice")

    # WHEN the tagging event reaches the indexer
    glake.deliver(retargeted(fixture, BUCKET, key))

    # THEN alice owns it in the index, and her erasure deletes it and is certified
    assert glake.owners("alice") == {
        f"s3://{BUCKET}/events/a.jsonl",
        f"s3://{BUCKET}/tables/t.parquet",
        f"s3://{BUCKET}/{key}",
    }
    code, purged, err = glake.cli(capsys, "purge", "alice", "--yes")
    assert code == 0 and purged["verified"] is True, err
    assert key not in glake.lake_keys()


def test_given_moto_bucket_notifications_for_tagging_when_the_queue_is_drained_then_tags_reach_the_index(
    glake: GapLake,
) -> None:
    """The whole path on moto: its S3 sends ObjectTagging:Put/Delete notifications to the queue (as S3 does with
    "s3:ObjectTagging:*" in the bucket's queue configuration)."""
    sqs = clients.client("sqs")
    queue_url = sqs.create_queue(QueueName="lakepurge-index-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    glake.s3.put_bucket_notification_configuration(
        Bucket=BUCKET,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": queue_arn,
                    "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*", "s3:ObjectTagging:*"],
                }
            ]
        },
    )
    glake.put("avatars/queued.png", b"\x89PNG synthetic")
    glake.tag("avatars/queued.png", "alice")
    glake.tag("avatars/dave.png", "erin")

    event = drained(sqs, queue_url)
    names = {orjson.loads(r["body"]).get("Records", [{}])[0].get("eventName") for r in event["Records"]}
    assert "ObjectTagging:Put" in names
    glake.deliver(event)

    assert f"s3://{BUCKET}/avatars/queued.png" in glake.owners("alice")
    assert (glake.owners("dave"), glake.owners("erin")) == (set(), {f"s3://{BUCKET}/avatars/dave.png"})


def test_given_a_tag_change_whose_event_was_lost_when_reconciled_then_the_owner_tag_is_compared_and_fixed(
    glake: GapLake, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN dave's avatar re-tagged owner=erin, and the event lost (the ETag is unchanged)
    glake.tag("avatars/dave.png", "erin")

    # WHEN the dataset is reconciled (first report-only, then fixing)
    code, report_only, _ = glake.cli(capsys, "index", "reconcile", "--report-only")
    fixed_code, fixed, _ = glake.cli(capsys, "index", "reconcile")

    # THEN the changed owner tag is drift, and fixing it moves the object to erin
    assert code == 1
    assert next(d for d in report_only["datasets"] if d["dataset"] == "avatars")["changed"] == 1
    assert fixed_code == 0
    assert next(d for d in fixed["datasets"] if d["dataset"] == "avatars")["fixed"] == 1
    assert (glake.owners("dave"), glake.owners("erin")) == (set(), {f"s3://{BUCKET}/avatars/dave.png"})
