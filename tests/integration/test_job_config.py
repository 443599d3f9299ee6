"""Spark jobs on EMR Serverless read their configuration from S3: ``--config s3://...``."""

from __future__ import annotations

import pytest

from lakepurge import runtime
from lakepurge.core.aws import client
from lakepurge.core.config import ConfigError
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

TOML = f'[index]\n{index_toml("dynamodb")}\n\n[reports]\nlocation = "s3://lake-reports/"\n'


def test_config_given_as_an_s3_uri_is_read_and_validated(aws: object) -> None:
    s3 = client("s3")
    s3.create_bucket(Bucket="artifacts")
    s3.put_object(Bucket="artifacts", Key="config/lakepurge.toml", Body=TOML.encode())
    settings = runtime.settings_from("s3://artifacts/config/lakepurge.toml")
    assert settings.index.backend == "dynamodb" and settings.reports.location == "s3://lake-reports/"


def test_invalid_toml_in_s3_is_refused_naming_the_uri(aws: object) -> None:
    s3 = client("s3")
    s3.create_bucket(Bucket="artifacts")
    s3.put_object(Bucket="artifacts", Key="bad.toml", Body=b"[index\nbackend=")
    with pytest.raises(ConfigError, match=r"s3://artifacts/bad\.toml: not valid TOML"):
        runtime.settings_from("s3://artifacts/bad.toml")
