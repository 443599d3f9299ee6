"""Issue 31's acceptance: a person, not an id. On both index backends, a versioned lake on moto and a CRM link table
in the test PostgreSQL (the person and her lake: tests/support/person.py). A request naming only her email, in another
spelling than any record's, exports and then erases her everywhere (every version), leaves every other byte as it
was, states the expansion per kind and link, certifies every kind by keyed hash, and verifies; an untyped dataset
holding her email as a string is not hers; a shared email linked to 500 customers is refused; no raw identifier of
hers is in the logs, the output, the reports or the certificate."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from tests.support.cli import cli
from tests.support.exports import kms_key, open_archive
from tests.support.lakes import every_version_bytes, hand_made_lake, rows_of
from tests.support.person import (
    ACCOUNTS,
    ALICE,
    EVENTS,
    HERS,
    OBJECTS,
    PEOPLE_BEFORE,
    PERSON_TOML,
    PURCHASES,
    SIGNUPS_BEFORE,
    crm_link,
    raw_in,
    without_her,
)
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

CONFIG = "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n" + PERSON_TOML


@pytest.fixture
def person_lake(index_backend: str, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The versioned lake on moto (signups and people written twice), indexed from its events and reconciled, in
    either backend; the CRM table in the test PostgreSQL, named by [[identifier_links]]."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    tail = CONFIG + crm_link(pg_dsn)
    with hand_made_lake(index_backend, tmp_path, tail, OBJECTS, ("exports",), versioned=True, reconciled=True) as lake:
        yield lake.s3, lake.config


def test_given_only_her_email_when_alice_is_exported_purged_and_verified_then_every_identifier_of_hers_goes_everywhere(
    person_lake: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3, config = person_lake
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")  # the command line logs at WARNING unless asked: every log
    before = every_version_bytes("lake", "")
    current = {key: s3.get_object(Bucket="lake", Key=key)["Body"].read() for key, _ in before}
    printed: list[str] = []

    with caplog.at_level(logging.DEBUG, logger="lakepurge"):
        # GIVEN an access export naming only her email: exactly her rows, from every dataset but the untyped one
        code, exported = cli(
            capsys, "export", "--id", f"email={ALICE}", "--to", "s3://exports/x/", "--kms-key", kms_key(),
            "--config", config,
        )  # fmt: skip
        assert code == 0, exported
        printed.append(json.dumps(exported))
        manifest, archive = open_archive(s3, exported["archive"])
        files = {entry["object"]: (entry["lines"], archive.read(entry["file"])) for entry in manifest["objects"]}
        assert {path: lines for path, (lines, _) in files.items()} == {f"s3://lake/{k}": v for k, v in HERS.items()}
        for key, lines in HERS.items():
            exported_body = files[f"s3://lake/{key}"][1]
            if key.endswith(".parquet"):
                assert rows_of(exported_body) == [ACCOUNTS[n] for n in lines]
            else:
                kept = [0] if key.endswith(".csv") else []  # a CSV's rows come with their header
                split = current[key].split(b"\n")
                assert exported_body == b"".join(split[n] + b"\n" for n in kept + lines)

        # WHEN she is purged by her email only
        capsys.readouterr()
        code = main(["purge", "--id", f"email={ALICE}", "--yes", "--config", config, "--json"])
        out = capsys.readouterr()
        printed += [out.out, out.err]
        assert code == 0, out.err
        purged = orjson.loads(out.out)

        # THEN it is verified, every dataset of hers was rewritten, none failed
        assert (purged["verified"], purged["objects_failed"]) == (True, [])
        assert purged["lines_erased"] == sum(len(lines) for lines in HERS.values())
        # the plan states the expansion per kind and per link, as counts
        assert purged["plan"]["identifiers"]["links"] == {
            "request": {"email": 1, "sha256_hex(email)": 1},  # her email, and its SHA-256 the marketing export holds
            "records of shop_orders": {"customer_id": 1, "name_dob": 1},
            "link table crm": {"customer_id": 1},
        }
        assert "Identifiers of the person: 5 (customer_id 2, email 1, name_dob 1, sha256_hex(email) 1)" in out.err

        # every current object is the original minus her lines, byte for byte; the untyped events are untouched
        after = every_version_bytes("lake", "")
        for key, body in current.items():
            got = s3.get_object(Bucket="lake", Key=key)["Body"].read()
            assert got == without_her(key, body), key
        assert s3.get_object(Bucket="lake", Key="web_events/a.jsonl")["Body"].read() == EVENTS
        # the old version holding her is gone; the one without her is kept as it was
        old = {(k, v) for (k, v) in before if before[k, v] != current[k] or k not in current}
        old_signups = next(kv for kv in before if kv[0] == "signups/a.jsonl" and before[kv] == SIGNUPS_BEFORE)
        old_people = next(kv for kv in before if kv[0] == "people/a.csv" and before[kv] == PEOPLE_BEFORE)
        assert old == {old_signups, old_people}
        assert old_signups not in after and after[old_people] == PEOPLE_BEFORE
        held = [kv for kv, body in after.items() if kv[0] != "web_events/a.jsonl" and raw_in(body.decode("latin-1"))]
        assert held == []  # no version of hers anywhere (Parquet's integers: its rows compared above)

        # the certificate lists every kind, by keyed hash only, and its verification passed
        certificate_key = purged["certificate"].removeprefix("s3://reports/")
        certificate_body = s3.get_object(Bucket="reports", Key=certificate_key)["Body"].read()
        certificate = orjson.loads(certificate_body)
        assert certificate["verification"]["passed"] is True
        erased = certificate["identifiers"]["erased"]
        every_kind = {"email": 1, "sha256_hex(email)": 1, "customer_id": 2, "name_dob": 1}
        assert {kind: len(hashes) for kind, hashes in erased.items()} == every_kind
        assert all(len(h) == 64 for hashes in erased.values() for h in hashes)

        # verify by her email: every identifier of hers is looked for; a leftover of her name and birth date fails it
        code, verified = cli(capsys, "verify", "--id", f"email={ALICE}", "--config", config)
        assert code == 0 and verified["verified"] is True, verified
        printed.append(json.dumps(verified))
        s3.put_object(Bucket="lake", Key="people/planted.csv", Body=b"fname,lname,dob\nALICE,Liddell,1852-05-04\n")
        code, verified = cli(capsys, "verify", "--id", f"email={ALICE}", "--config", config)
        assert code == 1 and verified["verified"] is False, verified
        assert [place["object"] for place in verified["remaining"]] == ["s3://lake/people/planted.csv"]
        printed.append(json.dumps(verified))
        # without the purge's report, what it erased through links is unknown: she is not verified, and it is said
        for version in s3.list_object_versions(Bucket="lake", Prefix="people/planted.csv")["Versions"]:
            s3.delete_object(Bucket="lake", Key=version["Key"], VersionId=version["VersionId"])
        report_key = purged["report"].removeprefix("s3://reports/")
        report_body = s3.get_object(Bucket="reports", Key=report_key)["Body"].read()
        s3.delete_object(Bucket="reports", Key=report_key)
        code, verified = cli(capsys, "verify", "--id", f"email={ALICE}", "--config", config)
        assert code == 1 and verified["reports_unread"] == [purged["request_id"]], verified
        assert verified["remaining"] == []  # nothing found: not verified for what could not be looked for
        s3.put_object(Bucket="reports", Key=report_key, Body=report_body)

    # no raw identifier of hers in the logs, the output, the reports or the certificate
    logged = "\n".join(json.dumps(record.__dict__, default=str) for record in caplog.records)
    assert "request resolved" in logged  # the logs of every step were captured
    written = b"\n".join(
        s3.get_object(Bucket="reports", Key=item["Key"])["Body"].read()
        for item in s3.list_objects_v2(Bucket="reports").get("Contents", [])
    ).decode("utf-8", "replace")
    assert certificate_body.decode() in written
    for where in (logged, "\n".join(printed), written):
        assert raw_in(where) == []


def test_given_a_shared_email_linked_to_500_customers_when_purged_by_it_then_the_request_is_refused_and_nothing_changes(
    person_lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = person_lake
    before = every_version_bytes("lake", "")
    code, refused = cli(capsys, "purge", "--id", "email=test@example.com", "--yes", "--config", config)
    assert code == 3, refused
    assert "is linked to 500 distinct customer_id through link table crm" in json.dumps(refused)
    assert "test@" not in json.dumps(refused)
    assert every_version_bytes("lake", "") == before
    code, refused = cli(capsys, "verify", "--id", "email=test@example.com", "--config", config)
    assert code == 3 and "500 distinct customer_id" in refused["reason"], refused  # whose records: not one person's
    export = ["export", "--id", "email=test@example.com", "--to", "s3://exports/x/", "--kms-key", kms_key()]
    code, refused = cli(capsys, *export, "--config", config)
    assert code == 3 and "500 distinct customer_id" in refused["error"], refused
    assert "Contents" not in aws.client("s3").list_objects_v2(Bucket="exports")  # nothing exported


def test_given_a_composite_parts_normalisation_changed_when_purged_then_its_datasets_are_not_covered_until_reindexed(
    person_lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = person_lake
    before = every_version_bytes("lake", "")
    text = Path(config).read_text()
    changed = text.replace('last_name = ["trim", "casefold"]', 'last_name = ["trim"]')
    assert changed != text
    Path(config).write_text(changed)

    code, refused = cli(capsys, "purge", "--id", f"email={ALICE}", "--yes", "--config", config)

    # the datasets holding the composite (people; shop_orders through id_composites) were indexed with other forms
    assert code != 0 and refused["status"] == "INDEX_INCOMPLETE", refused
    assert {gap["dataset"] for gap in refused["datasets"]} == {"people", "shop_orders"}
    assert all("indexed with other identifier forms" in gap["reason"] for gap in refused["datasets"])
    assert every_version_bytes("lake", "") == before  # nothing erased
    for dataset in ("people", "shop_orders"):
        assert cli(capsys, "index", "backfill", "--force", "--dataset", dataset, "--config", config)[0] == 0
    code, purged = cli(capsys, "purge", "--id", f"email={ALICE}", "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True, purged


def test_given_her_email_when_a_dry_run_is_reviewed_and_its_command_pasted_then_that_expansion_is_what_is_erased(
    person_lake: Any, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    s3, config = person_lake
    code, plan = cli(capsys, "purge", "--id", f"email={ALICE}", "--config", config)
    assert code == 0 and plan["plan"]["identifiers"]["kinds"]["name_dob"] == 1, plan
    assert raw_in(plan["execute"]) == []
    # the CRM links her email to one more customer after the review: the approved expansion is what is erased
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO crm_accounts VALUES ('alice@example.com', '51000007')")

    code, purged = cli(capsys, *shlex.split(plan["execute"])[1:])

    assert code == 0 and purged["verified"] is True, purged
    assert purged["request_id"] == plan["request_id"]
    purchases = s3.get_object(Bucket="lake", Key="purchases/a.csv")["Body"].read()
    assert purchases == without_her("purchases/a.csv", PURCHASES)  # the customer linked since is not erased


def test_given_only_her_customer_id_as_a_number_when_purged_then_her_email_its_digest_and_her_name_go_too(
    person_lake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    s3, config = person_lake
    current = {key: s3.get_object(Bucket="lake", Key=key)["Body"].read() for key in HERS}
    code, purged = cli(capsys, "purge", "--id", "customer_id=073004217.00", "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True, purged
    assert purged["plan"]["identifiers"]["links"]["records of shop_orders"] == {
        "email": 1,
        "name_dob": 1,
        "sha256_hex(email)": 1,  # the marketing export's digest of the email the order holds
    }
    for key, body in current.items():
        assert s3.get_object(Bucket="lake", Key=key)["Body"].read() == without_her(key, body), key
