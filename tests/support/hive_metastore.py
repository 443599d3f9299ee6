"""A real Hive Metastore 2.3 for tests: the pyspark wheel's own jars (hive-metastore, Thrift, DataNucleus, Derby),
an embedded Derby database created on first start, Thrift on a free port. Needs only Java.

S3 locations: the metastore resolves every table's and partition's location through Hadoop (and creates the
directory) before it records it, and the pyspark wheel has no S3 filesystem (no hadoop-aws): a plain metastore
refuses ``s3://`` with `No FileSystem for scheme "s3"` (and ``s3a://`` with S3AFileSystem not found). The smallest
honest way around it is Hadoop configuration, no code: ``fs.s3.impl`` and ``fs.s3a.impl`` name Hadoop's
ViewFileSystemOverloadScheme (in hadoop-client-api), which keeps the scheme, and each bucket's mount table
(``linkMergeSlash``) sends the metastore's own directory calls to a scratch folder. The metastore then records the
locations exactly as given (``s3://lake/events``), as one with S3A or EMRFS would; the data stays on the moto
server, where lakepurge reads it. Only the buckets the metastore was started with can be named.

Tables and partitions are created through the metastore's Thrift API as Hive's DDL or Spark would, with the client
lakepurge reads it with (pyiceberg's bindings, Apache Thrift).
"""

from __future__ import annotations

import copy
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

START_TIMEOUT_S = 300.0  # about a minute on two busy cores; a cold JVM and Derby's schema creation dominate
MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"

TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
PARQUET_INPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
HIVE_JSON_SERDE = "org.apache.hive.hcatalog.data.JsonSerDe"
OPEN_CSV_SERDE = "org.apache.hadoop.hive.serde2.OpenCSVSerde"
ORC_SERDE = "org.apache.hadoop.hive.ql.io.orc.OrcSerde"
ORC_INPUT = "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat"


