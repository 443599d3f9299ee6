"""What is not data: Spark/Hive/Glue clutter is skipped, table formats are recognised, Parquet erases by dropping,
and user ids given on the command line or in a users file are taken exactly."""

from __future__ import annotations

import argparse
import tomllib

import pytest

from lakepurge.cli.arguments import read_users
from lakepurge.core.config import ConfigError, DatasetConfig, parse_settings
from lakepurge.tables.detect import TableFormatError, key_table_format

pytestmark = pytest.mark.unit

HEAD = '[index]\nbackend = "dynamodb"\ntable = "t"\n[reports]\nlocation = "s3://r/"\n'


def dataset(**extra: object) -> DatasetConfig:
    fields: dict[str, object] = {"name": "events", "location": "s3://lake/events/", "id_fields": ["user_id"]}
    return DatasetConfig.model_validate({**fields, **extra})


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("events/_SUCCESS", "_SUCCESS marker"),
        ("events/dt=2026-01-01/_SUCCESS", "_SUCCESS marker"),
        ("events/_committed_1234", "commit marker"),
        ("events/_started_1234", "commit marker"),
        ("events/_temporary/0/_temporary/attempt_1/part-0.parquet", "_temporary"),
        ("events/.spark-staging-123/part-0.parquet", ".spark-staging directory"),
        ("events/.part-00000.parquet.crc", "checksum"),
        ("events/part-00000.parquet.crc", "checksum"),
        ("events/_metadata", "hidden file"),
        ("events/.hidden.jsonl", "hidden file"),
        ("events/_hidden/part-0.jsonl", "hidden directory"),
        ("events/dt=2026_$folder$", "directory marker"),
        ("events/folder/", "directory marker"),
    ],
)
def test_given_spark_and_hive_clutter_when_asking_then_it_is_skipped_with_a_reason(key, reason):
    found = dataset().skip_reason(key)
    assert found is not None and reason in found
    assert "events/" not in found  # the reason names no part of the key (keys may hold user ids)


@pytest.mark.parametrize(
    "key",
    [
        "events/part-00000.parquet",
        "events/dt=2026-01-01/part-0.jsonl",
        "events/_dt=2026/part-0.jsonl",  # a partition directory (holds '=') is not hidden
        "events/a_b/part_0.jsonl",
        "events/x.jsonl.meta.json",
    ],
)
def test_given_data_keys_when_asking_then_nothing_is_skipped(key):
    assert dataset().skip_reason(key) is None


def test_given_a_sidecar_dataset_when_asking_then_sidecars_of_data_are_not_clutter():
    owned = dataset(id_fields=None, id_sidecar={"suffix": ".meta.json", "field": "owner"}, erase="delete-object")
    assert owned.skip_reason("events/a.png.meta.json") is None
    assert owned.skip_reason("events/_SUCCESS.meta.json") is not None


def test_given_skip_globs_and_skip_hidden_off_when_asking_then_globs_match_the_relative_key():
    configured = dataset(skip=("manifests/*", "*.tmp"), skip_hidden=False)
    assert configured.skip_reason("events/manifests/a.jsonl") == "matches skip pattern 'manifests/*'"
    assert configured.skip_reason("events/dt=1/x.tmp") == "matches skip pattern '*.tmp'"
    assert configured.skip_reason("events/_SUCCESS") is None
    assert configured.skip_reason("events/folder/") is not None  # directory markers are never data


@pytest.mark.parametrize(
    ("key", "table_format"),
    [
        ("events/_delta_log/00000000000000000000.json", "delta"),
        ("events/dt=1/_delta_log/00000000000000000000.checkpoint.parquet", "delta"),
        ("events/.hoodie/hoodie.properties", "hudi"),
        ("events/dt=1/.hoodie_partition_metadata", "hudi"),
        ("events/metadata/00000-1f2e.metadata.json", "iceberg"),
        ("events/metadata/snap-1-1-abc.avro", "iceberg"),
        ("events/part-0.parquet", None),
        ("events/metadata/part-0.jsonl", None),
    ],
)
def test_given_keys_when_asking_their_table_format_then_logs_and_metadata_are_recognised(key, table_format):
    assert key_table_format(dataset(), key) == table_format


def test_given_a_table_format_error_when_shown_then_it_names_dataset_format_and_the_supported_way():
    message = str(TableFormatError(dataset(), "hudi"))
    assert "'events'" in message and "Hudi" in message and "cleaner" in message
    assert "\n" not in message
    assert 'format = "delta"' in str(TableFormatError(dataset(), "delta"))  # lakepurge erases Delta tables itself
    iceberg = str(TableFormatError(dataset(), "iceberg"))  # and Iceberg tables, through their catalog
    assert 'format = "iceberg"' in iceberg and 'catalog = "NAME"' in iceberg


def test_given_parquet_without_erase_when_loaded_then_it_drops_and_line_formats_blank():
    settings = parse_settings(
        tomllib.loads(
            HEAD
            + '[[datasets]]\nname = "p"\nlocation = "s3://lake/p/"\nformat = "parquet"\nid_fields = ["u"]\n'
            + '[[datasets]]\nname = "j"\nlocation = "s3://lake/j/"\nid_fields = ["u"]\n'
            + '[[datasets]]\nname = "c"\nlocation = "s3://lake/c/"\nformat = "csv"\nid_fields = ["u"]\n'
        )
    )
    assert [d.erase for d in settings.datasets] == ["drop", "blank", "blank"]


def test_given_parquet_with_erase_blank_when_loaded_then_the_error_names_datasets_n_erase():
    text = (
        HEAD
        + '[[datasets]]\nname = "j"\nlocation = "s3://lake/j/"\nid_fields = ["u"]\n'
        + '[[datasets]]\nname = "p"\nlocation = "s3://lake/p/"\nformat = "parquet"\nid_fields = ["u"]\n'
        + 'erase = "blank"\n'
    )
    with pytest.raises(ConfigError, match=r"datasets\[1\]\.erase: .*drop"):
        parse_settings(tomllib.loads(text))


def test_given_a_per_object_dataset_without_erase_when_loaded_then_delete_object_is_still_required():
    text = HEAD + '[[datasets]]\nname = "k"\nlocation = "s3://lake/k/"\nid_from_key = "(?P<id>[^/]+)"\n'
    with pytest.raises(ConfigError, match="delete-object"):
        parse_settings(tomllib.loads(text))


def test_given_ids_with_spaces_when_read_then_they_are_kept_exactly(tmp_path):
    users_file = tmp_path / "users.txt"
    users_file.write_bytes(b" alice \r\nbob\n\n\tcarol\n \ndave\r")
    args = argparse.Namespace(users=[" bob", "bob "], users_file=str(users_file))
    assert read_users(args) == [" bob", "bob ", " alice ", "bob", "\tcarol", " ", "dave\r"]


def test_given_a_users_file_with_a_byte_order_mark_when_read_then_the_first_id_has_none(tmp_path):
    users_file = tmp_path / "users.txt"
    users_file.write_bytes("\ufeffalice\n".encode())
    assert read_users(argparse.Namespace(users=[], users_file=str(users_file))) == ["alice"]
