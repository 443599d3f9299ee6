"""Per-field identifier kinds, transforms and composite kinds (issue 31, docs/design/PERSON.md section 2): a record
holds several kinds at once, a column may hold a named hash of a kind, several columns may make one composite id;
the ids are read as index forms in the one walk every reader makes, so the indexer, the purge's ownership check and
verification's search find the same lines, and a request's --id makes the same forms."""

from __future__ import annotations

import hashlib
import io
import json
import tomllib
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.core.config import ConfigError, DatasetConfig, Settings, parse_settings
from lakepurge.core.config_identity import dataset_id_forms, id_rules, typed_request_forms
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.purge.ownership import Ownership, owned_rows
from lakepurge.records.csv_records import csv_records
from lakepurge.records.formats import Grouped, group_records, read_records
from lakepurge.records.identifiers import IdentifierKind, RequestIdError, request_form, shown
from lakepurge.records.ids import Record, parse_paths
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

MAX = 4096
HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")
IDENTIFIERS = """
[identifiers.email]
normalise = ["trim", "casefold"]
[identifiers.customer_id]
[identifiers.name_dob]
parts = { first_name = ["trim", "casefold"], last_name = ["trim", "casefold"], birth_date = [] }
"""
ALICE_SHA = hashlib.sha256(b"alice@example.com").hexdigest()
ALICE_MD5 = hashlib.md5(b"alice@example.com", usedforsecurity=False).hexdigest()
EMAIL = "\x1femail\x1falice@example.com"
SHA = "\x1femail\x1fsha256_hex\x1f" + ALICE_SHA
CUSTOMER = "\x1fcustomer_id\x1f42"
NAME_DOB = '\x1fname_dob\x1f["alice","liddell","1852-05-04"]'


def settings(*datasets: str, identifiers: str = IDENTIFIERS) -> Settings:
    text = (
        '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n'
        '[reports]\nlocation = "s3://reports/r/"\n' + identifiers + "".join(datasets)
    )
    return parse_settings(tomllib.loads(text), "lakepurge.toml")


def dataset(name: str, keys: str, fmt: str = "jsonl") -> str:
    return f'[[datasets]]\nname = "{name}"\nlocation = "s3://lake/{name}/"\nformat = "{fmt}"\n{keys}\n'


ORDERS = dataset(
    "orders",
    'id_fields = ["buyer.email", "customer", "email_sha"]\n'
    'id_kinds = { "buyer.email" = "email", customer = "customer_id", email_sha = "sha256_hex(email)" }',
)
PEOPLE = dataset(
    "people",
    'id_fields = ["fname", "lname", "dob", "email"]\nid_kinds = { email = "email" }\n'
    'id_composites = { name_dob = { first_name = "fname", last_name = "lname", birth_date = "dob" } }',
    "csv",
)


def jsonl(*records: object) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def grouped(data: bytes, config: DatasetConfig) -> Grouped:
    assert config.id_fields is not None
    return group_records(
        io.BytesIO(data), f"x.{config.format}", config.format, config.id_fields, MAX, rules=id_rules(config)
    )


# Line 0: an email (nested, in another spelling) and a customer id in one record; 1: the hashed email in upper-case
# hex; 2: no id field; 3: two buyers and a customer; 4: a hash column holding no sha256 hex.
ORDER_LINES = jsonl(
    {"buyer": {"email": " Alice@Example.COM"}, "customer": 42, "n": 1},
    {"email_sha": ALICE_SHA.upper(), "n": 2},
    {"n": 3},
    {"buyer": [{"email": "bob@example.com"}, {"email": "ALICE@example.com"}], "customer": "7"},
    {"email_sha": "alice@example.com"},
)


def test_given_per_field_kinds_when_a_record_holds_an_email_a_customer_and_a_hash_then_each_is_its_kinds_form():
    orders = settings(ORDERS).datasets[0]
    read = grouped(ORDER_LINES, orders)
    assert read.lines_by_user == {
        EMAIL: [0, 3],
        CUSTOMER: [0],
        SHA: [1],
        "\x1femail\x1fbob@example.com": [3],
        "\x1fcustomer_id\x1f7": [3],
    }
    assert [(u.line, u.reason) for u in read.unindexable] == [
        (2, "id fields 'buyer.email', 'customer', 'email_sha' all missing"),  # (as an untyped record's)
        (4, "id field 'email_sha' holds no sha256_hex of email (lower- or upper-case hex)"),
    ]
    assert "alice" not in read.unindexable[1].reason