class MetastoreDidNotStart(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _hive_site(root: Path, buckets: Sequence[str]) -> str:
    properties = {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={root / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": (root / "warehouse").as_uri(),
        # s3:// and s3a:// through Hadoop's scheme-keeping view filesystem onto a scratch folder per bucket
        "fs.s3.impl": "org.apache.hadoop.fs.viewfs.ViewFileSystemOverloadScheme",
        "fs.s3a.impl": "org.apache.hadoop.fs.viewfs.ViewFileSystemOverloadScheme",
    }
    for bucket in buckets:
        (root / "buckets" / bucket).mkdir(parents=True, exist_ok=True)
        properties[f"fs.viewfs.mounttable.{bucket}.linkMergeSlash"] = (root / "buckets" / bucket).as_uri()
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


@dataclass
class LocalMetastore:
    uri: str
    port: int
    root: Path
    process: subprocess.Popen[bytes]
    started_in_s: float

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    @contextmanager
    def client(self) -> Iterator[Any]:
        """The raw Thrift client, to create and change what the tests read (lakepurge only ever reads)."""
        from hive_metastore.ThriftHiveMetastore import Client
        from thrift.protocol.TBinaryProtocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", self.port))
        transport.open()
        try:
            yield Client(TBinaryProtocol(transport))
        finally:
            transport.close()


def start_metastore(buckets: Sequence[str]) -> LocalMetastore:
    """A metastore on a free port, answering Thrift calls, whose tables may be located in ``buckets``."""
    java = shutil.which("java")
    if java is None:
        raise MetastoreDidNotStart("java not found: install a JRE 17 (Debian: openjdk-17-jre-headless)")
    root = Path(tempfile.mkdtemp(prefix="lakepurge-hms-"))
    conf = root / "conf"
    conf.mkdir()
    (conf / "hive-site.xml").write_text(_hive_site(root, buckets), encoding="utf-8")
    port = _free_port()
    command = [
        java,
        "-Xmx512m",
        # the async logger's dependency (LMAX disruptor) is not among the jars
        "-Dlog4j2.contextSelector=org.apache.logging.log4j.core.selector.BasicContextSelector",
        f"-Dderby.system.home={root}",
        f"-Dhive.log.dir={root}",
        f"-Djava.io.tmpdir={root}",
        "-cp",
        f"{conf}:{_jars()}/*",
        MAIN_CLASS,
        "-p",
        str(port),
    ]
    log = (root / "metastore.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    metastore = LocalMetastore(f"thrift://127.0.0.1:{port}", port, root, process, 0.0)
    deadline = started + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = (root / "metastore.log").read_text(errors="replace")[-3000:]
            shutil.rmtree(root, ignore_errors=True)
            raise MetastoreDidNotStart(f"the metastore exited with {process.returncode}:\n{tail}")
        try:
            # the port first (Thrift logs every refused connection), then a call: the metastore answers
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            with metastore.client() as client:
                client.get_all_databases()
            break
        except Exception:
            if time.monotonic() > deadline:
                metastore.stop()
                raise MetastoreDidNotStart(f"the metastore did not answer within {START_TIMEOUT_S:.0f} s") from None
            time.sleep(0.5)
    metastore.started_in_s = time.monotonic() - started
    return metastore


# --- tables as Hive's DDL leaves them ------------------------------------------------------------------------


def columns(spec: Mapping[str, str]) -> list[Any]:
    from hive_metastore.ttypes import FieldSchema

    return [FieldSchema(name, kind, None) for name, kind in spec.items()]


def storage(
    location: str,
    serde: str,
    cols: Mapping[str, str],
    input_format: str = TEXT_INPUT,
    output_format: str = TEXT_OUTPUT,
    serde_parameters: Mapping[str, str] | None = None,
) -> Any:
    from hive_metastore.ttypes import SerDeInfo, StorageDescriptor

    return StorageDescriptor(
        cols=columns(cols),
        location=location,
        inputFormat=input_format,
        outputFormat=output_format,
        compressed=False,
        numBuckets=-1,
        serdeInfo=SerDeInfo(serializationLib=serde, parameters=dict(serde_parameters or {"serialization.format": "1"})),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )


def external_table(
    database: str,
    name: str,
    sd: Any,
    partition_keys: Sequence[str] = (),
    parameters: Mapping[str, str] | None = None,
    table_type: str = "EXTERNAL_TABLE",
) -> Any:
    """A table as `CREATE EXTERNAL TABLE ... PARTITIONED BY (k string) ... LOCATION '...'` records it."""
    from hive_metastore.ttypes import Table

    return Table(
        tableName=name,
        dbName=database,
        owner="lakepurge-tests",
        createTime=int(time.time()),
        lastAccessTime=0,
        retention=0,
        sd=sd,
        partitionKeys=columns(dict.fromkeys(partition_keys, "string")),
        parameters={"EXTERNAL": "TRUE", **(parameters or {})}
        if table_type == "EXTERNAL_TABLE"
        else dict(parameters or {}),
        tableType=table_type,
    )


def add_partitions(client: Any, database: str, table: str, locations: Mapping[str, str]) -> None:
    """`ALTER TABLE t ADD PARTITION (k='v') LOCATION '...'` for each value -> location (one partition key): the
    table's storage with the partition's location."""
    from hive_metastore.ttypes import Partition

    found = client.get_table(database, table)
    partitions = []
    for value, location in locations.items():
        sd = copy.deepcopy(found.sd)
        sd.location = location
        partitions.append(
            Partition(values=[value], dbName=database, tableName=table, createTime=0, lastAccessTime=0, sd=sd)
        )
    client.add_partitions(partitions)


def create_database(client: Any, name: str, root: Path) -> None:
    from hive_metastore.ttypes import Database

    client.create_database(Database(name=name, description="", locationUri=(root / f"{name}.db").as_uri()))
