"""Delta Lake benchmark: lakepurge's index-located erasure against deltalake's own DELETE + VACUUM, on one table.

Run from the repository root (`pip install -e '.[bench]'` first)::

    .venv/bin/python bench/delta_bench.py            # 200 files, 1,000,000 rows, 200,000 users (~10 min)
    .venv/bin/python bench/delta_bench.py --quick    # 40 files, 40,000 rows: a smoke test (~2 min)

One moto S3 server in its own process (with a WSGI layer counting the bytes of every request and response, whoever
sends it: boto3, deltalake, DuckDB), one throwaway PostgreSQL index. The table is written once with deltalake (one
append per file, the id column's statistics on, partitioned by day, users spread at random over the files, a few
rows each) and copied to a fresh prefix (server-side copies, not timed) for every contender and user set, so each
run starts from the same table. For 1 user, 100 users and 1% of the users:

- lakepurge: the table indexed (reconcile, not timed), then `lakepurge purge --users-file F --yes --force`
  in-process: the report (the index follows the table, the log is read for the users), the rewrite of the files the
  index names, one commit, a checkpoint, the deletion of every object version naming the users (replaced files,
  log entries), and the verification (DuckDB's delta reader, the location listed and read where not proven);
- deltalake: `DeltaTable.delete("user_id IN (...)")` then `vacuum(retention_hours=0)`, the way the Databricks GDPR
  guide erases (which leaves the log's statistics and the predicate naming the users: not a complete erasure).

Wall time and bytes read/written through S3 for each, and the ratios. It measures; it asserts only that each
contender's current version no longer holds the users.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUCKET = "bench-lake"
HASH_KEY = "delta-bench-hash-key-0123456789abcdef"


class Counting:
    """WSGI middleware: bytes received (request bodies: writes) and sent (response bodies: reads)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.written = 0
        self.read = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == "/__bytes__":
            body = json.dumps({"read": self.read, "written": self.written}).encode()
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        self.written += int(environ.get("CONTENT_LENGTH") or 0)
        result = self.app(environ, start_response)
        out = []
        for chunk in result:
            self.read += len(chunk)
            out.append(chunk)
        return out


def _serve(port: int, ready: Any) -> None:
    import logging

    from moto.server import ThreadedMotoServer

    from bench.purge_bench import _patch_moto_list_object_versions

    # moto copies every version of the bucket on each ListObjectVersions (O(bucket), not O(prefix) as on S3): the
    # bench's bucket holds every contender's copy of the table, so lakepurge's listings would measure moto.
    _patch_moto_list_object_versions()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ["MOTO_PORT"] = str(port)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    server._server.app = Counting(server._server.app)  # the werkzeug server's WSGI app, wrapped
    ready.set()
    while True:
        time.sleep(3600)


def start_moto() -> tuple[Any, str]:
    from lakepurge.local.moto import DUMMY_CREDENTIALS
    from lakepurge.local.postgres import free_port

    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    port = free_port()
    process = context.Process(target=_serve, args=(port, ready), daemon=True)
    process.start()
    if not ready.wait(60):
        raise RuntimeError("moto did not start")
    os.environ.update(DUMMY_CREDENTIALS)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    return process, endpoint


def traffic(endpoint: str) -> dict[str, int]:
    import requests

    counted: dict[str, int] = requests.get(f"{endpoint}/__bytes__", timeout=10).json()
    return counted


def user(n: int) -> str:
    return f"user-{n:07d}@example.com"


LAYOUTS = ("scattered", "clustered")


