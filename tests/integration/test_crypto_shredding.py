"""Pseudonymised datasets end to end, on both vault backends (PostgreSQL, DynamoDB on moto, KMS on moto): a dataset
converted on local Spark holds no raw id or personal value and reads back through the vault; writers that meet a
person at once share one key; a record that cannot be protected fails its object; no key is ever logged."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.protection.convert import MANIFEST, ConversionRefused, pseudonymise_dataset
from lakepurge.protection.protect import Protection, reveal_records
from lakepurge.protection.vault import KeyEntry, Vault
from tests.support.lakes import index_toml
from tests.support.protection import (
    BUCKET,
    ORDERS_PERSONAL,
    PEOPLE,
    PROFILES_PERSONAL,
    RAW_DATASETS,
    PersonalLake,
    every_key,
    settings_with,
    truncate_vault,
    vault_entries,
    vault_toml,
    write_sources,
)
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration


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
        args = ["--config", str(config), "pseudonymise", "--dataset", dataset, "--to", to]
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


# -- what the conversion refuses --------------------------------------------------------------------


def test_given_a_record_without_its_id_when_converting_then_its_object_is_not_written_and_nothing_is_declared(
    scenario, caplog
):
    s3 = aws_client("s3")
    s3.put_object(
        Bucket=BUCKET, Key="raw/orders/part-9.jsonl", Body=b'{"user_id": "x-1", "email": "e"}\n{"email": "leak@x"}\n'
    )
    settings = scenario.raw_settings
    with caplog.at_level(logging.DEBUG, logger="lakepurge"), caplog.at_level(logging.DEBUG, "aws_lambda_powertools"):
        run = pseudonymise_dataset(None, settings, "orders", f"s3://{BUCKET}/protected/orders/", ORDERS_PERSONAL)
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
        pseudonymise_dataset(None, settings, "orders", f"s3://{BUCKET}/protected/orders/", ORDERS_PERSONAL)
