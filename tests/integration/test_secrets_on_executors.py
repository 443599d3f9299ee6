"""A Spark driver reads the hash key from Secrets Manager and hands it to the executors in the task closure: the
executors hash with it without asking Secrets Manager, and it reaches them through no environment variable."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import boto3
import pytest

from lakepurge.core import aws as lakepurge_aws
from lakepurge.core import privacy
from lakepurge.core.config import PrivacyConfig
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.sparkutil import job_environment, on_executors
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

KEY = "executor-handed-key-" + "z" * 30


def test_given_a_hash_key_secret_when_executors_hash_then_they_use_the_drivers_key_not_secrets_manager(
    aws: object, spark: object
) -> None:
    import tomllib

    from lakepurge.core.config import parse_settings

    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="lakepurge-hash-key", SecretString=KEY)["ARN"]
    lakepurge_aws.clear_secrets()
    privacy.forget_handed_keys()
    toml = f'[index]\n{index_toml("dynamodb")}\n\n[reports]\nlocation = "s3://reports/"\n\n'
    toml += f'[privacy]\nhash_key_secret = "{arn}"\n'
    settings = parse_settings(tomllib.loads(toml))
    env = job_environment(settings)  # the driver reads the secret here, once
    secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)  # nobody can read it any more
    users = ["alice", "bob", "carol", "dave"]
    config: PrivacyConfig = settings.privacy

    def work(part: Iterable[str]) -> Iterator[tuple[str, str, bool]]:
        import os

        from lakepurge.core.privacy import Pseudonymizer as OnExecutor
        from lakepurge.core.sparkutil import apply_job_environment

        apply_job_environment(env)
        hasher = OnExecutor.from_config(config)
        in_environment = any(KEY in value for value in os.environ.values())
        for user in part:
            yield user, hasher(user), in_environment

    try:
        rows = on_executors(spark, users, work, label="users hashed")
    finally:
        lakepurge_aws.clear_secrets()
        privacy.forget_handed_keys()
    expected = Pseudonymizer(KEY.encode())
    assert sorted((u, h) for u, h, _ in rows) == sorted((u, expected(u)) for u in users)
    assert not any(in_environment for _, _, in_environment in rows)
    assert KEY not in json.dumps({k: v for k, v in env.items() if not k.startswith("lakepurge.")})
