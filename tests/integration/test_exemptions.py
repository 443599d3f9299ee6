"""A dataset kept under a legal obligation ([[exemptions]], GDPR Art. 17(3)) on a versioned moto lake, both index
backends: the operator's purge erases alice from the events and leaves every version of the invoices byte for byte,
the certificate states what was kept and why, verification passes, the access export still holds her invoices; an
exemption whose date has passed keeps nothing. Every check reads the lake itself, never the index."""

from __future__ import annotations

import io
import tomllib
import uuid
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from lakepurge.access.export import export_users
from lakepurge.access.sealing import unseal
from lakepurge.cli import main
from lakepurge.core import aws as clients
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.purge.vacuum import run_vacuum
from tests.support.cli import cli
from tests.support.lakes import every_version_bytes, index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

BASIS = "Art. 17(3)(b): tax law, invoices kept 10 years"
KEEP_UNTIL = datetime.now(UTC).date() + timedelta(days=3650)
ENDED = datetime.now(UTC).date() - timedelta(days=1)
EVENTS = b'{"user_id":"alice","page":"/home"}\n{"user_id":"bob","page":"/cart"}\n{"user_id":"alice","page":"/pay"}\n'
INVOICES_2024 = b"invoice,customer,amount\nI-1,alice,10.00\n"
INVOICES_2025 = b"invoice,customer,amount\nI-1,alice,10.00\nI-2,bob,12.50\nI-3,alice,7.25\n"


def _datasets(bucket: str) -> str:
    return (
        f'[[datasets]]\nname = "events"\nlocation = "s3://{bucket}/events/"\nid_fields = ["user_id"]\n\n'
        f'[[datasets]]\nname = "invoices"\nlocation = "s3://{bucket}/invoices/"\nformat = "csv"\n'
        'id_fields = ["customer"]\n'
    )


def _exemption(retention: str) -> str:
    return f'\n[[exemptions]]\ndataset = "invoices"\nbasis = "{BASIS}"\n{retention}\n'


@pytest.fixture(params=["postgres", "dynamodb"])
def index(request: pytest.FixtureRequest, aws: object, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    if request.param == "postgres":
        return index_toml("postgres", request.getfixturevalue("pg_dsn"))
    return index_toml("dynamodb", table=f"index-{uuid.uuid4().hex[:8]}")


def lake(index: str, tmp_path: Path, exemption: str) -> tuple[Any, Settings, str, str]:
    """A versioned bucket: events holding alice and bob; an invoice file written twice (both versions hold alice);
    indexed from S3 events, then reconciled (coverage recorded). Returns (s3, settings, config file, bucket)."""
    bucket = f"xlake-{uuid.uuid4().hex[:8]}"
    s3 = clients.client("s3")
    for name in (bucket, f"{bucket}-reports", f"{bucket}-exports"):
        s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    toml = (
        f'[index]\n{index}\n\n[reports]\nlocation = "s3://{bucket}-reports/"\n\n[purge]\nmax_dataset_fraction = 1.0\n'
        f"max_object_fraction = 1.0\n\n{_datasets(bucket)}{_exemption(exemption) if exemption else ''}"
    )
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    settings = parse_settings(tomllib.loads(toml))
    store = open_store(settings.index)
    try:
        for key, body in (
            ("events/a.jsonl", EVENTS),
            ("invoices/2025.csv", INVOICES_2024),
            ("invoices/2025.csv", INVOICES_2025),
        ):
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            index_object(s3, store, settings, bucket, key)
    finally:
        store.close()
    run_reconcile(None, settings)
    return s3, settings, str(config), bucket


def certificate_of(s3: Any, bucket: str, request_id: str) -> tuple[bytes, dict[str, Any]]:
    body = s3.get_object(Bucket=f"{bucket}-reports", Key=f"certificates/{request_id}.json")["Body"].read()
    return body, orjson.loads(body)


def test_given_invoices_kept_for_tax_law_when_alice_is_purged_then_they_stay_byte_identical_and_are_certified_kept(
    index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN alice in the events and in two versions of an invoice file the configuration keeps until a future date
    s3, settings, config, bucket = lake(index, tmp_path, f"retain_until = {KEEP_UNTIL.isoformat()}")
    invoices_before = every_version_bytes(bucket, "invoices/")
    assert len(invoices_before) == 2

    # WHEN the operator purges her
    code, purged = cli(capsys, "purge", "alice", "--yes", "--config", config)

    # THEN the events no longer hold her (no version does), bob's line is as it was
    assert code == 0, purged
    events = every_version_bytes(bucket, "events/")
    assert all(b'"alice"' not in body for body in events.values())
    assert any(b'{"user_id":"bob","page":"/cart"}' in body for body in events.values())
    # every version of the invoices is byte for byte what it was: nothing rewritten, no version deleted or added
    assert every_version_bytes(bucket, "invoices/") == invoices_before
    # the certificate lists the invoices as kept, with their basis and date, and is verified for the rest
    body, certificate = certificate_of(s3, bucket, purged["request_id"])
    assert certificate["exemptions"] == [
        {
            "dataset": "invoices",
            "basis": BASIS,
            "legal_hold": False,
            "kept_until": KEEP_UNTIL.isoformat(),
            "kept": True,
            "objects": 1,
            "records": 2,
            "noncurrent_versions": 1,
            "coverage": "complete",
        }
    ]
    assert {o["dataset"] for o in certificate["objects"]} == {"events"}
    assert certificate["verification"]["passed"] is True
    assert b"alice" not in body
    assert "invoices" not in purged["plan"]["datasets"]

    # and verification, which reads the whole lake again, passes: the kept invoices are stated, not left behind
    capsys.readouterr()
    code = main(["verify", "alice", "--config", config, "--json"])
    said = capsys.readouterr()
    verified = orjson.loads(said.out)
    assert code == 0, verified
    assert f"dataset invoices: NOT erased, kept ({BASIS}) until {KEEP_UNTIL.isoformat()}" in said.err
    assert verified["verified"] is True and verified["remaining"] == [] and verified["index_locations"] == 0
    assert [(e["dataset"], e["kept"], e["records"]) for e in verified["exemptions"]] == [("invoices", True, 2)]
    # while a leftover anywhere else still fails it: bob's events line is no exemption
    code, bob = cli(capsys, "verify", "bob", "--config", config)
    assert code != 0 and bob["verified"] is False
    assert [place["object"] for place in bob["remaining"]] == [f"s3://{bucket}/events/a.jsonl"] * len(bob["remaining"])

    # and her next invoice is hers by right, not an erased user back: only a new events object is flagged
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    store = open_store(settings.index)
    try:
        flagged = {}
        for key, body in (
            ("invoices/2026.csv", b"invoice,customer,amount\nI-9,alice,3.00\n"),
            ("events/b.jsonl", EVENTS),
        ):
            s3.put_object(Bucket=bucket, Key=key, Body=body)
            flagged[key] = index_object(s3, store, settings, bucket, key, pseudonymizer=pseudonymizer).returning_users
    finally:
        store.close()
    assert flagged == {"invoices/2026.csv": 0, "events/b.jsonl": 1}

    # and her access export (Art. 15) still holds her invoice rows
    kms_key = clients.client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]
    run = export_users(settings, ["alice"], S3Uri(f"{bucket}-exports", "subject/"), kms_key=kms_key, say=lambda _: None)
    where = S3Uri.parse(run.archive)
    sealed = s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read()
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), clients.client("kms"))))
    manifest = orjson.loads(archive.read("manifest.json"))
    exported = {archive.read(entry["file"]) for entry in manifest["objects"] if entry["dataset"] == "invoices"}
    assert exported == {
        b"invoice,customer,amount\nI-1,alice,10.00\nI-3,alice,7.25\n",
        b"invoice,customer,amount\nI-9,alice,3.00\n",
    }


