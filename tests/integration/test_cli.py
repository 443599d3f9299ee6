"""The command line as a user runs it: lookup and status, options before or after the command."""

from __future__ import annotations

import logging
import os
import sys

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.logs import SERVICE, get_logger, root_logger
from lakepurge.indexing.indexer import index_object
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration


@pytest.fixture
def indexed_lake(lake_factory, pg_dsn, tmp_path):
    case = lake_factory(index_toml("postgres", pg_dsn), objects=40, users=12)
    for obj in case.lake.objects:
        index_object(aws.client("s3"), runtime.index_store(), case.settings, "lake", obj.key)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    return case, str(config)


@pytest.mark.parametrize("before", [True, False])
def test_given_an_indexed_lake_when_looking_users_up_then_every_location_and_line_is_listed(
    indexed_lake, capsys, before
):
    case, config = indexed_lake
    users = [*case.lake.users[:2], "nobody"]
    args = (
        ["--config", config, "--json", "lookup", *users] if before else ["lookup", *users, "--config", config, "--json"]
    )
    assert main(args) == 0
    document = orjson.loads(capsys.readouterr().out)["users"]
    for user in users:
        expected = {}
        for owner, path, line in case.lake.truth:
            if owner == user:
                expected.setdefault(path, []).append(line)
        got = {loc["s3path"]: ([-1] if loc["lines"] == "whole-object" else loc["lines"]) for loc in document[user]}
        assert got == {path: sorted(lines) for path, lines in expected.items()}
    assert document["nobody"] == []


def test_given_an_indexed_lake_when_asking_status_then_counts_match_the_lake(indexed_lake, capsys):
    case, config = indexed_lake
    assert main(["status", "--config", config, "--json"]) == 0
    index = orjson.loads(capsys.readouterr().out)["index"]
    data_objects = [o for o in case.lake.objects if not o.key.endswith(".meta.json")]
    assert index["objects"] == len(data_objects)
    assert index["rows"] == len(case.lake.truth)
    assert index["users"] == len({u for u, _, _ in case.lake.truth})
    assert index["unindexable_lines"] == 0


def test_given_an_object_uri_when_indexing_it_then_outside_objects_are_refused(indexed_lake, capsys):
    _, config = indexed_lake
    assert main(["index", "object", "s3://lake/reviews/dt=2026-01/part-00000.jsonl", "--config", config]) == 0
    assert main(["index", "object", "s3://lake/elsewhere/x.jsonl", "--config", config]) == 2


def test_given_a_bad_config_when_running_then_the_error_names_the_key(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text('[index]\nbackend = "oracle"\n[reports]\nlocation = "s3://r/"\n')
    assert main(["status", "--config", str(config)]) == 2
    assert "index.backend" in capsys.readouterr().err


def test_given_a_command_ran_in_this_process_when_the_library_logs_later_then_the_services_level_still_governs(
    tmp_path, capsys, caplog, monkeypatch
):
    """A command is quiet (WARNING) while it runs; it must not leave that level behind for the library modules a
    process loads afterwards (a notebook, a test run), whose INFO records would vanish whatever level is set."""
    monkeypatch.delenv("POWERTOOLS_LOG_LEVEL", raising=False)
    level_before = logging.getLogger(SERVICE).level
    config = tmp_path / "bad.toml"
    config.write_text('[index]\nbackend = "oracle"\n')
    assert main(["status", "--config", str(config)]) == 2
    assert "POWERTOOLS_LOG_LEVEL" not in os.environ
    assert logging.getLogger(SERVICE).level == level_before

    loaded_later = get_logger()
    with caplog.at_level(logging.INFO, logger=SERVICE):
        loaded_later.info("a library record after the command")
    assert [r.getMessage() for r in caplog.records] == ["a library record after the command"]


def test_given_an_object_with_an_unindexable_line_when_indexing_it_then_the_warning_is_a_line_not_json(
    indexed_lake, capsys
):
    _, config = indexed_lake
    key = "reviews/dt=2026-01/part-broken.jsonl"
    aws.client("s3").put_object(Bucket="lake", Key=key, Body=b'{"user_id": "u1", "rating": 4}\n{"user_id": \n')
    # the service's handler as a Lambda handler run earlier in this process configured it: on stdout
    handler = root_logger().registered_handler
    stream_before = handler.setStream(sys.stdout)

    assert main(["index", "object", f"s3://lake/{key}", "--config", config]) == 0

    captured = capsys.readouterr()
    assert "warning" not in captured.out  # stdout is the command's JSON document's
    assert handler.stream is sys.stdout  # put back as it was
    if stream_before is not None:
        handler.setStream(stream_before)
    lines = captured.err.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("{")], "no Powertools JSON among the output"
    warning = next(line for line in lines if line.startswith("lakepurge: warning: "))
    assert f"object=s3://lake/{key}" in warning and "unindexable" in warning
    # and the service logger is JSON again for whatever else runs in this process (a Lambda handler, a notebook)
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    handler = get_logger().registered_handler
    assert type(handler.formatter) is LambdaPowertoolsFormatter
