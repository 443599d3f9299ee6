"""Index backends behind one interface (:class:`IndexStore`)."""

from __future__ import annotations

import json

from lakepurge.core.config import IndexConfig, RelationalConfig
from lakepurge.index.base import IndexStore

_RDS_FIELDS = {"host": "host", "port": "port", "dbname": "dbname", "username": "user", "password": "password"}


def postgres_dsn(config: IndexConfig) -> str:
    """The PostgreSQL DSN: index.dsn, or the secret index.dsn_secret names (:func:`secret_dsn`)."""
    if config.dsn_secret is None:
        assert config.dsn is not None
        return config.dsn
    return secret_dsn(config.dsn_secret)


def relational_dsn(table: RelationalConfig, deleting: bool) -> str:
    """The DSN of a [[relational]] table: for deleting its rows, its dsn or dsn_secret; for reading them (the
    report's count, the access export), its read_dsn_secret when set. Secrets are read at run time."""
    if not deleting and table.read_dsn_secret is not None:
        return secret_dsn(table.read_dsn_secret)
    if table.dsn_secret is not None:
        return secret_dsn(table.dsn_secret)
    assert table.dsn is not None
    return table.dsn


def secret_dsn(secret: str) -> str:
    """The DSN a Secrets Manager secret holds, read through the Powertools cache (a rotated password is used by
    connections opened within aws.SECRET_MAX_AGE_SECONDS of the rotation).

    The secret's SecretString is one of: the DSN itself (``postgresql://...`` or ``host=... password=...``); a JSON
    object with a ``"dsn"`` key; or the JSON object of an RDS-managed secret (``username``, ``password``,
    ``host``, ``port``, ``dbname``), which Secrets Manager can rotate on its own."""
    from lakepurge.core import aws

    text = aws.secret_string(secret)
    if not text.lstrip().startswith("{"):
        return text
    try:
        document = json.loads(text)
    except ValueError:
        raise aws.SecretUnavailable(f"secret {secret}: not a DSN and not valid JSON") from None
    if isinstance(document, dict) and isinstance(document.get("dsn"), str) and document["dsn"]:
        return str(document["dsn"])
    if isinstance(document, dict) and {"host", "username", "password"} <= document.keys():
        from psycopg.conninfo import make_conninfo

        fields = {_RDS_FIELDS[k]: str(v) for k, v in document.items() if k in _RDS_FIELDS and v not in (None, "")}
        return make_conninfo(**fields)
    raise aws.SecretUnavailable(
        f'secret {secret}: JSON without a "dsn" key (or username, password and host of an RDS secret)'
    )


def open_store(config: IndexConfig, create: bool = True) -> IndexStore:
    """The configured backend, with its schema/table created on first use (create=False: as it is, unchecked; what
    executors use once their driver opened it)."""
    store: IndexStore
    if config.backend == "postgres":
        from lakepurge.index.postgres import PostgresIndexStore

        store = PostgresIndexStore(postgres_dsn(config))
    else:
        from lakepurge.index.dynamodb import DynamoIndexStore

        assert config.table is not None
        store = DynamoIndexStore(config.table)
    if create:
        store.ensure_schema()
    return store


def open_existing(config: IndexConfig) -> IndexStore:
    """The configured backend for a command that only reads the index (lookup, status, a report, the operations
    view): nothing is created, and an index never built is IndexMissing (naming what is missing), never an empty
    table made by a typo in [index] or a permission error of a read-only role."""
    store = open_store(config, create=False)
    try:
        store.check_schema()
    except BaseException:
        store.close()
        raise
    return store
