"""Where an Iceberg table is: its catalog's pointer to the table's current metadata file, and the table's location
as that file states it.

A SQL catalog (pyiceberg's ``iceberg_tables``: catalog_name, table_namespace, table_name, metadata_location) is read
with psycopg (``postgresql+psycopg2://`` and ``postgresql+psycopg://`` URLs alike) or sqlite3 (``sqlite:///``), and a
Glue table's ``metadata_location`` parameter with boto3: the Lambda functions, which have no pyiceberg or SQLAlchemy,
follow Iceberg tables too. A REST catalog (S3 Tables) is asked through pyiceberg (untested here). pyiceberg itself,
for the erasure's commit, gets the same catalog (``pyiceberg_catalog``) with the S3 endpoint, region and credentials
boto3 resolved: pyiceberg does not read AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import boto3

from lakepurge.core import aws
from lakepurge.core.config import CatalogConfig, ConfigError

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig

# (catalog, table) -> location, asked once per process: a table's location does not move under its name.
_LOCATIONS: dict[tuple[str, str], str] = {}


class CatalogError(ConfigError):
    """The catalog cannot be read, or does not hold the table: the message names the dataset and the catalog."""


def split_name(table: str) -> tuple[str, str]:
    """("namespace", "table") of "namespace.table" (a nested namespace keeps its dots)."""
    namespace, _, name = table.rpartition(".")
    return namespace, name


def metadata_location(dataset: DatasetConfig) -> str | None:
    """The table's current metadata file as its catalog records it (None: the catalog has no such table)."""
    assert dataset.table is not None and dataset.catalog is not None
    catalog = dataset.catalog_config
    try:
        if catalog.type == "sql":
            return _sql_pointer(catalog, dataset.catalog, dataset.table)
        if catalog.type == "glue":
            return _glue_pointer(dataset.table)
        return _rest_pointer(catalog, dataset.catalog, dataset.table)
    except CatalogError:
        raise
    except Exception as exc:  # a driver's or a client's error: its class, never a connection string
        raise CatalogError(
            f"dataset '{dataset.name}': catalog '{dataset.catalog}' ({catalog.type}) cannot be read:"
            f" {type(exc).__name__}"
        ) from exc


def table_location(dataset: DatasetConfig) -> str:
    """The table's location (s3://bucket/prefix/), from its current metadata file."""
    assert dataset.table is not None and dataset.catalog is not None
    cached = (json.dumps(dataset.catalog_config.model_dump(), sort_keys=True) + dataset.catalog, dataset.table)
    if cached not in _LOCATIONS:
        pointer = metadata_location(dataset)
        if pointer is None:
            raise CatalogError(f"dataset '{dataset.name}': catalog '{dataset.catalog}' has no table {dataset.table}")
        location = read_metadata(pointer).get("location")
        if not isinstance(location, str):
            raise CatalogError(f"dataset '{dataset.name}': the table's metadata file {pointer} states no location")
        _LOCATIONS[cached] = s3_path(location).rstrip("/") + "/"
    return _LOCATIONS[cached]


def s3_path(path: str) -> str:
    """An s3a:// or s3n:// path (Hadoop's names for S3) as s3://."""
    for scheme in ("s3a://", "s3n://"):
        if path.startswith(scheme):
            return "s3://" + path[len(scheme) :]
    return path


def read_metadata(pointer: str, version_id: str | None = None) -> dict[str, Any]:
    """A metadata.json (gzip-compressed ones too: ``.gz.metadata.json``, ``.metadata.json.gz``)."""
    path = s3_path(pointer)
    if not path.startswith("s3://"):
        raise CatalogError(f"the table's metadata file {pointer} is not on S3")
    bucket, key = path[5:].split("/", 1)
    pinned = {"VersionId": version_id} if version_id and version_id != "null" else {}
    body: bytes = aws.client("s3").get_object(Bucket=bucket, Key=key, **pinned)["Body"].read()
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    document: dict[str, Any] = json.loads(body)
    return document


def _sql_pointer(catalog: CatalogConfig, name: str, table: str) -> str | None:
    namespace, table_name = split_name(table)
    assert catalog.uri is not None
    url = urlsplit(catalog.uri)
    dialect = url.scheme.split("+", 1)[0]
    query = (
        "SELECT metadata_location FROM iceberg_tables"
        " WHERE catalog_name = {p} AND table_namespace = {p} AND table_name = {p}"
    )
    if dialect == "sqlite":
        path = catalog.uri.split(":///", 1)[1] if ":///" in catalog.uri else ""
        with sqlite3.connect(f"file:{path or ':memory:'}?mode=ro", uri=True) as connection:
            try:
                row = connection.execute(query.format(p="?"), (name, namespace, table_name)).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
    elif dialect in ("postgresql", "postgres"):
        row = _postgres_pointer(_conninfo(url), query.format(p="%s"), (name, namespace, table_name))
    else:
        raise CatalogError(
            f"catalog '{name}': a SQL catalog's uri must be postgresql+psycopg2://, postgresql+psycopg:// or sqlite:///"
        )
    return None if row is None else str(row[0])


