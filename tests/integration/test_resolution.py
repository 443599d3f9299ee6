"""Resolution (issue 31, slice 4) on both index backends and a CRM link table in the test PostgreSQL: a request
naming only alice's email finds her customer ids through an orders dataset holding both and through the CRM, and the
records of every identifier found; a shared email linked to 500 customers stops the request; the depth is bounded;
no raw identifier reaches the logs, the report, the approval page or the certificate's identifiers.

The orders dataset holds an email and a customer id on each line. Until per-field kinds (slice 3) let the indexer key
one dataset by two kinds, its index rows are written here as the indexer keys them: the object scanned for its emails,
the customer id of each line added in its index form (both forms on one (object, line), what ids_beside reads)."""

from __future__ import annotations

import json
import logging
import os
import tomllib
from datetime import UTC, datetime

import orjson
import psycopg
import pytest

from lakepurge.access.export import ExportRefused, export_users
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.core.config_identity import dataset_id_forms
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import head_object
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import Coverage
from lakepurge.indexing.indexer import scan_object
from lakepurge.indexing.resolution import ExpansionRefused, certified
from lakepurge.ops.manual_purge import purge_users
from lakepurge.records.identifiers import request_form
from lakepurge.reports.report import build_report
from lakepurge.workflow.approval import ApprovalLink, PendingApproval
from lakepurge.workflow.pages import approval_email, confirmation_page
from lakepurge.workflow.store import ErasureRequest
from tests.support.lakes import hand_made_lake

pytestmark = pytest.mark.integration

PSEUDONYMIZER = Pseudonymizer(b"r" * 32)
DATASETS = """
[identifiers.email]
normalise = ["trim", "casefold"]
[identifiers.customer_id]

[[datasets]]
name = "signups"
location = "s3://lake/signups/"
id_fields = ["email"]
id_kind = "email"

[[datasets]]
name = "purchases"
location = "s3://lake/purchases/"
format = "csv"
id_fields = ["customer"]
id_kind = "customer_id"

[[datasets]]
name = "orders"
location = "s3://lake/orders/"
id_fields = ["email"]
id_kind = "email"
"""
SIGNUPS = (
    b'{"email":" Alice@Example.com","plan":"pro"}\n'
    b'{"email":"bob@example.com","plan":"free"}\n'
    b'{"email":"alice.old@example.com","plan":"trial"}\n'
    b'{"email":"test@example.com","plan":"qa"}\n'
)
PURCHASES = b"customer,total\nC-42,10\nC-7,11\nC-99,12\nC-T3,13\n"
ORDERS = (
    b'{"email":"alice@example.com","customer":"C-42","total":10}\n'
    b'{"email":"bob@example.com","customer":"C-7","total":11}\n'
)
# The CRM: alice under her email in another spelling (an old account, C-99), her old email beside her customer id,
# bob, and a test address every QA account was created with.
CRM = [("ALICE@example.com ", "C-99"), ("alice.old@example.com", "C-42"), ("bob@example.com", "C-7")] + [
    ("test@example.com", f"C-T{n}") for n in range(500)
]
RAW = ("alice", "Alice", "ALICE", "C-42", "C-99", "test@")


