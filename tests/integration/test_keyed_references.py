"""Objects whose key may name their user (one-user-per-object datasets) are named by a keyed reference in every
document lakepurge keeps or prints: the certificate (kept for years under Object Lock), the export manifest and
record, and `status`. The attack of issue 25: hash a few candidate emails into candidate keys and look for the
hashes in those documents. A plain hash of the key lets it recover the key, and so the person; the keyed one must
not.
"""

from __future__ import annotations

import hashlib
import io
import json
import tomllib
import zipfile

import orjson
import pytest

from lakepurge import cli
from lakepurge.access.export import export_users
from lakepurge.access.sealing import unseal
from lakepurge.core.aws import client
from lakepurge.core.config import parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.ops.manual_purge import purge_users
from lakepurge.reports.report import object_reference  # (where it was before issue 25: the test runs on either)
from tests.support.purging import HASH_KEY, index_keys

pytestmark = pytest.mark.integration

BUCKET = "keyed-lake"
EXPORTS = "keyed-exports"
CANDIDATES = ["bob@example.com", "alice@example.com", "carol@example.com", "dave@example.com"]
TOML = f"""
[index]
backend = "dynamodb"
table = "keyed-references"

[reports]
location = "s3://{BUCKET}-reports/"

[[datasets]]
name = "documents"
location = "s3://{BUCKET}/docs/"
id_sidecar = {{ suffix = ".meta.json", field = "owner" }}
erase = "delete-object"
"""


def recovered(document: str) -> list[str]:
    """The attacker: each candidate's key hashed (SHA-256, cut to the 12 hex digits the old references kept, in
    both forms a key may have been hashed in) and looked for in the document."""
    found = []
    for email in CANDIDATES:
        key = f"docs/{email}.pdf"
        forms = (f"s3://{BUCKET}/{key}", key)
        if any(hashlib.sha256(form.encode()).hexdigest()[:12] in document for form in forms):
            found.append(email)
    return found


def test_given_keys_naming_people_when_certified_exported_and_shown_then_hashing_candidate_emails_recovers_none(
    aws, monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3, kms = client("s3"), client("kms")
    for bucket in (BUCKET, f"{BUCKET}-reports", EXPORTS):
        s3.create_bucket(Bucket=bucket)
    for owner in ("alice@example.com", "bob@example.com"):
        s3.put_object(Bucket=BUCKET, Key=f"docs/{owner}.pdf", Body=b"%PDF-1.7 " + owner.encode())
        s3.put_object(Bucket=BUCKET, Key=f"docs/{owner}.pdf.meta.json", Body=orjson.dumps({"owner": owner}))
    # carol's document lost its sidecar: `status` lists it as unindexable
    s3.put_object(Bucket=BUCKET, Key="docs/carol@example.com.pdf", Body=b"%PDF-1.7 carol")
    settings = parse_settings(tomllib.loads(TOML))
    index_keys(settings, BUCKET, [item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET)["Contents"]])
    config = tmp_path / "lakepurge.toml"
    config.write_text(TOML)

    cli.main(["status", "--config", str(config), "--json"])
    status = capsys.readouterr().out
    # carol's sidecar arrives: an owner-unknown object is a coverage gap, which nothing may be certified through
    s3.put_object(Bucket=BUCKET, Key="docs/carol@example.com.pdf.meta.json", Body=orjson.dumps({"owner": "carol"}))
    index_keys(settings, BUCKET, ["docs/carol@example.com.pdf"])
    export = export_users(
        settings,
        ["alice@example.com"],
        S3Uri(EXPORTS, "out/"),
        kms_key=kms.create_key()["KeyMetadata"]["KeyId"],
        say=lambda _line: None,
    )
    sealed = s3.get_object(Bucket=EXPORTS, Key=S3Uri.parse(export.archive).key)["Body"].read()
    manifest = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), kms))).read("manifest.json").decode()
    record = s3.get_object(Bucket=f"{BUCKET}-reports", Key=S3Uri.parse(export.record).key)["Body"].read().decode()
    # (forced: alice is a third of this tiny dataset)
    run = purge_users(
        settings, ["alice@example.com"], dry_run=False, force=True, engine="inline", say=lambda _line: None
    )
    assert run.result is not None and [o.status for o in run.result.outcomes] == ["deleted"]
    where = S3Uri.parse(run.result.certificate)
    certificate = s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read().decode()

    documents = {"certificate": certificate, "manifest": manifest, "record": record, "status": status}
    for name, document in documents.items():
        assert recovered(document) == [], name
        assert "@example.com" not in document, (name, document)
    # Whoever holds the hash key still finds the object: the certificate names it as the report does.
    alice = object_reference(f"s3://{BUCKET}/docs/alice@example.com.pdf", Pseudonymizer(HASH_KEY.encode()))
    assert [o["object"] for o in json.loads(certificate)["objects"]] == [alice]
    assert [o["object"] for o in json.loads(manifest)["objects"]] == [alice]
    assert [o["object"] for o in json.loads(record)["objects"]] == [alice]
    carol = object_reference(f"s3://{BUCKET}/docs/carol@example.com.pdf", Pseudonymizer(HASH_KEY.encode()))
    assert [u["s3path"] for u in json.loads(status)["unindexable"]] == [carol]
