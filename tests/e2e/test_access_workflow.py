"""The access workflow (GDPR Art. 15) executed from statemachine/export.asl.json by moto, with the real handlers
in-process: an AccessRequested event goes through the same intake, report and approval as an erasure, then exports
exactly the users' records into one encrypted archive; the lake is only read and no raw id is recorded or logged."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
import requests

from lakepurge.access.sealing import unseal
from lakepurge.core import aws
from lakepurge.local.workflow import sent_emails
from lakepurge.workflow.store import RequestStore
from tests.integration.test_export import assert_exactly_the_users_records, lake_state
from tests.support.events import LambdaContext, load
from tests.support.workflow import APPROVERS, EXPORTS_LOCATION, RecordList, WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e


def _users_in_several_datasets(case: WorkflowCase) -> list[str]:
    """One user whose records are in at least three datasets."""
    datasets: dict[str, set[str]] = {}
    for user, path, _ in case.lake.lake.truth:
        datasets.setdefault(user, set()).add(path.split("/")[3])
    return [max(sorted(datasets), key=lambda user: len(datasets[user]))]


def _file_access(case: WorkflowCase, users: list[str], request_id: str) -> str:
    """Through the intake Lambda, as EventBridge delivers an AccessRequested event."""
    from lakepurge_lambdas import intake

    event = load("eventbridge_deletion_requested.json")
    event["detail-type"] = "AccessRequested"
    event["detail"]["user_ids"] = users
    event["detail"]["request_id"] = request_id
    case.kinds[request_id] = "access"
    filed = intake.handler(event, LambdaContext())
    assert filed["request_id"] == request_id
    assert filed["execution_arn"].startswith(
        case.deployed.export_state_machine_arn.replace(":stateMachine:", ":execution:")
    )
    return request_id


def _assert_nothing_raw(case: WorkflowCase, request_id: str, users: list[str], logs: RecordList) -> None:
    history = json.dumps(case.history(request_id), default=str)
    mails = json.dumps([m for m in sent_emails() if request_id in m["subject"]])
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in logs.records)
    assert request_id in logged, "the handlers' logs were not captured"
    for user in users:
        assert user not in history, "a raw user id is in the execution history"
        assert user not in mails, "a raw user id is in an approval email"
        assert user not in logged, "a raw user id was logged"


def _assert_the_privacy_team_opens_it(
    case: WorkflowCase,
    message: str,
    sealed: bytes,
    archive: zipfile.ZipFile,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``lakepurge export --open`` (the archive's s3:// URI, or a downloaded file) unpacks exactly its files, checked
    against the request's export record (the request is the archive's name, or --request-id)."""
    from lakepurge.cli import main

    [uri] = re.findall(r"Archive: (s3://\S+?)\.(?:\s|$)", message)
    request_id = uri.rsplit("/", 1)[-1].removesuffix(".zip.enc")
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    downloaded = tmp_path / "delivered.zip.enc"
    downloaded.write_bytes(sealed)
    opened_as = ["--config", str(config), "--request-id", request_id]
    for source, out in ((uri, tmp_path / "from-s3"), (str(downloaded), tmp_path / "from-file")):
        capsys.readouterr()
        assert main(["export", "--open", source, "--out", str(out), "--json", *opened_as]) == 0
        opened = json.loads(capsys.readouterr().out)
        assert opened["files"] == len(archive.namelist())
        for name in archive.namelist():
            assert (out / name).read_bytes() == archive.read(name), name
    downloaded.write_bytes(b"not an archive")
    assert main(["export", "--open", str(downloaded), "--out", str(tmp_path / "bad"), *opened_as]) == 2
    assert main(["export", "--open", uri]) == 2  # --out is needed


def test_approved_access_request_exports_exactly_the_users_records_and_changes_nothing(
    workflow_case: Callable[..., WorkflowCase],
    service_logs: RecordList,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = workflow_case(versioned=True)
    s3 = aws.client("s3")
    users = _users_in_several_datasets(case)
    before = lake_state(s3, case.lake.lake.bucket)

    request_id = _file_access(case, users, "acc-approve")
    store = RequestStore(case.settings, s3, aws.client("kms"))
    assert store.get(request_id).kind == "access"
    mails = case.emails(request_id)
    assert all("approve access export request" in m["subject"] and "erasure" not in m["body"] for m in mails)
    page = call_approval("GET", link_in(mails[0]))
    assert page["statusCode"] == 200 and "Approve access export" in page["body"]
    assert "rasure" not in page["body"] and "erases" not in page["body"]
    case.approve_and_finish(request_id)

    [note] = case.notifications()
    assert note["outcome"] == "EXPORTED" and "EXPORTED" in note["subject"]
    link = re.search(r"(https?://\S+) \.", note["message"])
    assert link, note["message"]
    assert re.search(r"[?&](X-Amz-Expires|Expires)=\d+", link.group(1)), "the link is not time-limited"
    assert f"s3://lake-reports/exports/{request_id}.json" in note["message"], "no export record"
    assert f"{EXPORTS_LOCATION}{request_id}.zip.enc" in note["message"], "no archive location"
    sealed = requests.get(link.group(1), timeout=30)
    assert sealed.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed.content), aws.client("kms"))))
    manifest = json.loads(archive.read("manifest.json"))
    assert_exactly_the_users_records(case.lake.lake, case.settings, set(users), manifest, archive)
    assert len({entry["dataset"] for entry in manifest["objects"]}) >= 3
    _assert_the_privacy_team_opens_it(case, note["message"], sealed.content, archive, tmp_path, capsys)

    assert lake_state(s3, case.lake.lake.bucket) == before, "the lake changed"
    assert store.get(request_id).shredded, "the sealed ids outlived the request"
    assert store.state(request_id).state == "EXPORTED"
    _assert_nothing_raw(case, request_id, users, service_logs)


def test_rejected_access_request_filed_by_the_cli_exports_nothing(
    workflow_case: Callable[..., WorkflowCase],
    service_logs: RecordList,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lakepurge.cli import main

    case = workflow_case()
    s3 = aws.client("s3")
    users = _users_in_several_datasets(case)
    before = lake_state(s3, case.lake.lake.bucket)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    request_id = "acc-reject"
    case.kinds[request_id] = "access"
    assert main(["request", *users, "--access", "--config", str(config), "--json", "--request-id", request_id]) == 0
    filed = json.loads(capsys.readouterr().out)
    assert filed["execution_arn"] == case.execution_arn(request_id)  # the export state machine's execution
    assert RequestStore(case.settings, s3, aws.client("kms")).get(request_id).kind == "access"
    decided = call_approval("POST", link_in(case.emails(request_id)[1]), "reject")
    assert decided["statusCode"] == 200 and "nothing will be exported" in decided["body"]
    execution = case.finish(request_id)
    assert execution["status"] == "FAILED" and execution.get("error") == "Rejected"
    [note] = case.notifications()
    assert note["outcome"] == "REJECTED" and APPROVERS[1] in note["message"]
    assert "Nothing was exported" in note["message"] and "erased" not in note["message"]
    assert s3.list_objects_v2(Bucket="lake-exports").get("KeyCount", 0) == 0, "a rejected request was exported"
    assert lake_state(s3, case.lake.lake.bucket) == before
    assert RequestStore(case.settings, s3, aws.client("kms")).get(request_id).shredded
    _assert_nothing_raw(case, request_id, users, service_logs)
