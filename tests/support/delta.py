"""Delta tables on the moto server, written with deltalake (delta-rs) as a data platform would write them: a small
partitioned table with a history (append, partition overwrite, a delete that leaves a predicate and change data,
the id column's statistics on), its configuration, and the readers a test checks the lake with."""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakepurge.core import aws
from lakepurge.tables.storage import S3Access, duckdb_with_delta
from tests.support import lakes

BUCKET = "lake"
ROOT = "curated/events/"
URI = f"s3://{BUCKET}/{ROOT.rstrip('/')}"


def storage_options() -> dict[str, str]:
    return S3Access.resolved().object_store_options()


def rows(users: Iterable[str], day: str, start: int = 0) -> pa.Table:
    users = list(users)
    return pa.table(
        {
            "user_id": users,
            "day": [day] * len(users),
            "amount": [start + i for i in range(len(users))],
            "note": [f"n{start + i}" for i in range(len(users))],
        }
    )


def write(table: pa.Table, mode: str = "append", **kwargs: Any) -> None:
    from deltalake import write_deltalake

    write_deltalake(URI, table, mode=mode, partition_by=["day"], storage_options=storage_options(), **kwargs)


def open_delta(version: int | None = None) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(URI, version=version, storage_options=storage_options())


@dataclass
class HistoryTable:
    """What the table with a history holds, by user."""

    current: set[str]  # users in the current version
    old_only: str  # a user only in an old version (removed by the partition overwrite, file not vacuumed)
    edge: str  # a user at the edge of a file's range: in the log's min/max statistics
    deleted: str  # a user deleted with deltalake's own DELETE: the predicate and change data hold them


def make_history_table(change_data: bool = True) -> HistoryTable:
    """v0: days d1, d2; v1: append d3; v2: overwrite d2 (so its old file, holding 'olga', stays on storage);
    v3: deltalake DELETE of 'dora' (the commit's predicate names her; with change data, _change_data/ holds her)."""
    configuration = {"delta.enableChangeDataFeed": "true"} if change_data else None
    write(
        pa.concat_tables(
            [
                rows(["alice@example.com", "bob@example.com", "dora@example.com"], "d1"),
                rows(["carol@example.com", "olga@example.com"], "d2", 10),
            ]
        ),
        mode="overwrite",
        configuration=configuration,
    )
    write(rows(["alice@example.com", "erin@example.com", "bob@example.com"], "d3", 20))
    write(rows(["carol@example.com", "frank@example.com"], "d2", 30), mode="overwrite", predicate="day = 'd2'")
    open_delta().delete("user_id = 'dora@example.com'")
    current = {"alice@example.com", "bob@example.com", "carol@example.com", "erin@example.com", "frank@example.com"}
    return HistoryTable(current, "olga@example.com", "alice@example.com", "dora@example.com")


def hide_with_deletion_vector(user: str) -> None:
    """A commit as Spark's DELETE writes it on a table with deletion vectors: the protocol raised to the
    deletionVectors feature and the file holding the user re-added with a vector (in a deletion_vector_<uuid>.bin
    file) that hides the user's rows. deltalake cannot write vectors, so this test writes the protocol's format."""
    s3 = aws.client("s3")
    table = open_delta()
    version = table.version()
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    for add in adds:
        body = s3.get_object(Bucket=BUCKET, Key=ROOT + add["path"])["Body"].read()
        ids = pq.read_table(io.BytesIO(body), columns=["user_id"])["user_id"].to_pylist()
        hidden = [row for row, value in enumerate(ids) if value == user]
        if hidden:
            break
    else:
        raise AssertionError("no live file holds the user")
    bitmap = _roaring_bitmap_array(hidden)
    name = uuid.uuid4()
    vector_file = b"\x01" + struct.pack(">i", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}deletion_vector_{name}.bin", Body=vector_file)
    vector = {
        "storageType": "u",
        "pathOrInlineDv": _z85(name.bytes),
        "offset": 1,
        "sizeInBytes": len(bitmap),
        "cardinality": len(hidden),
    }
    now = int(time.time() * 1000)
    partition = {"day": add["partition.day"]}
    kept = {"path": add["path"], "partitionValues": partition, "size": add["size_bytes"], "dataChange": True}
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE"}},
        {
            "protocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["appendOnly", "invariants", "deletionVectors"],
            }
        },
        {"remove": {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "partitionValues": partition}},
        {"add": kept | {"modificationTime": now, "deletionVector": vector}},
    ]
    commit = "".join(json.dumps(action) + "\n" for action in actions)
    s3.put_object(Bucket=BUCKET, Key=f"{ROOT}_delta_log/{version + 1:020d}.json", Body=commit.encode())


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _z85(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        number = int.from_bytes(data[i : i + 4], "big")
        out.append("".join(_Z85[number // 85**power % 85] for power in range(4, -1, -1)))
    return "".join(out)


def _roaring_bitmap_array(rows: list[int]) -> bytes:
    """Row positions below 65,536 as the protocol's RoaringBitmapArray: one 32-bit bitmap, one array container."""
    container = struct.pack("<II", 12346, 1) + struct.pack("<HH", 0, len(rows) - 1) + struct.pack("<I", 16)
    container += b"".join(struct.pack("<H", row) for row in sorted(rows))
    return struct.pack("<iqI", 1681511377, 1, 0) + container


def config_toml(index: str, reports_bucket: str = "lake-reports", extra: str = "") -> str:
    return f"""
[index]
{index}

[reports]
location = "s3://{reports_bucket}/"

[[datasets]]
name = "events"
location = "s3://{BUCKET}/{ROOT}"
format = "delta"
id_fields = ["user_id"]
{extra}
"""


def current_rows(version: int | None = None) -> list[dict[str, Any]]:
    """The table's rows as the second reader (DuckDB's delta extension) reads them, sorted."""
    connection = duckdb_with_delta()
    try:
        found = connection.execute(f"SELECT * FROM delta_scan('{URI}')").to_arrow_table()
    finally:
        connection.close()
    return sorted(found.to_pylist(), key=lambda r: (r["day"], r["user_id"], r["amount"]))


def every_version_bytes() -> dict[tuple[str, str], bytes]:
    """Every version of every object under the table's location: (key, version id) -> bytes."""
    return lakes.every_version_bytes(BUCKET, ROOT)


def holding(user: str) -> list[tuple[str, str]]:
    """The object versions under the location that name the user: in their raw bytes, or (Parquet, whose pages are
    compressed) in any decoded value."""
    found = []
    for (key, version), body in every_version_bytes().items():
        if user.encode() in body or (key.endswith(".parquet") and _parquet_holds(body, user)):
            found.append((key, version))
    return found


def _parquet_holds(body: bytes, user: str) -> bool:
    table = pq.read_table(io.BytesIO(body))
    return any(user in str(value) for column in table.columns for value in column.to_pylist())