# (process, connection string) -> a connection to a SQL catalog's PostgreSQL, kept for the process: a table is asked
# for its metadata file several times per request (a connection costs more than the query).
_CONNECTIONS: dict[tuple[int, str], Any] = {}
_CONNECTING = threading.Lock()


def _postgres_pointer(conninfo: str, query: str, parameters: tuple[str, str, str]) -> Any:
    import psycopg

    for attempt in range(2):
        with _CONNECTING:
            connection = _CONNECTIONS.get((os.getpid(), conninfo))
            if connection is None or connection.closed:
                connection = _CONNECTIONS[os.getpid(), conninfo] = psycopg.connect(conninfo, autocommit=True)
        try:
            if connection.execute("SELECT to_regclass('iceberg_tables')").fetchone() == (None,):
                return None
            return connection.execute(query, parameters).fetchone()
        except psycopg.OperationalError:
            connection.close()  # a restart or failover broke it: once more on a new connection
            if attempt:
                raise
    return None


def _conninfo(url: Any) -> str:
    """A SQLAlchemy PostgreSQL URL as a libpq connection string (the driver part of the scheme dropped)."""
    import psycopg.conninfo

    parts: dict[str, Any] = {"dbname": unquote(url.path.lstrip("/")) or None}
    if url.hostname:
        parts["host"] = url.hostname
    if url.port:
        parts["port"] = url.port
    if url.username:
        parts["user"] = unquote(url.username)
    if url.password:
        parts["password"] = unquote(url.password)
    parts |= dict(parse_qsl(url.query))
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in parts.items() if v is not None})


def _glue_pointer(table: str) -> str | None:
    database, name = split_name(table)
    glue = aws.client("glue")
    try:
        found = glue.get_table(DatabaseName=database, Name=name)["Table"]
    except glue.exceptions.EntityNotFoundException:
        return None
    parameters = found.get("Parameters") or {}
    if str(parameters.get("table_type", "")).upper() != "ICEBERG" or "metadata_location" not in parameters:
        raise CatalogError(f"Glue table {table} is not an Iceberg table (no table_type ICEBERG, metadata_location)")
    return str(parameters["metadata_location"])


def _rest_pointer(catalog: CatalogConfig, name: str, table: str) -> str | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return str(pyiceberg_catalog(name, catalog).load_table(table).metadata_location)
    except NoSuchTableError:
        return None


def pyiceberg_catalog(name: str, catalog: CatalogConfig) -> Any:
    """The catalog as pyiceberg loads it, reaching S3 (and Glue) where boto3 does."""
    from pyiceberg.catalog import load_catalog

    properties: dict[str, str] = {"type": catalog.type, **s3_properties()}
    if catalog.uri is not None:
        properties["uri"] = catalog.uri
    if catalog.warehouse is not None:
        properties["warehouse"] = catalog.warehouse
    if catalog.type == "glue":
        glue = aws.client("glue")
        properties["glue.region"] = glue.meta.region_name or "us-east-1"
        if not (urlsplit(glue.meta.endpoint_url).hostname or "").endswith("amazonaws.com"):
            properties["glue.endpoint"] = glue.meta.endpoint_url
    return load_catalog(name, **{**properties, **catalog.properties})


def s3_properties() -> dict[str, str]:
    """pyiceberg's FileIO settings from what boto3 resolved: endpoint (AWS_ENDPOINT_URL), region, credentials."""
    s3 = aws.client("s3")
    properties = {"s3.region": s3.meta.region_name or "us-east-1"}
    endpoint = s3.meta.endpoint_url
    if not (urlsplit(endpoint).hostname or "").endswith("amazonaws.com"):
        properties["s3.endpoint"] = endpoint
        properties["s3.force-virtual-addressing"] = "false"
    credentials = boto3.session.Session().get_credentials()
    if credentials is not None:
        frozen = credentials.get_frozen_credentials()
        properties["s3.access-key-id"] = frozen.access_key
        properties["s3.secret-access-key"] = frozen.secret_key
        if frozen.token:
            properties["s3.session-token"] = frozen.token
    return properties
