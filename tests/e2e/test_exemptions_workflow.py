"""A kept dataset ([[exemptions]]) through the deployed workflow on the local stack: the approval page, served over
real HTTP by the approval function, lists what is kept and why as its own section; once approved, the kept dataset
is byte for byte as it was and the certificate states it kept, verified for the rest."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from html import unescape
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest
import requests

from lakepurge.core import aws
from tests.support.workflow import WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

HOLD = '\n[[exemptions]]\ndataset = "profiles"\nbasis = "legal hold: case 2026-17"\nlegal_hold = true\n'


@pytest.fixture
def page() -> Iterator[Any]:
    from lakepurge.local.approval_server import ApprovalServer

    server = ApprovalServer()
    yield server
    server.stop()


def _profiles(bucket: str) -> dict[str, bytes]:
    s3 = aws.client("s3")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="profiles/").get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_given_profiles_under_a_legal_hold_when_a_request_is_approved_then_the_page_lists_them_and_they_are_kept(
    workflow_case: Callable[..., WorkflowCase], page: Any
) -> None:
    # GIVEN a user with records in the profiles, which a legal hold keeps, and elsewhere
    case = workflow_case(objects=12, users=20, extra_toml=HOLD)
    bucket = case.lake.lake.bucket
    where: dict[str, set[str]] = {}
    for user, s3path, _ in case.lake.lake.truth:
        where.setdefault(user, set()).add(s3path.split("/")[3])
    user = sorted(u for u, datasets in where.items() if "profiles" in datasets and len(datasets) > 1)[0]
    before = _profiles(bucket)

    # WHEN the request is filed and an approver opens the link of the email
    filed = case.file([user], "req-kept")
    link = link_in(case.emails(filed)[0])
    answer = requests.get(page.url, params=dict(parse_qsl(urlsplit(link).query)), timeout=60)

    # THEN the page has a section of its own saying what is kept and why, never the id
    assert answer.status_code == 200, answer.text
    section = re.search(r"<h2>Exemptions from erasure</h2><ul id='kept'>(.*?)</ul>", answer.text)
    assert section is not None, answer.text
    [kept] = [unescape(item) for item in re.findall(r"<li>(.*?)</li>", section.group(1))]
    assert kept.startswith("dataset profiles: NOT erased, under a legal hold (legal hold: case 2026-17) until the")
    assert user not in answer.text

    # and once approved, the profiles are as they were and the certificate keeps them, verified for the rest
    case.approve_and_finish(filed)
    assert _profiles(bucket) == before
    body = aws.client("s3").get_object(Bucket="lake-reports", Key=f"certificates/{filed}.json")["Body"].read()
    certificate = orjson.loads(body)
    [stated] = certificate["exemptions"]
    assert (stated["dataset"], stated["kept"], stated["basis"]) == ("profiles", True, "legal hold: case 2026-17")
    assert "profiles" not in {o["dataset"] for o in certificate["objects"]} and certificate["objects"]
    assert certificate["verification"]["passed"] is True
    assert user.encode() not in body


def test_given_profiles_under_a_legal_hold_when_an_access_request_is_approved_then_its_plan_keeps_nothing_back(
    workflow_case: Callable[..., WorkflowCase], page: Any
) -> None:
    # GIVEN the same legal hold and a user with records in the profiles
    case = workflow_case(objects=12, users=20, extra_toml=HOLD)
    user = sorted(u for u, s3path, _ in case.lake.lake.truth if s3path.split("/")[3] == "profiles")[0]

    # WHEN the user asks for a copy of their data (Art. 15) and an approver opens the page
    filed = case.file([user], "req-access-kept", kind="access")
    link = link_in(case.emails(filed)[0])
    answer = requests.get(page.url, params=dict(parse_qsl(urlsplit(link).query)), timeout=60)

    # THEN the records to export include the kept profiles, and nothing is said to be kept back
    assert answer.status_code == 200, answer.text
    assert re.search(r"<li>dataset profiles: [1-9]\d* record\(s\) in", answer.text), answer.text
    assert "Exemptions from erasure" not in answer.text
    assert call_approval("POST", link, "reject")["statusCode"] == 200  # ends the execution
    assert case.finish(filed).get("error") == "Rejected"
