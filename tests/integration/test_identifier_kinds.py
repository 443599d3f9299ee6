"""Identifier kinds in the index (issue 31, first slice), on both backends: a dataset whose id_kind normalises emails
is indexed in that kind's index forms, a request's `--id email=...` is normalised the same way and finds it, and an
untyped dataset beside it keeps today's exact matching."""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core.config import parse_settings
from lakepurge.core.s3uri import S3Uri
from lakepurge.indexing.indexer import index_object
from lakepurge.records.identifiers import request_form
from tests.support.lakes import hand_made_lake, parquet_of, rows_of

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
    objects = (("signups/a.jsonl", SIGNUPS), ("orders/a.csv", ORDERS), ("events/a.jsonl", EVENTS))
    with hand_made_lake(index_backend, tmp_path, IDENTIFIERS + DATASETS, objects) as lake:
        yield lake.settings, lake.store, lake.config


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
        ("s3://lake/signups/a.jsonl", 3, "id field 'email' holds no email after normalisation (trim, casefold)")
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


# -- a typed request end to end: export, purge, verification (slice 2) ----------------------------------------------

TYPED_LAKE = """
[[datasets]]
name = "signups"
location = "s3://lake/signups/"
id_fields = ["email"]
id_kind = "email"

[[datasets]]
name = "orders"
location = "s3://lake/orders/"
format = "csv"
id_fields = ["buyer"]
id_kind = "email"

[[datasets]]
name = "profiles"
location = "s3://lake/profiles/"
format = "parquet"
id_fields = ["email"]
id_kind = "email"

[[datasets]]
name = "events"
location = "s3://lake/events/"
id_fields = ["email"]

[[datasets]]
name = "accounts"
location = "s3://lake/accounts/"
format = "csv"
id_fields = ["customer"]
id_kind = "customer_id"
"""
TYPED_SIGNUPS = (
    b'{"email":" Alice@Example.COM ","plan":"pro"}\n'
    b'{"email":"bob@example.com","plan":"free"}\n'
    b'{"email":"alice@example.com","plan":"team"}\n'
    b'{"email":"carol@example.org","plan":"pro"}\n'
)
TYPED_ORDERS = b"buyer,total\nALICE@EXAMPLE.COM,10\nbob@example.com,11\nalice@example.com ,12\n"
PROFILE_ROWS = [
    {"email": "bob@example.com", "city": "Leeds"},
    {"email": "Alice@example.com", "city": "Oxford"},
    {"email": "carol@example.org", "city": "York"},
]
ALICE = " Alice@Example.COM "  # as the operator types her email: another spelling than every record's


@pytest.fixture
def typed_purge_lake(index_backend, tmp_path, monkeypatch):
    """Alice's email in three typed datasets (JSON Lines, CSV, Parquet) in other spellings than the request's, and
    the same strings in an untyped dataset; indexed and reconciled (the coverage a certified purge needs)."""
    from tests.support.purging import HASH_KEY

    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    limits = "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n"
    objects = {
        "signups/a.jsonl": TYPED_SIGNUPS,
        "orders/a.csv": TYPED_ORDERS,
        "profiles/a.parquet": parquet_of(PROFILE_ROWS),
        "events/a.jsonl": EVENTS,
        "accounts/a.csv": ORDERS,
    }.items()
    toml_tail = limits + IDENTIFIERS + TYPED_LAKE
    with hand_made_lake(index_backend, tmp_path, toml_tail, objects, ("export-out",), reconciled=True) as lake:
        yield lake.s3, lake.config


def test_given_a_typed_email_when_exported_purged_and_verified_then_exactly_her_records_go_everywhere_typed_email(
    typed_purge_lake, capsys, caplog, monkeypatch
):
    import logging

    from tests.support.cli import cli
    from tests.support.exports import kms_key, open_archive

    s3, config = typed_purge_lake
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")  # the command line logs at WARNING unless asked: every log

    def body(key: str) -> bytes:
        return s3.get_object(Bucket="lake", Key=key)["Body"].read()

    with caplog.at_level(logging.DEBUG, logger="lakepurge"):
        code, exported = cli(
            capsys, "export", "--id", f"email={ALICE}", "--to", "s3://export-out/x/", "--kms-key", kms_key(),
            "--config", config,
        )  # fmt: skip
        assert code == 0, exported
        manifest, archive = open_archive(s3, exported["archive"])
        files = {entry["object"]: (entry["lines"], archive.read(entry["file"])) for entry in manifest["objects"]}
        assert {path: lines for path, (lines, _) in files.items()} == {
            "s3://lake/signups/a.jsonl": [0, 2],
            "s3://lake/orders/a.csv": [1, 3],
            "s3://lake/profiles/a.parquet": [1],
        }  # every typed dataset, in every spelling; never the untyped events
        signups = TYPED_SIGNUPS.split(b"\n")
        assert files["s3://lake/signups/a.jsonl"][1] == signups[0] + b"\n" + signups[2] + b"\n"
        assert files["s3://lake/orders/a.csv"][1] == b"buyer,total\nALICE@EXAMPLE.COM,10\nalice@example.com ,12\n"
        assert rows_of(files["s3://lake/profiles/a.parquet"][1]) == [PROFILE_ROWS[1]]

        capsys.readouterr()
        code = main(["purge", "--id", f"email={ALICE}", "--yes", "--engine", "inline", "--config", config, "--json"])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        purged = orjson.loads(printed.out)
        assert (purged["verified"], purged["lines_erased"], purged["objects_failed"]) == (True, 5, [])
        # the request names no customer id: the accounts dataset was not searched, and the plan and certificate say so
        assert "dataset accounts: not searched: the request names no customer_id" in printed.err
        certificate = S3Uri.parse(purged["certificate"])
        stated = orjson.loads(s3.get_object(Bucket=certificate.bucket, Key=certificate.key)["Body"].read())
        assert stated["not_searched"] == [{"dataset": "accounts", "kind": "customer_id"}]

        assert body("signups/a.jsonl") == b'{}\n{"email":"bob@example.com","plan":"free"}\n{}\n' + signups[3] + b"\n"
        assert body("orders/a.csv") == b"buyer,total\n,\nbob@example.com,11\n,\n"
        assert rows_of(body("profiles/a.parquet")) == [PROFILE_ROWS[0], PROFILE_ROWS[2]]
        assert body("events/a.jsonl") == EVENTS  # untyped: the same strings, not her email

        code, verified = cli(capsys, "verify", "--id", f"email={ALICE}", "--config", config)
        assert code == 0 and verified["verified"] is True, verified
        s3.put_object(Bucket="lake", Key="signups/planted.jsonl", Body=b'{"email":"ALICE@example.COM"}\n')
        code, verified = cli(capsys, "verify", "--id", f"email={ALICE}", "--config", config)
        assert code == 1 and verified["verified"] is False, verified
        assert [place["object"] for place in verified["remaining"]] == ["s3://lake/signups/planted.jsonl"]

    logged = "\n".join(str(record.__dict__) for record in caplog.records).casefold()
    assert "request resolved" in logged  # the commands' logs were captured
    written = b"".join(
        s3.get_object(Bucket="reports", Key=item["Key"])["Body"].read()
        for item in s3.list_objects_v2(Bucket="reports").get("Contents", [])
    )
    assert b"certificate" in written
    for where in (logged, printed.out + printed.err, written.decode("utf-8", "replace"), str(exported)):
        assert "alice@" not in where.casefold()  # no spelling of her email: logs, output, reports, certificate


