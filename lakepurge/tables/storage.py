"""Reaching S3 from the libraries that do not read boto3's settings: deltalake (object_store) and DuckDB (httpfs).

boto3 resolves the endpoint (AWS_ENDPOINT_URL, or AWS_ENDPOINT_URL_S3), the region and the credentials the usual
way; what it resolved is handed on here, so the same configuration reaches AWS, a moto server or any
S3-compatible endpoint. A plain-HTTP endpoint is allowed (AWS_ALLOW_HTTP) only when boto3's endpoint is one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import boto3

from lakepurge.core import aws

MISSING_LIBRARY = (
    "erasing from a Delta or Iceberg table needs deltalake or pyiceberg and DuckDB's delta or iceberg extension"
    " (pip install 'lakepurge[tables]'); the packaged Spark environment has them, the Lambda layer does not: a report"
    " naming a table is purged on Spark"
)


@dataclass(frozen=True)
class S3Access:
    endpoint_url: str | None
    region: str
    key_id: str | None
    secret: str | None
    token: str | None

    @classmethod
    def resolved(cls) -> S3Access:
        client = aws.client("s3")
        endpoint = client.meta.endpoint_url
        default = urlsplit(endpoint).hostname or ""
        custom = endpoint if not default.endswith("amazonaws.com") else None
        credentials = boto3.session.Session().get_credentials()
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
        return cls(
            endpoint_url=custom,
            region=client.meta.region_name or "us-east-1",
            key_id=frozen.access_key if frozen else None,
            secret=frozen.secret_key if frozen else None,
            token=frozen.token if frozen else None,
        )

    def object_store_options(self) -> dict[str, str]:
        """deltalake's storage_options. Commits are conditional writes (If-None-Match: a concurrent writer's commit
        of the same version makes ours fail and retry), which S3 and moto both honour: no lock table, no unsafe
        rename."""
        options = {"AWS_REGION": self.region, "AWS_CONDITIONAL_PUT": "etag"}
        if self.endpoint_url:
            options["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
        if self.key_id and self.secret:
            options |= {"AWS_ACCESS_KEY_ID": self.key_id, "AWS_SECRET_ACCESS_KEY": self.secret}
            if self.token:
                options["AWS_SESSION_TOKEN"] = self.token
        return options

    def duckdb_secret(self) -> str:
        """CREATE SECRET for DuckDB's httpfs (path-style addressing and plain HTTP for a local endpoint)."""
        parts = ["TYPE s3", f"REGION {_quoted(self.region)}"]
        if self.key_id and self.secret:
            parts += [f"KEY_ID {_quoted(self.key_id)}", f"SECRET {_quoted(self.secret)}"]
            if self.token:
                parts.append(f"SESSION_TOKEN {_quoted(self.token)}")
        if self.endpoint_url:
            split = urlsplit(self.endpoint_url)
            parts += [f"ENDPOINT {_quoted(split.netloc)}", "URL_STYLE 'path'"]
            parts.append(f"USE_SSL {'true' if split.scheme == 'https' else 'false'}")
        return f"CREATE OR REPLACE SECRET lakepurge_s3 ({', '.join(parts)})"


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_with_delta() -> Any:
    """A DuckDB connection with the httpfs and delta extensions loaded from their PyPI wheels (no download at run
    time) and the resolved S3 access as its secret."""
    return duckdb_with("delta")


_DATABASES: dict[str, Any] = {}  # table format -> this process's DuckDB with its extensions loaded
_LOADING = threading.Lock()


def duckdb_with(table_format: str) -> Any:
    """A DuckDB connection (a cursor of this process's database for the format: the extensions load once, ~0.5 s)
    with httpfs and a table format's extension (delta; iceberg, which reads manifests with the avro extension) loaded
    from their PyPI wheels, and the S3 access resolved now as its secret. Close it after use."""
    with _LOADING:
        database = _DATABASES.get(table_format)
        if database is None:
            database = _DATABASES[table_format] = _loaded(table_format)
    connection = database.cursor()
    connection.execute(S3Access.resolved().duckdb_secret())
    return connection


def _loaded(table_format: str) -> Any:
    import glob
    import importlib
    import os

    try:
        import duckdb
    except ImportError as exc:
        raise ImportError(MISSING_LIBRARY) from exc
    connection = duckdb.connect()
    for name in ("httpfs", *(("avro",) if table_format == "iceberg" else ()), table_format):
        try:
            module = importlib.import_module(f"duckdb_extension_{name}")
        except ImportError as exc:
            raise ImportError(MISSING_LIBRARY) from exc
        found = glob.glob(os.path.join(os.path.dirname(module.__file__ or ""), "extensions", "*", "*.duckdb_extension"))
        if not found:
            raise ImportError(f"duckdb-extension-{name} holds no extension file: {MISSING_LIBRARY}")
        connection.execute(f"LOAD {_quoted(found[0])}")
    return connection
