"""The purge engine on a real (moto) S3 with a real index: exact, complete, and it leaves no copy behind."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.index import open_store
from lakepurge.local.samples import generate_lake, settings_toml
from lakepurge.purge.vacuum import run_vacuum
from tests.support.invariant import assert_invariant, assert_vacuumed, snapshot
from tests.support.lakes import index_toml
from tests.support.purging import index_lake, purge_report, report_for

pytestmark = pytest.mark.integration


def fresh_lake(index: str, versioned: bool = False, seed: int = 7, objects: int = 24, users: int = 15):
    import tomllib

    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    lake = generate_lake(bucket=bucket, objects=objects, users=users, seed=seed)
    lake.upload(s3)
    cfg = parse_settings(tomllib.loads(settings_toml(bucket, index, f"s3://{bucket}-reports/")))
    s3.create_bucket(Bucket=f"{bucket}-reports")
    return lake, cfg


@pytest.fixture(params=["postgres", "dynamodb"])
def backend(request, moto_server):
    if request.param == "postgres":
        return lambda: index_toml("postgres", request.getfixturevalue("pg_dsn"))
    return lambda: index_toml("dynamodb", table=f"index-{uuid.uuid4().hex[:8]}")


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a lake takes minutes; the seed is enough
)
@given(seed=st.integers(min_value=0, max_value=10_000), picks=st.lists(st.integers(0, 14), min_size=1, max_size=4))
def test_given_any_lake_and_request_when_purged_then_the_invariant_holds(backend, seed, picks):
    lake, cfg = fresh_lake(backend(), seed=seed, objects=16)  # every dataset's format, small enough for 4 examples
    store = open_store(cfg.index)
    store.truncate()  # examples share the test's index
    try:
        index_lake(store, cfg, lake)
        users = {lake.users[p] for p in picks} | {"nobody-at-all"}
        s3 = aws.client("s3")
        before = snapshot(s3, lake.bucket)
        report = report_for(store, cfg, sorted(users))
        outcomes = purge_report(store, cfg, report, users)
        assert [o for o in outcomes if o.status == "failed"] == []
        assert_invariant(lake, cfg, users, before, snapshot(s3, lake.bucket))
        assert store.lookup(sorted(users)) == {}
        assert not any(user in users for user, _, _ in store.dump())

        vacuumed = run_vacuum(None, cfg, apply=True)
        assert vacuumed.failed == []
        assert_vacuumed(lake, cfg, users, before, snapshot(s3, lake.bucket))
        assert not any(user in users for user, _, _ in store.dump())
    finally:
        store.close()
