"""Index backends behind one interface (:class:`IndexStore`)."""

from __future__ import annotations

from lakepurge.config import IndexConfig
from lakepurge.index.base import IndexStore


def open_store(config: IndexConfig, create: bool = True) -> IndexStore:
    """The configured backend, with its schema/table created on first use."""
    store: IndexStore
    if config.backend == "postgres":
        from lakepurge.index.postgres import PostgresIndexStore

        assert config.dsn is not None
        store = PostgresIndexStore(config.dsn)
    else:
        from lakepurge.index.dynamodb import DynamoIndexStore

        assert config.table is not None
        store = DynamoIndexStore(config.table)
    if create:
        store.ensure_schema()
    return store
