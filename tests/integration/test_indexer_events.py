"""Real-time indexing through the indexer Lambda: whatever order and however often events arrive, the index
ends up equal to what the lake holds (checked against the generator's ground truth, not against the code)."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge_lambdas import indexer as indexer_lambda
from tests.support.events import LambdaContext, drained, load, s3_notification, s3_record, sqs_event

pytestmark = pytest.mark.integration


def lines_of(users: list[str | None]) -> bytes:
    """A JSONL body whose n-th line belongs to users[n] (None: an erased `{}` line)."""
    return b"".join((orjson.dumps({"user_id": u, "text": "synthetic"}) if u else b"{}") + b"\n" for u in users)


def expected_rows(path: str, users: list[str | None]) -> set[tuple[str, str, int]]:
    return {(u, path, n) for n, u in enumerate(users) if u}


def deliver(*notifications: dict) -> dict:
    return indexer_lambda.handler(sqs_event(*notifications), LambdaContext())


class Lake:
    """The test's own record of what each object should contribute to the index."""

    def __init__(self, case) -> None:
        self.truth: dict[str, set[tuple[str, str, int]]] = {}
        for row in case.lake.truth:
            self.truth.setdefault(row[1], set()).add(row)

    def put(self, key: str, users: list[str | None], gz: bool = False) -> dict:
        body = lines_of(users)
        aws.client("s3").put_object(Bucket="lake", Key=key, Body=gzip.compress(body) if gz else body)
        self.truth[f"s3://lake/{key}"] = expected_rows(f"s3://lake/{key}", users)
        return s3_notification(s3_record("lake", key))

    def delete(self, key: str) -> dict:
        aws.client("s3").delete_object(Bucket="lake", Key=key)
        self.truth.pop(f"s3://lake/{key}", None)
        return s3_notification(s3_record("lake", key, "ObjectRemoved:Delete"))

    def rows(self) -> set[tuple[str, str, int]]:
        return set().union(*self.truth.values())


@pytest.fixture
def lake(lake_factory, index_backend):
    case = lake_factory(index_backend, objects=40, users=20)
    created = [s3_notification(s3_record("lake", o.key)) for o in case.lake.objects]
    response = deliver(*created)
    assert response["batchItemFailures"] == []
    return Lake(case)


def index_rows() -> set[tuple[str, str, int]]:
    return runtime.index_store().dump()


def test_given_every_object_created_when_events_arrive_then_index_equals_ground_truth(lake):
    assert index_rows() == lake.rows()


def test_given_the_same_events_twice_when_delivered_then_index_is_unchanged(lake):
    key = "reviews/dt=2026-02/extra file.jsonl"  # a space: S3 sends it URL-encoded as '+'
    event = lake.put(key, ["u1", None, "u2", "u1"])
    assert deliver(event, event)["batchItemFailures"] == []
    assert deliver(event)["batchItemFailures"] == []
    assert index_rows() == lake.rows()


def test_given_an_overwrite_with_different_content_when_indexed_then_old_lines_are_gone(lake):
    key = "reviews/dt=2026-03/overwritten.jsonl.gz"
    deliver(lake.put(key, ["u1", "u2", "u3"], gz=True))
    deliver(lake.put(key, ["u4", "u1"], gz=True))
    assert index_rows() == lake.rows()
    assert ("u2", f"s3://lake/{key}", 1) not in index_rows()


def test_given_events_out_of_order_when_indexed_then_index_reflects_the_latest_object(lake):
    key = "reviews/dt=2026-04/raced.jsonl"
    first = lake.put(key, ["u1", "u2"])
    second = lake.put(key, ["u3"])
    deliver(second)
    deliver(first)  # the older event, late: the indexer reads what S3 holds now
    assert index_rows() == lake.rows()
    removed = lake.delete(key)
    created_late = s3_notification(s3_record("lake", key))
    deliver(removed)
    deliver(created_late)
    assert index_rows() == lake.rows()


def test_given_an_object_removed_when_indexed_then_its_rows_are_dropped(lake):
    key = "reviews/dt=2026-05/removed.jsonl"
    deliver(lake.put(key, ["u1", "u2"]))
    deliver(lake.delete(key))
    assert index_rows() == lake.rows()
    assert not any(path == f"s3://lake/{key}" for _, path, _ in index_rows())


def test_given_an_object_rewritten_with_blank_lines_when_indexed_then_blanked_users_disappear(lake):
    key = "reviews/dt=2026-06/purged.jsonl"
    deliver(lake.put(key, ["u1", "u2", "u1", "u3"]))
    deliver(lake.put(key, [None, "u2", None, "u3"]))
    assert index_rows() == lake.rows()
    assert all(loc.s3path != f"s3://lake/{key}" for loc in runtime.index_store().lookup(["u1"]).get("u1", []))


def test_given_eventbridge_s3_events_through_sqs_when_delivered_then_the_object_is_indexed_and_removed(lake):
    key = "reviews/dt=2026-11/part 0001.jsonl"  # EventBridge does not URL-encode the space
    lake.put(key, ["u1", None, "u2"])
    event = load("sqs_eventbridge_s3_object_created.json")
    assert indexer_lambda.handler(event, LambdaContext())["batchItemFailures"] == []
    assert index_rows() == lake.rows()
    lake.delete(key)
    body = orjson.loads(event["Records"][0]["body"])
    body["detail-type"], body["detail"]["reason"] = "Object Deleted", "DeleteObject"
    event["Records"][0]["body"] = orjson.dumps(body).decode()
    assert indexer_lambda.handler(event, LambdaContext())["batchItemFailures"] == []
    assert index_rows() == lake.rows()


