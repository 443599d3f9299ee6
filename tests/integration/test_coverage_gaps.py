"""What the index knows it could not locate stops a certificate: an object that failed after the last listing, a
one-user object whose owner is unknown, an unindexable line that may hold the person; and tag changes are events.

Each case goes through the paths a deployment uses (the indexer Lambda fed SQS batches built from the real-shaped
fixtures in tests/events/ or drained from a queue moto's bucket notification filled, `lakepurge` on the command
line, the GenerateReport step), on both index backends, and checks the lake itself."""

from __future__ import annotations

import io
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.cli.errors import EXIT_NOT_CERTIFIABLE
from lakepurge.core import aws as clients
from lakepurge.core.aws import Clients
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.purge.job import run_purge
from lakepurge.reports.report import build_report
from lakepurge.workflow.approval import PendingApproval
from lakepurge.workflow.pages import confirmation_page
from lakepurge.workflow.steps import generate_report
from lakepurge.workflow.store import RequestStore
from lakepurge_lambdas import indexer as indexer_lambda
from tests.support.events import LambdaContext, drained, retargeted, s3_notification, s3_record, sqs_event
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


# A Parquet object this reader cannot open (as one written with a codec the pyarrow wheel lacks would be).
UNREADABLE_PARQUET = b"PAR1" + b"\x00synthetic, not a footer pyarrow can read" * 4 + b"PAR1"


