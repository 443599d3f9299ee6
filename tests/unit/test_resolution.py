"""Resolution (issue 31, slice 4): a typed request expanded through the ids its records hold together, bounded in
depth, stopped by an identifier linked to too many people, on a real (in-memory) index; the report binds what was
found by keyed hashes and shows counts. Link tables and both backends: tests/integration/test_resolution.py."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime

import pytest

from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.base import ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.indexing.resolution import ExpansionRefused, resolve
from lakepurge.records.identifiers import request_form
from lakepurge.reports.report import build_report

pytestmark = pytest.mark.unit

KINDS = (
    '[identifiers.email]\nnormalise = ["trim", "casefold"]\n[identifiers.customer_id]\n[identifiers.device_id]\n'
    "[identifiers.phone]\n"
)
PSEUDONYMIZER = Pseudonymizer(b"k" * 16)


def settings(resolution: str = "") -> Settings:
    datasets = "".join(
        f'[[datasets]]\nname = "{name}"\nlocation = "s3://lake/{name}/"\nid_fields = ["id"]\n'
        for name in ("signups", "orders", "devices", "phones", "events")
    )
    text = (
        '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n[reports]\nlocation = "s3://reports/r/"\n'
        + KINDS
        + resolution
        + datasets
    )
    return parse_settings(tomllib.loads(text), "lakepurge.toml")


def form(text: str) -> str:
    return request_form(text, settings().identifier_kinds)


def obj(path: str, rows: dict[str, list[int]]) -> ObjectIndex:
    dataset = path.split("/")[3]
    records = 1 + max(line for lines in rows.values() for line in lines)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    return ObjectIndex(path, dataset, f"e-{path}", None, when, lines_by_user=rows, records=records)


ALICE = form("email=alice@example.com")
C42 = form("customer_id=C-42")
DEV = form("device_id=dev-9")
PHONE = form("phone=555-0101")


@pytest.fixture
def store():
    """alice's signup (email), her order (email and customer_id on one line), her device (customer_id and device_id),
    the phone on that device (device_id and phone), and bob's order on another line of the same object."""
    index = MemoryIndexStore()
    bob, c7 = form("email=bob@example.com"), form("customer_id=C-7")
    index.replace_objects(
        [
            obj("s3://lake/signups/a.jsonl", {ALICE: [0], bob: [1]}),
            obj("s3://lake/orders/a.csv", {ALICE: [0], C42: [0], bob: [1], c7: [1]}),
            obj("s3://lake/devices/a.csv", {C42: [3], DEV: [3], c7: [4]}),
            obj("s3://lake/phones/a.csv", {DEV: [0], PHONE: [0]}),
        ]
    )
    return index


def test_given_an_order_holding_email_and_customer_id_when_the_email_is_requested_then_the_customer_id_is_found(
    store,
):
    expansion = resolve(store, settings("[resolution]\nmax_depth = 1\n"), [ALICE])
    assert [(i.form, i.via, i.depth) for i in expansion.identifiers] == [
        (ALICE, "request", 0),
        (C42, "records of orders", 1),
    ]
    # bob's order line is in the same object, on another line: not linked to alice
    assert expansion.kinds() == {"customer_id": 1, "email": 1}
    assert expansion.beyond_depth == 1  # the device id, one step further: the bound stopped there


def test_given_a_chain_of_links_when_resolved_then_each_step_follows_one_link_up_to_max_depth(store):
    default = resolve(store, settings(), [ALICE])
    assert [i.form for i in default.identifiers] == [ALICE, C42, DEV]
    assert default.by_link() == {
        "records of devices": {"device_id": 1},
        "records of orders": {"customer_id": 1},
        "request": {"email": 1},
    }
    assert default.beyond_depth == 1
    deeper = resolve(store, settings("[resolution]\nmax_depth = 3\n"), [ALICE])
    assert [i.form for i in deeper.identifiers] == [ALICE, C42, DEV, PHONE] and deeper.beyond_depth == 0


