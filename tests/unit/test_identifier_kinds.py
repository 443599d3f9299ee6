"""Identifier kinds (issue 31, first slice): a kind's normalisation makes one index form of a record's id and of a
request's id; an untyped id is its own index form, exactly as before kinds existed."""

from __future__ import annotations

import io
import tomllib

import pytest

from lakepurge.core.config import ConfigError, Settings, parse_settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.indexing.unindexable import Needles
from lakepurge.records.formats import group_records
from lakepurge.records.id_typing import FieldKind, IdTyping
from lakepurge.records.identifiers import (
    IdentifierKind,
    RequestIdError,
    kind_of,
    request_form,
    shown,
    without_marked_ids,
)
from lakepurge.reports.report import build_report

pytestmark = pytest.mark.unit

EMAIL = IdentifierKind("email", ("trim", "casefold"))
CUSTOMER = IdentifierKind("customer_id")
PHONE = IdentifierKind("phone", ("digits",))
KINDS = {k.name: k for k in (EMAIL, CUSTOMER, PHONE)}


def settings(identifiers: str, *datasets: str) -> Settings:
    text = (
        '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n'
        '[reports]\nlocation = "s3://reports/r/"\n' + identifiers + "".join(datasets)
    )
    return parse_settings(tomllib.loads(text), "lakepurge.toml")


def dataset(name: str, extra: str = "", fields: str = 'id_fields = ["email"]') -> str:
    return f'[[datasets]]\nname = "{name}"\nlocation = "s3://lake/{name}/"\n{fields}\n{extra}\n'


def test_given_a_trimmed_casefolded_email_kind_when_a_request_names_another_spelling_then_its_form_is_the_records():
    record = EMAIL.index_form("alice@example.com")
    assert request_form("email=Alice@Example.COM ", KINDS) == record
    assert request_form("email=ALICE@EXAMPLE.COM", KINDS) == record
    assert kind_of(record) == "email" and shown(record) == "email=alice@example.com"


def test_given_an_exact_kind_when_a_request_names_another_spelling_then_it_is_another_id():
    assert request_form("customer_id=AB-42", KINDS) == CUSTOMER.index_form("AB-42")
    assert request_form("customer_id=ab-42", KINDS) != CUSTOMER.index_form("AB-42")
    assert request_form("customer_id= AB-42", KINDS) != CUSTOMER.index_form("AB-42")


def test_given_kinds_when_the_same_value_is_of_two_kinds_then_the_forms_differ_and_differ_from_the_untyped_id():
    forms = {IdentifierKind("email").index_form("42"), CUSTOMER.index_form("42"), "42"}
    assert len(forms) == 3
    assert kind_of("42") is None


def test_given_a_digits_kind_when_a_phone_number_is_written_with_spaces_and_signs_then_only_digits_count():
    assert request_form("phone=+44 (0)20 7946-0000", KINDS) == PHONE.index_form("4402079460000")


def test_given_an_untyped_dataset_when_its_rows_are_put_in_index_forms_then_they_are_the_rows_as_read():
    rows = {"Alice@Example.COM ": [0, 3], "alice@example.com": [1], " bob": [2]}
    kept, bad = without_marked_ids(rows, False, "id field(s) email")
    assert kept is rows and bad == {}
    kept, bad = without_marked_ids(rows, True, "id field(s) email")  # kinds configured elsewhere: still as read
    assert kept == {"Alice@Example.COM ": [0, 3], "alice@example.com": [1], " bob": [2]} and bad == {}


def indexed(dataset_toml: str, identifiers: str, lines: bytes) -> tuple[dict[str, list[int]], dict[int, str]]:
    """An object of JSON Lines as the indexer reads it for the dataset: its rows and its unindexable lines."""
    one = settings(identifiers, dataset_toml).datasets[0]
    assert one.id_fields is not None
    read = group_records(io.BytesIO(lines), "d/a.jsonl", "jsonl", one.id_fields, 4096, rules=id_rules(one))
    return read.lines_by_user, {u.line: u.reason for u in read.unindexable}


def test_given_an_email_dataset_when_two_spellings_of_one_email_are_read_then_one_id_holds_both_lines():
    lines = b'{"email":"Alice@Example.COM "}\n{"email":"alice@example.com"}\n{"email":"bob@example.com"}\n' * 2
    kept, bad = indexed(
        dataset("d", 'id_kind = "email"'), '[identifiers.email]\nnormalise = ["trim", "casefold"]\n', lines
    )
    assert kept == {EMAIL.index_form("alice@example.com"): [0, 1, 3, 4], EMAIL.index_form("bob@example.com"): [2, 5]}
    assert bad == {}


def test_given_a_value_that_normalises_to_nothing_when_indexed_then_its_line_is_unindexable_and_never_quoted():
    phones = dataset("d", 'id_kind = "phone"', 'id_fields = ["phone", "mobile"]')
    identifiers = '[identifiers.phone]\nnormalise = ["digits"]\n'
    # line 1 holds two ids; line 2 one, in the second id field
    lines = b'{"phone":"no digits here"}\n{"phone":["+1 555 0100","555-0199"]}\n{"mobile":"555-0199"}\n'
    kept, bad = indexed(phones, identifiers, lines)
    assert kept == {PHONE.index_form("15550100"): [1], PHONE.index_form("5550199"): [1, 2]}
    assert bad == {0: "id field 'phone' holds no phone after normalisation (digits)"}
    lines = b'{"phone":"555-0199"}\n{"phone":"555-0199","mobile":"no digits here"}\n'  # unindexable as a whole
    kept, bad = indexed(phones, identifiers, lines)
    assert kept == {PHONE.index_form("5550199"): [0]} and set(bad) == {1}