def test_given_id_kind_when_every_field_is_named_in_id_kinds_instead_then_the_index_forms_are_the_same():
    data = jsonl({"email": "Alice@Example.COM "}, {"email": "bob@example.com", "x": 1}, {"x": 2}, {"email": " "})
    typed = settings(dataset("a", 'id_fields = ["email"]\nid_kind = "email"'))
    per_field = settings(dataset("a", 'id_fields = ["email"]\nid_kinds = { email = "email" }'))
    one, each = grouped(data, typed.datasets[0]), grouped(data, per_field.datasets[0])
    assert one.lines_by_user == each.lines_by_user == {EMAIL: [0], "\x1femail\x1fbob@example.com": [1]}
    assert one.unindexable == each.unindexable
    assert [(u.line, u.reason) for u in one.unindexable] == [
        (2, "id field 'email' missing"),
        (3, "id field 'email' holds no email after normalisation (trim, casefold)"),
    ]


def test_given_id_kind_when_its_coverage_fingerprint_is_made_then_it_is_the_kind_alone_as_before_its_expansion():
    # An id_kind dataset's coverage was recorded as "kind:normalisations": another fingerprint would make every such
    # dataset "indexed with other identifier forms" until backfilled again.
    typed = settings(dataset("a", 'id_fields = ["email", "buyer.email"]\nid_kind = "email"')).datasets[0]
    per_field = settings(dataset("a", 'id_fields = ["email"]\nid_kinds = { email = "email" }')).datasets[0]
    assert dataset_id_forms(typed) == "email:trim,casefold"
    assert dataset_id_forms(per_field) == "email=email:trim,casefold"


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_given_id_kind_and_names_in_any_case_when_indexed_purged_and_verified_then_all_readers_find_the_same(fmt):
    config = settings(
        dataset("a", 'id_fields = ["email"]\nid_kind = "email"\ncolumn_names = "case-insensitive"', fmt)
    ).datasets[0]
    emails = ["Alice@Example.com", "bob@example.com", " alice@example.com"]
    if fmt == "jsonl":
        data = jsonl(*({"EMail": email} for email in emails))
    elif fmt == "csv":
        data = ("EMail,n\n" + "".join(f"{email},{n}\n" for n, email in enumerate(emails))).encode()
    else:
        sink = io.BytesIO()
        pq.write_table(pa.table({"EMail": emails}), sink)
        data = sink.getvalue()
    _agree(config, data, [EMAIL, "\x1femail\x1fbob@example.com"])


def test_given_one_typed_field_when_a_chunk_is_read_in_bulk_then_its_forms_are_those_read_line_by_line():
    hashed = settings(dataset("h", 'id_fields = ["h"]\nid_kinds = { h = "sha256_hex(email)" }')).datasets[0]
    assert hashed.id_fields is not None
    good = jsonl(*({"h": ALICE_SHA.upper() if n % 2 else ALICE_SHA, "n": n} for n in range(6)))
    for data in (good, good + jsonl({"h": "not hex", "n": 6}, {"h": ALICE_SHA, "n": 7})):
        read = grouped(data, hashed)  # the indexer's: a chunk at once when it can
        by_line = read_records(io.BytesIO(data), "x.jsonl", "jsonl", hashed.id_fields, MAX, rules=id_rules(hashed))
        lines: dict[str, list[int]] = {}
        bad = []
        for item in by_line:
            if isinstance(item, Record):
                for user in item.user_ids:
                    lines.setdefault(user, []).append(item.line)
            else:
                bad.append(item)
        assert read.lines_by_user == lines and read.unindexable == bad
    assert read.lines_by_user == {SHA: [0, 1, 2, 3, 4, 5, 7]} and [u.line for u in read.unindexable] == [6]


def test_given_a_hashed_email_column_when_a_request_names_the_email_then_its_forms_include_the_columns():
    configured = settings(ORDERS, dataset("md5s", 'id_fields = ["h"]\nid_kinds = { h = "md5_hex(email)" }'))
    forms = typed_request_forms("email= ALICE@example.com", configured.datasets, configured.identifiers)
    assert forms == [EMAIL, "\x1femail\x1fmd5_hex\x1f" + ALICE_MD5, SHA]
    md5s = configured.datasets[1]
    assert grouped(jsonl({"h": ALICE_MD5}), md5s).lines_by_user == {forms[1]: [0]}
    assert shown(SHA) == f"sha256_hex(email)={ALICE_SHA}"
    # No dataset holds a transform of the kind: the request is its kind's form alone.
    alone = settings(dataset("a", 'id_fields = ["e"]\nid_kinds = { e = "email" }'))
    assert typed_request_forms("email=alice@example.com", alone.datasets, alone.identifiers) == [EMAIL]


