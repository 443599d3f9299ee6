"""Configuration errors read naturally: the key, what is wrong in words, "did you mean" for a near miss; the
example configuration and the one `lakepurge init` writes both load. No network."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from lakepurge.cli.errors import explain
from lakepurge.cli.init_template import init_text
from lakepurge.core.config import ConfigError, load_settings, parse_settings
from tests.support.configs import reviews_toml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASE = reviews_toml("postgresql://postgres@127.0.0.1:5432/lakepurge")
JARGON = ("Input should", "valid tuple", "valid dictionary", "Extra inputs", "Field required", "String should")


def error_for(toml: str) -> str:
    with pytest.raises(ConfigError) as error:
        parse_settings(tomllib.loads(toml), "lakepurge.toml")
    message = str(error.value)
    assert not any(word in message for word in JARGON), message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("id_fields = ", "id_field = ", "datasets[0].id_field: unknown key, did you mean `id_fields`?"),
        ("[reports]", "[report]", "report: unknown key, did you mean `reports`?"),
        ('location = "s3://lake/reviews/"', 'locaton = "s3://lake/reviews/"', "did you mean `location`?"),
        ("[[datasets]]", "[[dataset]]", "did you mean `datasets`?"),
    ],
)
def test_given_a_near_miss_key_when_loading_then_the_error_suggests_the_right_one(old, new, expected):
    assert expected in error_for(BASE.replace(old, new, 1))


def test_given_an_unrelated_key_when_loading_then_the_known_keys_are_listed():
    message = error_for(BASE + 'colour = "blue"\n')
    assert "datasets[0].colour: unknown key" in message
    assert "id_fields" in message and "did you mean" not in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'id_fields = ["user_id"]',
            'id_fields = "user_id"',
            'datasets[0].id_fields: must be a list, e.g. id_fields = ["user_id"]',
        ),
        ('backend = "postgres"', 'backend = "oracle"', "index.backend: must be 'postgres' or 'dynamodb', not 'oracle'"),
        ("[[datasets]]", "[datasets]", "datasets: must be a list of tables: write each one under its own [[datasets]]"),
        ('location = "s3://lake-reports/"', "", "reports.location: required key missing"),
        ('name = "reviews"', 'name = ""', "datasets[0].name: must not be empty"),
        (
            'id_fields = ["user_id"]',
            'id_fields = ["user_id"]\nformat = "xml"',
            "must be 'jsonl', 'csv', 'parquet', 'delta' or 'iceberg'",
        ),
        ("[reports]", "[purge]\nmax_dataset_fraction = 2\n[reports]", "purge.max_dataset_fraction: must be at most 1"),
        (
            "[reports]",
            '[indexing]\nmax_record_bytes = "big"\n[reports]',
            "indexing.max_record_bytes: must be a whole number",
        ),
    ],
)
def test_given_a_mistake_when_loading_then_the_error_reads_naturally(old, new, expected):
    assert old in BASE
    assert expected in error_for(BASE.replace(old, new, 1))


def test_given_a_workflow_mistake_when_loading_then_the_launcher_kind_is_spelled_out():
    workflow = (
        '[workflow]\nkms_key_id = "k"\nsender = "not-an-address"\napprovers = ["dpo@example.com"]\n'
        'approval_url = "https://x"\ntopic_arn = "arn:aws:sns:eu-west-1:1:t"\n[workflow.launcher]\nkind = "emr"\n'
    )
    message = error_for(BASE + workflow)
    assert "workflow.sender: must be an email address" in message
    assert "workflow.launcher: kind must be 'local' or 'emr-serverless'" in message


def test_given_an_empty_file_when_loading_then_the_missing_sections_are_named():
    message = error_for("")
    assert "index: required section missing: add the [index] table" in message
    assert "reports: required section missing" in message


def test_the_example_configuration_loads_and_holds_every_section():
    settings = load_settings(ROOT / "examples" / "lakepurge.toml")
    assert settings.workflow is not None and settings.relational
    assert {d.name for d in settings.datasets} >= {"reviews", "clicks", "attachments", "exports"}
    text = (ROOT / "examples" / "lakepurge.toml").read_text()
    for section in ("[index]", "[reports]", "[indexing]", "[purge]", "[vacuum]", "[privacy]", "[[datasets]]"):
        assert section in text
    for section in ("[[relational]]", "[workflow]", "[workflow.launcher]"):
        assert section in text


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:5000", None])
def test_the_file_init_writes_loads(endpoint):
    text = init_text(endpoint, "eu-west-1")
    settings = parse_settings(tomllib.loads(text))
    assert settings.index.backend == ("postgres" if endpoint else "dynamodb")
    assert (endpoint or "no AWS_ENDPOINT_URL") in text


def test_an_unreachable_endpoint_is_named_without_the_request_path(monkeypatch):
    from botocore.exceptions import EndpointConnectionError

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    error = explain(EndpointConnectionError(endpoint_url="https://lake.s3.amazonaws.com/clicks/u0000042.csv"))
    assert error.code == "endpoint_unreachable"
    assert "https://lake.s3.amazonaws.com" in error.message
    assert "u0000042" not in error.message


def test_an_unexpected_error_is_internal_and_does_not_repeat_its_message():
    error = explain(KeyError("u0000042"))
    assert error.code == "internal" and error.exit_code == 1
    assert "u0000042" not in error.message and "--debug" in error.message