def test_given_kinds_configured_when_an_untyped_id_begins_with_the_kind_marker_then_its_line_is_unindexable():
    forged = EMAIL.index_form("alice@example.com")  # an untyped value spelling a typed form
    rows = {forged: [0], "bob": [0, 1]}
    assert without_marked_ids(rows, False, "id field(s) user_id") == (rows, {})  # no kinds: today's meaning
    kept, bad = without_marked_ids(rows, True, "id field(s) user_id")
    assert kept == {"bob": [1]}
    assert bad == {0: "id field(s) user_id begins with U+001F, the marker of identifier kinds"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("wanda@example.com", "a typed id is KIND=VALUE"),
        ("=wanda@example.com", "a typed id is KIND=VALUE"),
        ("mail=wanda@example.com", "identifier kind 'mail' is not configured (configured: customer_id, email, phone)"),
        ("email=   ", "the email given holds no email after normalisation (trim, casefold)"),
        ("customer_id=wanda\x00", "the customer_id given contains a NUL character"),
    ],
)
def test_given_a_bad_typed_id_when_a_request_names_it_then_the_error_says_why_without_the_value(text, message):
    with pytest.raises(RequestIdError) as raised:
        request_form(text, KINDS)
    assert str(raised.value).startswith(message)
    assert "wanda" not in str(raised.value)


def test_given_identifiers_in_the_configuration_when_read_then_datasets_get_their_kinds_and_others_none():
    read = settings(
        '[identifiers.email]\nnormalise = ["trim", "casefold"]\n[identifiers.customer_id]\n',
        dataset("signups", 'id_kind = "email"'),
        dataset("orders", fields='id_fields = ["customer"]\nformat = "csv"\nid_kind = "customer_id"'),
        dataset("events", fields='id_fields = ["user_id"]'),
    )
    kinds = {d.name: d.id_typing for d in read.datasets}
    # id_kind: every id field typed that kind, as id_kinds would name it
    assert kinds == {
        "signups": IdTyping(((("email",), FieldKind(EMAIL)),)),
        "orders": IdTyping(((("customer",), FieldKind(CUSTOMER)),)),
        "events": None,
    }
    assert read.identifier_kinds == {"email": EMAIL, "customer_id": CUSTOMER}


@pytest.mark.parametrize(
    ("identifiers", "extra", "fields", "message"),
    [
        ("", 'id_kind = "email"', 'id_fields = ["email"]', "dataset 'd' names id_kind 'email', which has no"),
        ('[identifiers.email]\nnormalise = ["upper"]\n', "", 'id_fields = ["email"]', "identifiers.email.normalise"),
        ("[identifiers.Email]\n", "", 'id_fields = ["email"]', "identifiers"),
        (
            "[identifiers.email]\n",
            'id_kind = "email"\nerase = "delete-object"',
            'id_from_key = "(?P<id>[^/]+)/"',
            "id_kind is for datasets of files (jsonl, csv, parquet) with id_fields",
        ),
    ],
)
def test_given_a_wrong_identifier_configuration_when_read_then_the_error_names_the_key(
    identifiers, extra, fields, message
):
    with pytest.raises(ConfigError) as raised:
        settings(identifiers, dataset("d", extra, fields))
    assert message in str(raised.value)


def test_given_typed_ids_when_a_report_is_made_then_it_names_them_by_keyed_hashes_of_their_index_forms():
    read = settings("[identifiers.email]\n", dataset("signups", 'id_kind = "email"'))
    wanda = request_form("email=wanda@example.com", read.identifier_kinds)
    pseudonymizer = Pseudonymizer(b"k" * 16)
    report = build_report(MemoryIndexStore(), read, ["bob", wanda], "req-1", pseudonymizer)
    assert report.user_hashes == (pseudonymizer("bob"), pseudonymizer(wanda))
    assert b"wanda" not in report.to_bytes()


def test_given_a_typed_request_when_an_unindexable_line_holds_the_value_in_another_case_then_it_may_hold_it():
    # an unindexable line is searched for the bytes of each requested id: a typed id by its normalised value, in
    # any case (the line was never normalised), never by its index form, which no line holds
    alice = request_form("email= Alice@Example.COM", KINDS)
    needles = Needles([alice, "bob"])
    assert needles.found_in(b'{"email":"ALICE@example.com", broken')
    assert needles.found_in(b'{"id":"bob",')
    assert not needles.found_in(b'{"email":"carol@example.com",')
    assert not Needles(["Bob"]).found_in(b'{"id":"bob",')  # an untyped id: its exact bytes, as before kinds


def test_given_no_kinds_configured_when_an_untyped_id_begins_with_the_marker_then_the_report_is_made_as_today():
    read = settings("", dataset("events", fields='id_fields = ["user_id"]'))
    report = build_report(MemoryIndexStore(), read, ["\x1femail\x1fwanda"], "req-1", Pseudonymizer(b"k" * 16))
    assert report.users_found == 0 and len(report.user_hashes) == 1
