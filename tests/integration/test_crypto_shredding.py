"""Pseudonymised datasets end to end, on both vault backends (PostgreSQL, DynamoDB on moto, KMS on moto): a dataset
converted on local Spark holds no raw id or personal value and joins on pseudonyms; a request erases a person from a
mixed lake (a raw dataset rewritten, protected ones crypto-shredded) with one certificate naming both methods; her
ciphertext then decrypts with no key the deployment holds while the others' still do; the access export decrypts
through the vault; no key is ever logged; the vault's copies bound the certificate; the check flags the clear
columns of a census-like dataset that single rows out."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import threading
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.access.sealing import unseal
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.protection.convert import MANIFEST, ConversionRefused, QuasiIdentifiersFound, pseudonymise_dataset
from lakepurge.protection.protect import Protection, reveal_records
from lakepurge.protection.shred import ShredPlan
from lakepurge.protection.vault import KeyEntry, Vault
from lakepurge.purge.shredding import shred_persons
from tests.support.lakes import index_toml
from tests.support.protection import (
    BUCKET,
    ORDERS_PERSONAL,
    PEOPLE,
    PROFILES_PERSONAL,
    RAW_DATASETS,
    PersonalLake,
    every_key,
    opens,
    person_id,
    settings_with,
    truncate_vault,
    vault_entries,
    vault_toml,
    write_sources,
)
from tests.support.purging import HASH_KEY, index_keys

pytestmark = pytest.mark.integration

ALICE, BOB = person_id("alice"), person_id("bob")
REVIEWS = f'[[datasets]]\nname = "reviews"\nlocation = "s3://{BUCKET}/raw/reviews/"\nid_fields = ["user_id"]\n'


@dataclass
class Scenario:
    base: str  # [index], [reports], [vault]
    sources: PersonalLake
    kms_key: str

    @property
    def raw_settings(self) -> Settings:
        return settings_with(self.base + RAW_DATASETS)


@pytest.fixture(params=["postgres", "dynamodb"])
def scenario(request, aws, pg_dsn, monkeypatch) -> Scenario:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    truncate_vault(pg_dsn)
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket="lake-reports")
    kms_key = aws_client("kms").create_key(Description="vault")["KeyMetadata"]["Arn"]
    base = f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://lake-reports/"\n\n' + vault_toml(
        request.param, pg_dsn, kms_key
    )
    return Scenario(base, write_sources(s3), kms_key)


def aws_client(service: str) -> Any:
    return aws.client(service)


def keys_under(prefix: str) -> list[str]:
    listed = aws_client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"] for item in listed]


def body(key: str) -> bytes:
    return aws_client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()


def protected_records(prefix: str) -> list[dict[str, Any]]:
    """Every record of the protected objects under a prefix, as written (pseudonyms and ciphertext)."""
    records: list[dict[str, Any]] = []
    for key in keys_under(prefix):
        if key.endswith(".parquet"):
            records += pq.read_table(io.BytesIO(body(key))).to_pylist()
        elif not key.endswith(MANIFEST):
            records += [orjson.loads(line) for line in body(key).splitlines() if line.strip() not in (b"", b"{}")]
    return records


def protect_sources(scenario: Scenario, spark: Any = None) -> tuple[Settings, str]:
    """The migration: orders and profiles converted (in this process without a session), the raw copies deleted,
    the protected datasets configured in their place. Returns the new settings and their TOML."""
    settings = scenario.raw_settings
    orders = pseudonymise_dataset(
        spark, settings, "orders", f"s3://{BUCKET}/protected/orders/", ORDERS_PERSONAL, ("email",), force=True
    )
    profiles = pseudonymise_dataset(
        spark, settings, "profiles", f"s3://{BUCKET}/protected/profiles/", PROFILES_PERSONAL, force=True
    )
    assert orders.manifest and profiles.manifest and not orders.failed and not profiles.failed
    s3 = aws_client("s3")
    for key in keys_under("raw/orders/") + keys_under("raw/profiles/"):
        s3.delete_object(Bucket=BUCKET, Key=key)
    toml = scenario.base + REVIEWS + "\n" + orders.entry + "\n" + profiles.entry
    return settings_with(toml), toml


def logged_text(caplog: Any) -> str:
    return "\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records)


def secrets_in(logged: str, held: list[tuple[KeyEntry, bytes]], values: Iterable[str]) -> list[str]:
    """What of the keys (hex, base64, wrapped) and of the raw ids and personal values a log holds."""
    found = []
    for entry, material in held:
        forms = (material.hex(), base64.b64encode(material).decode(), base64.urlsafe_b64encode(material).decode())
        if any(form.rstrip("=") in logged for form in (*forms, base64.b64encode(entry.wrapped_key).decode())):
            found.append(f"the key of {entry.person[:8]}")
    return found + sorted(value for value in values if value in logged)


# -- the write side ---------------------------------------------------------------------------------------------------


def test_given_a_jsonl_and_a_parquet_dataset_when_pseudonymised_on_spark_then_no_raw_id_or_value_is_left_and_joins_work(
    scenario, spark, tmp_path, capsys
):
    config = tmp_path / "lakepurge.toml"
    config.write_text(scenario.base + RAW_DATASETS)
    for dataset, personal, extra in (
        ("orders", ORDERS_PERSONAL, ["--deterministic", "email"]),
        ("profiles", PROFILES_PERSONAL, []),
    ):
        to = f"s3://{BUCKET}/protected/{dataset}/"
        args = ["--config", str(config), "pseudonymise", "--dataset", dataset, "--to", to, "--force"]
        assert main([*args, "--personal", ",".join(personal), *extra]) == 0
        entry = capsys.readouterr().out
        assert 'protection = "crypto-shred"' in entry and f'location = "{to}"' in entry

    # Not one raw id or personal value in any byte written, nor in the Parquet files' decoded values.
    written = [body(key) for key in keys_under("protected/")]
    decoded = json.dumps(protected_records("protected/"), default=str)
    for value in scenario.sources.personal_values():
        assert all(value.encode() not in data for data in written), value
        assert value not in decoded, value
    manifest = orjson.loads(body(f"protected/orders/{MANIFEST}"))
    assert manifest["protection"] == "crypto-shred" and manifest["deterministic_fields"] == ["email"]

    # Joins on pseudonyms give what joins on the raw ids gave.
    orders, profiles = protected_records("protected/orders/"), protected_records("protected/profiles/")
    joined = (
        spark.createDataFrame([(o["user_id"], o["order_id"]) for o in orders], "user_id string, order_id string")
        .join(
            spark.createDataFrame([(p["user_id"], p["city"]) for p in profiles], "user_id string, city string"),
            "user_id",
        )
        .collect()
    )
    source = [
        (o["order_id"], p["city"])
        for _, o in scenario.sources.records["orders"]
        for _, p in scenario.sources.records["profiles"]
        if o["user_id"] == p["user_id"]
    ]
    assert sorted((r["order_id"], r["city"]) for r in joined) == sorted(source)
    # A deterministic field joins too: each person's orders carry one email ciphertext.
    assert len({o["email"] for o in orders}) == len(PEOPLE)

    # A reader with vault access decrypts (the Spark transform), the types given back.
    from pyspark.sql.types import DateType

    from lakepurge.protection.transforms import reveal_dataframe

    settings = scenario.raw_settings
    frame = spark.createDataFrame(profiles)
    revealed = reveal_dataframe(frame, settings, Protection("user_id", PROFILES_PERSONAL), {"birth_date": DateType()})
    got = sorted((r["email"], r["birth_date"], r["city"]) for r in revealed.collect())
    assert got == sorted((p["email"], p["birth_date"], p["city"]) for _, p in scenario.sources.records["profiles"])


def test_given_a_dataframe_when_protected_by_the_spark_transform_then_the_vault_keys_it_and_it_reads_back(
    scenario, spark
):
    from lakepurge.protection.transforms import protect_dataframe

    settings = scenario.raw_settings
    rows = [r for _, r in scenario.sources.records["orders"]]
    frame = spark.createDataFrame(
        [(r["user_id"], r["email"], r["amount"]) for r in rows], "user_id string, email string, amount long"
    )
    protection = Protection("user_id", ("email",))
    protected = [r.asDict() for r in protect_dataframe(frame, settings, protection).collect()]
    assert all(r["email"].startswith("lp1r.") and r["user_id"].startswith("ps-") for r in protected)
    assert len(vault_entries(settings)) == len(PEOPLE)  # a key per person, created on first sight
    with Vault.open(settings) as vault:
        revealed = reveal_records(vault, protected, protection)
    assert sorted((r["email"], r["amount"]) for r in revealed) == sorted((r["email"], r["amount"]) for r in rows)


# -- the erase side ---------------------------------------------------------------------------------------------------


def test_given_a_mixed_lake_when_alice_is_erased_then_her_key_goes_bobs_data_still_decrypts_and_both_methods_are_named(
    scenario, caplog
):
    from lakepurge.ops.manual_purge import purge_users

    said: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="lakepurge"), caplog.at_level(logging.DEBUG, "aws_lambda_powertools"):
        settings, _ = protect_sources(scenario)
        protected_keys = keys_under("protected/")
        index_keys(settings, BUCKET, keys_under("raw/reviews/") + protected_keys)
        etags = {k: aws_client("s3").head_object(Bucket=BUCKET, Key=k)["ETag"] for k in protected_keys}
        held = list(every_key(settings))  # every key the deployment holds before the shred
        with Vault.open(settings) as vault:
            pseudonyms = vault.pseudonyms_of([ALICE, BOB])
        run = purge_users(settings, [ALICE], dry_run=False, engine="inline", say=said.append)

    certificate = orjson.loads(body_of(run.result.certificate))
    assert certificate["erasure_methods"] == {
        "crypto-shred": ["orders_protected", "profiles_protected"],
        "rewrite": ["reviews"],
    }
    shred = certificate["crypto_shred"]
    assert shred["keys_destroyed"] == 1 and shred["persons_requested"] == 1
    assert shred["objects_still_holding_ciphertext"] == {"orders_protected": 3, "profiles_protected": 2}
    assert shred["records_still_holding_ciphertext"] == {"orders_protected": 3, "profiles_protected": 2}
    assert certificate["verification"]["passed"] and shred["verification"]["passed"]
    assert shred["verification"]["vault_entries_remaining"] == 0 and shred["verification"]["pseudonyms_resolving"] == 0
    assert "erased by crypto-shredding, not rewritten" in shred["statement"]
    assert certificate["totals"]["lines_erased"] == 3  # her reviews, one a part
    assert any(line.startswith("Crypto-shredded") for line in said) and any("crypto-shredded" in line for line in said)

    # No protected object was rewritten; her raw reviews were.
    assert {k: aws_client("s3").head_object(Bucket=BUCKET, Key=k)["ETag"] for k in protected_keys} == etags
    assert all(ALICE.encode() not in body(k) for k in keys_under("raw/reviews/"))

    # Her ciphertext opens with no key the deployment holds now (every vault entry, unwrapped by KMS), her pseudonym
    # resolves no more; it opened with her key before.
    hers = [r for r in protected_records("protected/") if r["user_id"] == pseudonyms[ALICE]]
    assert len(hers) == 5
    tokens = [(f, r[f]) for r in hers for f in ("email", "name", "birth_date") if f in r]
    alice_before = next(material for entry, material in held if entry.pseudonym == pseudonyms[ALICE])
    assert all(opens(alice_before, f, t) for f, t in tokens)
    now = list(every_key(settings))
    assert len(now) == len(PEOPLE) - 1
    assert not any(opens(material, f, t) for _, material in now for f, t in tokens)
    with Vault.open(settings) as vault:
        assert vault.store.persons_of([pseudonyms[ALICE]]) == {}
        assert vault.keys_of_pseudonyms([pseudonyms[ALICE]]) == {}
        revealed = reveal_records(vault, protected_records("protected/orders/"), Protection("user_id", ORDERS_PERSONAL))
    # Bob's records decrypt to what they were; hers read as erased.
    bobs = sorted((r["email"], r["name"]) for r in revealed if r["user_id"] == pseudonyms[BOB])
    assert bobs == sorted((r["email"], r["name"]) for r in scenario.sources.of("orders", "bob"))
    assert all(r["email"] is None for r in revealed if r["user_id"] == pseudonyms[ALICE])

    # Nothing secret or personal in what lakepurge logged.
    logged = logged_text(caplog)
    assert "vault keys created on first sight" in logged and "vault keys destroyed" in logged
    assert secrets_in(logged, held, scenario.sources.personal_values()) == []


def body_of(uri: str) -> bytes:
    where = S3Uri.parse(uri)
    return aws_client("s3").get_object(Bucket=where.bucket, Key=where.key)["Body"].read()


def test_given_protected_records_when_alice_asks_for_her_data_then_the_export_decrypts_them_through_the_vault(scenario):
    from lakepurge.access.export import export_users

    settings, _ = protect_sources(scenario)
    index_keys(settings, BUCKET, keys_under("raw/reviews/") + keys_under("protected/"))
    run = export_users(
        settings, [ALICE], S3Uri("lake-reports", "exports/"), kms_key=scenario.kms_key, say=lambda _line: None
    )
    sealed = body_of(run.archive)
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), aws_client("kms"))))
    manifest = json.loads(archive.read("manifest.json"))
    assert run.records == {"orders_protected": 3, "profiles_protected": 2, "reviews": 3}
    decrypted = [e for e in manifest["objects"] if e.get("decrypted_through_the_vault")]
    assert {e["dataset"] for e in decrypted} == {"orders_protected", "profiles_protected"}
    records = [orjson.loads(line) for e in decrypted for line in archive.read(e["file"]).splitlines()]
    orders = sorted((r["user_id"], r["email"], r["name"]) for r in records if "order_id" in r)
    assert orders == sorted((r["user_id"], r["email"], r["name"]) for r in scenario.sources.of("orders", "alice"))
    births = sorted(r["birth_date"] for r in records if "birth_date" in r)
    assert births == sorted(str(r["birth_date"]) for r in scenario.sources.of("profiles", "alice"))


# -- the vault --------------------------------------------------------------------------------------------------------


def test_given_two_writers_meeting_a_person_first_at_once_when_keys_are_created_then_both_use_one_key(scenario):
    settings = scenario.raw_settings
    answers: list[Any] = []

    def write() -> None:
        with Vault.open(settings) as vault:
            key, pseudonym = vault.keys_for(["zoe"], create=True)["zoe"]
            answers.append((key.seal("email", "z@x", True), pseudonym))

    Vault.open(settings).close()
    writers = [threading.Thread(target=write) for _ in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert len(set(answers)) == 1  # one key, one pseudonym for all
    assert len(vault_entries(settings)) == 1
    with Vault.open(settings) as vault:
        assert vault.keys_for(["zoe"])["zoe"][1] == answers[0][1]  # found again, not created
        assert vault.keys_for(["nobody"]) == {}  # not created without create


def test_given_a_dynamodb_vault_with_copies_outside_the_rule_when_shredding_then_verification_fails_naming_them(
    aws, monkeypatch
):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    aws_client("s3").create_bucket(Bucket="lake-reports")
    kms_key = aws_client("kms").create_key()["KeyMetadata"]["Arn"]
    base = f'[index]\n{index_toml("dynamodb")}\n[reports]\nlocation = "s3://lake-reports/"\n'
    settings = settings_with(base + vault_toml("dynamodb", None, kms_key, max_copy_days=30))
    with Vault.open(settings) as vault:
        vault.keys_for(["alice"], create=True)
    dynamodb = aws_client("dynamodb")
    dynamodb.update_continuous_backups(
        TableName="lakepurge-vault-test",
        PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True, "RecoveryPeriodInDays": 35},
    )
    dynamodb.create_backup(TableName="lakepurge-vault-test", BackupName="before-the-shred")
    plan = ShredPlan(("orders_protected",), "dynamodb:lakepurge-vault-test", 1)
    results = S3Uri("lake-reports", "results/req-1/")
    hashed = Pseudonymizer(HASH_KEY.encode())("alice")

    section = shred_persons(aws_client("s3"), settings, plan, [hashed], results, [])

    checked = section["verification"]
    assert section["keys_destroyed"] == 1 and checked["vault_entries_remaining"] == 0
    assert not checked["passed"] and checked["point_in_time_recovery_days"] == 35
    assert any("backup before-the-shred of the vault never expires" in p for p in checked["problems"])
    assert any("beyond [vault] max_copy_days (30)" in p for p in checked["problems"])
    shredded = datetime.fromisoformat(section["shredded_at"])
    assert datetime.fromisoformat(checked["copies_gone_by"]) - shredded >= timedelta(days=35)
    # A rerun of the same request finds nothing left to destroy and still counts what this request destroyed.
    again = shred_persons(aws_client("s3"), settings, plan, [hashed], results, [])
    assert again["keys_destroyed"] == 1 and again["verification"]["vault_entries_remaining"] == 0


# -- the check and what the conversion refuses --------------------------------------------------------------------


def test_given_a_census_like_dataset_when_checked_then_the_quasi_identifying_column_set_is_flagged(
    aws, spark, pg_dsn, tmp_path, capsys, monkeypatch
):
    import random

    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    chance = random.Random(11)
    for part in range(2):
        rows = [
            {
                "person": f"p{part}-{n}",
                "zip": f"{chance.randrange(30):05d}",
                "birth_year": 1950 + chance.randrange(45),
                "sex": chance.choice("FM"),
                "visits": chance.randrange(3),
            }
            for n in range(1500)
        ]
        s3.put_object(Bucket=BUCKET, Key=f"census/part-{part}.jsonl", Body=b"\n".join(map(orjson.dumps, rows)))
    config = tmp_path / "lakepurge.toml"
    config.write_text(
        f'[index]\n{index_toml("postgres", pg_dsn)}\n[reports]\nlocation = "s3://lake-reports/"\n'
        f'[[datasets]]\nname = "census"\nlocation = "s3://{BUCKET}/census/"\nid_fields = ["person"]\n'
    )
    code = main(["--config", str(config), "--json", "pseudonymise", "--check", "census", "--max-unique-share", "0.05"])
    captured = capsys.readouterr()
    report = orjson.loads(captured.out)
    assert code == 1 and report["rows_read"] == 3000 and not report["sampled"]
    flagged = [set(s["columns"]) for s in report["flagged"]]
    assert {"zip", "birth_year"} in flagged
    assert all(len(columns) > 1 for columns in flagged)  # no column alone singles anyone out
    assert "WARNING zip + birth_year" in captured.err
    coarse = ["pseudonymise", "--check", "census", "--columns", "sex,visits"]
    assert main(["--config", str(config), *coarse]) == 0


def test_given_a_record_without_its_id_when_converting_then_its_object_is_not_written_and_nothing_is_declared(
    scenario, caplog
):
    s3 = aws_client("s3")
    s3.put_object(
        Bucket=BUCKET, Key="raw/orders/part-9.jsonl", Body=b'{"user_id": "x-1", "email": "e"}\n{"email": "leak@x"}\n'
    )
    settings = scenario.raw_settings
    with caplog.at_level(logging.DEBUG, logger="lakepurge"), caplog.at_level(logging.DEBUG, "aws_lambda_powertools"):
        run = pseudonymise_dataset(
            None, settings, "orders", f"s3://{BUCKET}/protected/orders/", ORDERS_PERSONAL, force=True
        )
    # Keys were made and used in this process: none of them, no raw id, no personal value was logged.
    logged = logged_text(caplog)
    assert "vault keys created on first sight" in logged and "dataset pseudonymised" in logged
    assert secrets_in(logged, list(every_key(settings)), [*scenario.sources.personal_values(), "leak@x"]) == []
    assert [(o.source, o.error) for o in run.failed] == [
        (
            f"s3://{BUCKET}/raw/orders/part-9.jsonl",
            "line 1: the id field 'user_id' is missing or null: it cannot be pseudonymised",
        )
    ]
    assert run.manifest is None
    assert "protected/orders/part-9.jsonl" not in keys_under("protected/orders/")
    assert MANIFEST not in "".join(keys_under("protected/orders/"))
    with pytest.raises(ConversionRefused, match="holds objects already"):
        pseudonymise_dataset(None, settings, "orders", f"s3://{BUCKET}/protected/orders/", ORDERS_PERSONAL, force=True)
    with pytest.raises(QuasiIdentifiersFound, match="order_id"):
        pseudonymise_dataset(None, settings, "orders", f"s3://{BUCKET}/protected/again/", ORDERS_PERSONAL)
    assert keys_under("protected/again/") == []  # refused before anything was written


def test_given_a_parquet_object_without_a_personal_column_when_converting_then_it_fails_naming_the_column(scenario):
    s3 = aws_client("s3")
    out = io.BytesIO()
    pq.write_table(pa.table({"user_id": [person_id("zoe")], "email": ["zoe@example.com"]}), out)
    s3.put_object(Bucket=BUCKET, Key="raw/profiles/part-9.parquet", Body=out.getvalue())
    to = f"s3://{BUCKET}/protected/profiles/"
    run = pseudonymise_dataset(None, scenario.raw_settings, "profiles", to, PROFILES_PERSONAL, force=True)
    assert [(o.source, o.error) for o in run.failed] == [
        (f"s3://{BUCKET}/raw/profiles/part-9.parquet", "no column(s) birth_date")
    ]
    assert run.manifest is None and "protected/profiles/part-9.parquet" not in keys_under("protected/profiles/")
    assert len(keys_under("protected/profiles/")) == 2  # the two good objects, not declared protected


@pytest.mark.parametrize("scenario", ["postgres"], indirect=True)
def test_given_emr_configured_when_pseudonymise_runs_on_emr_then_the_job_converts_and_the_cli_prints_its_entry(
    scenario, spark, tmp_path, capsys
):
    from lakepurge_jobs import pseudonymise as pseudonymise_job
    from tests.integration.test_remote_jobs import CONFIG_URI, launcher_toml, runs

    aws.configure(cli=True)  # the CLI's clients: the test's hooks go on the same ones
    emr = aws.client("emr-serverless")
    application_id = emr.create_application(name="lakepurge", releaseLabel="emr-7.1.0", type="SPARK")["applicationId"]
    config = tmp_path / "lakepurge.toml"
    config.write_text(scenario.base + RAW_DATASETS + launcher_toml(application_id))
    s3 = aws_client("s3")
    s3.create_bucket(Bucket="lake-artifacts")
    s3.put_object(Bucket="lake-artifacts", Key="config/lakepurge.toml", Body=config.read_bytes())
    submitted: list[list[str]] = []

    def run_the_job_as_emr_would(params, **_):  # the first status request: EMR has run the job by now
        if submitted and submitted[-1]:
            with contextlib.redirect_stdout(io.StringIO()):  # the driver's stdout goes to EMR's logs
                assert pseudonymise_job.main(submitted[-1]) == 0
            submitted.append([])

    def record_submission(params, **_):
        submitted.append(params["jobDriver"]["sparkSubmit"]["entryPointArguments"])

    emr.meta.events.register("provide-client-params.emr-serverless.StartJobRun", record_submission)
    emr.meta.events.register("provide-client-params.emr-serverless.GetJobRun", run_the_job_as_emr_would)
    to = f"s3://{BUCKET}/protected/orders/"
    try:
        command = ["--config", str(config), "pseudonymise", "--dataset", "orders", "--to", to, "--force"]
        code = main([*command, "--personal", ",".join(ORDERS_PERSONAL), "--on", "emr-serverless"])
        check = main(["--config", str(config), "pseudonymise", "--check", "orders", "--on", "emr-serverless"])
    finally:
        emr.meta.events.unregister("provide-client-params.emr-serverless.StartJobRun", record_submission)
        emr.meta.events.unregister("provide-client-params.emr-serverless.GetJobRun", run_the_job_as_emr_would)
        aws.configure(cli=False)

    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert 'protection = "crypto-shred"' in captured.out and f'location = "{to}"' in captured.out
    (run,) = runs(emr, application_id)
    submit = run["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://lake-artifacts/spark/pseudonymise.py"
    assert submit["entryPointArguments"][:6] == ["--config", CONFIG_URI, "--dataset", "orders", "--to", to]
    orders = protected_records("protected/orders/")
    assert len(orders) == len(scenario.sources.records["orders"])
    assert all(o["user_id"].startswith("ps-") and o["email"].startswith("lp1r.") for o in orders)
    assert check == 2 and "--check runs on local Spark" in captured.err  # nothing submitted for it