def test_given_objects_outside_every_dataset_when_notified_then_they_are_ignored(lake):
    aws.client("s3").put_object(Bucket="lake", Key="tmp/scratch.jsonl", Body=lines_of(["u1"]))
    assert deliver(s3_notification(s3_record("lake", "tmp/scratch.jsonl")))["batchItemFailures"] == []
    assert index_rows() == lake.rows()


def test_given_a_bad_message_in_a_batch_when_processed_then_only_it_fails_and_the_rest_is_indexed(lake):
    good = lake.put("reviews/dt=2026-07/good.jsonl", ["u7"])
    event = sqs_event(good, "this is not json", s3_notification(s3_record("lake", "reviews/x.jsonl")))
    bad_id = event["Records"][1]["messageId"]
    response = indexer_lambda.handler(event, LambdaContext())
    assert response["batchItemFailures"] == [{"itemIdentifier": bad_id}]
    assert index_rows() == lake.rows()


def test_given_the_s3_test_event_when_delivered_then_it_is_acknowledged(lake):
    assert indexer_lambda.handler(load("sqs_s3_test_event.json"), LambdaContext())["batchItemFailures"] == []


def test_given_a_direct_s3_notification_when_invoked_then_it_is_indexed(lake):
    key = "reviews/dt=2026-08/direct.jsonl"
    event = lake.put(key, ["u5"])
    assert indexer_lambda.handler(event, LambdaContext())["indexed"] == 1
    removed = lake.delete(key)
    assert indexer_lambda.handler(removed, LambdaContext())["removed"] == 1
    assert index_rows() == lake.rows()


def test_given_s3_notifications_to_sqs_when_the_queue_is_drained_then_index_follows(lake):
    """The whole AWS path on moto: bucket notification -> SQS -> indexer batch."""
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="lakepurge-index-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.client("s3").put_bucket_notification_configuration(
        Bucket="lake",
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]
        },
    )
    lake.put("reviews/dt=2026-09/queued é.jsonl", ["u8", "u9"])
    lake.delete("reviews/dt=2026-01/part-00000.jsonl")
    event = drained(sqs, queue_url)
    assert len(event["Records"]) >= 2
    assert json.loads(event["Records"][0]["body"])  # moto delivers S3's JSON notification
    assert indexer_lambda.handler(event, LambdaContext())["batchItemFailures"] == []
    assert index_rows() == lake.rows()


def test_given_a_purge_when_its_own_events_arrive_then_the_indexer_answers_them_from_the_index_reading_no_object(
    lake, monkeypatch
):
    """The purge moved the index to the versions it wrote: its events find that version indexed already (ETag and
    version id), so no byte of the rewritten objects is read again."""
    from lakepurge.core.s3io import head_object
    from lakepurge.core.s3uri import S3Uri
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.indexing.indexer import scan_object
    from lakepurge.ops.manual_purge import purge_users
    from tests.support.purging import HASH_KEY

    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    settings = runtime.settings()
    run_reconcile(None, settings, [d.name for d in settings.datasets])  # the coverage a purge needs
    user = sorted(user for user, _, _ in index_rows())[0]
    run = purge_users(settings, [user], dry_run=False, force=True, engine="inline", say=lambda _: None)
    assert run.result is not None and run.result.objects_rewritten > 0
    rewritten = [S3Uri.parse(o.s3path).key for o in run.report.objects]
    s3 = aws.client("s3")
    read: list[str] = []

    def count_get(params: dict, **_: object) -> None:
        read.append(params["Key"])

    s3.meta.events.register("provide-client-params.s3.GetObject", count_get)
    try:
        response = deliver(*[s3_notification(s3_record("lake", key)) for key in rewritten])
    finally:
        s3.meta.events.unregister("provide-client-params.s3.GetObject", count_get)

    assert response["batchItemFailures"] == []
    assert [key for key in read if key in rewritten] == [], "the purge's own events read the objects it wrote"
    store = runtime.index_store()
    assert store.lookup([user]) == {}
    for key in rewritten:  # what the index holds of each is what the object holds now
        head = head_object(s3, "lake", key)
        if head is not None:
            dataset = settings.dataset_for("lake", key)
            assert dataset is not None
            assert store.object_rows(head.s3path) == scan_object(s3, settings, dataset, head).lines_by_user


@pytest.fixture
def versioned_lake(lake_factory, index_backend):
    case = lake_factory(index_backend, objects=10, users=8, versioned=True)
    deliver(*[s3_notification(s3_record("lake", o.key)) for o in case.lake.objects])
    return case


def created(key: str, version_id: str) -> dict:
    record = s3_record("lake", key)
    record["s3"]["object"]["versionId"] = version_id
    return s3_notification(record)


def test_given_an_object_overwritten_before_its_event_is_handled_when_both_events_arrive_then_the_first_version_is_kept(
    versioned_lake,
):
    """S3 keeps the overwritten version, so the index must know whose records it holds, although by the time its
    event was handled the indexer could only read the newer one."""
    s3 = aws.client("s3")
    key = "reviews/rapid.jsonl"
    first = s3.put_object(Bucket="lake", Key=key, Body=lines_of(["rapid-alice", "rapid-bob"]))["VersionId"]
    second = s3.put_object(Bucket="lake", Key=key, Body=lines_of(["rapid-bob"]))["VersionId"]

    deliver(created(key, first), created(key, second))

    store = runtime.index_store()
    assert store.noncurrent_of(["rapid-alice"]) == {f"s3://lake/{key}": {first}}
    assert store.lookup(["rapid-alice"]) == {}
    assert [loc.lines for loc in store.lookup(["rapid-bob"])["rapid-bob"]] == [(0,)]
    assert second not in store.noncurrent_of(["rapid-bob"]).get(f"s3://lake/{key}", set())
