"""Access-export archives as stored things (issue 25): a failed export is retried under its request id, archives
expire, an archive is opened only as the request its record names, and its link is SigV4 with its real lifetime."""

from __future__ import annotations

import hashlib
import io
import json
import tomllib
import zipfile
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from lakepurge import cli
from lakepurge.access.export import expire_archives, export_users, presigned_link
from lakepurge.access.sealing import unseal
from lakepurge.core.aws import client
from lakepurge.core.config import parse_settings
from lakepurge.core.s3uri import S3Uri
from lakepurge.reports import layout
from tests.support.purging import HASH_KEY, index_keys

pytestmark = pytest.mark.integration

LAKE = "archive-lake"
OUT = "archive-out"
TOML = f"""
[index]
backend = "dynamodb"
table = "archive-index"

[reports]
location = "s3://{LAKE}-reports/"

[[datasets]]
name = "events"
location = "s3://{LAKE}/events/"
id_fields = ["user_id"]
"""


@pytest.fixture
def lake(aws, monkeypatch, tmp_path):
    """A one-object lake, indexed and covered; the archives go to a versioned bucket, as the stack's do."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = client("s3")
    for bucket in (LAKE, f"{LAKE}-reports", OUT):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=OUT, VersioningConfiguration={"Status": "Enabled"})
    body = b'{"user_id": "alice", "n": 1}\n{"user_id": "bob", "n": 2}\n{"user_id": "carol", "n": 3}\n'
    s3.put_object(Bucket=LAKE, Key="events/a.jsonl", Body=body)
    settings = parse_settings(tomllib.loads(TOML))
    index_keys(settings, LAKE, ["events/a.jsonl"])
    config = tmp_path / "lakepurge.toml"
    config.write_text(TOML)
    return settings, str(config), client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]


def versions_of(key: str) -> list[str]:
    listed = client("s3").list_object_versions(Bucket=OUT, Prefix=key)
    return [v["VersionId"] for v in listed.get("Versions", []) if v["Key"] == key]


def test_given_a_failed_export_left_its_archive_when_retried_under_its_request_id_then_it_completes_alone(lake):
    settings, _, key = lake
    s3 = client("s3")
    # what a run that failed between the archive and its record leaves: an archive and no record
    s3.put_object(Bucket=OUT, Key="x/req-retry.zip.enc", Body=b"an earlier attempt's archive")

    run = export_users(settings, ["alice"], S3Uri(OUT, "x/"), request_id="req-retry", kms_key=key, say=print)

    record = layout.read_document(s3, layout.export_record(settings, "req-retry"), layout.ExportDocument)
    assert record is not None and record.archive == run.archive == f"s3://{OUT}/x/req-retry.zip.enc"
    # only this run's archive is left: the earlier attempt's version held personal data too
    assert versions_of("x/req-retry.zip.enc") == [record.archive_version_id]
    stored = s3.get_object(Bucket=OUT, Key="x/req-retry.zip.enc")["Body"].read()
    assert hashlib.sha256(stored).hexdigest() == record.archive_sha256
    manifest = json.loads(zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(stored), client("kms")))).read("manifest.json"))
    assert manifest["request_id"] == "req-retry" and manifest["users_found"] == 1


def test_given_archives_past_their_retention_when_an_export_runs_then_every_version_of_them_is_deleted(
    lake, monkeypatch
):
    settings, _, key = lake
    monkeypatch.delenv("AWS_SESSION_TOKEN")  # long-term keys (an IAM user's): the link's end is the archive's
    s3 = client("s3")
    old = export_users(settings, ["alice"], S3Uri(OUT, "y/"), request_id="req-old", kms_key=key, say=print)
    s3.put_object(Bucket=OUT, Key="y/notes.zip.enc", Body=b"not an archive of lakepurge's")  # never touched
    record = layout.read_document(s3, layout.export_record(settings, "req-old"), layout.ExportDocument)
    assert record is not None and record.archive_expires_at is not None
    written = datetime.fromisoformat(record.created_at)
    assert datetime.fromisoformat(record.archive_expires_at) == written + timedelta(days=30)  # the default
    assert s3.head_object(Bucket=OUT, Key="y/req-old.zip.enc")["Metadata"]["expires-at"] == record.archive_expires_at

    kept = expire_archives(s3, S3Uri(OUT, "y/"), 30, now=written + timedelta(days=29))
    expired = expire_archives(s3, S3Uri(OUT, "y/"), 30, now=written + timedelta(days=30, minutes=1))

    assert kept == [] and expired == ["req-old"]
    assert versions_of("y/req-old.zip.enc") == []  # no noncurrent copy left behind
    assert versions_of("y/notes.zip.enc")
    # the link never outlives the archive
    short = export_users(
        settings, ["bob"], S3Uri(OUT, "y/"), request_id="req-short", kms_key=key, say=print, retention_days=1
    )
    ends = datetime.fromisoformat(short.archive_expires_at)
    assert short.link_limited_by == "archive"
    assert ends - timedelta(seconds=1) <= datetime.fromisoformat(short.link_expires_at) <= ends
    assert old.archive_expires_at == record.archive_expires_at


def test_given_another_requests_archive_when_opened_as_this_request_then_it_is_refused_and_nothing_written(
    lake, tmp_path, capsys
):
    settings, config, key = lake
    s3 = client("s3")
    export_users(settings, ["alice"], S3Uri(OUT, "z/"), request_id="req-alice", kms_key=key, say=print)
    export_users(settings, ["bob"], S3Uri(OUT, "z/"), request_id="req-bob", kms_key=key, say=print)
    bobs = s3.get_object(Bucket=OUT, Key="z/req-bob.zip.enc")["Body"].read()
    delivered = tmp_path / "req-alice.zip.enc"  # bob's archive under alice's request's name
    delivered.write_bytes(bobs)
    out = tmp_path / "opened"

    opening = ["export", "--out", str(out), "--config", config, "--open"]
    by_name = cli.main([*opening, str(delivered)])
    by_id = cli.main([*opening, f"s3://{OUT}/z/req-bob.zip.enc", "--request-id", "req-alice"])

    captured = capsys.readouterr()
    assert (by_name, by_id) == (2, 2), captured.err
    assert "not the archive exported for request req-alice" in captured.err
    assert not out.exists()
    assert cli.main([*opening, f"s3://{OUT}/z/req-bob.zip.enc"]) == 0
    assert json.loads((out / "manifest.json").read_bytes())["request_id"] == "req-bob"


def test_given_an_export_when_its_link_is_made_then_it_is_sigv4_and_states_its_lifetime(lake, monkeypatch, capsys):
    settings, config, key = lake
    monkeypatch.delenv("AWS_SESSION_TOKEN")  # long-term keys (an IAM user's): the link lives as long as asked

    run = export_users(
        settings, ["carol"], S3Uri(OUT, "w/"), request_id="req-link", kms_key=key, say=print, expires_seconds=3 * 86400
    )

    query = parse_qs(urlsplit(run.link).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"] and query["X-Amz-Expires"] == [str(3 * 86400)]
    assert not {"AWSAccessKeyId", "Signature", "Expires"} & set(query)  # no SigV2
    assert run.link_limited_by == "requested"
    assert (
        requests.get(run.link, timeout=10).content
        == client("s3").get_object(Bucket=OUT, Key="w/req-link.zip.enc")["Body"].read()
    )
    # a new link to the same archive, signed with the caller's credentials
    capsys.readouterr()
    assert cli.main(["export", "--link", "req-link", "--expires-days", "2", "--config", config, "--json"]) == 0
    minted = json.loads(capsys.readouterr().out)
    assert parse_qs(urlsplit(minted["link"]).query)["X-Amz-Expires"] == [str(2 * 86400)]
    assert minted["archive"] == run.archive and minted["link_limited_by"] == "requested"


def test_given_temporary_credentials_when_a_link_is_made_then_its_lifetime_ends_with_them(lake, monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", "a-role-session")
    now = datetime.now(UTC).replace(microsecond=0)
    expiry = now + timedelta(hours=2)
    monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", expiry.isoformat())

    link = presigned_link(S3Uri(OUT, "w/any.zip.enc"), 7 * 86400, now=now)

    assert link.limited_by == "credentials" and link.expires_at == expiry
    assert parse_qs(urlsplit(link.url).query)["X-Amz-Expires"] == ["7200"]
    monkeypatch.delenv("AWS_CREDENTIAL_EXPIRATION")  # a Lambda's credentials: a session token, no expiry
    unknown = presigned_link(S3Uri(OUT, "w/any.zip.enc"), 86400, now=now)
    assert unknown.limited_by == "session" and unknown.expires_at == now + timedelta(days=1)
