"""The vault in PostgreSQL: two tables named after ``[vault] table`` (default ``lakepurge_vault``):

- ``<table>_keys(person TEXT PRIMARY KEY, wrapped_key BYTEA, kms_key_id TEXT, pseudonym TEXT, created_at
  TIMESTAMPTZ)``: one row per person, by the keyed hash of their id;
- ``<table>_pseudonyms(pseudonym TEXT PRIMARY KEY, person TEXT)``: what a reader resolves a pseudonym through.

Destroying a person deletes both rows in one transaction, then VACUUMs the two tables: the deleted rows stop being
readable at the commit, and their space is reclaimed at once instead of at autovacuum's leisure. The bytes of a
deleted row stay in the database's storage until that space is reused and in the write-ahead log until it is
recycled: the database's backups, point-in-time recovery and WAL archive are the vault's copies, kept
``backup_retention_days`` (docs/OPERATIONS.md, *Crypto-shredding and the vault's backups*).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from lakepurge.protection.vault import KeyEntry, VaultCopies, VaultStore

F = TypeVar("F", bound=Callable[..., Any])


def _one_at_a_time(method: F) -> F:
    """The connection serves one statement or transaction at a time, whichever thread asks."""

    @wraps(method)
    def locked(self: PostgresVault, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


class PostgresVault(VaultStore):
    def __init__(self, dsn: str, table: str, backup_retention_days: int | None) -> None:
        self.name = table
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._keys = sql.Identifier(f"{table}_keys")
        self._pseudonyms = sql.Identifier(f"{table}_pseudonyms")
        self._by_person = sql.Identifier(f"{table}_pseudonyms_person")
        self._retention = backup_retention_days
        self._lock = threading.RLock()

    @_one_at_a_time
    def ensure_schema(self) -> None:
        with self._conn.transaction():
            self._conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (person TEXT PRIMARY KEY, wrapped_key BYTEA NOT NULL,"
                    " kms_key_id TEXT NOT NULL, pseudonym TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL)"
                ).format(self._keys)
            )
            self._conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} (pseudonym TEXT PRIMARY KEY, person TEXT NOT NULL)").format(
                    self._pseudonyms
                )
            )
            self._conn.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (person)").format(self._by_person, self._pseudonyms)
            )

    @_one_at_a_time
    def entries(self, persons: Sequence[str]) -> dict[str, KeyEntry]:
        if not persons:
            return {}
        rows = self._conn.execute(
            sql.SQL(
                "SELECT person, wrapped_key, kms_key_id, pseudonym, created_at FROM {} WHERE person = ANY(%s)"
            ).format(self._keys),
            (list(persons),),
        ).fetchall()
        return {
            row[0]: KeyEntry(row[0], bytes(row[1]), row[2], row[3], row[4].isoformat(timespec="seconds"))
            for row in rows
        }

    @_one_at_a_time
    def add(self, entries: Sequence[KeyEntry]) -> dict[str, KeyEntry]:
        if not entries:
            return {}
        columns = (
            [e.person for e in entries],
            [e.wrapped_key for e in entries],
            [e.kms_key_id for e in entries],
            [e.pseudonym for e in entries],
            [e.created_at for e in entries],
        )
        with self._conn.transaction():
            added = {
                row[0]
                for row in self._conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (person, wrapped_key, kms_key_id, pseudonym, created_at)"
                        " SELECT * FROM unnest(%s::text[], %s::bytea[], %s::text[], %s::text[], %s::timestamptz[])"
                        " ON CONFLICT (person) DO NOTHING RETURNING person"
                    ).format(self._keys),
                    columns,
                ).fetchall()
            }
            self._conn.execute(
                sql.SQL("INSERT INTO {} (pseudonym, person) SELECT * FROM unnest(%s::text[], %s::text[])").format(
                    self._pseudonyms
                ),
                ([e.pseudonym for e in entries if e.person in added], [e.person for e in entries if e.person in added]),
            )
        stored = {e.person: e for e in entries if e.person in added}
        return stored | self.entries([e.person for e in entries if e.person not in added])

    @_one_at_a_time
    def persons_of(self, pseudonyms: Sequence[str]) -> dict[str, str]:
        if not pseudonyms:
            return {}
        rows = self._conn.execute(
            sql.SQL("SELECT pseudonym, person FROM {} WHERE pseudonym = ANY(%s)").format(self._pseudonyms),
            (list(pseudonyms),),
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    @_one_at_a_time
    def destroy(self, persons: Sequence[str]) -> list[str]:
        with self._conn.transaction():
            self._conn.execute(
                sql.SQL("DELETE FROM {} WHERE person = ANY(%s)").format(self._pseudonyms), (list(persons),)
            )
            rows = self._conn.execute(
                sql.SQL("DELETE FROM {} WHERE person = ANY(%s) RETURNING person").format(self._keys), (list(persons),)
            ).fetchall()
        self._conn.execute(sql.SQL("VACUUM {}, {}").format(self._keys, self._pseudonyms))
        return [row[0] for row in rows]

    def copies(self) -> VaultCopies:
        # A DSN does not say where the database's backups are: their retention is what the configuration declares.
        return VaultCopies(
            recovery_days=self._retention,
            notes=("the database's backups, point-in-time recovery and WAL archive, as [vault] backup_retention_days",),
        )

    def close(self) -> None:
        self._conn.close()
