"""A deployment with 100 datasets: its configuration (far over the 4 KB a Lambda environment holds) is an S3 object
the handlers read through LAKEPURGE_CONFIG_URI, as the SAM template deploys it, and the workflow runs on it from the
request to the certificate."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable

import orjson
import pytest

from lakepurge import runtime
from lakepurge.core import aws, configsource
from lakepurge.core.config import parse_settings
from tests.support.invariant import assert_invariant, snapshot
from tests.support.lakes import LakeCase, index_toml
from tests.support.purging import HASH_KEY
from tests.support.workflow import deploy_case

pytestmark = pytest.mark.e2e

DATASETS = 100
CONFIG_BUCKET = "lake-artifacts"
CONFIG_URI = f"s3://{CONFIG_BUCKET}/config/lakepurge.toml"


def _more_datasets(bucket: str, first: int, count: int) -> str:
    """Datasets at prefixes that hold no object: configured, reconciled and covered, cheap to list."""
    return "".join(
        f'\n[[datasets]]\nname = "extra-{n:03d}"\nlocation = "s3://{bucket}/extra/{n:03d}/"\nformat = "jsonl"\n'
        'id_fields = ["user_id"]\n'
        for n in range(first, first + count)
    )


def test_workflow_with_100_datasets_reads_its_config_from_s3(
    lake_factory: Callable[..., LakeCase], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a lake with 100 configured datasets, indexed and covered, and the workflow deployed for it
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    lake = lake_factory(index_toml("postgres", pg_dsn), objects=24, users=30)
    sample = len(lake.settings.datasets)
    toml = lake.toml + _more_datasets(lake.lake.bucket, sample, DATASETS - sample)
    case = deploy_case(LakeCase(lake.lake, parse_settings(tomllib.loads(toml)), toml))
    assert len(case.settings.datasets) == DATASETS

    # AND its configuration published as an S3 object, the handlers' only source (no TOML in their environment)
    published = case.toml.encode()
    assert len(published) > 4096, "not larger than a Lambda environment holds"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=CONFIG_BUCKET)
    s3.put_object(Bucket=CONFIG_BUCKET, Key="config/lakepurge.toml", Body=published)
    monkeypatch.delenv("LAKEPURGE_CONFIG_TOML", raising=False)
    monkeypatch.delenv("LAKEPURGE_CONFIG", raising=False)
    monkeypatch.setenv(configsource.URI_VARIABLE, CONFIG_URI)
    monkeypatch.setenv(configsource.MAX_AGE_VARIABLE, "300")
    runtime.reset()
    assert not {"LAKEPURGE_CONFIG_TOML", "LAKEPURGE_CONFIG"} & os.environ.keys()
    assert len(runtime.settings().datasets) == DATASETS

    seen: list[str] = []
    for user, _, _ in sorted(case.lake.lake.truth):
        if user not in seen:
            seen.append(user)
    users = seen[:2]
    before = snapshot(s3, case.lake.lake.bucket)

    # WHEN a request is filed and approved
    request_id = case.file(users, "req-100-datasets")
    case.approve_and_finish(request_id)

    # THEN the users are erased, verified and certified, and the outcome notified
    assert_invariant(case.lake.lake, case.lake.settings, set(users), before, snapshot(s3, case.lake.lake.bucket))
    certificate = orjson.loads(
        s3.get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")["Body"].read()
    )
    assert certificate["verification"]["passed"] is True
    [note] = case.notifications()
    assert "ERASED" in note["subject"]
    # every handler ran on the object's settings, parsed once for all their invocations (the text did not change)
    assert runtime.settings() is runtime.settings()
    assert runtime._loader(CONFIG_URI, 300.0, None).loads == 1
