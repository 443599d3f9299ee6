"""[[relational]] dsn_secret: the DSN that may DELETE from a CRM table is read from Secrets Manager at run time,
not from the configuration every role reads; a read-only DSN (read_dsn_secret) serves the report's count."""

from __future__ import annotations

import tomllib

import boto3
import psycopg
import pytest

from lakepurge.core import aws as lakepurge_aws
from lakepurge.core.config import parse_settings
from lakepurge.ops.manual_purge import purge_users
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_keys

pytestmark = pytest.mark.integration

BUCKET = "crm-lake"


def test_given_the_relational_dsns_in_secrets_when_purging_then_rows_are_counted_and_deleted_through_them(
    aws, pg_dsn, monkeypatch
):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_contacts")
        conn.execute("CREATE TABLE crm_contacts (customer_id text, email text)")
        conn.execute("INSERT INTO crm_contacts VALUES ('alice', 'a@example.com'), ('bob', 'b@example.com')")
        conn.execute("DROP ROLE IF EXISTS crm_reader")
        conn.execute("CREATE ROLE crm_reader LOGIN")
        conn.execute("GRANT SELECT ON crm_contacts TO crm_reader")
    reader_dsn = psycopg.conninfo.make_conninfo(pg_dsn, user="crm_reader")
    secrets = boto3.client("secretsmanager")
    deleting = secrets.create_secret(Name="crm-delete-dsn", SecretString=pg_dsn)["ARN"]
    reading = secrets.create_secret(Name="crm-read-dsn", SecretString=f'{{"dsn": "{reader_dsn}"}}')["ARN"]
    lakepurge_aws.clear_secrets()
    s3 = lakepurge_aws.client("s3")
    for bucket in (BUCKET, f"{BUCKET}-reports"):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=BUCKET, Key="events/a.jsonl", Body=b'{"user_id": "alice"}\n{"user_id": "bob"}\n')
    toml = f"""
[index]
{index_toml("postgres", pg_dsn)}

[reports]
location = "s3://{BUCKET}-reports/"

[[datasets]]
name = "events"
location = "s3://{BUCKET}/events/"
id_fields = ["user_id"]

[[relational]]
name = "crm"
dsn_secret = "{deleting}"
read_dsn_secret = "{reading}"
table = "public.crm_contacts"
column = "customer_id"
"""
    settings = parse_settings(tomllib.loads(toml))
    index_keys(settings, BUCKET, ["events/a.jsonl"])

    run = purge_users(settings, ["alice"], dry_run=False, force=True, engine="inline", say=lambda _line: None)

    assert [(t.name, t.rows, t.total_rows) for t in run.report.relational] == [("crm", 1, 2)]
    assert run.result is not None and run.result.verified
    assert [(t["name"], t["rows_deleted"]) for t in run.result.relational] == [("crm", 1)]
    with psycopg.connect(pg_dsn) as conn:  # (the reader may not delete: the rows went through the other secret)
        assert conn.execute("SELECT customer_id FROM crm_contacts").fetchall() == [("bob",)]
