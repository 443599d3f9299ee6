"""Commands that only read never create: `lookup`, `status`, `requests` and the operations view on an index that was
never built (a typo in [index] table, an empty database) create no table, schema or bucket, and say in one line how
to build the index; `index reconcile` builds it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import orjson
import psycopg
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.index.base import IndexMissing
from tests.support.events import LambdaContext
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

TYPO_TABLE = "lakepurge-indx"  # the deployment's table is lakepurge-index


@pytest.fixture(autouse=True)
def hash_key(monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", "reads-without-writes-key")


def _buckets() -> set[str]:
    return {b["Name"] for b in aws.client("s3").list_buckets()["Buckets"]}


def _read_commands(config: str) -> list[list[str]]:
    return [
        ["lookup", "u0000001", "--config", config],
        ["status", "--config", config],
        ["purge", "u0000001", "--config", config],  # the dry run reads the index to plan
    ]


def test_given_a_dynamodb_table_name_that_does_not_exist_when_reading_then_nothing_is_created_and_the_fix_is_named(
    lake_factory, tmp_path, capsys
):
    case = lake_factory(index_toml("dynamodb", table=TYPO_TABLE), objects=6, users=5)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    buckets = _buckets()

    for command in _read_commands(str(config)):
        assert main([*command, "--json"]) == 2, command
        captured = capsys.readouterr()
        assert orjson.loads(captured.out)["code"] == "index_missing", captured.err
        assert f"table {TYPO_TABLE} does not exist" in captured.err
        assert "lakepurge index reconcile" in captured.err
    assert main(["requests", "--config", str(config)]) == 0  # the history lives in the reports bucket
    capsys.readouterr()

    assert TYPO_TABLE not in aws.client("dynamodb").list_tables()["TableNames"]
    assert _buckets() == buckets

    # building the index is what creates it
    assert main(["index", "reconcile", "--config", str(config)]) == 0
    assert TYPO_TABLE in aws.client("dynamodb").list_tables()["TableNames"]
    assert main(["lookup", "u0000001", "--config", str(config)]) == 0


@pytest.fixture
def empty_database(postgres_server) -> Iterator[str]:
    """A database of its own in the shared cluster, never given an index."""
    name = f"empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_given_an_empty_postgres_database_when_reading_then_no_table_is_created(
    lake_factory, empty_database, tmp_path, capsys
):
    case = lake_factory(index_toml("postgres", empty_database), objects=4, users=3)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)

    for command in _read_commands(str(config)):
        assert main(command) == 2, command
        assert "the PostgreSQL index has no indexed_objects" in capsys.readouterr().err

    with psycopg.connect(empty_database) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)


def test_given_no_index_when_the_operations_view_is_refreshed_then_it_fails_without_creating_the_table(
    lake_factory,
):
    from lakepurge_lambdas import request_metrics

    lake_factory(index_toml("dynamodb", table=TYPO_TABLE), objects=3, users=3)
    os.environ["LAKEPURGE_CONFIG_TOML"] += (
        '\n[workflow]\nkms_key_id = "unused"\nsender = "privacy-bot@example.com"\napprovers = ["dpo@example.com"]\n'
        'approval_url = "http://127.0.0.1/approval"\ntopic_arn = "arn:aws:sns:us-east-1:123456789012:outcomes"\n'
    )
    runtime.reset()
    with pytest.raises(IndexMissing):
        request_metrics.handler({"source": "aws.events"}, LambdaContext())
    assert TYPO_TABLE not in aws.client("dynamodb").list_tables()["TableNames"]