def test_given_a_composite_kind_when_rows_hold_all_some_or_none_of_its_parts_then_only_complete_ones_hold_it():
    people = settings(PEOPLE).datasets[0]
    data = (
        b"fname,lname,dob,email\n"
        b" Alice ,LIDDELL,1852-05-04,\n"  # the composite alone
        b"Alice,Liddell,,alice@example.com\n"  # no birth date: only the email
        b"Alice,Liddell,,\n"  # neither: unindexable
        b'"Alice","Liddell","1852-05-04",Alice@example.com\n'  # both
    )
    read = grouped(data, people)
    assert read.lines_by_user == {NAME_DOB: [1, 4], EMAIL: [2, 4]}
    assert [(u.line, u.reason) for u in read.unindexable] == [
        (3, "no id: id field(s) 'email' missing; name_dob incomplete")
    ]
    request = '{"first_name": "ALICE", "last_name": " Liddell", "birth_date": "1852-05-04"}'
    configured = settings(PEOPLE)
    assert typed_request_forms(f"name_dob={request}", configured.datasets, configured.identifiers) == [NAME_DOB]
    # The birth date is exact: another spelling of it is another person.
    other = request.replace("1852-05-04", "1852-5-4")
    assert typed_request_forms(f"name_dob={other}", configured.datasets, configured.identifiers) != [NAME_DOB]


def test_given_a_composite_in_json_lines_when_a_part_is_nested_numeric_null_or_several_then_each_is_read_as_such():
    member = dataset(
        "m",
        'id_fields = ["name.first", "name.last", "born"]\n'
        'id_composites = { name_dob = { first_name = "name.first", last_name = "name.last", birth_date = "born" } }',
    )
    data = jsonl(
        {"name": {"first": "Alice", "last": "Liddell"}, "born": 1852},  # an integer part: its decimal string
        {"name": {"first": "Alice", "last": "Liddell"}, "born": None},  # null: the part is missing
        {"name": {"first": ["Alice", "Alicia"], "last": "Liddell"}, "born": 1852},  # two first names: whose?
        {"name": {"first": ["Alice", "Alice"], "last": "Liddell"}, "born": "1852"},  # one value, written twice
    )
    read = grouped(data, settings(member).datasets[0])
    assert read.lines_by_user == {'\x1fname_dob\x1f["alice","liddell","1852"]': [0, 3]}
    assert [(u.line, u.reason) for u in read.unindexable] == [
        (1, "no id: name_dob incomplete"),
        (2, "name_dob part 'first_name' (field 'name.first') holds several values"),
    ]


def test_given_a_composite_kind_when_a_request_is_read_as_one_value_then_it_is_refused_not_made_a_wrong_form():
    # request_form (slice 1's, one value a kind) must never make "\x1fname_dob\x1f" + the raw JSON, which no record
    # holds: the composite is not one of the kinds it knows.
    configured = settings(PEOPLE)
    assert sorted(configured.identifier_kinds) == ["customer_id", "email"]
    with pytest.raises(RequestIdError, match="identifier kind 'name_dob' is not configured"):
        request_form('name_dob={"first_name": "a", "last_name": "b", "birth_date": "c"}', configured.identifier_kinds)


def test_given_number_kinds_per_field_when_parquet_holds_decimals_and_floats_then_they_are_ids_by_value_there_only():
    numbers = """
[identifiers.order_no]
normalise = ["number"]
[identifiers.ref]
[identifiers.line]
parts = { order = ["number"], item = [] }
"""
    keys = (
        'id_fields = ["order", "ref", "item"]\nid_kinds = { order = "order_no", ref = "ref" }\n'
        'id_composites = { line = { order = "order", item = "item" } }'
    )
    config = settings(dataset("o", keys, "parquet"), identifiers=numbers).datasets[0]
    sink = io.BytesIO()
    table = pa.table(
        {
            "order": pa.array([Decimal("12345.00"), Decimal("123.45"), None], pa.decimal128(10, 2)),
            "ref": pa.array([None, None, 1.5]),  # a float in a field of an exact kind: no id
            "item": ["a", None, "c"],
        }
    )
    pq.write_table(table, sink)
    read = grouped(sink.getvalue(), config)
    assert read.lines_by_user == {
        "\x1forder_no\x1f12345": [0],
        "\x1forder_no\x1f123.45": [1],
        '\x1fline\x1f["12345","a"]': [0],
    }
    assert [(u.line, u.reason) for u in read.unindexable] == [
        (2, "id field 'ref' holds a float, not a string or integer")
    ]
    _agree(config, sink.getvalue(), ["\x1forder_no\x1f12345", '\x1fline\x1f["12345","a"]'])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name_dob=Alice Liddell", "a name_dob id is a JSON object of its parts (first_name, last_name, birth_date)"),
        ('name_dob={"first_name": "Alice", "last_name": "Liddell"}', "names exactly its parts"),
        ('name_dob={"first_name": "Alice", "last_name": "Liddell", "birth_date": null}', "strings or integers"),
        ('name_dob={"first_name": " ", "last_name": "Liddell", "birth_date": "1"}', "part 'first_name' holds no value"),
    ],
)
def test_given_a_bad_composite_request_when_parsed_then_the_error_names_the_kind_and_parts_never_a_value(text, message):
    configured = settings(PEOPLE)
    with pytest.raises(RequestIdError) as raised:
        typed_request_forms(text, configured.datasets, configured.identifiers)
    assert message in str(raised.value) and "Liddell" not in str(raised.value)


