"""A typed request through the deployed workflow (issue 31): an EventBridge event naming an email kind is sealed
as its index form, the approval page states the typed dataset the request names no id of the kind of, the approved
purge erases exactly her records in every spelling of her email, and no spelling of it reaches the execution's
history, the emails, the logs or the certificate."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from lakepurge.core import aws
from tests.support.workflow import RecordList, WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

TYPED = """
[identifiers.email]
normalise = ["trim", "casefold"]
[identifiers.customer_id]

[[datasets]]
name = "signups"
location = "s3://lake/signups/"
id_fields = ["email"]
id_kind = "email"

[[datasets]]
name = "accounts"
location = "s3://lake/accounts/"
format = "csv"
id_fields = ["customer"]
id_kind = "customer_id"
"""
SIGNUPS = (
    b'{"email":"Alice@Example.COM","plan":"pro"}\n'
    b'{"email":"bob@example.com","plan":"free"}\n'
    b'{"email":" alice@example.com","plan":"team"}\n'
)
ACCOUNTS = b"customer,total\nC-1,10\n"


@pytest.fixture
def typed_workflow(workflow_case: Callable[..., WorkflowCase]) -> WorkflowCase:
    """The sample lake and two typed datasets beside it, indexed, reconciled and deployed."""
    typed = [("signups/a.jsonl", SIGNUPS), ("accounts/a.csv", ACCOUNTS)]
    return workflow_case(objects=6, users=5, beside=typed, beside_toml=TYPED)


def test_given_an_event_naming_an_email_when_approved_then_her_records_go_and_no_spelling_of_it_leaves_the_stack(
    typed_workflow: WorkflowCase, service_logs: RecordList
) -> None:
    case = typed_workflow
    filed = case.file_event([{"kind": "email", "value": "ALICE@example.com "}], "req-typed")
    page = call_approval("GET", link_in(case.emails(filed)[0]))

    assert page["statusCode"] == 200
    assert "<li>dataset accounts: not searched: the request names no customer_id</li>" in page["body"]
    assert "dataset signups: 2 record(s) in 1 object(s)" in page["body"]
    case.approve_and_finish("req-typed")
    s3 = aws.client("s3")
    assert s3.get_object(Bucket="lake", Key="signups/a.jsonl")["Body"].read() == (
        b'{}\n{"email":"bob@example.com","plan":"free"}\n{}\n'
    )
    certificate = orjson.loads(s3.get_object(Bucket="lake-reports", Key="certificates/req-typed.json")["Body"].read())
    assert certificate["verification"]["passed"] is True
    assert certificate["not_searched"] == [{"dataset": "accounts", "kind": "customer_id"}]
    for where, text in case.what_left("req-typed", page["body"], certificate, service_logs).items():
        assert "alice@" not in text.casefold(), f"a spelling of her email is in the {where}"
