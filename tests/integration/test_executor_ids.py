"""The ids sealed for a Spark purge's executors in S3 (lakepurge.core.executor_ids): an executor opens them once per
request and document; one changed, sealed for another request, or gone is not used (the executor hashes every id,
the purge goes on), and deleting them, by the driver or when the request ends, leaves no version."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import boto3
import pytest
from botocore.config import Config

from lakepurge.core import aws, executor_ids
from lakepurge.core.config import Settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.purge.launch import write_sealed_ids
from lakepurge.reports import layout
from lakepurge.reports.report import Report
from lakepurge.workflow.store import RequestStore
from tests.support.faults import FaultProxy, Rule

pytestmark = pytest.mark.integration

HASH_KEY = b"executor-ids-hash-key-0123456789abcdef"
IDS = ("carol.canary-5e1d@example.com", "dave.canary-5e1d@example.com")


@pytest.fixture
def versioned(aws: object) -> S3Uri:
    s3 = aws_s3()
    s3.create_bucket(Bucket="ids-reports")
    s3.put_bucket_versioning(Bucket="ids-reports", VersioningConfiguration={"Status": "Enabled"})
    return S3Uri("ids-reports", "results/req-ids/" + layout.EXECUTOR_IDS)


def aws_s3():  # type: ignore[no-untyped-def]
    return aws.client("s3")


def aws_kms():  # type: ignore[no-untyped-def]
    return aws.client("kms")


def test_given_sealed_ids_in_s3_when_an_executor_opens_them_then_it_reads_them_once_per_document(
    versioned: S3Uri,
) -> None:
    s3 = aws_s3()
    executor_ids.write(s3, versioned, HASH_KEY, "req-ids", IDS)
    where = executor_ids.locate(s3, versioned, "req-ids")
    assert where is not None and where.key == versioned.key

    first = executor_ids.opened(s3, where, HASH_KEY)
    assert first is not None and first.ids == IDS
    s3.delete_object(Bucket=versioned.bucket, Key=versioned.key)  # (the driver's deletion, while the cache holds it)
    again = executor_ids.opened(s3, where, HASH_KEY)  # one GET per process and request: from memory now
    assert again is not None and again.ids == IDS
    assert executor_ids.opened(s3, None, HASH_KEY) is None
    assert executor_ids.locate(s3, versioned, "req-ids") is None


def test_given_s3_failing_every_write_of_the_sealed_ids_when_a_starter_seals_them_then_it_starts_without_them(
    versioned: S3Uri, moto_server: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # They spare executors the hashing, nothing more: a starter that cannot write them starts the purge without them
    # (the driver finds none, and its executors hash every id), and its log names the error, never an id.
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY.decode())
    settings = Settings.model_validate(
        {"index": {"backend": "dynamodb", "table": "unused"}, "reports": {"location": "s3://ids-reports/"}}
    )
    report = Report("req-ids", "2026-01-01T00:00:00Z", tuple(Pseudonymizer(HASH_KEY).many(IDS)), 2, ())
    proxy = FaultProxy(moto_server.endpoint)  # type: ignore[attr-defined]
    try:
        proxy.set_rules([Rule("error500", "PUT", layout.EXECUTOR_IDS)])  # every attempt
        # (one attempt: lakepurge's clients retry for half a minute first, which is not what this test is about)
        once = boto3.client("s3", endpoint_url=proxy.endpoint, config=Config(retries={"max_attempts": 1}))
        with caplog.at_level(logging.INFO):
            written = write_sealed_ids(once, settings, report, list(IDS))
        fired = proxy.fired_kinds()
    finally:
        proxy.stop()

    assert written is None and "error500" in fired
    assert executor_ids.locate(aws_s3(), versioned, "req-ids") is None
    (warning,) = [r for r in caplog.records if r.getMessage().startswith("sealed ids not written")]
    assert (warning.levelname, warning.error, warning.ids) == ("WARNING", "ClientError", 2)  # type: ignore[attr-defined]
    assert not any(user in caplog.text for user in IDS)


def test_given_sealed_ids_changed_or_for_another_request_when_opened_then_none_are_used_and_counts_are_logged(
    versioned: S3Uri, caplog: pytest.LogCaptureFixture
) -> None:
    s3 = aws_s3()
    body = executor_ids.seal(HASH_KEY, "another-request", IDS)
    s3.put_object(Bucket=versioned.bucket, Key=versioned.key, Body=body)
    caplog.set_level(logging.INFO)
    where = executor_ids.locate(s3, versioned, "req-ids")
    assert where is not None

    assert executor_ids.opened(s3, where, HASH_KEY) is None
    s3.put_object(Bucket=versioned.bucket, Key=versioned.key, Body=executor_ids.seal(HASH_KEY, "req-ids", IDS))
    assert executor_ids.opened(s3, where, HASH_KEY) is None  # changed since the driver saw it (its ETag)
    logged = "\n".join(str(record.__dict__) for record in caplog.records)
    assert "sealed ids failed authentication: every id read is hashed" in caplog.messages
    assert "sealed ids not read: every id read is hashed" in caplog.messages
    assert "req-ids" in logged and not any(user in logged for user in IDS)


def test_given_sealed_ids_written_twice_in_a_versioned_bucket_when_deleted_then_no_version_or_marker_is_left(
    versioned: S3Uri,
) -> None:
    s3 = aws_s3()
    executor_ids.write(s3, versioned, HASH_KEY, "req-ids", IDS)
    executor_ids.write(s3, versioned, HASH_KEY, "req-ids", IDS)  # a retried start
    s3.delete_object(Bucket=versioned.bucket, Key=versioned.key)  # a marker over both

    assert executor_ids.delete(s3, versioned) == 3
    listed = s3.list_object_versions(Bucket=versioned.bucket, Prefix=versioned.key)
    assert listed.get("Versions", []) == [] and listed.get("DeleteMarkers", []) == []
    assert executor_ids.delete(s3, versioned) == 0


def test_given_a_request_whose_driver_left_its_sealed_ids_when_it_ends_and_is_shredded_then_they_are_gone(
    aws: object,
) -> None:
    kms = aws_kms()
    s3 = aws_s3()
    s3.create_bucket(Bucket="end-reports")
    s3.put_bucket_versioning(Bucket="end-reports", VersioningConfiguration={"Status": "Enabled"})
    settings = Settings.model_validate(
        {
            "index": {"backend": "dynamodb", "table": "unused"},
            "reports": {"location": "s3://end-reports/"},
            "workflow": {
                "kms_key_id": kms.create_key()["KeyMetadata"]["KeyId"],
                "sender": "lakepurge@example.com",
                "approvers": ["dpo@example.com"],
                "approval_url": "https://approve.example.com/",
                "topic_arn": "arn:aws:sns:us-east-1:123456789012:lakepurge",
            },
        }
    )
    store = RequestStore(settings, s3, kms)
    store.create("req-end", list(IDS), "cli", datetime.now(UTC), Pseudonymizer(HASH_KEY))
    where = layout.executor_ids(layout.results_prefix(settings, "req-end"))
    executor_ids.write(s3, where, HASH_KEY, "req-end", IDS)  # a driver killed before its finally
    store.set_state("req-end", "JOB_FAILED")

    store.shred("req-end")

    listed = s3.list_object_versions(Bucket=where.bucket, Prefix=where.key)
    assert listed.get("Versions", []) == [] and listed.get("DeleteMarkers", []) == []


def test_given_sealed_ids_when_a_workers_tasks_ask_for_their_users_then_they_are_built_once_and_check_by_id(
    versioned: S3Uri,
) -> None:
    s3 = aws_s3()
    pseudonymizer = Pseudonymizer(HASH_KEY)
    hashes = pseudonymizer.many([IDS[0]])  # the report found only the first: the other sealed id is dropped
    executor_ids.write(s3, versioned, HASH_KEY, "req-ids", IDS)
    where = executor_ids.locate(s3, versioned, "req-ids")

    first = executor_ids.task_users(s3, where, HASH_KEY, hashes)
    again = executor_ids.task_users(s3, where, HASH_KEY, list(reversed(hashes)))

    assert again is first  # the next task of this worker process and request
    held = first.ids_held()
    assert held is not None and IDS[0] in first and IDS[1] not in first
    with_more = executor_ids.task_users(s3, where, HASH_KEY, [*hashes, pseudonymizer("someone-else")])
    assert with_more is not first and with_more.ids_held() is None  # a hash no id stands for: checked by hashes
    assert "someone-else" in with_more
    hashed_only = executor_ids.task_users(s3, None, HASH_KEY, hashes)
    assert hashed_only.ids_held() is None and IDS[0] in hashed_only


def test_given_a_starter_holding_an_id_the_report_has_no_hash_of_when_it_seals_then_executors_never_get_it(
    versioned: S3Uri, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = aws_s3()
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY.decode())
    settings = Settings.model_validate(
        {"index": {"backend": "dynamodb", "table": "unused"}, "reports": {"location": "s3://ids-reports/"}}
    )
    hashes = tuple(Pseudonymizer(HASH_KEY).many([IDS[0]]))  # the report holds the first user only
    report = Report("req-ids", "2026-01-01T00:00:00Z", hashes, 1, ())

    written = write_sealed_ids(s3, settings, report, [IDS[1], IDS[0], ""])
    where = executor_ids.locate(s3, versioned, "req-ids")

    assert written == versioned and where is not None
    body = s3.get_object(Bucket=versioned.bucket, Key=versioned.key)["Body"].read()
    assert executor_ids.unseal(body, HASH_KEY, "req-ids") == (IDS[0],)
    users = executor_ids.task_users(s3, where, HASH_KEY, hashes)
    assert users.ids_held() is not None and IDS[0] in users and IDS[1] not in users
    assert write_sealed_ids(s3, settings, report, [IDS[1]]) is None  # none of the report's: nothing sealed