def _agree(config: DatasetConfig, data: bytes, forms: list[str]) -> None:
    """The indexer's lines of each form are the lines the purge's ownership check (one by one and in bulk, with
    the hashed users the purge uses) and verification's search find for it."""
    assert config.id_fields is not None
    read = grouped(data, config)
    rules = id_rules(config)
    for form in forms:
        mine = read.lines_by_user.get(form, [])
        assert mine, form  # each form is somewhere: the agreement is not that of nobody
        users = HashedUsers(HASHER.many([form]), HASHER)
        found = lines_holding(
            io.BytesIO(data), f"x.{config.format}", config.format, config.id_fields, MAX, DEFAULT_INFLATION,
            users.each_contained, users.none_of, rules,
        )  # fmt: skip
        assert found == mine, form
        if config.format == "jsonl":
            lines = data.split(b"\n")[:-1]
            assert [n for n, line in enumerate(lines) if Ownership(config, {form}, rules).json_line(n, line)] == mine
            owned = Ownership(config, users, rules).json_lines(list(range(len(lines))), lines)
            assert [n for n, each in enumerate(owned) if each] == mine, form
        elif config.format == "csv":
            rows = list(csv_records(io.BytesIO(data), MAX))
            owner = Ownership(config, users, rules)
            owner.csv_header(rows[0].row or [])
            assert owner.csv_column() is None  # the bulk column path compares values, not forms
            owned = owner.csv_rows([r.line for r in rows[1:]], [r.row or [] for r in rows[1:]])
            assert [r.line for r, each in zip(rows[1:], owned, strict=True) if each] == mine, form
        else:
            table = pq.read_table(io.BytesIO(data))
            owned = owned_rows(table, parse_paths(config.id_fields), {form}, rules)
            assert [n for n, each in enumerate(owned) if each] == mine, form


def test_given_typed_fields_in_json_lines_when_indexed_purged_and_verified_then_all_readers_find_the_same_lines():
    # Every line one top-level field: the shape each reader's bulk path takes, which compares values as written.
    config = settings(dataset("a", 'id_fields = ["email"]\nid_kinds = { email = "email" }')).datasets[0]
    data = jsonl({"email": "Alice@Example.com"}, {"email": "bob@example.com"}, {"email": "alice@example.com "})
    _agree(config, data, [EMAIL, "\x1femail\x1fbob@example.com"])
    _agree(settings(ORDERS).datasets[0], ORDER_LINES, [EMAIL, SHA, CUSTOMER, "\x1fcustomer_id\x1f7"])


def test_given_a_hashed_column_and_a_composite_in_csv_when_indexed_purged_and_verified_then_all_find_the_same():
    hashed = settings(dataset("h", 'id_fields = ["email_sha"]\nid_kinds = { email_sha = "sha256_hex(email)" }', "csv"))
    _agree(hashed.datasets[0], f"email_sha,n\n{ALICE_SHA.upper()},1\n{'0' * 64},2\n{ALICE_SHA},3\n".encode(), [SHA])
    data = b"fname,lname,dob,email\nAlice,Liddell,1852-05-04,\nBob,Brown,1900-01-01,ALICE@example.com\n"
    _agree(settings(PEOPLE).datasets[0], data, [NAME_DOB, EMAIL])


