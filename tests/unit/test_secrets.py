"""Secrets at run time (issue 14): the hash key and the index DSN come from Secrets Manager, read through the
Powertools Parameters cache by the processes that need them, never resolved into a configuration or environment.

moto's in-process mock answers Secrets Manager (no network: the unit tier's guard stays on)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import pytest
from moto import mock_aws

from lakepurge.core import aws, privacy, sparkutil
from lakepurge.core.config import ConfigError, IndexConfig, PrivacyConfig, Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer, hash_key
from lakepurge.index import postgres_dsn

pytestmark = pytest.mark.unit

KEY = "k3y-0f-the-keyed-hashes-" + "x" * 24
ROTATED = "r0tated-key-0f-the-hashes-" + "y" * 22
USERS = ["alice@example.com", "bob", "42"]


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Secrets Manager in moto's in-process mock, with every cache (Powertools', the handed keys) empty."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    aws.clear_secrets()
    privacy.forget_handed_keys()
    with mock_aws():
        import boto3

        yield boto3.client("secretsmanager", region_name="us-east-1")
    aws.clear_secrets()
    privacy.forget_handed_keys()


def settings_with_secret(arn: str) -> Settings:
    """The smallest configuration whose hash key is read from the secret arn."""
    return parse_settings(
        {
            "index": {"backend": "dynamodb", "table": "t"},
            "reports": {"location": "s3://r/"},
            "privacy": {"hash_key_secret": arn},
        }
    )


def _secret(client: object, name: str, value: str) -> str:
    arn: str = client.create_secret(Name=name, SecretString=value)["ARN"]  # type: ignore[attr-defined]
    return arn


def test_given_a_hash_key_secret_when_hashing_then_the_hashes_equal_those_of_the_environment_variable(
    secrets: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = _secret(secrets, "lakepurge-hash-key", KEY)
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    from_env = Pseudonymizer.from_config(PrivacyConfig())
    by_arn = Pseudonymizer.from_config(PrivacyConfig(hash_key_secret=arn))
    by_name = Pseudonymizer.from_config(PrivacyConfig(hash_key_secret="lakepurge-hash-key"))
    assert by_arn.many(USERS) == from_env.many(USERS) == by_name.many(USERS)
    assert Pseudonymizer.optional(PrivacyConfig(hash_key_secret=arn)) is not None


def test_given_a_rotated_secret_when_the_cache_expires_then_the_new_value_is_used(secrets: object) -> None:
    arn = _secret(secrets, "lakepurge-hash-key", KEY)
    config = PrivacyConfig(hash_key_secret=arn)
    before = Pseudonymizer.from_config(config)("alice")
    secrets.put_secret_value(SecretId=arn, SecretString=ROTATED)  # type: ignore[attr-defined]
    # within the cache's lifetime the value read first is used (no call per hash) ...
    assert Pseudonymizer.from_config(config)("alice") == before
    assert aws.secret_string(arn) == KEY
    # ... once it has expired (what clearing the cache does at once) the rotated value is read
    aws.clear_secrets()
    assert hash_key(config) == ROTATED.encode()
    assert Pseudonymizer.from_config(config)("alice") == Pseudonymizer(ROTATED.encode())("alice") != before
    # a reader that keeps nothing (max_age 0) sees each rotation at once
    aws.clear_secrets()
    assert aws.secret_string(arn, max_age=0) == ROTATED
    secrets.put_secret_value(SecretId=arn, SecretString=KEY)  # type: ignore[attr-defined]
    assert aws.secret_string(arn, max_age=0) == KEY


def test_given_a_secret_when_read_hashed_handed_to_executors_and_failing_then_no_log_carries_it(
    secrets: object, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = _secret(secrets, "lakepurge-hash-key", KEY)
    settings = settings_with_secret(arn)
    errors: list[str] = []
    with (
        caplog.at_level(logging.INFO),  # every logger; botocore logs bodies only at DEBUG, off unless asked
        caplog.at_level(logging.DEBUG, logger="lakepurge"),
        caplog.at_level(logging.DEBUG, logger="aws_lambda_powertools"),
    ):
        Pseudonymizer.from_config(settings.privacy).many(USERS)
        env = sparkutil.job_environment(settings)
        env[sparkutil._DRIVER_PID] = "0"  # as on an executor: another process than the driver's
        sparkutil.apply_job_environment(env)
        for bad in ("no-such-secret", arn.replace("hash-key", "other")):
            with pytest.raises(aws.SecretUnavailable) as raised:
                Pseudonymizer.from_config(PrivacyConfig(hash_key_secret=bad))
            errors.append(str(raised.value))
        secrets.put_secret_value(SecretId=arn, SecretString="short")  # type: ignore[attr-defined]
        aws.clear_secrets()
        privacy.forget_handed_keys()  # (this process played the executor above)
        with pytest.raises(ConfigError) as short:
            Pseudonymizer.from_config(settings.privacy)
        errors.append(str(short.value))
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    assert KEY not in logged and "short" not in logged
    assert all(KEY not in e and "short" not in e for e in errors), errors
    assert "no-such-secret" in errors[0]  # the error names the secret, not its value
    # the key reached the "executor" in memory, not through its environment
    assert KEY not in json.dumps(dict(os.environ))


def test_given_a_job_environment_when_applied_on_an_executor_then_the_key_is_in_memory_not_in_the_environment(
    secrets: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = _secret(secrets, "lakepurge-hash-key", KEY)
    settings = settings_with_secret(arn)
    env = sparkutil.job_environment(settings)
    variables = {name for name in env if not name.startswith("lakepurge.")}
    assert variables <= set(sparkutil.AWS_VARIABLES)
    assert KEY not in json.dumps({name: env[name] for name in variables})

    # the driver (spark=None runs the work in-process) keeps reading from the source: nothing is handed over
    sparkutil.apply_job_environment(env)
    assert not privacy._handed
    # an executor (another process) takes the driver's key and never asks Secrets Manager
    env[sparkutil._DRIVER_PID] = "0"
    sparkutil.apply_job_environment(env)
    secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)  # type: ignore[attr-defined]
    aws.clear_secrets()
    assert hash_key(settings.privacy) == KEY.encode()
    assert KEY not in json.dumps(dict(os.environ))
    with pytest.raises(aws.SecretUnavailable):  # the driver itself would have to read it again
        privacy.read_hash_key(settings.privacy)


def test_given_an_unreadable_hash_key_secret_when_optional_then_it_raises_instead_of_turning_checks_off(
    secrets: object,
) -> None:
    with pytest.raises(aws.SecretUnavailable, match="missing-secret"):
        Pseudonymizer.optional(PrivacyConfig(hash_key_secret="missing-secret"))


def test_given_both_key_sources_or_both_dsn_settings_when_validating_then_the_settings_are_refused() -> None:
    base = {"index": {"backend": "dynamodb", "table": "t"}, "reports": {"location": "s3://r/"}}
    with pytest.raises(ConfigError, match="hash_key_env or hash_key_secret, not both"):
        parse_settings(base | {"privacy": {"hash_key_env": "K", "hash_key_secret": "arn"}})
    with pytest.raises(ConfigError, match="hash_key_secret"):
        parse_settings(base | {"privacy": {"hash_key_secret": ""}})
    assert parse_settings(base | {"privacy": {"hash_key_secret": "arn"}}).privacy.hash_key_env is None
    assert parse_settings(base).privacy.hash_key_env == "LAKEPURGE_HASH_KEY"
    with pytest.raises(ConfigError, match="'dsn' or 'dsn_secret', not both"):
        parse_settings(base | {"index": {"backend": "postgres", "dsn": "postgresql://x", "dsn_secret": "arn"}})
    with pytest.raises(ConfigError, match="needs 'dsn' or 'dsn_secret'"):
        parse_settings(base | {"index": {"backend": "postgres"}})
    settings = parse_settings(base | {"index": {"backend": "postgres", "dsn_secret": "arn:dsn"}})
    assert settings.index.dsn_secret == "arn:dsn" and settings.index.dsn is None


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ("postgresql://lakepurge:pw1@db.internal:5432/lake", "postgresql://lakepurge:pw1@db.internal:5432/lake"),
        (json.dumps({"dsn": "postgresql://lakepurge:pw1@db/lake"}), "postgresql://lakepurge:pw1@db/lake"),
        (
            json.dumps(
                {"engine": "postgres", "username": "lp", "password": "pw 1", "host": "db", "port": 5432, "dbname": "l"}
            ),
            "host=db port=5432 dbname=l user=lp password='pw 1'",
        ),
    ],
)
def test_given_a_dsn_secret_when_opening_the_index_then_the_dsn_is_read_in_each_documented_form(
    secrets: object, stored: str, expected: str
) -> None:
    arn = _secret(secrets, "lakepurge-index", stored)
    dsn = postgres_dsn(IndexConfig(backend="postgres", dsn_secret=arn))
    if expected.startswith("host="):
        assert dict(part.split("=", 1) for part in dsn.replace("'pw 1'", "pw1").split()) == dict(
            part.split("=", 1) for part in expected.replace("'pw 1'", "pw1").split()
        )
    else:
        assert dsn == expected
    assert postgres_dsn(IndexConfig(backend="postgres", dsn="postgresql://plain")) == "postgresql://plain"


def test_given_a_dsn_secret_without_a_dsn_when_reading_then_the_error_names_the_secret_not_its_value(
    secrets: object,
) -> None:
    arn = _secret(secrets, "lakepurge-index", json.dumps({"password": "hunter2-password"}))
    with pytest.raises(aws.SecretUnavailable) as raised:
        postgres_dsn(IndexConfig(backend="postgres", dsn_secret=arn))
    assert arn in str(raised.value) and "hunter2" not in str(raised.value)
