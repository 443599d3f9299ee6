"""A Hive metastore read over Thrift (``thrift://host:9083``): a database's tables and a table's partitions, in the
shape of the Glue Data Catalog's GetTables and GetPartitions answers, so that one mapping
(lakepurge.indexing.catalog) serves both catalogs.

The client is Apache Thrift's Python library with the metastore bindings pyiceberg ships for its own Hive catalog
(the ``hive_metastore`` package, generated from Hive's ``hive_metastore.thrift``): the ``hive`` extra. Only calls
that every metastore from Hive 2.3 on answers are made, over a plain socket (no Kerberos/SASL), and only to read.
Partitions are fetched in batches, by name, as Hive's own clients do: a table may have hundreds of thousands.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

DEFAULT_PORT = 9083
BATCH = 300  # partitions or tables per call: hive.metastore.batch.retrieve.max's default
TIMEOUT_S = 60.0


class MetastoreError(RuntimeError):
    """The metastore cannot be reached, or the client is not installed. The message names the URI, never data."""


class NoSuchDatabase(MetastoreError):
    pass


class BadUri(MetastoreError):
    pass


def parse_uris(uris: str) -> list[tuple[str, int]]:
    """(host, port) of each URI of a ``hive.metastore.uris`` value: comma-separated ``thrift://host[:port]``."""
    found = []
    for uri in (part.strip() for part in uris.split(",")):
        parts = urlsplit(uri)
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            port = 0
        if parts.scheme != "thrift" or not parts.hostname or not port or parts.path not in ("", "/"):
            raise BadUri(f"{uri or '(empty)'} is not a metastore URI: write thrift://host:9083")
        found.append((parts.hostname, port))
    return found


def _columns(fields: Any) -> list[dict[str, Any]]:
    return [{"Name": f.name, "Type": f.type} for f in fields or []]


def _storage(sd: Any) -> dict[str, Any]:
    """A Thrift StorageDescriptor as Glue's (the keys Glue leaves out when unset are left out)."""
    if sd is None:
        return {}
    storage: dict[str, Any] = {"Columns": _columns(sd.cols), "Compressed": bool(sd.compressed)}
    for key, value in (("Location", sd.location), ("InputFormat", sd.inputFormat), ("OutputFormat", sd.outputFormat)):
        if value:
            storage[key] = value
    if sd.serdeInfo is not None:
        serde: dict[str, Any] = {"Parameters": dict(sd.serdeInfo.parameters or {})}
        if sd.serdeInfo.serializationLib:
            serde["SerializationLibrary"] = sd.serdeInfo.serializationLib
        storage["SerdeInfo"] = serde
    return storage


def glue_table(table: Any) -> dict[str, Any]:
    """A Thrift Table as a Glue GetTables entry."""
    return {
        "Name": table.tableName,
        "DatabaseName": table.dbName,
        "TableType": table.tableType or "",
        "StorageDescriptor": _storage(table.sd),
        "PartitionKeys": _columns(table.partitionKeys),
        "Parameters": dict(table.parameters or {}),
    }


def glue_partition(partition: Any) -> dict[str, Any]:
    """A Thrift Partition as a Glue GetPartitions entry."""
    return {
        "Values": list(partition.values or []),
        "StorageDescriptor": _storage(partition.sd),
        "Parameters": dict(partition.parameters or {}),
    }


class HiveMetastore:
    """One connection to a metastore (the first of its URIs that answers); a context manager that closes it."""

    def __init__(self, uris: str, timeout_s: float = TIMEOUT_S) -> None:
        self.uris = uris
        self._addresses = parse_uris(uris)
        self._timeout_ms = int(timeout_s * 1000)
        self._transport: Any = None
        self._client: Any = None

    def __enter__(self) -> HiveMetastore:
        try:
            from hive_metastore.ThriftHiveMetastore import Client
            from thrift.protocol.TBinaryProtocol import TBinaryProtocol
            from thrift.transport import TSocket, TTransport
        except ImportError:
            raise MetastoreError(
                "the Hive metastore client is not installed: pip install 'lakepurge[hive]'"
                " (Apache Thrift and the metastore bindings pyiceberg ships)"
            ) from None
        failures = []
        for host, port in self._addresses:
            socket = TSocket.TSocket(host, port)
            socket.setTimeout(self._timeout_ms)
            transport = TTransport.TBufferedTransport(socket)
            try:
                transport.open()
            except TTransport.TTransportException as exc:
                failures.append(f"thrift://{host}:{port} ({type(exc).__name__})")
                continue
            self._transport = transport
            self._client = Client(TBinaryProtocol(transport))
            return self
        raise MetastoreError(f"cannot connect to the Hive metastore at {', '.join(failures)}")

    def __exit__(self, *exc: object) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = self._client = None

    def _call(self, method: str, *args: Any, missing: str | None = None) -> Any:
        """The client's ``method``; a metastore's refusal as MetastoreError (``missing``: the message of a
        NoSuchObjectException, raised as NoSuchDatabase)."""
        from hive_metastore.ttypes import NoSuchObjectException
        from thrift.Thrift import TException

        if self._client is None:
            raise MetastoreError("the metastore connection is not open (use HiveMetastore as a context manager)")
        try:
            return getattr(self._client, method)(*args)
        except NoSuchObjectException:
            if missing is not None:
                raise NoSuchDatabase(missing) from None
            raise MetastoreError(f"the Hive metastore at {self.uris} failed {method}: no such object") from None
        except TException as exc:
            # The metastore's own message (a MetaException's) names paths or classes at most, never records.
            detail = getattr(exc, "message", None) or type(exc).__name__
            raise MetastoreError(f"the Hive metastore at {self.uris} failed {method}: {detail}") from None

    def tables(self, database: str) -> list[dict[str, Any]]:
        """Every table of the database (views included), as Glue GetTables entries sorted by name."""
        self._call("get_database", database, missing=f"no database {database!r} in the Hive metastore at {self.uris}")
        names = sorted(self._call("get_all_tables", database))
        found: list[dict[str, Any]] = []
        for start in range(0, len(names), BATCH):
            found.extend(
                glue_table(t) for t in self._call("get_table_objects_by_name", database, names[start : start + BATCH])
            )
        return sorted(found, key=lambda t: str(t["Name"]))

    def partitions(self, database: str, table: str) -> Iterator[Mapping[str, Any]]:
        """The table's partitions, as Glue GetPartitions entries (fetched BATCH at a time)."""
        names = self._call("get_partition_names", database, table, -1)
        for start in range(0, len(names), BATCH):
            for partition in self._call("get_partitions_by_names", database, table, names[start : start + BATCH]):
                yield glue_partition(partition)
