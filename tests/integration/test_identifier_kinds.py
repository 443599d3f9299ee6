"""Identifier kinds in the index (issue 31, first slice), on both backends: a dataset whose id_kind normalises emails
is indexed in that kind's index forms, a request's `--id email=...` is normalised the same way and finds it, and an
untyped dataset beside it keeps today's exact matching."""

from __future__ import annotations

import os
import tomllib

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.indexing.indexer import index_object
from lakepurge.records.identifiers import request_form

pytestmark = pytest.mark.integration

IDENTIFIERS = '[identifiers.email]\nnormalise = ["trim", "casefold"]\n[identifiers.customer_id]\n'
DATASETS = """
[[datasets]]
name = "signups"
location = "s3://lake/signups/"
id_fields = ["email"]
id_kind = "email"

[[datasets]]
name = "orders"
location = "s3://lake/orders/"
format = "csv"
id_fields = ["customer"]
id_kind = "customer_id"

[[datasets]]
name = "events"
location = "s3://lake/events/"
id_fields = ["email"]
"""
SIGNUPS = (
    b'{"email":"Alice@Example.COM ","plan":"pro"}\n'
    b'{"email":"bob@example.com","plan":"free"}\n'
    b'{"email":"alice@example.com","plan":"team"}\n'
    b'{"email":"   ","plan":"none"}\n'
)
ORDERS = b"customer,total\nC-42,10\nc-42,11\n"
EVENTS = b'{"email":"alice@example.com","ev":1}\n{"email":"Alice@Example.COM ","ev":2}\n'


@pytest.fixture
def typed_lake(index_backend, tmp_path):
    """The three datasets on moto, indexed by the event indexer into the backend (index_backend starts moto)."""
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="lake")
    s3.create_bucket(Bucket="reports")
    toml = f'[index]\n{index_backend}\n[reports]\nlocation = "s3://reports/r/"\n{IDENTIFIERS}{DATASETS}'
    os.environ["LAKEPURGE_CONFIG_TOML"] = toml
    runtime.reset()
    settings = parse_settings(tomllib.loads(toml))
    store = runtime.index_store()
    for key, body in (("signups/a.jsonl", SIGNUPS), ("orders/a.csv", ORDERS), ("events/a.jsonl", EVENTS)):
        s3.put_object(Bucket="lake", Key=key, Body=body)
        assert index_object(s3, store, settings, "lake", key).action == "indexed"
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    yield settings, store, str(config)
    os.environ.pop("LAKEPURGE_CONFIG_TOML", None)
    runtime.reset()


def lines(found, user):
    return {loc.s3path: list(loc.lines) for loc in found.get(user, [])}


def test_given_an_email_kind_when_alice_is_requested_in_any_spelling_then_she_is_found_in_that_kinds_datasets_only(
    typed_lake,
):
    settings, store, _ = typed_lake
    alice = request_form("email=Alice@Example.COM ", settings.identifier_kinds)

    found = store.lookup([alice, "alice@example.com", "Alice@Example.COM "])

    # The signups dataset is of kind email: both spellings are alice's, by her one normalised email.
    assert lines(found, alice) == {"s3://lake/signups/a.jsonl": [0, 2]}
    # The events dataset is untyped: each spelling is its own id, matched exactly as before kinds existed.
    assert lines(found, "alice@example.com") == {"s3://lake/events/a.jsonl": [0]}
    assert lines(found, "Alice@Example.COM ") == {"s3://lake/events/a.jsonl": [1]}


def test_given_an_exact_kind_when_a_customer_id_is_requested_then_only_that_spelling_is_found(typed_lake):
    settings, store, _ = typed_lake
    kinds = settings.identifier_kinds
    customer = request_form("customer_id=C-42", kinds)
    found = store.lookup([customer, "C-42"])
    assert lines(found, customer) == {"s3://lake/orders/a.csv": [1]}  # line 0 is the header; line 2, c-42, is not hers
    assert "C-42" not in found  # a typed dataset's ids are never found by an untyped request


def test_given_a_value_with_no_email_when_indexed_then_its_line_is_unindexable_and_the_reason_never_quotes_it(
    typed_lake,
):
    _, store, _ = typed_lake
    listed = [(path, u.line, u.reason) for path, u in store.unindexable(limit=100)]
    assert listed == [
        ("s3://lake/signups/a.jsonl", 3, "id field(s) email holds no email after normalisation (trim, casefold)")
    ]
    assert store.object_records(["s3://lake/signups/a.jsonl"]) == {"s3://lake/signups/a.jsonl": 3}


def test_given_typed_ids_when_looked_up_from_the_command_line_then_each_is_shown_by_kind_and_normalised_value(
    typed_lake, capsys
):
    _, _, config = typed_lake
    assert main(["lookup", "--id", "email=ALICE@example.com", "alice@example.com", "--config", config, "--json"]) == 0
    users = orjson.loads(capsys.readouterr().out)["users"]
    assert {user: [(loc["s3path"], loc["lines"]) for loc in found] for user, found in users.items()} == {
        "email=alice@example.com": [("s3://lake/signups/a.jsonl", [0, 2])],
        "alice@example.com": [("s3://lake/events/a.jsonl", [0])],
    }
    assert main(["lookup", "--id", "phone=123", "--config", config, "--json"]) != 0
