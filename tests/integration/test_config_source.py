"""Functions and jobs read their configuration from an S3 object or an SSM parameter (LAKEPURGE_CONFIG_URI), through
Powertools Parameters' cache: kept LAKEPURGE_CONFIG_MAX_AGE seconds, then read again, the settings rebuilt only
when the text changed. On the moto server."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

import pytest

from lakepurge import runtime
from lakepurge.core import configsource
from lakepurge.core.aws import client
from lakepurge.core.config import ConfigError
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

URI = "s3://lake-config/deploy/lakepurge.toml"
PARAMETER = "/lakepurge/test/lakepurge.toml"
TTL = 0.3  # seconds; the tests wait a little longer than this for the cache to expire


def _toml(reports: str = "s3://lake-reports/") -> str:
    return f'[index]\n{index_toml("dynamodb")}\n\n[reports]\nlocation = "{reports}"\n'


def _put_s3(text: str) -> None:
    client("s3").put_object(Bucket="lake-config", Key="deploy/lakepurge.toml", Body=text.encode())


def _put_ssm(text: str, secure: bool = False) -> None:
    client("ssm").put_parameter(Name=PARAMETER, Value=text, Type="SecureString" if secure else "String", Overwrite=True)


@pytest.fixture
def config_env(aws: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No other configuration in the environment; every cache forgotten before and after."""
    client("s3").create_bucket(Bucket="lake-config")
    for variable in runtime.CONFIG_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(configsource.MAX_AGE_VARIABLE, str(TTL))
    runtime.reset()
    yield monkeypatch
    runtime.reset()


