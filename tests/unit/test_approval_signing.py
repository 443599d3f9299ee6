"""Signatures of approval.json and decision.json (lakepurge.workflow.signing), and who sent the deciding POST."""

from __future__ import annotations

import copy

import orjson
import pytest

from lakepurge.core.config import ConfigError, WorkflowConfig
from lakepurge.reports import layout
from lakepurge.workflow import signing
from lakepurge.workflow.approval import USER_AGENT_MAX, Requester
from tests.support.events import load

pytestmark = pytest.mark.unit

KEY = b"approval-signing-key-for-unit-tests"
OTHER_KEY = b"someone-elses-key-0123456789abcdef"


def _approval(**changes: object) -> layout.ApprovalDocument:
    document = layout.ApprovalDocument(
        report_uri="s3://reports/reports/req-1.json",
        report_sha256="ab" * 32,
        task_token="token-of-the-waiting-execution",
        opened_at="2026-11-21T10:00:00+00:00",
        expires_at="2026-11-28T09:55:00+00:00",
        approvers=(layout.Approver(email="dpo@example.com", secret_sha256="cd" * 32),),
    )
    return document.model_copy(update=changes)


def _decision(**changes: object) -> layout.DecisionDocument:
    document = layout.DecisionDocument(
        decision="approved",
        approved_by="dpo@example.com",
        by="dpo@example.com",
        decided_at="2026-11-21T10:16:03+00:00",
        report_uri="s3://reports/reports/req-1.json",
        report_sha256="ab" * 32,
        source_ip="198.51.100.7",
        user_agent="Mozilla/5.0",
    )
    return document.model_copy(update=changes)


def _stored_and_read_back(document: layout.Document) -> dict[str, object]:
    read: dict[str, object] = orjson.loads(orjson.dumps(document.to_json()))
    return read


def test_given_a_signed_approval_when_read_back_from_its_json_then_it_verifies() -> None:
    signed = signing.sign(KEY, "req-1", layout.APPROVAL, _approval())
    assert signed.signature is not None and signed.signature.startswith("hmac-sha256:")

    read = layout.ApprovalDocument.model_validate(_stored_and_read_back(signed))

    signing.verify(KEY, "req-1", layout.APPROVAL, read)


def test_given_an_unsigned_approval_then_it_does_not_verify() -> None:
    with pytest.raises(signing.SignatureInvalid, match="not signed"):
        signing.verify(KEY, "req-1", layout.APPROVAL, _approval())


def test_given_an_approval_signed_with_another_key_then_it_does_not_verify() -> None:
    forged = signing.sign(OTHER_KEY, "req-1", layout.APPROVAL, _approval())
    with pytest.raises(signing.SignatureInvalid, match="does not verify"):
        signing.verify(KEY, "req-1", layout.APPROVAL, forged)


@pytest.mark.parametrize(
    "change",
    [
        {"approvers": (layout.Approver(email="mallory@example.com", secret_sha256="ee" * 32),)},
        {"expires_at": "2999-01-01T00:00:00+00:00"},
        {"task_token": "another-execution"},
        {"report_sha256": "00" * 32},
    ],
)
def test_given_a_signed_approval_when_a_field_is_rewritten_keeping_the_signature_then_it_does_not_verify(
    change: dict[str, object],
) -> None:
    signed = signing.sign(KEY, "req-1", layout.APPROVAL, _approval())
    rewritten = signed.model_copy(update=change)
    with pytest.raises(signing.SignatureInvalid):
        signing.verify(KEY, "req-1", layout.APPROVAL, rewritten)


def test_given_a_valid_approval_of_one_request_then_it_does_not_stand_for_another_or_for_a_decision() -> None:
    signed = signing.sign(KEY, "req-1", layout.APPROVAL, _approval())
    with pytest.raises(signing.SignatureInvalid):
        signing.verify(KEY, "req-2", layout.APPROVAL, signed)
    with pytest.raises(signing.SignatureInvalid):
        signing.verify(KEY, "req-1", layout.DECISION, signed)


def test_given_a_signature_that_is_not_ascii_then_it_is_refused_not_an_error() -> None:
    forged = _approval(signature="hmac-sha256:é")
    with pytest.raises(signing.SignatureInvalid):
        signing.verify(KEY, "req-1", layout.APPROVAL, forged)


