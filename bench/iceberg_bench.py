"""Iceberg benchmark: lakepurge's index-located erasure against pyiceberg's own delete(filter) + snapshot expiry, on
the same table.

Run from the repository root (`pip install -e '.[bench]'` first)::

    .venv/bin/python bench/iceberg_bench.py            # 200 files, 1,000,000 rows, 200,000 users
    .venv/bin/python bench/iceberg_bench.py --quick    # 40 files, 40,000 rows: a smoke test

One moto S3 server in its own process behind the byte-counting WSGI layer of bench/delta_bench.py (the bytes read:
response bodies of boto3's, pyiceberg's and DuckDB's requests alike; the bytes written are the sizes of the object
versions a run created, since pyarrow's S3 uploads are chunked and carry no Content-Length), one throwaway
PostgreSQL holding both the index and the SQL catalog (``postgresql+psycopg2://``). Iceberg files hold absolute
paths, so a table cannot be copied: each contender and user set gets its own table, written the same way from the
same seed (not timed): 10 daily loads with pyiceberg, each an append of 100,000 rows over 20 day partitions (200
files, 1,000,000 rows, users at random, ~5 rows each), the id column's bounds on (Iceberg's default).
For 1 user, 100 users and 1% of the users:

- lakepurge: the table indexed (reconcile, not timed), then `lakepurge purge --users-file F --yes --force --engine
  inline` in-process: the report (the index follows the table, every metadata object is read for the users), the
  rewrite of the files the index names, one commit (a new snapshot, its manifests without id bounds, the snapshots
  reaching the users expired), the deletion of every file only those snapshots reached and of every version naming
  the users, and the verification (DuckDB's iceberg reader on what changed, the location listed and read where not
  proven);
- pyiceberg: ``table.delete(In("user_id", users))`` then ``maintenance.expire_snapshots().older_than(now)``: the way
  pyiceberg erases, which leaves every file the expired snapshots held on storage (pyiceberg has no orphan-file
  removal), the users in the manifests' bounds of the files it keeps, and verifies nothing.

Wall time and bytes read/written through S3 for each, and the ratios. It measures; it asserts only that each
contender's current snapshot no longer holds the users (DuckDB), and counts the objects still naming them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.delta_bench import LAYOUTS, file_users, reset_index, start_moto, timed_purge, traffic, user  # noqa: E402

BUCKET = "bench-lake"
HASH_KEY = "iceberg-bench-hash-key-0123456789abcdef"
NAMESPACE = "bench"
LOADS = 10  # appends; each spreads its rows over DAYS partitions: LOADS x DAYS files
DAYS = 20


def catalog_config(dsn: str) -> Any:
    from lakepurge.core.config import CatalogConfig

    uri = dsn.replace("postgresql://", "postgresql+psycopg2://")
    return CatalogConfig(type="sql", uri=uri, warehouse=f"s3://{BUCKET}/warehouse")


def write_table(
    catalog: Any, name: str, files: int, rows_per_file: int, users: int, layout: str = "scattered", seed: int = 7
) -> None:
    """`files` files in LOADS appends (DAYS partitions each), the same rows for the same seed and layout
    (delta_bench.file_users: scattered or clustered)."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "user_id", StringType(), required=False),
        NestedField(2, "event_id", LongType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
        NestedField(4, "note", StringType(), required=False),
        NestedField(5, "day", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(5, 1000, IdentityTransform(), "day"))
    table = catalog.create_table(f"{NAMESPACE}.{name}", schema, partition_spec=spec, location=table_uri(name))
    rng = random.Random(seed)
    days = min(DAYS, files)
    loads = max(files // days, 1)
    per_file = file_users(layout, loads * days, rows_per_file, users, rng)
    event = 0
    for load in range(loads):
        count = rows_per_file * days
        ids = [u for d in range(days) for u in per_file[load * days + d]]
        batch = pa.table(
            {
                "user_id": pa.array(ids, pa.string()),
                "event_id": pa.array(range(event, event + count), pa.int64()),
                "amount": pa.array([rng.random() * 100 for _ in ids], pa.float64()),
                "note": pa.array([f"note {rng.randrange(1_000_000):06d} of event" for _ in ids], pa.string()),
                "day": pa.array([f"2026-11-{1 + i // rows_per_file:02d}" for i in range(count)], pa.string()),
            }
        )
        event += count
        table.append(batch)


def table_uri(name: str) -> str:
    return f"s3://{BUCKET}/tables/{name}"


def config(tmp: Path, dsn: str, name: str) -> Path:
    from tests.support.iceberg import catalog_toml

    path = tmp / f"{name}.toml"
    path.write_text(
        f'[index]\nbackend = "postgres"\ndsn = "{dsn}"\n\n[reports]\nlocation = "s3://{BUCKET}-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n"
        f'[[datasets]]\nname = "events"\nformat = "iceberg"\ntable = "{NAMESPACE}.{name}"\ncatalog = "lakecat"\n'
        'id_fields = ["user_id"]\n\n' + catalog_toml(catalog_config(dsn))
    )
    return path


def stored(s3: Any) -> dict[tuple[str, str, str, str], int]:
    """Every object version of the bench's buckets: (bucket, key, version, ETag) -> size."""
    found = {}
    for bucket in (BUCKET, f"{BUCKET}-reports"):
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for version in page.get("Versions", []):
                found[bucket, version["Key"], version["VersionId"], version["ETag"]] = version["Size"]
    return found


def measured(s3: Any, endpoint: str, before: tuple[dict[str, int], dict[Any, int]]) -> dict[str, int]:
    """Bytes read (response bodies) and written (object versions created) since `before` was taken."""
    counted, versions = traffic(endpoint), stored(s3)
    return {
        "read": counted["read"] - before[0]["read"],
        "written": sum(size for version, size in versions.items() if version not in before[1]),
    }


def run_lakepurge(tmp: Path, dsn: str, endpoint: str, name: str, users: list[str]) -> dict[str, Any]:
    from lakepurge.cli import main

    reset_index(dsn)
    path = config(tmp, dsn, name)
    started = time.perf_counter()
    assert main(["index", "reconcile", "--config", str(path)]) == 0
    indexed = time.perf_counter() - started
    s3 = aws_client()
    before = (traffic(endpoint), stored(s3))
    code, document, wall = timed_purge(tmp, path, users, "ICEBERG_BENCH_PROFILE")
    table = document["tables"][0]
    return {
        "wall": wall,
        **measured(s3, endpoint, before),
        "exit": code,
        "verified": document["verified"],
        "rows_erased": table["rows_erased"],
        "files_replaced": len(table["files_replaced"]),
        "snapshots_expired": len(table["versions_cut"]),
        "index_seconds": indexed,
    }


def run_pyiceberg(catalog: Any, endpoint: str, name: str, users: list[str]) -> dict[str, Any]:
    from pyiceberg.expressions import In

    rows = catalog.load_table(f"{NAMESPACE}.{name}").scan().count()  # not timed
    s3 = aws_client()
    before = (traffic(endpoint), stored(s3))
    started = time.perf_counter()
    table = catalog.load_table(f"{NAMESPACE}.{name}")
    table.delete(In("user_id", users))
    table = catalog.load_table(f"{NAMESPACE}.{name}")
    table.maintenance.expire_snapshots().older_than(datetime.datetime.now(datetime.UTC)).commit()
    wall = time.perf_counter() - started
    left = catalog.load_table(f"{NAMESPACE}.{name}").scan().count()
    return {
        "wall": wall,
        **measured(s3, endpoint, before),
        "rows_erased": rows - left,
    }


def still_holding(catalog: Any, name: str, users: list[str]) -> int:
    from lakepurge.tables.storage import duckdb_with

    pointer = catalog.load_table(f"{NAMESPACE}.{name}").metadata_location
    connection = duckdb_with("iceberg")
    try:
        listed = ", ".join(f"'{u}'" for u in users)
        query = f"SELECT count(*) FROM iceberg_scan('{pointer}') WHERE user_id IN ({listed})"
        found: int = connection.execute(query).fetchone()[0]
    finally:
        connection.close()
    return found


def objects_naming(s3: Any, name: str, users: list[str]) -> int:
    """Object versions under the table's location whose bytes (Parquet decoded, Avro decompressed by DuckDB) hold
    one of the users or the first 16 characters of one (a manifest's bound): not timed."""
    from lakepurge.tables.storage import duckdb_with

    needles = [u.encode() for u in users] + [u[:16].encode() for u in users]
    connection = duckdb_with("iceberg")
    found = 0
    try:
        prefix = f"tables/{name}/"
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=BUCKET, Prefix=prefix):
            for version in page.get("Versions", []):
                key = version["Key"]
                if key.endswith(".parquet"):
                    uri = f"s3://{BUCKET}/{key}"
                    query = f"SELECT count(*) FROM read_parquet('{uri}') WHERE user_id IN ({_listed(users)})"
                    try:
                        found += connection.execute(query).fetchone()[0] > 0
                    except Exception:
                        continue  # a delete file without a user_id column
                elif key.endswith(".avro"):
                    text = str(connection.execute(f"SELECT * FROM read_avro('s3://{BUCKET}/{key}')").fetchall())
                    found += any(n.decode() in text for n in needles)
                else:
                    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    found += any(n in body for n in needles)
    finally:
        connection.close()
    return found


def aws_client() -> Any:
    from lakepurge.core import aws

    return aws.client("s3")


def _listed(users: list[str]) -> str:
    return ", ".join(f"'{u}'" for u in users)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 files of 1,000 rows (a smoke test)")
    parser.add_argument("--files", type=int, help="files instead of 200 (a multiple of 20)")
    parser.add_argument("--rows", type=int, help="rows per file instead of 5,000")
    parser.add_argument("--users", type=int, help="distinct users instead of 200,000")
    parser.add_argument("--only", action="append", default=[], help="only this user set (1, 100, 1%%)")
    parser.add_argument("--layout", choices=[*LAYOUTS, "both"], default="both", help="the table's layout (both)")
    args = parser.parse_args()
    files, rows, users = (40, 1_000, 10_000) if args.quick else (200, 5_000, 200_000)
    files, rows, users = args.files or files, args.rows or rows, args.users or users
    os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
    moto, endpoint = start_moto()
    from lakepurge.core import aws
    from lakepurge.core.table_catalogs import pyiceberg_catalog
    from lakepurge.local.postgres import start_postgres

    postgres = start_postgres()
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=f"{BUCKET}-reports")
    catalog = pyiceberg_catalog("lakecat", catalog_config(postgres.dsn))
    catalog.create_namespace_if_not_exists(NAMESPACE)
    tmp = Path(tempfile.mkdtemp(prefix="lakepurge-iceberg-bench-"))
    try:
        sets = {"1 user": 1, "100 users": 100, "1% of users": users // 100}
        short = {"1 user": "1", "100 users": "100", "1% of users": "1%"}
        sets = {label: n for label, n in sets.items() if not args.only or short[label] in args.only}
        results = []
        for layout in LAYOUTS if args.layout == "both" else (args.layout,):
            rng = random.Random(3)
            for label, count in sets.items():
                chosen = [user(n) for n in rng.sample(range(users), count)]
                mine, theirs = f"lp{len(results)}", f"pi{len(results)}"
                started = time.perf_counter()
                write_table(catalog, mine, files, rows, users, layout)
                write_table(catalog, theirs, files, rows, users, layout)
                print(
                    f"{layout} tables: 2 x {files} files, {files * rows:,} rows ({time.perf_counter() - started:.0f} s)"
                )
                ours = run_lakepurge(tmp, postgres.dsn, endpoint, mine, chosen)
                iceberg = run_pyiceberg(catalog, endpoint, theirs, chosen)
                assert still_holding(catalog, mine, chosen) == 0 and still_holding(catalog, theirs, chosen) == 0
                ours["objects_naming_users"] = objects_naming(s3, mine, chosen)
                iceberg["objects_naming_users"] = objects_naming(s3, theirs, chosen)
                results.append((f"{layout} {label}", ours, iceberg))
                print(f"{layout} {label}: lakepurge {ours}  pyiceberg {iceberg}", flush=True)
        print()
        print(
            f"{'users':<24}{'files':>6}{'lakepurge s':>12}{'read MB':>9}{'written MB':>11}{'left':>6}"
            f"{'pyiceberg s':>13}{'read MB':>9}{'written MB':>11}{'left':>6}{'speed-up':>10}  verified"
        )
        for label, ours, iceberg in results:
            print(
                f"{label:<24}{ours['files_replaced']:>6}{ours['wall']:>12.2f}{ours['read'] / 1e6:>9.1f}"
                f"{ours['written'] / 1e6:>11.1f}"
                f"{ours['objects_naming_users']:>6}{iceberg['wall']:>13.2f}{iceberg['read'] / 1e6:>9.1f}"
                f"{iceberg['written'] / 1e6:>11.1f}{iceberg['objects_naming_users']:>6}"
                f"{iceberg['wall'] / ours['wall']:>9.1f}x  {ours['verified']}"
            )
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "iceberg_bench.json").write_text(
            json.dumps({"files": files, "rows": files * rows, "users": users, "results": results}, indent=2)
        )
    finally:
        postgres.stop()
        moto.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
