"""Configuration: the documented shape loads; every mistake is refused with the key that holds it."""

from __future__ import annotations

import tomllib

import pytest

from lakepurge.core.config import ConfigError, load_settings, parse_settings
from lakepurge.local.samples import settings_toml

pytestmark = pytest.mark.unit

ISSUE_EXAMPLE = """
[index]
backend = "postgres"
dsn = "postgresql://postgres@127.0.0.1:5432/lakepurge"
table = "lakepurge-index"
[reports]
location = "s3://lake-reports/"
[[datasets]]
name = "reviews"
location = "s3://lake/reviews/"
format = "jsonl"
id_fields = ["user_id"]
erase = "blank"
[[datasets]]
name = "clicks"
location = "s3://lake/clicks/"
id_from_key = '(?P<id>[^/]+)-[^/]*\\.csv$'
erase = "delete-object"
"""


def settings_from(text: str):
    return parse_settings(tomllib.loads(text))


def test_given_the_documented_example_when_loaded_then_datasets_resolve_objects():
    settings = settings_from(ISSUE_EXAMPLE)
    assert settings.dataset_for("lake", "reviews/a.jsonl").name == "reviews"
    assert settings.dataset_for("lake", "clicks/u1-x.csv").per_object
    assert settings.dataset_for("lake", "other/a.jsonl") is None
    assert settings.dataset_for("other-bucket", "reviews/a.jsonl") is None


def test_given_the_sample_lake_config_when_loaded_then_every_id_source_is_accepted():
    settings = settings_from(settings_toml("lake", 'backend = "dynamodb"\ntable = "t"', "s3://r/"))
    attachments = settings.dataset_named("attachments")
    assert attachments.is_sidecar("attachments/doc.pdf.meta.json")
    assert attachments.data_key("attachments/doc.pdf.meta.json") == "attachments/doc.pdf"
    assert settings.dataset_named("avatars").id_tag == "owner"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('format = "jsonl"', 'format = "xml"'), "datasets[0].format"),
        (('erase = "blank"', 'erase = "shred"'), "datasets[0].erase"),
        (('location = "s3://lake/reviews/"', 'location = "lake/reviews"'), "datasets[0].location"),
        (('location = "s3://lake/reviews/"', 'location = "s3://lake/reviews"'), "must be a prefix"),
        (('backend = "postgres"', 'backend = "mysql"'), "index.backend"),
        (('id_fields = ["user_id"]', "id_fields = []"), "datasets[0].id_fields"),
        (("(?P<id>[^/]+)", "([^/]+)"), "named group (?P<id>...)"),
        (('erase = "delete-object"', 'erase = "blank"'), "one user per object"),
        (('id_fields = ["user_id"]', 'id_fields = ["user_id"]\nid_tag = "owner"'), "exactly one id source"),
        (('name = "clicks"', 'name = "reviews"'), "dataset names must be unique"),
        (('location = "s3://lake/clicks/"', 'location = "s3://lake/reviews/sub/"'), "overlap"),
        (('name = "reviews"', 'name = "reviews"\ncolour = "blue"'), "datasets[0].colour"),
    ],
)
def test_given_a_mistake_when_loading_then_the_error_names_the_key(change, message):
    old, new = change
    assert old in ISSUE_EXAMPLE
    with pytest.raises(ConfigError) as error:
        settings_from(ISSUE_EXAMPLE.replace(old, new, 1))
    assert message.replace("datasets[0].", "datasets[0].") in str(error.value) or message in str(error.value)


def test_given_postgres_without_dsn_when_loading_then_it_is_refused():
    with pytest.raises(ConfigError, match=r"index: .*needs 'dsn'"):
        settings_from(ISSUE_EXAMPLE.replace('dsn = "postgresql://postgres@127.0.0.1:5432/lakepurge"\n', ""))


def test_given_a_missing_or_broken_file_when_loading_then_the_error_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_settings(tmp_path / "absent.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[index\n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML"):
        load_settings(broken)


@pytest.mark.parametrize(
    "dsns",
    ['dsn = "postgresql://crm"\ndsn_secret = "crm-dsn"', 'read_dsn_secret = "crm-read-dsn"'],
    ids=["both", "neither"],
)
def test_given_a_relational_table_without_exactly_one_deleting_dsn_when_loading_then_it_is_refused(dsns):
    table = f'\n[[relational]]\nname = "crm"\n{dsns}\ntable = "contacts"\ncolumn = "customer_id"\n'
    with pytest.raises(ConfigError, match=r"relational\[0\]: needs exactly one of 'dsn' and 'dsn_secret'"):
        settings_from(ISSUE_EXAMPLE + table)