def test_given_an_email_on_orders_of_eleven_customers_when_resolved_then_it_is_refused_naming_kind_count_and_link():
    index = MemoryIndexStore()
    shared = form("email=test@example.com")
    rows = {shared: list(range(11))} | {form(f"customer_id=C-{n}"): [n] for n in range(11)}
    index.replace_objects([obj("s3://lake/orders/a.csv", rows)])
    with pytest.raises(ExpansionRefused) as refused:
        resolve(index, settings(), [shared], pseudonymizer=PSEUDONYMIZER)
    message = str(refused.value)
    assert "the email named in the request" in message
    assert "linked to 11 distinct customer_id through records of orders" in message
    assert "max_linked = 10" in message and "--no-expand email=VALUE" in message
    assert PSEUDONYMIZER(shared) in message and "test@" not in message and "C-1" not in message
    # found one step away (through alice's customer id), the shared email is refused just the same
    rows[C42] = [0]
    index.replace_objects([obj("s3://lake/orders/a.csv", rows)], force=True)
    with pytest.raises(ExpansionRefused, match=r"the email found through records of orders .* 12 distinct customer_id"):
        resolve(index, settings(), [C42], pseudonymizer=PSEUDONYMIZER)
    # a higher limit follows it
    assert len(resolve(index, settings("[resolution]\nmax_linked = 12\n"), [shared]).identifiers) == 13


def test_given_no_expand_when_the_shared_email_is_named_then_it_is_kept_unfollowed_or_left_out_when_found():
    index = MemoryIndexStore()
    shared = form("email=test@example.com")
    rows = {shared: list(range(11))} | {form(f"customer_id=C-{n}"): [n] for n in range(11)}
    index.replace_objects([obj("s3://lake/orders/a.csv", rows)])
    named = resolve(index, settings(), [shared], no_expand=[shared])
    assert [i.form for i in named.identifiers] == [shared] and named.not_expanded == (shared,)
    found = resolve(index, settings(), [form("customer_id=C-3")], no_expand=[shared])
    assert [i.form for i in found.identifiers] == [form("customer_id=C-3")]


def test_given_an_untyped_request_when_a_report_is_made_then_nothing_is_resolved_as_before_kinds(store):
    store.replace_objects([obj("s3://lake/events/a.jsonl", {"u1": [0], "u2": [0]})])
    report = build_report(store, settings(), ["u1"], "req-1", PSEUDONYMIZER)
    assert report.user_hashes == (PSEUDONYMIZER("u1"),) and report.identifiers == {}
    assert "identifiers" not in report.summary()


def test_given_a_typed_request_when_a_report_is_made_then_it_binds_the_expansion_by_keyed_hashes_and_counts(store):
    report = build_report(store, settings(), [ALICE, "u1"], "req-1", PSEUDONYMIZER)
    assert report.requested_hashes == tuple(sorted((PSEUDONYMIZER(ALICE), PSEUDONYMIZER("u1"))))
    assert set(report.user_hashes) == {PSEUDONYMIZER(f) for f in ("u1", ALICE, C42, DEV)}
    assert report.identifiers["found"][1] == {
        "hash": PSEUDONYMIZER(C42),
        "kind": "customer_id",
        "via": "records of orders",
        "depth": 1,
    }
    # every line of every identifier found: the device id's phone record too (its phone is not followed: depth 2)
    lines = {o.dataset: o.lines for o in report.objects}
    assert lines == {"signups": (0,), "orders": (0,), "devices": (3,), "phones": (0,)}
    assert report.summary()["identifiers"] == {
        "kinds": {"customer_id": 1, "device_id": 1, "email": 1},
        "links": {
            "records of devices": {"device_id": 1},
            "records of orders": {"customer_id": 1},
            "request": {"email": 1},
        },
        "not_expanded": 0,
        "beyond_depth": 1,
        "max_depth": 2,
    }
    data = report.to_bytes()
    assert all(raw not in data for raw in (b"alice", b"C-42", b"dev-9"))
    assert type(report).from_bytes(data) == report


def test_given_a_resolved_report_when_the_certificate_is_written_then_it_lists_identifiers_per_kind_and_links(store):
    from lakepurge.purge.certificate import PurgeResult, write_certificate
    from lakepurge.purge.engine import ObjectOutcome
    from lakepurge.reports.layout import CertificateDocument
    from tests.unit.test_layout import RecordingS3  # what the writer would store (nothing is sent)

    read = settings()
    report = build_report(store, read, [ALICE], "req-cert", PSEUDONYMIZER)
    outcomes = tuple(
        ObjectOutcome(o.s3path, "erased", o.etag, None, '"new"', None, lines_erased=len(o.lines))
        for o in report.objects
    )
    s3 = RecordingS3()
    when = datetime(2026, 1, 2, tzinfo=UTC)
    result = PurgeResult("req-cert", outcomes, (), "")
    write_certificate(s3, read, report, result, when, "dpo", "ab" * 32, None, PSEUDONYMIZER)
    [put] = s3.puts
    stated = CertificateDocument.model_validate_json(put["Body"]).identifiers
    assert stated is not None
    assert stated["erased"] == {
        "customer_id": [PSEUDONYMIZER(C42)],
        "device_id": [PSEUDONYMIZER(DEV)],
        "email": [PSEUDONYMIZER(ALICE)],
    }
    assert stated["links"]["records of orders"] == {"customer_id": 1}
    assert all(raw not in put["Body"] for raw in (b"alice", b"C-42", b"dev-9"))


