"""Per-field kinds, a hashed email column and a composite kind in the index (issue 31, slice 3), on both backends: a
request naming alice's email in any spelling finds her rows in the marketing export that holds only the SHA-256 of
her email, without any link; her name and birth date find the CRM rows that hold no single key; an orders dataset
holding her email and her customer id in one record is found by either."""

from __future__ import annotations

import hashlib
import io

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from tests.support.lakes import hand_made_lake

pytestmark = pytest.mark.integration

ALICE_SHA = hashlib.sha256(b"alice@example.com").hexdigest()
IDENTIFIERS = """
[identifiers.email]
normalise = ["trim", "casefold"]
[identifiers.customer_id]
[identifiers.name_dob]
parts = { first_name = ["trim", "casefold"], last_name = ["trim", "casefold"], birth_date = [] }
"""
DATASETS = """
[[datasets]]
name = "marketing"
location = "s3://lake/marketing/"
id_fields = ["email_sha"]
id_kinds = { email_sha = "sha256_hex(email)" }

[[datasets]]
name = "crm"
location = "s3://lake/crm/"
format = "csv"
id_fields = ["fname", "lname", "dob"]
id_composites = { name_dob = { first_name = "fname", last_name = "lname", birth_date = "dob" } }

[[datasets]]
name = "orders"
location = "s3://lake/orders/"
format = "parquet"
id_fields = ["email", "customer"]
id_kinds = { email = "email", customer = "customer_id" }
"""
MARKETING = (
    f'{{"email_sha":"{ALICE_SHA.upper()}","segment":"a"}}\n'
    f'{{"email_sha":"{hashlib.sha256(b"bob@example.com").hexdigest()}","segment":"b"}}\n'
    f'{{"email_sha":"{ALICE_SHA}","segment":"c"}}\n'
    '{"email_sha":"not a digest","segment":"d"}\n'
).encode()
CRM = b"fname,lname,dob,note\nAlice,Liddell,1852-05-04,x\n ALICE ,liddell,1852-05-04,y\nAlice,Liddell,,z\nBob,B,1,w\n"


def orders() -> bytes:
    sink = io.BytesIO()
    columns = {"email": ["Alice@Example.COM", None, "bob@example.com"], "customer": ["C-1", "C-1", "C-2"]}
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


@pytest.fixture
def typed_fields_lake(index_backend, tmp_path):
    """The three datasets on moto, indexed by the event indexer into the backend (index_backend starts moto)."""
    objects = (("marketing/a.jsonl", MARKETING), ("crm/a.csv", CRM), ("orders/a.parquet", orders()))
    with hand_made_lake(index_backend, tmp_path, IDENTIFIERS + DATASETS, objects) as lake:
        yield lake.store, lake.config


def looked_up(capsys, config: str, *ids: str) -> dict[str, list[tuple[str, list[int]]]]:
    assert main(["lookup", *(arg for each in ids for arg in ("--id", each)), "--config", config, "--json"]) == 0
    users = orjson.loads(capsys.readouterr().out)["users"]
    return {user: [(loc["s3path"], loc["lines"]) for loc in found] for user, found in users.items()}


def test_given_a_hashed_email_column_when_alice_is_looked_up_by_her_email_then_its_rows_are_found_without_a_link(
    typed_fields_lake, capsys
):
    _, config = typed_fields_lake
    assert looked_up(capsys, config, "email= Alice@EXAMPLE.com") == {
        "email=alice@example.com": [("s3://lake/orders/a.parquet", [0])],
        f"sha256_hex(email)={ALICE_SHA}": [("s3://lake/marketing/a.jsonl", [0, 2])],
        # (lookup resolves as the report does: her customer id shares the order's line with her email)
        "customer_id=C-1": [("s3://lake/orders/a.parquet", [0, 1])],
    }


def test_given_a_composite_name_and_birth_date_when_looked_up_then_the_rows_holding_every_part_are_found(
    typed_fields_lake, capsys
):
    _, config = typed_fields_lake
    alice = '{"first_name": "Alice", "last_name": "Liddell", "birth_date": "1852-05-04"}'
    assert looked_up(capsys, config, f"name_dob={alice}", "customer_id=C-1") == {
        'name_dob=["alice","liddell","1852-05-04"]': [("s3://lake/crm/a.csv", [1, 2])],  # line 0 is the header
        "customer_id=C-1": [("s3://lake/orders/a.parquet", [0, 1])],
        "email=alice@example.com": [("s3://lake/orders/a.parquet", [0])],  # (resolved: beside C-1 on line 0)
        f"sha256_hex(email)={ALICE_SHA}": [("s3://lake/marketing/a.jsonl", [0, 2])],  # (that email's digest)
    }


def test_given_rows_without_a_complete_id_when_indexed_then_each_is_unindexable_with_why_and_no_value(
    typed_fields_lake,
):
    store, _ = typed_fields_lake
    listed = sorted((path, u.line, u.reason) for path, u in store.unindexable(limit=100))
    assert listed == [
        ("s3://lake/crm/a.csv", 3, "no id: name_dob incomplete"),
        (
            "s3://lake/marketing/a.jsonl",
            3,
            "id field 'email_sha' holds no sha256_hex of email (lower- or upper-case hex)",
        ),
    ]
    assert store.object_records(["s3://lake/marketing/a.jsonl", "s3://lake/crm/a.csv"]) == {
        "s3://lake/marketing/a.jsonl": 3,
        "s3://lake/crm/a.csv": 3,
    }
