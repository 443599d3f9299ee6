"""The index under load: concurrent purges of overlapping user sets, the purge's own S3 events, duplicated,
out-of-order and stale events, and a foreign writer overwriting and deleting objects, in rounds. After every round
the index must equal a fresh index of what S3 holds (same rows, same version of every object): a missing row is a
record that would never be erased.

Short by default (a few rounds per backend and bucket kind). LAKEPURGE_STRESS_ROUNDS=200 runs the long form;
LAKEPURGE_STRESS_SEED=N replays a seed printed by a failure. bench/index_stress.py runs the long form on both
backends and prints what it found."""

from __future__ import annotations

import os
import random

import pytest

from tests.support.stress import Stress, StressOptions

pytestmark = pytest.mark.integration

# The short form: a few rounds (DynamoDB on moto is ~4 times slower a round), ~20-40 s per backend.
SHORT_ROUNDS = {"postgres": 3, "dynamodb": 1}


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_given_concurrent_purges_events_and_writes_when_each_round_ends_then_index_equals_a_fresh_index(
    index_backend, versioned
):
    seed = int(os.environ.get("LAKEPURGE_STRESS_SEED") or random.randrange(1_000_000))
    backend = "dynamodb" if '"dynamodb"' in index_backend else "postgres"
    rounds = int(os.environ.get("LAKEPURGE_STRESS_ROUNDS") or SHORT_ROUNDS[backend])
    stress = Stress(index_backend, seed, versioned, StressOptions(rounds=rounds))
    try:
        result = stress.run()
    finally:
        stress.close()
    print(result.describe())
    finding = result.findings[0] if result.findings else None
    assert finding is None, (
        f"index differs from a fresh index (replay with LAKEPURGE_STRESS_SEED={seed}):\n{finding.summary()}\n"
        + "\n".join(finding.trace)
    )


def test_given_a_write_in_the_same_second_as_the_purged_version_when_its_event_arrives_then_its_rows_are_indexed(
    index_backend,
):
    """What the stress test found first: the purge moved the index to its new version with the read version's
    LastModified plus 1 µs, above what S3 reports (whole seconds) for a later write in the same second, so that
    write's event, and even a forced re-index, was refused and its rows never indexed."""
    import tomllib

    from lakepurge.core import aws
    from lakepurge.core.config import parse_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.indexer import index_object
    from lakepurge.local.samples import settings_toml
    from lakepurge.purge.engine import PurgeTarget, purge_object
    from tests.support.stress import fresh_index

    s3 = aws.client("s3")
    bucket, key = "same-second", "reviews/dt=2026-01/part-00000.jsonl"
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket="same-second-reports")
    settings = parse_settings(tomllib.loads(settings_toml(bucket, index_backend, "s3://same-second-reports/")))
    store = open_store(settings.index)
    try:
        for _ in range(20):  # the three writes must fall in one second of S3's clock: try again across a boundary
            store.truncate()
            s3.put_object(Bucket=bucket, Key=key, Body=b'{"user_id": "a"}\n{"user_id": "b"}\n')
            index_object(s3, store, settings, bucket, key)
            hit = store.lookup_objects(["a"]).objects[f"s3://{bucket}/{key}"]
            target = PurgeTarget(hit.s3path, "reviews", hit.etag, hit.lines)
            assert purge_object(s3, store, settings, target, frozenset({"a"}), versioned=False).status == "erased"
            # A producer writes new records a moment later; its event arrives after the purge's index update.
            s3.put_object(Bucket=bucket, Key=key, Body=b'{"user_id": "c"}\n{"user_id": "d"}\n')
            index_object(s3, store, settings, bucket, key)
            versions = s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
            if len({v["LastModified"].replace(microsecond=0) for v in versions}) == 1:
                break
        rows, etags = fresh_index(s3, settings, bucket)
        assert store.dump() == rows == {("c", f"s3://{bucket}/{key}", 0), ("d", f"s3://{bucket}/{key}", 1)}
        assert store.indexed_objects() == etags
    finally:
        store.close()