def test_given_a_decision_then_its_signature_covers_who_sent_it_and_survives_delivery_re_signing() -> None:
    claimed = signing.sign(KEY, "req-1", layout.DECISION, _decision())
    read = layout.DecisionDocument.model_validate(_stored_and_read_back(claimed))
    signing.verify(KEY, "req-1", layout.DECISION, read)
    with pytest.raises(signing.SignatureInvalid):
        signing.verify(KEY, "req-1", layout.DECISION, read.model_copy(update={"source_ip": "203.0.113.9"}))
    delivered = signing.sign(KEY, "req-1", layout.DECISION, read.model_copy(update={"delivered_at": "2026-11-21"}))
    signing.verify(KEY, "req-1", layout.DECISION, delivered)
    assert delivered.signature != claimed.signature


def test_given_a_decision_written_before_the_new_fields_then_it_still_reads() -> None:
    old = {
        "decision": "rejected",
        "rejected_by": "cto@example.com",
        "by": "cto@example.com",
        "decided_at": "2026-01-01T00:00:00+00:00",
        "report_uri": "s3://reports/reports/req-0.json",
        "report_sha256": "ab" * 32,
        "delivered_at": "2026-01-01T00:00:01+00:00",
    }
    document = layout.DecisionDocument.model_validate(old)
    assert document.source_ip is None and document.user_agent is None and document.signature is None
    assert document.to_json() == old, "absent fields stay absent"


def _workflow(env: str = "LAKEPURGE_APPROVAL_KEY") -> WorkflowConfig:
    return WorkflowConfig(
        kms_key_id="k",
        sender="bot@example.com",
        approvers=("dpo@example.com",),
        approval_url="https://example.invalid/approval",
        topic_arn="arn:aws:sns:us-east-1:123456789012:t",
        approval_signing_key_env=env,
    )


def test_given_the_configured_variable_when_it_holds_a_key_then_that_is_the_signing_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _workflow().approval_signing_key_env == "LAKEPURGE_APPROVAL_KEY"
    monkeypatch.setenv("MY_APPROVAL_KEY", KEY.decode())
    assert signing.signing_key(_workflow("MY_APPROVAL_KEY")) == KEY


@pytest.mark.parametrize("value", [None, "", "short"])
def test_given_no_key_or_a_short_one_then_the_error_names_the_setting_and_not_the_value(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("MY_APPROVAL_KEY", raising=False)
    else:
        monkeypatch.setenv("MY_APPROVAL_KEY", value)
    with pytest.raises(ConfigError, match="approval_signing_key_env: set MY_APPROVAL_KEY") as raised:
        signing.signing_key(_workflow("MY_APPROVAL_KEY"))
    assert value is None or value == "" or value not in str(raised.value)


def test_given_a_secret_configured_then_the_key_is_read_from_it_not_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lakepurge.core import aws

    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:approval-AbCdEf"
    read: list[str] = []

    def secret_string(name: str) -> str:
        read.append(name)
        return KEY.decode()

    monkeypatch.setattr(aws, "secret_string", secret_string)
    monkeypatch.setenv("LAKEPURGE_APPROVAL_KEY", OTHER_KEY.decode())
    workflow = _workflow().model_copy(update={"approval_signing_key_secret": arn})
    assert signing.signing_key(workflow) == KEY
    assert read == [arn]
    monkeypatch.setattr(aws, "secret_string", lambda name: "short")
    with pytest.raises(ConfigError, match="approval_signing_key_secret: the secret arn:aws:secretsmanager"):
        signing.signing_key(workflow)


def test_given_the_recorded_post_event_then_the_requester_is_its_source_ip_and_user_agent() -> None:
    requester = Requester.from_event(load("apigw_http_approval_post.json"))
    assert requester == Requester(source_ip="198.51.100.7", user_agent="Mozilla/5.0", authorized_subject=None)


def test_given_a_long_user_agent_and_a_jwt_then_the_agent_is_truncated_and_the_subject_kept() -> None:
    event = copy.deepcopy(load("apigw_http_approval_post.json"))
    event["requestContext"]["http"]["userAgent"] = "A" * 5000
    event["requestContext"]["authorizer"] = {"jwt": {"claims": {"sub": "user-123"}, "scopes": None}}
    requester = Requester.from_event(event)
    assert requester.user_agent == "A" * USER_AGENT_MAX
    assert requester.authorized_subject == "user-123"


def test_given_an_event_without_a_request_context_then_nothing_is_recorded() -> None:
    assert Requester.from_event({}) == Requester()
