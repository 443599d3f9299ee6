"""Issue 31's acceptance through the deployed workflow: an EventBridge event naming only alice's email is resolved
to her customer ids (an order's record, the CRM table), the SHA-256 of her email and her name with birth date; the
approval page states that expansion in counts; the approved purge erases her from every dataset, every other byte as
it was; and none of her identifiers (any spelling of her email, her name, birth date, customer ids, the hex of her
hashed email) is in the execution's history, the emails, the page, the logs, the notifications or the certificate.
The person and her lake: tests/support/person.py."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from lakepurge.core import aws
from tests.support.person import ALICE, HERS, OBJECTS, PERSON_TOML, crm_link, raw_in, without_her
from tests.support.workflow import RecordList, WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

CURRENT = dict(OBJECTS)  # the bucket is not versioned here: the last body of each key (versions: the integration test)


@pytest.fixture
def person_workflow(workflow_case: Callable[..., WorkflowCase], pg_dsn: str) -> WorkflowCase:
    """The sample lake and alice's datasets beside it, indexed, reconciled and deployed; the CRM in PostgreSQL."""
    return workflow_case(objects=6, users=5, beside=CURRENT.items(), beside_toml=PERSON_TOML + crm_link(pg_dsn))


def test_given_an_event_naming_only_her_email_when_approved_then_every_identifier_of_hers_goes_and_none_leaves_raw(
    person_workflow: WorkflowCase, service_logs: RecordList
) -> None:
    case = person_workflow
    filed = case.file_event([{"kind": "email", "value": ALICE}], "req-person")
    page = call_approval("GET", link_in(case.emails(filed)[0]))

    # the approver sees the expansion per kind and link, in counts
    assert page["statusCode"] == 200
    assert "Identifiers of the person: 5 (customer_id 2, email 1, name_dob 1, sha256_hex(email) 1)" in page["body"]
    assert "records of shop_orders: customer_id 1, name_dob 1" in page["body"]
    assert "link table crm: customer_id 1" in page["body"]
    case.approve_and_finish("req-person")

    s3 = aws.client("s3")
    for key in HERS:
        assert s3.get_object(Bucket="lake", Key=key)["Body"].read() == without_her(key, CURRENT[key]), key
    assert s3.get_object(Bucket="lake", Key="web_events/a.jsonl")["Body"].read() == CURRENT["web_events/a.jsonl"]
    certificate = orjson.loads(s3.get_object(Bucket="lake-reports", Key="certificates/req-person.json")["Body"].read())
    assert certificate["verification"]["passed"] is True
    erased = {kind: len(hashes) for kind, hashes in certificate["identifiers"]["erased"].items()}
    assert erased == {"customer_id": 2, "email": 1, "name_dob": 1, "sha256_hex(email)": 1}
    for where, text in case.what_left("req-person", page["body"], certificate, service_logs).items():
        assert raw_in(text) == [], f"an identifier of hers is in the {where}"
