"""A small lake with personal data to pseudonymise, its vault, and what a test needs to look inside the vault."""

from __future__ import annotations

import hashlib
import io
import random
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.protection.aead import PersonKey
from lakepurge.protection.vault import CONTEXT_KEY, KeyEntry, open_store

BUCKET = "lake"
PEOPLE = ["alice", "bob", "carol", "dave", *(f"person{n:02d}" for n in range(16))]


def person_id(name: str) -> str:
    """Each person's raw id: distinctive enough that finding it in bytes means it leaked."""
    return f"user-{name}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def vault_toml(backend: str, pg_dsn: str | None, kms_key_id: str, **more: int) -> str:
    settings = [f'backend = "{backend}"', f'kms_key_id = "{kms_key_id}"', "cache_seconds = 0"]
    if backend == "postgres":
        settings += [f'dsn = "{pg_dsn}"', 'table = "test_vault"', "backup_retention_days = 7"]
    else:
        settings += ['table = "lakepurge-vault-test"']
    settings += [f"{name} = {value}" for name, value in more.items()]
    return "[vault]\n" + "\n".join(settings) + "\n"


RAW_DATASETS = f"""
[[datasets]]
name = "reviews"
location = "s3://{BUCKET}/raw/reviews/"
id_fields = ["user_id"]

[[datasets]]
name = "orders"
location = "s3://{BUCKET}/raw/orders/"
id_fields = ["user_id"]

[[datasets]]
name = "profiles"
format = "parquet"
location = "s3://{BUCKET}/raw/profiles/"
id_fields = ["user_id"]
"""
ORDERS_PERSONAL = ("email", "name", "address")
PROFILES_PERSONAL = ("email", "birth_date")


@dataclass
class PersonalLake:
    """The sources as written, by dataset: each record (dicts) and the object it is in."""

    records: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)

    def of(self, dataset: str, person: str) -> list[dict[str, Any]]:
        return [r for _, r in self.records[dataset] if r["user_id"] == person_id(person)]

    def personal_values(self) -> set[str]:
        """Every raw id and personal value of the sources, as text."""
        values = set()
        for dataset, fields in (("orders", ORDERS_PERSONAL), ("profiles", PROFILES_PERSONAL)):
            for _, record in self.records[dataset]:
                values.add(record["user_id"])
                values.update(str(record[f]) for f in fields)
        return values


def write_sources(s3: Any, seed: int = 3) -> PersonalLake:
    """reviews (JSON Lines, stays raw), orders (JSON Lines) and profiles (Parquet) for every person."""
    chance = random.Random(seed)
    lake = PersonalLake({"reviews": [], "orders": [], "profiles": []})
    for part in range(3):
        lines, orders = [], []
        for name in PEOPLE:
            lines.append({"user_id": person_id(name), "stars": chance.randrange(1, 6), "text": "fine product"})
            order = {
                "user_id": person_id(name),
                "order_id": f"o-{part}-{len(orders)}",
                "email": f"{name}.mail@example.com",
                "name": f"{name.title()} Liddell-{part}",
                "address": {"street": f"{chance.randrange(1, 99)} Rabbit Hole", "city": "Oxford"},
                "amount": chance.randrange(5, 500),
                "zip": f"OX{chance.randrange(1, 4)}",
            }
            orders.append(order)
        for dataset, records in (("reviews", lines), ("orders", orders)):
            key = f"raw/{dataset}/part-{part}.jsonl"
            body = b"".join(orjson.dumps(r) + b"\n" for r in records)
            if part == 1 and dataset == "orders":
                body += b"{}\n"  # a line a purge blanked: passed through as it is
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            lake.records[dataset] += [(key, r) for r in records]
    for part in range(2):
        profiles = [
            {
                "user_id": person_id(name),
                "email": f"{name}.mail@example.com",
                "birth_date": date(1960 + n, 1 + n % 12, 1 + part),
                "city": chance.choice(["Oxford", "Leeds"]),
                "plan": chance.choice(["basic", "pro"]),
            }
            for n, name in enumerate(PEOPLE)
        ]
        out = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(profiles), out)
        key = f"raw/profiles/part-{part}.parquet"
        s3.put_object(Bucket=BUCKET, Key=key, Body=out.getvalue())
        lake.records["profiles"] += [(key, r) for r in profiles]
    return lake


def settings_with(toml: str) -> Settings:
    return parse_settings(tomllib.loads(toml))


def vault_entries(settings: Settings) -> list[KeyEntry]:
    """Every entry the vault's table holds, read past the vault's interface (a scan of the whole table)."""
    assert settings.vault is not None
    store = open_store(settings.vault, create=False)
    try:
        if settings.vault.backend == "postgres":
            rows = store._conn.execute(  # type: ignore[attr-defined]
                "SELECT person, wrapped_key, kms_key_id, pseudonym, created_at::text FROM test_vault_keys"
            ).fetchall()
            return [KeyEntry(r[0], bytes(r[1]), r[2], r[3], r[4]) for r in rows]
        items = aws.client("dynamodb").scan(TableName=settings.vault.table)["Items"]
        return [store._entry(i) for i in items if i["pk"]["S"].startswith("key#")]  # type: ignore[attr-defined]
    finally:
        store.close()


def every_key(settings: Settings) -> Iterator[tuple[KeyEntry, bytes]]:
    """Every key the deployment can produce from its vault: each entry unwrapped by KMS as its own person's."""
    kms = aws.client("kms")
    for entry in vault_entries(settings):
        plain = kms.decrypt(CiphertextBlob=entry.wrapped_key, EncryptionContext={CONTEXT_KEY: entry.person})
        yield entry, plain["Plaintext"]


def opens(material: bytes, field_name: str, token: str) -> bool:
    try:
        PersonKey(material).open(field_name, token)
    except ValueError:
        return False
    return True


def truncate_vault(pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "DO $$ BEGIN IF to_regclass('test_vault_keys') IS NOT NULL THEN"
            " TRUNCATE test_vault_keys, test_vault_pseudonyms; END IF; END $$"
        )