def test_given_an_untyped_id_beside_a_typed_one_when_resolved_then_it_is_not_followed(store):
    # an untyped id keeps today's meaning: it names nobody's kind, so a typed request never takes it on
    store.replace_objects([obj("s3://lake/events/a.jsonl", {ALICE: [0], "u1": [0]})])
    expansion = resolve(store, settings("[resolution]\nmax_depth = 1\n"), [ALICE])
    assert "u1" not in expansion.forms and [i.form for i in expansion.identifiers] == [ALICE, C42]


def test_given_a_refused_resolution_in_a_workflow_task_when_it_fails_then_its_message_reaches_the_history_unchanged():
    from lakepurge.workflow.errors import sanitized_errors

    index = MemoryIndexStore()
    shared = form("email=test@example.com")
    index.replace_objects([obj("s3://lake/orders/a.csv", {shared: [0, 1]} | {C42: [0], form("customer_id=C-7"): [1]})])

    @sanitized_errors
    def generate_report() -> None:  # as the GenerateReport Task: build_report resolves the sealed request's ids
        build_report(index, settings("[resolution]\nmax_linked = 1\n"), [shared], "req-1", PSEUDONYMIZER)

    # kinds, counts, links and a keyed hash: the operator sees why, and no raw identifier reaches the history
    with pytest.raises(ExpansionRefused, match="linked to 2 distinct customer_id through records of orders") as refused:
        generate_report()
    assert "test@" not in str(refused.value) and "C-42" not in str(refused.value)


def test_given_an_order_holding_an_email_and_a_name_with_birth_date_when_the_email_is_resolved_then_both_are_found():
    from lakepurge.records.id_typing import CompositeKind

    composite = '[identifiers.name_dob]\nparts = { first_name = ["casefold"], birth_date = [] }\n'
    configured = settings(composite)
    name_dob = CompositeKind("name_dob", (("first_name", ("casefold",)), ("birth_date", ()))).form(
        ["Alice", "1852-05-04"], "test"
    )
    index = MemoryIndexStore()
    index.replace_objects([obj("s3://lake/orders/a.csv", {ALICE: [0], name_dob: [0]})])

    expansion = resolve(index, configured, [ALICE])

    assert [(i.form, i.via, i.depth) for i in expansion.identifiers] == [
        (ALICE, "request", 0),
        (name_dob, "records of orders", 1),
    ]


def test_given_a_request_for_an_email_and_its_digest_when_counted_then_the_digest_is_its_own_line_not_a_second_email():
    digest = "\x1femail\x1fsha256_hex\x1f" + "0" * 64  # as typed_request_forms makes it for a hashed column
    expansion = resolve(MemoryIndexStore(), settings(), [ALICE, digest])
    assert expansion.kinds() == {"email": 1, "sha256_hex(email)": 1}
    assert expansion.by_link() == {"request": {"email": 1, "sha256_hex(email)": 1}}


def test_given_an_email_found_through_a_link_when_a_dataset_holds_its_digest_then_the_digest_is_found_too():
    import hashlib

    hashed = '[[datasets]]\nname = "marketing"\nlocation = "s3://lake/marketing/"\nid_fields = ["h"]\n'
    configured = settings(hashed + 'id_kinds = { h = "sha256_hex(email)" }\n')
    digest = "\x1femail\x1fsha256_hex\x1f" + hashlib.sha256(b"alice@example.com").hexdigest()
    index = MemoryIndexStore()
    index.replace_objects([obj("s3://lake/orders/a.csv", {ALICE: [0], C42: [0]})])

    expansion = resolve(index, configured, [C42])  # a request naming her customer id only

    assert [(i.form, i.via, i.kind) for i in expansion.identifiers] == [
        (C42, "request", "customer_id"),
        (ALICE, "records of orders", "email"),
        (digest, "records of orders", "sha256_hex(email)"),  # what the marketing export holds of her
    ]
