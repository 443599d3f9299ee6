"""No raw ids at rest beyond need: once a request ends, its sealed ids are shredded (request.json keeps only the
keyed hashes, the receipt time and the deadline; its earlier versions are gone), and no object or version of the
reports bucket holds a raw id."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from lakepurge.core import aws
from lakepurge.core.s3uri import S3Uri
from tests.support.workflow import WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

REPORTS_BUCKET = "lake-reports"


def _per_object_datasets(case: WorkflowCase) -> set[str]:
    return {d.name for d in case.settings.datasets if d.per_object}


def _holdings(case: WorkflowCase) -> dict[str, set[str]]:
    """Each user's objects (s3 paths), from the generator's ground truth."""
    held: dict[str, set[str]] = {}
    for user, s3path, _ in case.lake.lake.truth:
        held.setdefault(user, set()).add(s3path)
    return held


def _dataset_names(case: WorkflowCase, s3paths: set[str]) -> set[str]:
    names = set()
    for s3path in s3paths:
        uri = S3Uri.parse(s3path)
        dataset = case.settings.dataset_for(uri.bucket, uri.key)
        if dataset is not None:
            names.add(dataset.name)
    return names


def _user_without_per_object_data(case: WorkflowCase) -> str:
    per_object = _per_object_datasets(case)
    for user, s3paths in sorted(_holdings(case).items()):
        if not _dataset_names(case, s3paths) & per_object:
            return user
    pytest.skip("every sample user owns one-user-per-object data")


def _every_version(s3: Any, bucket: str) -> Iterator[tuple[str, str, bytes]]:
    """(key, version id, bytes) of every object version in a bucket."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            yield version["Key"], version["VersionId"], body


def _assert_shredded(case: WorkflowCase, request_id: str) -> None:
    from lakepurge.workflow.store import RequestShredded, RequestStore

    s3 = aws.client("s3")
    key = f"requests/{request_id}/request.json"
    versions = [
        v for v in s3.list_object_versions(Bucket=REPORTS_BUCKET, Prefix=key).get("Versions", []) if v["Key"] == key
    ]
    assert len(versions) == 1, "an earlier version of request.json (with the sealed ids) is still there"
    document = orjson.loads(s3.get_object(Bucket=REPORTS_BUCKET, Key=key)["Body"].read())
    for field in ("sealed_key", "nonce", "sealed"):
        assert field not in document, f"request.json still holds {field} after the request ended"
    assert document["user_hashes"] and document["received_at"] and document["deadline"] and document["shredded_at"]
    store = RequestStore(case.settings, s3, aws.client("kms"))
    request = store.get(request_id)
    assert request.shredded
    with pytest.raises(RequestShredded, match="cannot be decrypted"):
        store.open(request)
    assert store.state(request_id).final
    assert store.shred(request_id) is False, "shredding again (a retried Notify) is a no-op"


def _assert_nowhere_in_reports(needles: list[str]) -> None:
    """No object or version of the reports bucket holds any of the needles, in its key or its bytes."""
    for key, version_id, body in _every_version(aws.client("s3"), REPORTS_BUCKET):
        for needle in needles:
            assert needle not in key, f"{needle!r} names an object of the reports bucket: {key}"
            assert needle.encode() not in body, f"{needle!r} is stored raw in {key} (version {version_id})"


