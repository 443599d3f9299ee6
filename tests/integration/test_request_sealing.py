"""A request's raw ids are sealed with a data key bound to the request (KMS encryption context): the key policy of
the deployed stack lets only the functions that need raw ids decrypt, and only with that context."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.workflow.store import RequestStore

pytestmark = pytest.mark.integration


@pytest.fixture
def request_store(aws) -> RequestStore:
    kms = aws_client("kms")
    key_id = kms.create_key(Description="lakepurge requests (sealing)")["KeyMetadata"]["KeyId"]
    aws_client("s3").create_bucket(Bucket="seal-reports")
    settings = Settings.model_validate(
        {
            "index": {"backend": "dynamodb", "table": "unused"},
            "reports": {"location": "s3://seal-reports/"},
            "workflow": {
                "kms_key_id": key_id,
                "sender": "lakepurge@example.com",
                "approvers": ["dpo@example.com"],
                "approval_url": "https://approve.example.com/",
                "topic_arn": "arn:aws:sns:us-east-1:123456789012:lakepurge",
            },
        }
    )
    return RequestStore(settings, aws_client("s3"), kms)


def aws_client(service: str):
    return aws.client(service)


def test_given_a_sealed_request_when_its_data_key_is_decrypted_without_its_request_context_then_kms_refuses(
    request_store,
):
    pseudonymizer = Pseudonymizer(b"sealing-test-key-0123456789")
    sealed = request_store.create("req-seal-1", ["alice@example.com"], "cli", datetime.now(UTC), pseudonymizer)
    other = request_store.create("req-seal-2", ["bob@example.com"], "cli", datetime.now(UTC), pseudonymizer)
    kms = aws_client("kms")
    blob = base64.b64decode(sealed.sealed_key)

    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob)
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext={"request_id": other.request_id})
    assert request_store.open(sealed) == (["alice@example.com"], "cli")
    stored = aws_client("s3").get_object(Bucket="seal-reports", Key="requests/req-seal-1/request.json")["Body"].read()
    assert b"alice@example.com" not in stored


def test_given_an_erasure_request_when_its_data_key_is_asked_for_as_an_access_requests_then_kms_refuses(
    request_store,
):
    """The kind is in the sealing context: the key policy lets ExportArchive decrypt only with kind "access"
    (tests/integration/test_template.py), and KMS refuses an erasure request's key under that context."""
    pseudonymizer = Pseudonymizer(b"sealing-test-key-0123456789")
    erasure = request_store.create("req-kind-1", ["alice@example.com"], "cli", datetime.now(UTC), pseudonymizer)
    access = request_store.create(
        "req-kind-2", ["bob@example.com"], "cli", datetime.now(UTC), pseudonymizer, kind="access"
    )
    kms = aws_client("kms")

    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(
            CiphertextBlob=base64.b64decode(erasure.sealed_key),
            EncryptionContext={"request_id": "req-kind-1", "kind": "access"},
        )
    kms.decrypt(
        CiphertextBlob=base64.b64decode(erasure.sealed_key),
        EncryptionContext={"request_id": "req-kind-1", "kind": "erasure"},
    )
    assert request_store.open(request_store.get("req-kind-2")) == (["bob@example.com"], "cli")
    assert request_store.get("req-kind-2").encryption_context == {"request_id": "req-kind-2", "kind": "access"}
    assert access.kind == "access"


def test_given_an_ended_request_when_shredded_then_its_ids_can_never_be_opened_and_a_retry_is_a_no_op(
    request_store,
):
    from lakepurge.workflow.store import RequestShredded

    pseudonymizer = Pseudonymizer(b"sealing-test-key-0123456789")
    request_store.create("req-shred", ["carol@example.com"], "cli", datetime.now(UTC), pseudonymizer)
    with pytest.raises(ValueError, match="has not ended"):
        request_store.shred("req-shred")  # still running: the report and the relational DELETEs need the ids
    request_store.set_state("req-shred", "REJECTED")

    assert request_store.shred("req-shred") is True
    assert request_store.shred("req-shred") is False  # a retried Notify

    shredded = request_store.get("req-shred")
    assert shredded.shredded and shredded.shredded_at
    assert shredded.user_hashes == tuple(pseudonymizer.many(["carol@example.com"]))
    with pytest.raises(RequestShredded, match="cannot be decrypted"):
        request_store.open(shredded)
    stored = aws_client("s3").get_object(Bucket="seal-reports", Key="requests/req-shred/request.json")["Body"].read()
    assert b"sealed" not in stored.replace(b"shredded_at", b"") and b"nonce" not in stored
    # filed again (EventBridge delivers at least once): the ended request is returned, not sealed anew
    again = request_store.create("req-shred", ["carol@example.com"], "cli", datetime.now(UTC), pseudonymizer)
    assert again.shredded
