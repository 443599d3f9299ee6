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
from tests.support.lakes import events_lake, index_toml
from tests.support.shipping import record_shipped

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


def test_given_a_purge_on_spark_whose_caller_holds_the_raw_ids_when_its_tasks_are_shipped_then_none_holds_one(
    aws: object, pg_dsn: str, spark: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The operator's CLI holds the users' ids and may run the purge on Spark: the ids serve only work done in its own
    # process. What Spark ships to executors (task closures, which it may broadcast and spill to an executor's disk;
    # the tasks' items, written to a file the JVM reads) holds the keyed hashes and the key, never an id; so neither
    # can an executor's log, a failed task's error (the driver's log, the Spark UI, the event log) or its heap.
    import orjson

    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.indexing.indexer import index_object
    from lakepurge.purge.job import run_purge
    from lakepurge.reports.report import build_report

    users = ["alice.secret@example.com", "bob.secret@example.com"]
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    s3, bucket, settings = events_lake(pg_dsn, "ship")
    store = open_store(settings.index)
    for n in range(4):
        lines = [{"user_id": user, "n": n} for user in [*users, "carol"]]
        s3.put_object(Bucket=bucket, Key=f"events/{n}.jsonl", Body=b"\n".join(map(orjson.dumps, lines)) + b"\n")
        index_object(s3, store, settings, bucket, f"events/{n}.jsonl")
    run_reconcile(None, settings)
    report = build_report(store, settings, users, "req-shipped", Pseudonymizer(KEY.encode()), force=True)
    store.close()
    shipped = record_shipped(monkeypatch)
    caplog.set_level("DEBUG")

    result = run_purge(spark, settings, report, KEY.encode(), requested=users)

    assert result.verified and result.lines_erased == 8
    assert shipped["closures"] and shipped["items"]  # the purge's and the verification's tasks
    assert any(KEY.encode() in pickled for pickled in shipped["closures"])  # what the closures carry, as designed
    for pickled in [*shipped["closures"], *shipped["items"]]:
        for user in users:
            assert user.encode() not in pickled
    assert not any(user in caplog.text for user in users)
