"""Issue 31's person, shared by its acceptance tests (tests/integration/test_person_erasure.py, the workflow's in
tests/e2e/test_person_workflow.py): alice is her email in a JSON Lines dataset, her customer id in a CSV and a Parquet
dataset (the integer 73004217 in Parquet, "73004217" and "73009931.0" in CSV: a `number` kind), the SHA-256 of her
email in a marketing export, her first name, last name and birth date (a composite kind) in a people dataset; a shop's
orders hold her email, customer id and name in one record, and a CRM table links her email to a second customer id.
Bob and others share every object; an untyped dataset holds her email as a plain string."""

from __future__ import annotations

import hashlib

import psycopg

from tests.support.lakes import parquet_of, rows_of

ALICE = " Alice@Example.COM "  # as the operator types her email: no record spells it so
ALICE_SHA = hashlib.sha256(b"alice@example.com").hexdigest()
PERSON_TOML = """
[identifiers.email]
normalise = ["trim", "casefold"]
[identifiers.customer_id]
normalise = ["number"]
[identifiers.name_dob]
parts = { first_name = ["trim", "casefold"], last_name = ["trim", "casefold"], birth_date = [] }

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
name = "accounts"
location = "s3://lake/accounts/"
format = "parquet"
id_fields = ["customer_id"]
id_kind = "customer_id"

[[datasets]]
name = "marketing"
location = "s3://lake/marketing/"
id_fields = ["email_sha"]
id_kinds = { email_sha = "sha256_hex(email)" }

[[datasets]]
name = "people"
location = "s3://lake/people/"
format = "csv"
id_fields = ["fname", "lname", "dob"]
id_composites = { name_dob = { first_name = "fname", last_name = "lname", birth_date = "dob" } }

[[datasets]]
name = "shop_orders"
location = "s3://lake/shop_orders/"
id_fields = ["email", "customer", "first", "last", "dob"]
id_kinds = { email = "email", customer = "customer_id" }
id_composites = { name_dob = { first_name = "first", last_name = "last", birth_date = "dob" } }

[[datasets]]
name = "web_events"
location = "s3://lake/web_events/"
id_fields = ["user"]
"""
SIGNUPS = (
    b'{"email":"alice@example.com","plan":"pro"}\n'
    b'{"email":"bob@example.com","plan":"free"}\n'
    b'{"email":" ALICE@Example.com","plan":"team"}\n'
    b'{"email":"carol@example.org","plan":"pro"}\n'
)
SIGNUPS_BEFORE = b'{"email":"bob@example.com","plan":"trial"}\n{"email":"Alice@example.com","plan":"trial"}\n'
PURCHASES = b"customer,total\n73004217,10\n51000007,11\n73009931.0,12\n"  # 73009931.0: the CRM's 73009931
ACCOUNTS = [
    {"customer_id": 51000007, "city": "Leeds"},
    {"customer_id": 73004217, "city": "Oxford"},
    {"customer_id": 73009931, "city": "Bath"},
]
MARKETING = (
    f'{{"email_sha":"{ALICE_SHA.upper()}","segment":"a"}}\n'
    f'{{"email_sha":"{hashlib.sha256(b"bob@example.com").hexdigest()}","segment":"b"}}\n'
    f'{{"email_sha":"{ALICE_SHA}","segment":"c"}}\n'
).encode()
PEOPLE = b"fname,lname,dob,note\nAlice,Liddell,1852-05-04,x\nBob,Builder,1990-01-01,y\n ALICE ,LIDDELL,1852-05-04,z\n"
PEOPLE_BEFORE = b"fname,lname,dob,note\nBob,Builder,1990-01-01,y\n"  # a version without her: kept as it is
ORDERS = (
    b'{"email":"Alice@Example.com","customer":73004217,"first":"Alice","last":"Liddell","dob":"1852-05-04","n":1}\n'
    b'{"email":"bob@example.com","customer":51000007,"first":"Bob","last":"Builder","dob":"1990-01-01","n":2}\n'
)
EVENTS = b'{"user":"Alice@Example.COM","ev":1}\n{"user":"bob","ev":2}\n'  # untyped: a string, not her email
# The CRM: her email in another spelling beside her second customer id, bob, and the address every QA account has.
CRM = [("ALICE@example.com ", "73009931"), ("bob@example.com", "51000007")] + [
    ("test@example.com", str(60000000 + n)) for n in range(500)
]
# Every raw identifier of hers, as grepped (case-insensitively) in logs, output, reports and certificate.
RAW = ("alice", "liddell", "1852-05-04", "73004217", "73009931", ALICE_SHA)
# Her lines in each current object (a CSV's line 0 is its header; Parquet: row numbers).
HERS = {
    "signups/a.jsonl": [0, 2],
    "purchases/a.csv": [1, 3],
    "accounts/a.parquet": [1, 2],
    "marketing/a.jsonl": [0, 2],
    "people/a.csv": [1, 3],
    "shop_orders/a.jsonl": [0],
}


# Every object version, in the order written: signups and people twice (the first version of signups holds her, that
# of people does not). Without versioning, the last of each key is what the bucket holds.
OBJECTS = [
    ("signups/a.jsonl", SIGNUPS_BEFORE),
    ("signups/a.jsonl", SIGNUPS),
    ("people/a.csv", PEOPLE_BEFORE),
    ("people/a.csv", PEOPLE),
    ("purchases/a.csv", PURCHASES),
    ("accounts/a.parquet", parquet_of(ACCOUNTS)),
    ("marketing/a.jsonl", MARKETING),
    ("shop_orders/a.jsonl", ORDERS),
    ("web_events/a.jsonl", EVENTS),
]


def crm_link(pg_dsn: str) -> str:
    """The CRM table created afresh in the test PostgreSQL; returns the [[identifier_links]] table naming it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_accounts")
        conn.execute("CREATE TABLE crm_accounts (email_address text, cust_id text)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO crm_accounts VALUES (%s, %s)", CRM)
    return (
        f'\n[[identifier_links]]\nname = "crm"\ndsn = "{pg_dsn}"\ntable = "crm_accounts"\n'
        'columns = { email = "email_address", customer_id = "cust_id" }\n'
    )


def without_her(key: str, body: bytes) -> bytes:
    """The object as it must be after the purge: her lines replaced by the format's empty record, every other byte
    as it was (Parquet: her rows gone, the others' values as they were)."""
    if key.endswith(".parquet"):
        return parquet_of([row for n, row in enumerate(rows_of(body)) if n not in HERS[key]])
    lines = body.split(b"\n")
    empty = b"{}" if key.endswith(".jsonl") else b"," * lines[0].count(b",")
    return b"\n".join(empty if n in HERS.get(key, ()) else line for n, line in enumerate(lines))


def raw_in(text: str) -> list[str]:
    return [raw for raw in RAW if raw.casefold() in text.casefold()]