def test_an_erased_request_is_shredded_and_no_version_of_the_reports_bucket_holds_its_ids(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case(versioned_reports=True)
    user = _user_without_per_object_data(case)
    request_id = case.file([user], "req-shred-erased")
    case.approve_and_finish(request_id)
    [note] = case.notifications()
    assert note["outcome"] == "ERASED"
    _assert_shredded(case, request_id)
    _assert_nowhere_in_reports([user, "privacy-portal"])


def test_a_rejected_request_is_shredded(workflow_case: Callable[..., WorkflowCase]) -> None:
    case = workflow_case(versioned_reports=True)
    user = _user_without_per_object_data(case)
    request_id = case.file([user], "req-shred-rejected")
    assert call_approval("POST", link_in(case.emails(request_id)[1]), "reject")["statusCode"] == 200
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "Rejected"
    _assert_shredded(case, request_id)
    _assert_nowhere_in_reports([user])


def test_a_request_whose_approval_timed_out_is_shredded(workflow_case: Callable[..., WorkflowCase]) -> None:
    case = workflow_case(versioned_reports=True, approval_timeout_seconds=3)
    user = _user_without_per_object_data(case)
    request_id = case.file([user], "req-shred-timeout")
    link = link_in(case.emails(request_id)[0])
    execution = case.finish(request_id, timeout=60)
    assert execution["status"] == "FAILED" and execution.get("error") == "ApprovalTimedOut"
    assert call_approval("POST", link, "approve")["statusCode"] == 410
    _assert_shredded(case, request_id)
    _assert_nowhere_in_reports([user])


def test_a_request_that_has_not_ended_is_never_shredded(workflow_case: Callable[..., WorkflowCase]) -> None:
    from lakepurge.workflow.store import RequestStore

    case = workflow_case(versioned_reports=True)
    user = _user_without_per_object_data(case)
    request_id = case.file([user], "req-shred-open")
    case.emails(request_id)  # waiting for approval: StartPurge still needs the ids (relational DELETEs)
    store = RequestStore(case.settings, aws.client("s3"), aws.client("kms"))
    with pytest.raises(ValueError, match="has not ended"):
        store.shred(request_id)
    assert store.open(store.get(request_id)) == ([user], "privacy-portal")
    case.sfn.stop_execution(executionArn=case.execution_arn(request_id))


def _user_with_key_named_objects(case: WorkflowCase) -> tuple[str, list[str]]:
    """A user owning objects of a dataset whose keys name their user (id_from_key), with all the user's keys of
    one-user-per-object datasets."""
    per_object = _per_object_datasets(case)
    named = {d.name for d in case.settings.datasets if d.id_from_key is not None}
    for user, s3paths in sorted(_holdings(case).items()):
        if _dataset_names(case, s3paths) & named:
            keys = [S3Uri.parse(p).key for p in sorted(s3paths) if _dataset_names(case, {p}) & per_object]
            return user, keys
    pytest.skip("no sample user owns objects whose keys name them")


def _erase_user_with_per_object_data(case: WorkflowCase, request_id: str) -> tuple[str, list[str]]:
    user, keys = _user_with_key_named_objects(case)
    assert any(user in key for key in keys)
    case.file([user], request_id)
    case.approve_and_finish(request_id)
    return user, keys


def test_no_object_or_version_of_the_reports_bucket_holds_a_raw_id_or_a_raw_key_of_per_object_data(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    """The report names objects whose key may name their user by a keyed reference, resolved against the lake at
    purge time; the per-object outcomes (results/) by the same reference; the certificate by the masked key. The
    user's objects are still erased, and a rerun (or Notify after a failed job) finds their outcomes."""
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.purge.job import recorded_outcomes
    from lakepurge.reports.report import OBJECT_REFERENCE

    case = workflow_case(versioned_reports=True)
    request_id = "req-shred-per-object"
    user, keys = _erase_user_with_per_object_data(case, request_id)
    _assert_shredded(case, request_id)
    _assert_nowhere_in_reports([user, *keys])
    s3 = aws.client("s3")
    report = orjson.loads(s3.get_object(Bucket=REPORTS_BUCKET, Key=f"reports/{request_id}.json")["Body"].read())
    per_object = _per_object_datasets(case)
    named = [o["s3path"] for o in report["objects"] if o["dataset"] in per_object]
    assert len(named) == len(keys) and all(name.startswith(OBJECT_REFERENCE) for name in named)
    certificate = orjson.loads(
        s3.get_object(Bucket=REPORTS_BUCKET, Key=f"certificates/{request_id}.json")["Body"].read()
    )
    assert certificate["verification"]["passed"] is True
    erased = [o for o in certificate["objects"] if o["dataset"] in per_object]
    assert len(erased) == len(keys) and {o["status"] for o in erased} == {"deleted"}
    for key in keys:
        assert s3.list_object_versions(Bucket=case.lake.lake.bucket, Prefix=key).get("Versions", []) == []
    paths = [f"s3://{case.lake.lake.bucket}/{key}" for key in keys]
    pseudonymizer = Pseudonymizer.from_config(case.settings.privacy)
    recorded = recorded_outcomes(s3, S3Uri(REPORTS_BUCKET, f"results/{request_id}/"), paths, pseudonymizer)
    assert set(paths) <= set(recorded)
