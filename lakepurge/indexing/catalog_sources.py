"""Where lakepurge.indexing.catalog reads tables from: the AWS Glue Data Catalog and a Hive metastore, both answering
in the shape of Glue's GetTables and GetPartitions entries, so that one mapping serves both."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from lakepurge.core.hive_metastore import HiveMetastore, NoSuchDatabase


class CatalogError(RuntimeError):
    """The catalog cannot be read as asked (no such database). The message names the database, never data."""


class TableSource(Protocol):
    """A catalog's tables and partitions, as Glue's GetTables and GetPartitions entries."""

    catalog: str  # what the catalog is called in reports and entries ("Glue", "Hive metastore")
    iceberg_catalog: bool  # an Iceberg table found there can become a dataset (lakepurge reaches the catalog)

    def where(self, database: str) -> str: ...

    def tables(self, database: str) -> list[Mapping[str, Any]]:
        """Every table of the database (views included), sorted by name; CatalogError when there is no such
        database."""
        ...

    def partitions(self, database: str, table: str) -> Iterator[Mapping[str, Any]]: ...


class GlueTables:
    """The Glue Data Catalog, through a boto3 Glue client."""

    catalog = "Glue"
    iceberg_catalog = True  # a [catalogs.NAME] of type "glue"

    def __init__(self, glue: Any) -> None:
        self.glue = glue

    def where(self, database: str) -> str:
        return f"Glue database {database}"

    def tables(self, database: str) -> list[Mapping[str, Any]]:
        from botocore.exceptions import ClientError

        tables: list[Mapping[str, Any]] = []
        try:
            for page in self.glue.get_paginator("get_tables").paginate(DatabaseName=database):
                tables.extend(page.get("TableList", []))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
                raise CatalogError(f"no Glue database {database!r} in this account and region") from None
            raise
        return sorted(tables, key=lambda t: str(t["Name"]))

    def partitions(self, database: str, table: str) -> Iterator[Mapping[str, Any]]:
        for page in self.glue.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table):
            yield from page.get("Partitions", [])


class HiveTables:
    """A Hive metastore, through an open lakepurge.core.hive_metastore.HiveMetastore."""

    catalog = "Hive metastore"
    iceberg_catalog = False  # lakepurge has no Iceberg catalog of type hive (docs/LIMITS.md)

    def __init__(self, metastore: HiveMetastore) -> None:
        self.metastore = metastore

    def where(self, database: str) -> str:
        return f"database {database} of the Hive metastore at {self.metastore.uris}"

    def tables(self, database: str) -> list[Mapping[str, Any]]:
        try:
            return list(self.metastore.tables(database))
        except NoSuchDatabase as exc:
            raise CatalogError(str(exc)) from None

    def partitions(self, database: str, table: str) -> Iterator[Mapping[str, Any]]:
        return self.metastore.partitions(database, table)