def test_given_an_exemption_whose_date_has_passed_when_alice_is_purged_then_her_invoices_are_erased_and_it_is_said(
    index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s3, _, config, bucket = lake(index, tmp_path, f"retain_until = {ENDED.isoformat()}")

    code, purged = cli(capsys, "purge", "alice", "--yes", "--config", config)

    assert code == 0, purged
    invoices = every_version_bytes(bucket, "invoices/")
    assert invoices and all(b"alice" not in body for body in invoices.values())
    assert any(b"I-2,bob,12.50" in body for body in invoices.values())
    _, certificate = certificate_of(s3, bucket, purged["request_id"])
    [stated] = certificate["exemptions"]
    assert (stated["dataset"], stated["kept"], stated["kept_until"]) == ("invoices", False, ENDED.isoformat())
    assert "invoices" in {o["dataset"] for o in certificate["objects"]}
    assert certificate["verification"]["passed"] is True
    assert purged["plan"]["exemptions"][0]["kept"] is False


def test_given_a_legal_hold_placed_after_the_report_when_that_report_is_executed_then_nothing_is_erased(
    index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a reviewed report (dry run) that erases alice's invoices, made before any exemption
    _, _, config, bucket = lake(index, tmp_path, "")
    code, dry = cli(capsys, "purge", "alice", "--config", config)
    assert code == 0 and "invoices" in dry["plan"]["datasets"]
    before = every_version_bytes(bucket, "")
    # and then a legal hold placed on the invoices
    with Path(config).open("a") as file:
        file.write(_exemption("legal_hold = true"))

    # WHEN that reviewed report is executed
    code, refused = cli(
        capsys,
        "purge",
        "alice",
        "--report",
        dry["request_id"],
        "--sha256",
        dry["report_sha256"],
        "--yes",
        "--config",
        config,
    )

    # THEN it is refused naming the dataset, and not one object or version of the lake changed
    assert code != 0 and refused["status"] == "REFUSED"
    assert "dataset(s) invoices kept by an exemption made after the report" in refused["reason"]
    assert every_version_bytes(bucket, "") == before


def test_given_placeholders_in_a_dataset_kept_since_when_vacuumed_then_not_one_of_its_versions_changes(
    index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN bob erased (blanked) from the events and the invoices before any exemption
    _, _, config, bucket = lake(index, tmp_path, "")
    code, purged = cli(capsys, "purge", "bob", "--yes", "--config", config)
    assert code == 0, purged
    # and then the invoices kept under a legal hold, and alice erased from the rest (she is on the suppression list)
    with Path(config).open("a") as file:
        file.write(_exemption("legal_hold = true"))
    code, purged = cli(capsys, "purge", "alice", "--yes", "--config", config)
    assert code == 0, purged
    invoices = every_version_bytes(bucket, "invoices/")

    # WHEN the vacuum removes the placeholders the purges left
    vacuumed = run_vacuum(None, parse_settings(tomllib.loads(Path(config).read_text())), apply=True)

    # THEN the events' are gone, while not one version of the kept invoices changed or went (bob's blank stays)
    assert vacuumed.placeholders == 3 and vacuumed.kept == 1  # the events' three lines, all erased
    assert every_version_bytes(bucket, "invoices/") == invoices