@pytest.fixture
def glake(index_backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GapLake]:
    """An unversioned lake with a JSON Lines, a Parquet, a tag-owned and a sidecar-owned dataset, indexed by events
    and reconciled (every dataset covered), on each index backend; its configuration is the indexer Lambda's and the
    CLI's."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = clients.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=f"{BUCKET}-reports")
    toml = (
        f'[index]\n{index_backend}\n\n[reports]\nlocation = "s3://{BUCKET}-reports/"\n\n'
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


# -- a failed object after the last listing ------------------------------------------------------------------------


def test_given_an_unreadable_object_indexed_after_a_complete_reconcile_when_purged_then_nothing_is_certified(
    glake: GapLake, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a complete reconcile, then an object the indexer cannot read arriving through its events
    glake.put("tables/late.parquet", UNREADABLE_PARQUET)
    glake.created("tables/late.parquet")
    before = {key: glake.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in glake.lake_keys()}

    # WHEN status is asked and alice's erasure is run by the operator
    code, status, err = glake.cli(capsys, "status")
    purge_code, purged, purge_err = glake.cli(capsys, "purge", "alice", "--yes")

    # THEN status shows the Parquet dataset not covered, naming the failed object; the purge is not certifiable,
    # erases nothing and writes no certificate
    assert code == 0
    tables = next(c for c in status["coverage"] if c["dataset"] == "tables")
    assert tables["complete"] is False
    assert "1 object(s) could not be read" in tables["reason"], tables
    assert "lakepurge index reconcile --dataset tables" in tables["fix"]
    assert "dataset tables: NOT COVERED" in err
    assert all(c["complete"] for c in status["coverage"] if c["dataset"] != "tables")
    assert purge_code == EXIT_NOT_CERTIFIABLE, purge_err
    assert purged["status"] == "INDEX_INCOMPLETE"
    assert [d["dataset"] for d in purged["datasets"]] == ["tables"]
    assert "NOT CERTIFIABLE" in purge_err
    assert {key: glake.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in glake.lake_keys()} == before
    assert not glake.s3.list_objects_v2(Bucket=f"{BUCKET}-reports", Prefix="certificates/").get("Contents")

    # and once the object is replaced by a readable one (its event re-indexes it), alice's erasure is certified
    glake.put("tables/late.parquet", parquet("erin"))
    glake.created("tables/late.parquet")
    purge_code, purged, _ = glake.cli(capsys, "purge", "alice", "--yes")
    assert purge_code == 0 and purged["verified"] is True


def _workflow_settings(lake: GapLake) -> Settings:
    kms = clients.client("kms")
    key_id = kms.create_key(Description="lakepurge requests")["KeyMetadata"]["KeyId"]
    workflow = (
        f'\n[workflow]\nkms_key_id = "{key_id}"\nsender = "lakepurge@example.com"\napprovers = ["dpo@example.com"]\n'
        'approval_url = "https://approve.example.com/"\ntopic_arn = "arn:aws:sns:us-east-1:123456789012:lakepurge"\n'
    )
    return parse_settings(tomllib.loads(lake.toml + workflow))


def test_given_an_unreadable_object_after_the_last_reconcile_when_the_workflow_reports_then_coverage_is_incomplete(
    glake: GapLake,
) -> None:
    # GIVEN an object the indexer recorded as failed after the last reconcile, and a filed request for alice
    glake.put("tables/late.parquet", UNREADABLE_PARQUET)
    glake.created("tables/late.parquet")
    settings = _workflow_settings(glake)
    requests = RequestStore(settings, glake.s3, clients.client("kms"))
    requests.create("req-failed-object", ["alice"], "test", datetime.now(UTC), Pseudonymizer(KEY))

    # WHEN the GenerateReport Task runs
    summary = generate_report(
        settings, Clients.from_environment(), glake.store, Pseudonymizer(KEY), "req-failed-object"
    )

    # THEN the state machine is told the coverage is incomplete (its Choice ends the request INDEX_INCOMPLETE)
    assert summary.coverage_complete is False
    assert summary.coverage_gaps == ["tables"]


def test_given_a_tag_owned_object_without_its_tag_when_assessed_then_its_dataset_is_a_gap_until_the_tag_arrives(
    glake: GapLake, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an object of the tag-owned dataset uploaded without its owner tag (its event indexed it as owner unknown)
    glake.put("avatars/new.png", b"\x89PNG synthetic")
    glake.created("avatars/new.png")

    # WHEN the operator purges someone
    purge_code, purged, _ = glake.cli(capsys, "purge", "alice", "--yes")

    # THEN the dataset is a gap: nobody can be certified absent from an object whose owner nobody knows
    assert purge_code == EXIT_NOT_CERTIFIABLE
    [avatars] = purged["datasets"]
    assert avatars["dataset"] == "avatars" and "1 object(s) whose owner is unknown" in avatars["reason"], avatars

    # and the tag arriving (its tagging event) closes the gap
    glake.tag("avatars/new.png", "erin")
    glake.deliver(retargeted("sqs_s3_object_tagging_put.json", BUCKET, "avatars/new.png"))
    assert _gaps(glake) == []
    assert glake.owners("erin") == {f"s3://{BUCKET}/avatars/new.png"}


def test_given_an_attachment_whose_sidecar_comes_later_when_its_event_arrives_then_the_gap_closes_and_moves_owners(
    glake: GapLake,
) -> None:
    # GIVEN an attachment uploaded before its sidecar (its event indexed it: owner unknown, a gap)
    key = "attachments/scan.pdf"
    glake.put(key, b"%PDF synthetic")
    glake.created(key)
    assert _gaps(glake) == ["attachments"]

    # WHEN its sidecar arrives (the sidecar's event re-reads the object it describes), then is rewritten for another
    glake.put(key + ".meta.json", orjson.dumps({"owner": "erin"}))
    glake.created(key + ".meta.json")
    covered, erin = _gaps(glake), glake.owners("erin")
    glake.put(key + ".meta.json", orjson.dumps({"owner": "frank"}))
    glake.created(key + ".meta.json")

    # THEN the gap closed with erin as the owner, and the rewritten sidecar moved the object to frank
    assert covered == [] and erin == {f"s3://{BUCKET}/{key}"}
    assert (glake.owners("erin"), glake.owners("frank")) == (set(), {f"s3://{BUCKET}/{key}"})


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


def test_given_an_object_re_tagged_to_another_owner_when_its_events_arrive_then_only_the_new_owner_is_indexed(
    glake: GapLake, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN dave's avatar re-tagged owner=erin, then its tags deleted, then tagged owner=frank: each change's event
    # delivered in turn, the S3 notification and the EventBridge forms
    key = "avatars/dave.png"
    glake.tag(key, "erin")
    glake.deliver(retargeted("sqs_eventbridge_s3_object_tags_added.json", BUCKET, key))
    assert (glake.owners("dave"), glake.owners("erin")) == (set(), {f"s3://{BUCKET}/{key}"})

    glake.s3.delete_object_tagging(Bucket=BUCKET, Key=key)
    glake.deliver(retargeted("sqs_s3_object_tagging_delete.json", BUCKET, key))
    assert glake.owners("erin") == set()
    assert _gaps(glake) == ["avatars"]  # owner unknown again

    glake.tag(key, "frank")
    glake.deliver(retargeted("sqs_s3_object_tagging_put.json", BUCKET, key))

    # THEN the index names frank only; dave's erasure leaves frank's avatar and is certified
    assert glake.owners("frank") == {f"s3://{BUCKET}/{key}"}
    assert glake.owners("dave") == glake.owners("erin") == set()
    code, purged, err = glake.cli(capsys, "purge", "dave", "--yes")
    assert code == 0 and purged["verified"] is True, err
    assert key in glake.lake_keys()


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


# -- unindexable lines ------------------------------------------------------------------------------------------------

# Line 1 is invalid JSON holding bob's id; line 3 is invalid JSON holding nobody's id; line 4 an id too long to index.
BROKEN = (
    jsonl("alice")
    + b'{"user_id": "bob", "note": synthetic}\n'
    + jsonl("carol")
    + b'{"user_id": "nobody-asked", "note": "synthetic"\n'
    + orjson.dumps({"user_id": "x" * 5000, "note": "synthetic"})
    + b"\n"
)


def _with_broken_lines(lake: GapLake) -> None:
    lake.put("events/broken.jsonl", BROKEN)
    lake.created("events/broken.jsonl")


def test_given_unindexable_lines_that_cannot_hold_the_user_when_purged_then_they_are_stated_and_certified(
    glake: GapLake,
) -> None:
    # GIVEN an object with three unindexable lines, none holding carol's id
    _with_broken_lines(glake)

    # WHEN carol's report is made and purged
    report = build_report(glake.store, glake.settings, ["carol"], "req-carol", Pseudonymizer(KEY))
    result = run_purge(None, glake.settings, report, KEY)

    # THEN the report states them per dataset (counts and the object, never content) as read and clear of carol
    [events] = [u for u in report.unindexable if u["dataset"] == "events"]
    assert (events["lines"], events["objects"], events["checked"], events["may_hold"]) == (3, 1, 3, [])
    assert events["listed"] == [{"object": f"s3://{BUCKET}/events/broken.jsonl", "lines": [1, 3, 4], "count": 3}]
    assert b"synthetic" not in report.to_bytes() and b"nobody-asked" not in report.to_bytes()
    assert report.summary()["unindexable"]["events"] == {"lines": 3, "objects": 1, "may_hold": 0, "not_read": 0}
    # the certificate states them too, and the erasure is verified
    assert result.verified
    certificate = orjson.loads(
        glake.s3.get_object(Bucket=f"{BUCKET}-reports", Key="certificates/req-carol.json")["Body"].read()
    )
    [stated] = [u for u in certificate["unindexable"] if u["dataset"] == "events"]
    assert (stated["lines"], stated["checked"], stated["may_hold"]) == (3, 3, [])
    assert certificate["verification"]["passed"] is True


def test_given_unindexable_lines_when_an_approver_opens_the_page_then_they_are_stated_per_dataset(
    glake: GapLake,
) -> None:
    _with_broken_lines(glake)
    settings = _workflow_settings(glake)
    requests = RequestStore(settings, glake.s3, clients.client("kms"))
    request = requests.create("req-page", ["carol"], "test", datetime.now(UTC), Pseudonymizer(KEY))
    report = build_report(glake.store, settings, ["carol"], "req-page", Pseudonymizer(KEY))

    view = PendingApproval(request, report, "0" * 64, "dpo@example.com", "2026-12-01T00:00:00+00:00")
    page = confirmation_page(view, "0", "secret", "/approval")

    assert "dataset events: 3 unindexable line(s) in 1 object(s), read for the requested users: none holds them" in page
    assert f"s3://{BUCKET}/events/broken.jsonl" in page
    assert "carol" not in page and "synthetic" not in page


def test_given_an_unindexable_line_holding_the_user_when_purged_then_not_certifiable_naming_line_and_fix(
    glake: GapLake, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN bob's id inside a line the indexer could not parse
    _with_broken_lines(glake)
    before = glake.s3.get_object(Bucket=BUCKET, Key="events/broken.jsonl")["Body"].read()

    # WHEN bob's erasure is run by the operator
    code, purged, err = glake.cli(capsys, "purge", "bob", "--yes")

    # THEN it is not certifiable: the dataset's reason names the object and line, the fix says what to do; nothing
    # is erased and the message never quotes the line
    assert code == EXIT_NOT_CERTIFIABLE, err
    [events] = purged["datasets"]
    assert events["dataset"] == "events"
    assert f"line 1 of s3://{BUCKET}/events/broken.jsonl may hold" in events["reason"], events
    assert "repair or remove" in events["fix"] and "lakepurge index reconcile --dataset events" in events["fix"]
    assert "synthetic" not in err and "synthetic" not in str(purged)
    assert glake.s3.get_object(Bucket=BUCKET, Key="events/broken.jsonl")["Body"].read() == before

    # and the workflow's report says the same: not complete
    settings = _workflow_settings(glake)
    RequestStore(settings, glake.s3, clients.client("kms")).create(
        "req-bob", ["bob"], "test", datetime.now(UTC), Pseudonymizer(KEY)
    )
    summary = generate_report(settings, Clients.from_environment(), glake.store, Pseudonymizer(KEY), "req-bob")
    assert summary.coverage_complete is False and summary.coverage_gaps == ["events"]


def test_given_more_unindexable_lines_than_the_check_reads_when_purged_then_not_certifiable_saying_so(
    glake: GapLake,
) -> None:
    _with_broken_lines(glake)
    settings = glake.settings.model_copy(
        update={"purge": glake.settings.purge.model_copy(update={"max_unindexable_lines_checked": 2})}
    )

    report = build_report(glake.store, settings, ["carol"], "req-bounded", Pseudonymizer(KEY))

    [gap] = report.gaps
    assert gap.dataset == "events"
    assert "1 unindexable line(s) were not read" in gap.reason and "max_unindexable_lines_checked" in gap.reason