def test_given_a_config_in_s3_when_settings_are_read_then_it_is_loaded_and_validated(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_s3(_toml())
    config_env.setenv(runtime.URI_VARIABLE, URI)
    settings = runtime.settings()
    assert settings.index.backend == "dynamodb" and settings.reports.location == "s3://lake-reports/"


def test_given_a_config_in_s3_when_it_changes_then_the_cached_one_serves_until_the_ttl_and_the_new_one_after(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_s3(_toml("s3://lake-reports/"))
    config_env.setenv(runtime.URI_VARIABLE, URI)
    first = runtime.settings()
    _put_s3(_toml("s3://lake-reports-2/"))
    assert runtime.settings() is first, "re-read within the TTL"
    time.sleep(TTL + 0.1)
    changed = runtime.settings()
    assert changed.reports.location == "s3://lake-reports-2/"
    assert runtime.settings() is changed


def test_given_an_unchanged_object_when_it_is_read_again_after_the_ttl_then_it_is_not_parsed_again(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_s3(_toml())
    loader = configsource.ConfigLoader(URI, max_age=TTL)
    first = loader.settings()
    time.sleep(TTL + 0.1)
    _put_s3(_toml())  # the same text, a new version
    assert loader.settings() is first
    assert loader.loads == 1


def test_given_a_config_in_ssm_when_it_changes_then_it_is_picked_up_after_the_ttl(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_ssm(_toml("s3://lake-reports/"), secure=True)  # a SecureString is decrypted
    config_env.setenv(runtime.URI_VARIABLE, f"ssm:{PARAMETER}")
    first = runtime.settings()
    assert first.reports.location == "s3://lake-reports/"
    _put_ssm(_toml("s3://lake-reports-2/"))
    assert runtime.settings() is first
    time.sleep(TTL + 0.1)
    assert runtime.settings().reports.location == "s3://lake-reports-2/"


def test_given_a_config_uri_and_a_toml_variable_then_the_uri_wins(config_env: pytest.MonkeyPatch) -> None:
    _put_s3(_toml("s3://from-s3/"))
    config_env.setenv(runtime.TOML_VARIABLE, _toml("s3://from-environment/"))
    config_env.setenv(runtime.URI_VARIABLE, URI)
    assert runtime.settings().reports.location == "s3://from-s3/"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[index\nbackend=", r"s3://lake-config/deploy/lakepurge\.toml: not valid TOML"),
        ('[index]\nbackend = "dynamodb"\n', r"s3://lake-config/deploy/lakepurge\.toml: .*reports"),
        ("   \n", r"s3://lake-config/deploy/lakepurge\.toml: the configuration is empty"),
    ],
)
def test_given_a_bad_config_in_s3_when_it_is_read_then_the_error_names_the_source(
    config_env: pytest.MonkeyPatch, text: str, message: str
) -> None:
    _put_s3(text)
    config_env.setenv(runtime.URI_VARIABLE, URI)
    with pytest.raises(ConfigError, match=message):
        runtime.settings()


def test_given_a_good_config_made_bad_when_the_ttl_passes_then_the_error_names_the_source(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_s3(_toml())
    config_env.setenv(runtime.URI_VARIABLE, URI)
    runtime.settings()
    _put_s3("[index\n")
    time.sleep(TTL + 0.1)
    with pytest.raises(ConfigError, match=r"^s3://lake-config/deploy/lakepurge\.toml: not valid TOML"):
        runtime.settings()
    _put_s3(_toml("s3://fixed/"))
    time.sleep(TTL + 0.1)
    assert runtime.settings().reports.location == "s3://fixed/"


def test_given_a_pinned_config_when_the_object_is_replaced_then_functions_and_jobs_refuse_the_new_text(
    config_env: pytest.MonkeyPatch,
) -> None:
    """Whoever can write the artifacts bucket must not steer the purge: the deployment pins the configuration's
    SHA-256 (ConfigSha256 -> LAKEPURGE_CONFIG_SHA256) and a text with another hash is refused, even a valid one."""
    pinned = _toml("s3://lake-reports/")
    _put_s3(pinned)
    config_env.setenv(runtime.URI_VARIABLE, URI)
    config_env.setenv("LAKEPURGE_CONFIG_SHA256", hashlib.sha256(pinned.encode()).hexdigest())
    runtime.reset()
    assert runtime.settings().reports.location == "s3://lake-reports/"
    _put_s3(_toml("s3://someone-elses-reports/"))  # valid, but not what was deployed
    time.sleep(TTL + 0.1)

    with pytest.raises(
        ConfigError, match=r"^s3://lake-config/deploy/lakepurge\.toml: refused: its SHA-256 \w{64} is not"
    ):
        runtime.settings()
    with pytest.raises(ConfigError, match="LAKEPURGE_CONFIG_SHA256"):
        runtime.settings_from(URI)  # a Spark job's read
    _put_s3(pinned)  # the pinned text back: accepted again
    time.sleep(TTL + 0.1)
    assert runtime.settings().reports.location == "s3://lake-reports/"
    assert runtime.settings_from(URI).reports.location == "s3://lake-reports/"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://lake-config/missing.toml", r"s3://lake-config/missing\.toml: the configuration could not be read"),
        ("ssm:/lakepurge/missing", r"ssm:/lakepurge/missing: the configuration could not be read"),
        ("lakepurge.toml", r"not a configuration URI"),
        ("s3://lake-config/", r"names no object"),
    ],
)
def test_given_a_missing_source_when_settings_are_read_then_the_error_names_it(
    config_env: pytest.MonkeyPatch, uri: str, message: str
) -> None:
    config_env.setenv(runtime.URI_VARIABLE, uri)
    with pytest.raises(ConfigError, match=message):
        runtime.settings()


def test_given_a_bad_max_age_then_the_error_names_the_variable(config_env: pytest.MonkeyPatch) -> None:
    _put_s3(_toml())
    config_env.setenv(runtime.URI_VARIABLE, URI)
    config_env.setenv(configsource.MAX_AGE_VARIABLE, "five minutes")
    with pytest.raises(ConfigError, match="LAKEPURGE_CONFIG_MAX_AGE"):
        runtime.settings()


def test_given_a_spark_job_when_its_config_is_an_ssm_parameter_then_it_reads_it(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_ssm(_toml("s3://for-the-job/"))
    assert runtime.settings_from(f"ssm:{PARAMETER}").reports.location == "s3://for-the-job/"


def test_given_a_reloaded_config_when_the_index_section_is_unchanged_then_the_index_connection_is_kept(
    config_env: pytest.MonkeyPatch,
) -> None:
    _put_s3(_toml("s3://lake-reports/"))
    config_env.setenv(runtime.URI_VARIABLE, URI)
    store = runtime.index_store()
    _put_s3(_toml("s3://lake-reports-2/"))
    time.sleep(TTL + 0.1)
    assert runtime.settings().reports.location == "s3://lake-reports-2/"
    assert runtime.index_store() is store
    _put_s3(_toml("s3://lake-reports-2/").replace("lakepurge-index-test", "lakepurge-index-other"))
    time.sleep(TTL + 0.1)
    assert runtime.index_store() is not store