def test_given_a_kinds_normalisation_changed_when_coverage_is_assessed_then_its_datasets_are_uncovered_until_reindexed(
    typed_purge_lake, capsys
):
    from lakepurge.indexing.coverage import of_index
    from tests.support.cli import cli

    _, config = typed_purge_lake

    def coverage(settings) -> dict[str, str]:
        store = runtime.index_store()
        return {c.dataset: c.reason for c in of_index(settings, store) if not c.complete}

    assert coverage(parse_settings(tomllib.loads(Path(config).read_text()))) == {}
    changed = Path(config).read_text().replace('normalise = ["trim", "casefold"]', 'normalise = ["trim"]')
    Path(config).write_text(changed)
    settings = parse_settings(tomllib.loads(changed))
    stale = "indexed with other identifier forms (kind email:trim,casefold): its id_kind or its normalisation changed"
    assert coverage(settings) == {"signups": stale, "orders": stale, "profiles": stale}  # events is untyped

    assert cli(capsys, "index", "reconcile", "--config", config)[0] == 0  # reads only what changed: still stale
    assert coverage(settings) == {"signups": stale, "orders": stale, "profiles": stale}
    assert cli(capsys, "index", "backfill", "--dataset", "signups", "--config", config)[0] == 0  # nothing re-read
    assert set(coverage(settings)) == {"signups", "orders", "profiles"}
    assert cli(capsys, "index", "backfill", "--force", "--dataset", "signups", "--config", config)[0] == 0
    assert set(coverage(settings)) == {"orders", "profiles"}


def test_given_more_typed_values_without_an_email_than_the_index_lists_when_reported_then_each_is_read_for_her(
    typed_purge_lake, capsys
):
    from tests.support.cli import cli

    s3, config = typed_purge_lake
    blank = b'{"email":"   ","plan":"none"}\n' * 130  # unindexable: no email once trimmed; the index lists 100
    s3.put_object(Bucket="lake", Key="signups/blank.jsonl", Body=blank)
    settings = parse_settings(tomllib.loads(Path(config).read_text()))
    assert index_object(s3, runtime.index_store(), settings, "lake", "signups/blank.jsonl").action == "indexed"

    code, plan = cli(capsys, "purge", "--id", f"email={ALICE}", "--engine", "inline", "--config", config)

    assert code == 0, plan
    assert plan["plan"]["coverage"]["signups"] == "complete"  # every line read for her, as the indexer reads it
    assert plan["plan"]["unindexable"]["signups"] == {"lines": 130, "objects": 1, "may_hold": 0, "not_read": 0}


def test_given_a_typed_dry_run_when_its_printed_command_is_pasted_then_exactly_that_plan_is_erased(
    typed_purge_lake, capsys
):
    import shlex

    from tests.support.cli import cli

    _, config = typed_purge_lake
    code, plan = cli(capsys, "purge", "--id", f"email={ALICE}", "--engine", "inline", "--config", config)
    assert code == 0, plan
    command = shlex.split(plan["execute"])
    assert "alice" not in plan["execute"].casefold()  # the typed ids are in a file only this user reads
    ids_file = Path(command[command.index("--ids-file") + 1])
    assert ids_file.read_text() == f"email={ALICE}\n" and ids_file.stat().st_mode & 0o777 == 0o600

    code, purged = cli(capsys, *command[1:])

    assert code == 0, purged
    assert (purged["request_id"], purged["lines_erased"], purged["verified"]) == (plan["request_id"], 5, True)
    assert not ids_file.exists()  # gone once the report it was written for was executed