def test_given_a_composite_in_parquet_when_indexed_and_dropped_then_both_find_the_same_rows():
    people = dataset(
        "p",
        'id_fields = ["fname", "lname", "dob"]\n'
        'id_composites = { name_dob = { first_name = "fname", last_name = "lname", birth_date = "dob" } }',
        "parquet",
    )
    sink = io.BytesIO()
    columns = {
        "fname": ["Alice", "ALICE", None],
        "lname": ["Liddell", "liddell ", "Liddell"],
        "dob": ["1852-05-04"] * 3,
    }
    pq.write_table(pa.table(columns), sink)
    config = settings(people).datasets[0]
    assert grouped(sink.getvalue(), config).lines_by_user == {NAME_DOB: [0, 1]}
    _agree(config, sink.getvalue(), [NAME_DOB])


@pytest.mark.parametrize(
    ("keys", "identifiers", "message"),
    [
        ('id_fields = ["e"]\nid_kinds = { x = "email" }', IDENTIFIERS, "id_kinds.x: not one of id_fields"),
        (
            'id_fields = ["e"]\nid_kinds = { e = "sha1_hex(email)" }',
            IDENTIFIERS,
            "id_kinds.e: 'sha1_hex(email)': unknown transform",
        ),
        ('id_fields = ["e"]\nid_kinds = { e = "Email" }', IDENTIFIERS, "id_kinds.e: 'Email' is neither a kind"),
        ('id_fields = ["e"]\nid_kinds = { e = "phone" }', IDENTIFIERS, "id_kinds.e names kind 'phone', which has no"),
        ('id_fields = ["e"]\nid_kinds = { e = "name_dob" }', IDENTIFIERS, "id_kinds.e: 'name_dob' is a composite kind"),
        ('id_fields = ["e", "f"]\nid_kinds = { e = "email" }', IDENTIFIERS, "id field(s) f: no kind"),
        ('id_fields = ["e"]\nid_kind = "email"\nid_kinds = { e = "email" }', IDENTIFIERS, "id_kinds: id_kind is every"),
        ('id_fields = ["e"]\nid_kind = "name_dob"', IDENTIFIERS, "id_kind 'name_dob' is composite"),
        (
            'id_fields = ["a"]\nid_composites = { name_dob = { first_name = "a" } }',
            IDENTIFIERS,
            "id_composites.name_dob names the fields of exactly its parts: first_name, last_name, birth_date",
        ),
        (
            'id_fields = ["a"]\nid_composites = { name_dob = { first_name = "b" } }',
            IDENTIFIERS,
            "id_composites.name_dob.first_name: 'b' is not one of id_fields",
        ),
        (
            'id_fields = ["a"]\nid_composites = { email = { first_name = "a" } }',
            IDENTIFIERS,
            "id_composites.email: no composite [identifiers.email] table with parts",
        ),
        ('id_fields = ["a"]', "[identifiers.x]\nparts = {}\n", "parts: a composite kind names at least one part"),
        (
            'id_fields = ["e"]\nid_kinds = { e = "email" }\ncolumn_names = "case-insensitive"',
            IDENTIFIERS,
            "id_kinds is for datasets of files (jsonl, csv, parquet) with id_fields that are not pseudonymised and"
            ' column_names = "exact"',
        ),
    ],
)
def test_given_a_wrong_typed_fields_configuration_when_read_then_the_error_names_the_key(keys, identifiers, message):
    with pytest.raises(ConfigError) as raised:
        settings(dataset("d", keys), identifiers=identifiers)
    assert message in str(raised.value)
    assert any(where in str(raised.value) for where in ("datasets[0]", "dataset 'd'", "identifiers.x"))


def test_given_a_dataset_without_typed_fields_when_read_then_its_rules_carry_no_typing_and_kinds_are_unchanged():
    configured = settings(dataset("plain", 'id_fields = ["user_id"]'))
    assert id_rules(configured.datasets[0]).typing is None
    assert IdentifierKind("email", ("trim", "casefold")).index_form(" Alice@Example.COM") == EMAIL
    # A typed dataset read without the configuration that names its kinds would be read untyped: refused.
    alone = DatasetConfig.model_validate(
        {"name": "a", "location": "s3://lake/a/", "id_fields": ["e"], "id_kinds": {"e": "email"}}
    )
    with pytest.raises(ValueError, match="resolved by the Settings"):
        id_rules(alone)
    one_kind = DatasetConfig.model_validate(
        {"name": "a", "location": "s3://lake/a/", "id_fields": ["e"], "id_kind": "email"}
    )
    with pytest.raises(ValueError, match="resolved by the Settings"):
        id_rules(one_kind)