def file_users(layout: str, files: int, rows_per_file: int, users: int, rng: random.Random) -> list[list[str]]:
    """Each file's user ids, row by row. scattered: every row a user drawn at random (a user's ~5 rows in ~5 files:
    the worst case for an index, nothing for the predicate's statistics to skip either); clustered: each user's rows
    in one file, as a session's events land in one time window's file, users spread over the files at random (so a
    file's id bounds still span nearly every id: no more pruning for the predicate than scattered)."""
    if layout == "scattered":
        return [[user(rng.randrange(users)) for _ in range(rows_per_file)] for _ in range(files)]
    order = list(range(users))
    rng.shuffle(order)
    found = []
    for f in range(files):
        mine = order[f * users // files : (f + 1) * users // files]
        ids = [user(mine[i * len(mine) // rows_per_file]) for i in range(rows_per_file)]
        rng.shuffle(ids)
        found.append(ids)
    return found


def write_table(files: int, rows_per_file: int, users: int, layout: str = "scattered", seed: int = 7) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from lakepurge.tables.storage import S3Access

    options = S3Access.resolved().object_store_options()
    rng = random.Random(seed)
    uri = f"s3://{BUCKET}/{source(layout).rstrip('/')}"
    event = 0
    for f, ids in enumerate(file_users(layout, files, rows_per_file, users, rng)):
        table = pa.table(
            {
                "user_id": ids,
                "event_id": list(range(event, event + rows_per_file)),
                "amount": [rng.random() * 100 for _ in ids],
                "note": [f"note {rng.randrange(1_000_000):06d} of event" for _ in ids],
                "day": [f"2026-11-{1 + f % 20:02d}"] * len(ids),
            }
        )
        event += rows_per_file
        write_deltalake(uri, table, mode="append", partition_by=["day"], storage_options=options)


def source(layout: str) -> str:
    return f"tables/source-{layout}/"


def copy_table(s3: Any, to: str, layout: str = "scattered") -> None:
    prefix = source(layout)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            key = to + item["Key"][len(prefix) :]
            s3.copy_object(Bucket=BUCKET, Key=key, CopySource={"Bucket": BUCKET, "Key": item["Key"]})


def config(tmp: Path, dsn: str, prefix: str) -> Path:
    path = tmp / f"{prefix.strip('/').replace('/', '-')}.toml"
    path.write_text(
        f'[index]\nbackend = "postgres"\ndsn = "{dsn}"\n\n[reports]\nlocation = "s3://{BUCKET}-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n"
        f'[[datasets]]\nname = "events"\nlocation = "s3://{BUCKET}/{prefix}"\nformat = "delta"\n'
        'id_fields = ["user_id"]\n'
    )
    return path


def reset_index(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "DO $$ BEGIN IF to_regclass('user_rows') IS NOT NULL THEN"
            " TRUNCATE user_rows, indexed_objects, unindexable_lines, erased_users, noncurrent_versions,"
            " dataset_coverage; END IF; END $$"
        )


def timed_purge(tmp: Path, path: Path, users: list[str], profile_env: str) -> tuple[int, dict[str, Any], float]:
    """`lakepurge purge --yes` of the users, inline, with its JSON document written apart from the bench's output:
    the exit code, the document and the wall time (cProfile'd into $profile_env.<users> when that is set)."""
    from lakepurge.cli import main

    users_file = tmp / "users.txt"
    users_file.write_text("\n".join(users) + "\n")
    out = tmp / "purge.json"
    argv = ["purge", "--users-file", str(users_file), "--yes", "--force", "--engine", "inline"]
    argv += ["--config", str(path), "--json"]
    started = time.perf_counter()
    stdout = sys.stdout
    with out.open("w") as handle:
        sys.stdout = handle
        try:
            if os.environ.get(profile_env):
                import cProfile

                profile = cProfile.Profile()
                code = profile.runcall(main, argv)
                profile.dump_stats(os.environ[profile_env] + f".{len(users)}")
            else:
                code = main(argv)
        finally:
            sys.stdout = stdout
    wall = time.perf_counter() - started
    return code, json.loads(out.read_text()), wall


def run_lakepurge(tmp: Path, dsn: str, endpoint: str, prefix: str, users: list[str]) -> dict[str, Any]:
    from lakepurge.cli import main

    reset_index(dsn)
    path = config(tmp, dsn, prefix)
    started = time.perf_counter()
    assert main(["index", "reconcile", "--config", str(path)]) == 0
    indexed = time.perf_counter() - started
    before = traffic(endpoint)
    code, document, wall = timed_purge(tmp, path, users, "DELTA_BENCH_PROFILE")
    after = traffic(endpoint)
    table = document["tables"][0]
    return {
        "wall": wall,
        "read": after["read"] - before["read"],
        "written": after["written"] - before["written"],
        "exit": code,
        "verified": document["verified"],
        "rows_erased": table["rows_erased"],
        "files_replaced": len(table["files_replaced"]),
        "index_seconds": indexed,
    }


def run_deltalake(endpoint: str, prefix: str, users: list[str]) -> dict[str, Any]:
    from deltalake import DeltaTable

    from lakepurge.tables.storage import S3Access

    uri = f"s3://{BUCKET}/{prefix.rstrip('/')}"
    options = S3Access.resolved().object_store_options()
    before = traffic(endpoint)
    started = time.perf_counter()
    table = DeltaTable(uri, storage_options=options)
    metrics = table.delete("user_id IN (" + ", ".join(f"'{u}'" for u in users) + ")")
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    wall = time.perf_counter() - started
    after = traffic(endpoint)
    return {
        "wall": wall,
        "read": after["read"] - before["read"],
        "written": after["written"] - before["written"],
        "rows_erased": metrics.get("num_deleted_rows"),
    }


def still_holding(prefix: str, users: list[str]) -> int:
    from lakepurge.tables.storage import duckdb_with_delta

    connection = duckdb_with_delta()
    try:
        listed = ", ".join(f"'{u}'" for u in users)
        query = f"SELECT count(*) FROM delta_scan('s3://{BUCKET}/{prefix.rstrip('/')}') WHERE user_id IN ({listed})"
        found: int = connection.execute(query).fetchone()[0]
    finally:
        connection.close()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 files of 1,000 rows (a smoke test)")
    parser.add_argument("--files", type=int, help="files (one append each) instead of 200")
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
    from lakepurge.local.postgres import start_postgres

    postgres = start_postgres()
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.create_bucket(Bucket=f"{BUCKET}-reports")
    tmp = Path(tempfile.mkdtemp(prefix="lakepurge-delta-bench-"))
    try:
        sets = {"1 user": 1, "100 users": 100, "1% of users": users // 100}
        short = {"1 user": "1", "100 users": "100", "1% of users": "1%"}
        sets = {label: n for label, n in sets.items() if not args.only or short[label] in args.only}
        results = []
        for layout in LAYOUTS if args.layout == "both" else (args.layout,):
            started = time.perf_counter()
            write_table(files, rows, users, layout)
            print(
                f"{layout} table: {files} files, {files * rows:,} rows, {users:,} users"
                f" ({time.perf_counter() - started:.0f} s)"
            )
            rng = random.Random(3)
            for label, count in sets.items():
                chosen = [user(n) for n in rng.sample(range(users), count)]
                mine = f"tables/lp-{len(results)}/"
                theirs = f"tables/dl-{len(results)}/"
                copy_table(s3, mine, layout)
                copy_table(s3, theirs, layout)
                ours = run_lakepurge(tmp, postgres.dsn, endpoint, mine, chosen)
                delta = run_deltalake(endpoint, theirs, chosen)
                assert still_holding(mine, chosen) == 0 and still_holding(theirs, chosen) == 0
                results.append((f"{layout} {label}", ours, delta))
                print(f"{layout} {label}: lakepurge {ours}  deltalake {delta}", flush=True)
        print()
        print(
            f"{'users':<24}{'files':>6}{'lakepurge s':>12}{'read MB':>9}{'written MB':>11}{'deltalake s':>13}"
            f"{'read MB':>9}{'written MB':>11}{'speed-up':>10}  verified"
        )
        for label, ours, delta in results:
            print(
                f"{label:<24}{ours['files_replaced']:>6}{ours['wall']:>12.2f}{ours['read'] / 1e6:>9.1f}"
                f"{ours['written'] / 1e6:>11.1f}"
                f"{delta['wall']:>13.2f}{delta['read'] / 1e6:>9.1f}{delta['written'] / 1e6:>11.1f}"
                f"{delta['wall'] / ours['wall']:>9.1f}x  {ours['verified']}"
            )
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "delta_bench.json").write_text(
            json.dumps({"files": files, "rows": files * rows, "users": users, "results": results}, indent=2)
        )
    finally:
        postgres.stop()
        moto.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