@pytest.fixture
def person_lake(index_backend, pg_dsn, tmp_path):
    """The lake on moto, indexed into the backend; the CRM table in the test PostgreSQL."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_customers")
        conn.execute("CREATE TABLE crm_customers (email_address text, cust_id text, name text)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO crm_customers VALUES (%s, %s, 'x')", CRM)
    link = (
        f'[[identifier_links]]\nname = "crm"\ndsn = "{pg_dsn}"\ntable = "crm_customers"\n'
        'columns = { email = "email_address", customer_id = "cust_id" }\n'
    )
    objects = (("signups/a.jsonl", SIGNUPS), ("purchases/a.csv", PURCHASES), ("orders/a.jsonl", ORDERS))
    with hand_made_lake(index_backend, tmp_path, DATASETS + link, objects) as lake:
        settings, store = lake.settings, lake.store
        # the orders' customer ids, beside their emails (see the module docstring)
        head = head_object(lake.s3, "lake", "orders/a.jsonl")
        assert head is not None
        orders = scan_object(lake.s3, settings, settings.dataset_named("orders"), head)
        customer = settings.identifier_kinds["customer_id"]
        for line, record in enumerate(ORDERS.splitlines()):
            orders.lines_by_user.setdefault(customer.index_form(orjson.loads(record)["customer"]), []).append(line)
        assert store.replace_objects([orders], force=True) == 1
        now = datetime.now(UTC)
        for dataset in settings.datasets:  # as a backfill records it: every dataset completely indexed
            forms = dataset_id_forms(dataset)
            store.record_coverage(
                Coverage(dataset.name, dataset.location, "backfill", now, now, 1, 0, 0, id_forms=forms)
            )
        yield settings, store, lake.config


def email(settings, value):
    return request_form(f"email={value}", settings.identifier_kinds)


def with_resolution(settings, text):
    return parse_settings(tomllib.loads(os.environ["LAKEPURGE_CONFIG_TOML"] + f"\n[resolution]\n{text}\n"))


def test_given_only_alices_email_when_a_report_is_made_then_it_erases_her_customer_ids_records_found_by_links(
    person_lake, caplog
):
    settings, store, _ = person_lake
    with caplog.at_level(logging.DEBUG, logger="lakepurge"):
        report = build_report(store, settings, [email(settings, "alice@example.com")], "req-1", PSEUDONYMIZER)

    # her signup lines (both emails), her order, and the purchases of both customer ids; none of bob's
    lines = {o.dataset: o.lines for o in report.objects}
    assert lines == {"signups": (0, 2), "orders": (0,), "purchases": (1, 3)}
    kinds = settings.identifier_kinds
    forms = {
        email(settings, "alice@example.com"): ("request", 0),
        kinds["customer_id"].index_form("C-42"): ("records of orders", 1),
        kinds["customer_id"].index_form("C-99"): ("link table crm", 1),
        email(settings, "alice.old@example.com"): ("link table crm", 2),
    }
    # the report binds each identifier by keyed hash and the link it came by; user_hashes erases them all
    assert {(f["hash"], f["via"], f["depth"]) for f in report.identifiers["found"]} == {
        (PSEUDONYMIZER(form), via, depth) for form, (via, depth) in forms.items()
    }
    assert set(report.user_hashes) == {PSEUDONYMIZER(form) for form in forms}
    assert report.requested_hashes == (PSEUDONYMIZER(email(settings, "alice@example.com")),)
    assert report.summary()["identifiers"]["links"] == {
        "link table crm": {"customer_id": 1, "email": 1},
        "records of orders": {"customer_id": 1},
        "request": {"email": 1},
    }
    # the certificate lists the identifiers erased per kind, as keyed hashes, and the links used
    stated = certified(report.identifiers)
    assert stated is not None and sorted(stated["erased"]) == ["customer_id", "email"]
    assert len(stated["erased"]["customer_id"]) == 2 and stated["links"] == report.summary()["identifiers"]["links"]

    # nothing raw in the report, the logs, the approval page or the certificate's identifiers
    request = ErasureRequest("req-1", "2026-11-26T00:00:00+00:00", "2026-12-26T00:00:00+00:00", (), "kms")
    page = confirmation_page(PendingApproval(request, report, "0" * 64, "dpo", "2026-12-01"), "0", "s", "/a")
    assert "Identifiers of the person: 4 (customer_id 2, email 2)" in page
    assert "link table crm: customer_id 1, email 1" in page and "records of orders: customer_id 1" in page
    link = ApprovalLink("dpo@example.com", "https://approve.example/x")
    _, mail = approval_email(request, report.summary(), link, "2026-12-01")
    assert "Identifiers of the person: 4 (customer_id 2, email 2)" in mail
    assert all(h not in page for h in report.user_hashes)  # counts only on the page, no hash
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    assert "request resolved" in logged
    for text in (report.to_bytes().decode(), logged, page, mail, json.dumps(stated)):
        assert not [raw for raw in RAW if raw in text]


def test_given_a_shared_email_linked_to_500_customers_when_requested_then_the_request_stops_with_a_clear_refusal(
    person_lake, caplog
):
    settings, store, _ = person_lake
    shared = email(settings, "test@example.com")
    with caplog.at_level(logging.DEBUG, logger="lakepurge"), pytest.raises(ExpansionRefused) as refused:
        build_report(store, settings, [shared], "req-2", PSEUDONYMIZER, force=True)  # never forced through
    message = str(refused.value)
    assert "the email named in the request" in message
    assert "is linked to 500 distinct customer_id through link table crm, more than [resolution] max_linked = 10" in (
        message
    )
    assert "test@" not in message and "test@" not in "\n".join(
        json.dumps(r.__dict__, default=str) for r in caplog.records
    )
    # named not to be followed, it is erased alone and the report records it
    report = build_report(store, settings, [shared], "req-3", PSEUDONYMIZER, no_expand=[shared])
    assert {o.dataset: o.lines for o in report.objects} == {"signups": (3,)}
    assert report.identifiers["not_expanded"] == [{"hash": PSEUDONYMIZER(shared), "kind": "email"}]


def test_given_max_depth_one_when_alice_is_resolved_then_links_two_steps_away_are_left_out_and_counted(person_lake):
    settings, store, _ = person_lake
    shallow = with_resolution(settings, "max_depth = 1")
    report = build_report(store, shallow, [email(settings, "alice@example.com")], "req-4", PSEUDONYMIZER)
    assert {o.dataset: o.lines for o in report.objects} == {"signups": (0,), "orders": (0,), "purchases": (1, 3)}
    assert report.summary()["identifiers"]["beyond_depth"] == 1  # alice.old, through the CRM from C-42


def test_given_alices_email_when_looked_up_from_the_command_line_then_her_customer_ids_are_found_through_links(
    person_lake, capsys
):
    _, _, config = person_lake
    assert main(["lookup", "--id", "email=ALICE@example.com", "--config", config, "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    found = {user: [(loc["s3path"], loc["lines"]) for loc in where] for user, where in document["users"].items()}
    assert found["customer_id=C-42"] == [("s3://lake/orders/a.jsonl", [0]), ("s3://lake/purchases/a.csv", [1])]
    assert found["customer_id=C-99"] == [("s3://lake/purchases/a.csv", [3])]
    assert document["identifiers"]["links"]["link table crm"] == {"customer_id": 1, "email": 1}
    assert main(["lookup", "--id", "email=test@example.com", "--config", config, "--json"]) == 3
    assert "500 distinct customer_id" in capsys.readouterr().out
    named = ["lookup", "--id", "email=test@example.com", "--no-expand", "email=TEST@example.com", "--config", config]
    assert main([*named, "--json"]) == 0
    document = orjson.loads(capsys.readouterr().out)
    assert list(document["users"]) == ["email=test@example.com"] and document["identifiers"]["kinds"] == {"email": 1}


def test_given_alices_email_when_exported_then_the_same_resolution_exports_her_customer_ids_records(
    person_lake, monkeypatch
):
    settings, _, _ = person_lake
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", "r" * 32)
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="exports")
    key = aws.client("kms").create_key()["KeyMetadata"]["KeyId"]
    to = S3Uri.parse("s3://exports/x/")
    with pytest.raises(ExportRefused, match="linked to 500 distinct customer_id through link table crm"):
        export_users(settings, [email(settings, "test@example.com")], to, kms_key=key, say=lambda _: None)
    assert "Contents" not in s3.list_objects_v2(Bucket="exports")  # refused before anything was written

    # the export looks up every identifier of the expansion and records them by keyed hash with their links (its
    # records are read by the access extract, which reads typed ids with the readers' slice 2, not on this branch)
    run = export_users(settings, [email(settings, "alice@example.com")], to, kms_key=key, say=lambda _: None)
    record = orjson.loads(s3.get_object(Bucket="reports", Key=f"r/exports/{run.request_id}.json")["Body"].read())
    assert run.users_requested == len(record["user_hashes"]) == 4
    assert {f["hash"] for f in record["identifiers"]["found"]} == set(record["user_hashes"])
    assert record["identifiers"]["links"]["link table crm"] == {"customer_id": 1, "email": 1}
    assert not [raw for raw in RAW if raw in json.dumps(record)]


def test_given_alices_email_when_an_operator_dry_runs_a_purge_then_the_plan_shows_the_expansion_in_counts(
    person_lake, monkeypatch
):
    settings, _, _ = person_lake
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", "r" * 32)
    said: list[str] = []
    run = purge_users(settings, [email(settings, "alice@example.com")], dry_run=True, say=said.append)
    assert run.result is None and {o.dataset for o in run.report.objects} == {"signups", "orders", "purchases"}
    printed = "\n".join(said)
    assert "Identifiers of the person: 4 (customer_id 2, email 2)" in printed
    assert "  link table crm: customer_id 1, email 1" in printed
    assert not [raw for raw in RAW if raw in printed]
    shared = email(settings, "test@example.com")
    with pytest.raises(ExpansionRefused, match="500 distinct customer_id"):
        purge_users(settings, [shared], dry_run=True, say=said.append)
    run = purge_users(settings, [shared], dry_run=True, say=said.append, no_expand=[shared])
    assert "  not followed (--no-expand): 1 identifier(s)" in said


def test_given_a_number_kind_in_a_link_table_when_resolved_then_each_spelling_of_the_number_links_and_no_cell_fails(
    pg_dsn,
):
    from lakepurge.index.in_memory import MemoryIndexStore
    from lakepurge.indexing.resolution import resolve

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_numbers")
        conn.execute("CREATE TABLE crm_numbers (email text, cust_id text)")
        rows = [("a@x.org", "0042.50"), ("b@x.org", "4.25e1"), ("c@x.org", "42.5 "), ("d@x.org", "1e99999")]
        rows += [("d@x.org", "-1e-9999"), ("e@x.org", "x42.5")]
        conn.cursor().executemany("INSERT INTO crm_numbers VALUES (%s, %s)", rows)
    toml = (
        '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n[reports]\nlocation = "s3://r/r/"\n'
        '[identifiers.email]\n[identifiers.customer_id]\nnormalise = ["number"]\n'
        f'[[identifier_links]]\nname = "crm"\ndsn = "{pg_dsn}"\ntable = "crm_numbers"\n'
        'columns = { email = "email", customer_id = "cust_id" }\n'
    )
    settings = parse_settings(tomllib.loads(toml))
    expansion = resolve(MemoryIndexStore(), settings, [request_form("customer_id=42.500", settings.identifier_kinds)])
    # 0042.50 and 4.25e1 are 42.5; "42.5 " is no number (as a record's would be), nor is x42.5; no cell fails the query
    assert sorted(i.form.rsplit("\x1f", 1)[1] for i in expansion.identifiers) == ["42.5", "a@x.org", "b@x.org"]
