"""Scaling curve of the Spark backfill and the Spark purge over Spark masters (local[1], local[2], a local cluster).

Run from the repository root::

    .venv/bin/python bench/spark_scale_bench.py                       # 1,000 objects (~1.3 GB): ~10 min
    .venv/bin/python bench/spark_scale_bench.py --objects 40 --masters 'local[1]'   # a smoke test: ~1 min

One lake of JSON Lines review objects (purge_bench's generator: ~1.3 MB objects of 5,000 records, users of 50
records, half scattered over 50 objects, half clustered in 2) in a moto server in its own process, one throwaway
PostgreSQL. For each master, a fresh Spark session, its Python workers warmed (lakepurge imported) before any
clock starts, then:

- **backfill**: `indexing.backfill.run_backfill` into an empty index database (every object read and indexed);
- **purge**: `ops.manual_purge.purge_users(..., engine="spark")` of --purge-users users drawn from all of them
  (report, the purge job, the verify job, the certificate), on the index the backfill just built; the objects are
  put back afterwards (not timed).

Each phase records wall seconds, the load average before it (`os.getloadavg`, what `uptime` shows), the CPU seconds
of the process tree of this bench (driver, JVMs, Python workers; not moto, not PostgreSQL), of moto and of the
PostgreSQL server (postmaster and backends), and for the backfill the CPU seconds of its indexing tasks
(`BackfillResult.cpu_seconds`). A purge that does not erase exactly the users' lines, or does not end verified, is
an error. Figures go to bench/results/spark_scale_bench.json.

`local-cluster[W,C,M]` is Spark's own test cluster: W worker JVMs of C cores and M MiB each, launched from the
pip-installed pyspark; executors are separate JVMs with their own Python workers, as on a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import purge_bench as pb  # the lake generator, moto in its own process

MASTERS = "local[1],local[2],local-cluster[2,1,1024]"
RESULTS = Path(__file__).resolve().parent / "results" / "spark_scale_bench.json"


def session(master: str) -> Any:
    """A Spark session on master, configured as lakepurge.core.sparkutil.local_session configures local mode."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("lakepurge-scale-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master.startswith("local-cluster"):
        builder = builder.config("spark.executor.memory", "768m")  # under the worker's 1024 MiB
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _warm(items: Any) -> Any:
    import importlib

    for module in ("lakepurge.indexing.backfill", "lakepurge.purge.job"):
        importlib.import_module(module)
    yield sum(1 for _ in items)


def warm(spark: Any) -> None:
    """Every Python worker started and lakepurge imported in it, before a clock starts."""
    slots = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(slots * 8), slots * 4).mapPartitions(_warm).collect()


def _cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of a process; with children, also those of its ended children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_cpu(data_dir: Path) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster, its ended backends and the live ones."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total = _cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    total += _cpu(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return total


def tree_cpu(root: int, excluded: set[int]) -> dict[int, float]:
    """CPU seconds per process of root's descendants (and root), excluded subtrees and PostgreSQL left out."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    out: dict[int, float] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in excluded:
            continue
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip().startswith("postgres"):
                continue
            out[pid] = _cpu(pid)
        except OSError:
            continue
        stack.extend(children.get(pid, []))
    return out


@dataclass
class Phase:
    wall_s: float
    tree_cpu_s: float
    moto_cpu_s: float
    postgres_cpu_s: float
    load_before: float
    result: Any


def measured(moto_pid: int, data_dir: Path, call: Callable[[], Any]) -> Phase:
    me = os.getpid()
    load = os.getloadavg()[0]
    before, moto_before, pg_before = tree_cpu(me, {moto_pid}), _cpu(moto_pid), postgres_cpu(data_dir)
    start = time.perf_counter()
    result = call()
    wall = time.perf_counter() - start
    after, moto_after, pg_after = tree_cpu(me, {moto_pid}), _cpu(moto_pid), postgres_cpu(data_dir)
    used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    # Processes that ended during the phase (a task's worker) are not seen; with worker reuse there are none.
    return Phase(
        round(wall, 2),
        round(used, 2),
        round(moto_after - moto_before, 2),
        round(pg_after - pg_before, 2),
        round(load, 2),
        result,
    )


def quiet(_: str) -> None:
    return None


def run_master(master: str, lake: pb.Lake, postgres: Any, moto_pid: int, users: list[int], n: int) -> dict[str, Any]:
    import psycopg

    from lakepurge.core import aws
    from lakepurge.indexing.backfill import run_backfill
    from lakepurge.ops.manual_purge import purge_users

    server_dsn, data_dir = postgres.dsn, postgres.data_dir
    database = f"scale_{n}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    settings = pb.bench_settings(server_dsn.rsplit("/", 1)[0] + "/" + database)
    started = time.perf_counter()
    spark = session(master)
    warm(spark)
    start_s = time.perf_counter() - started
    try:
        slots = spark.sparkContext.defaultParallelism
        pb.progress(f"{master}: {slots} slot(s), session up and warm in {start_s:.1f} s; backfill ...")
        backfill = measured(moto_pid, data_dir, lambda: run_backfill(spark, settings))
        if backfill.result.failed or backfill.result.scanned != len(lake.keys):
            raise RuntimeError(f"{master}: backfill scanned {backfill.result.scanned}, failed {backfill.result.failed}")
        pb.progress(f"  backfill {backfill.wall_s} s (load before {backfill.load_before}); purge ...")
        ids = [lake.user_ids[u] for u in users]
        chosen = set(users)
        expected = sum(1 for owners in lake.owners for u in owners if u in chosen)
        purge = measured(
            moto_pid,
            data_dir,
            lambda: purge_users(settings, ids, dry_run=False, force=True, say=quiet, engine="spark"),
        )
        result = purge.result.result
        if result is None or not result.verified or result.lines_erased != expected:
            raise RuntimeError(f"{master}: purge erased {getattr(result, 'lines_erased', None)} of {expected} lines")
        pb.progress(f"  purge {purge.wall_s} s (load before {purge.load_before})")
    finally:
        spark.stop()
    pb.put_objects(aws.client("s3"), lake, lake.keys)  # back to the original bytes for the next master
    b = backfill.result
    return {
        "master": master,
        "slots": slots,
        "session_start_s": round(start_s, 1),
        "backfill": {
            "wall_s": backfill.wall_s,
            "load_before": backfill.load_before,
            "tree_cpu_s": backfill.tree_cpu_s,
            "moto_cpu_s": backfill.moto_cpu_s,
            "postgres_cpu_s": backfill.postgres_cpu_s,
            "task_cpu_s": b.cpu_seconds,
            "objects": b.scanned,
            "bytes": b.bytes_read,
            "rows": b.rows,
        },
        "purge": {
            "wall_s": purge.wall_s,
            "load_before": purge.load_before,
            "tree_cpu_s": purge.tree_cpu_s,
            "moto_cpu_s": purge.moto_cpu_s,
            "postgres_cpu_s": purge.postgres_cpu_s,
            "objects": result.objects_rewritten,
            "lines": result.lines_erased,
            "users": len(users),
        },
    }


def render(out: dict[str, Any]) -> str:
    lines = [
        f"lake: {out['objects']} objects, {out['bytes'] / 1e6:,.0f} MB, {out['records']:,} records;"
        f" purge of {out['purge_users']} users",
        "| master | slots | phase | wall s | MB/s | speedup vs the first master"
        " | CPU s (bench tree / moto / PostgreSQL) | cores used | task CPU s | load before |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    base = {phase: out["runs"][0][phase]["wall_s"] for phase in ("backfill", "purge")}
    for run in out["runs"]:
        for phase in ("backfill", "purge"):
            p = run[phase]
            moved = out["bytes"] if phase == "backfill" else out["purged_bytes"]
            lines.append(
                f"| {run['master']} | {run['slots']} | {phase} | {p['wall_s']:.1f} | {moved / 1e6 / p['wall_s']:.1f}"
                f" | {base[phase] / p['wall_s']:.2f}x | {p['tree_cpu_s']:.1f} / {p['moto_cpu_s']:.1f}"
                f" / {p['postgres_cpu_s']:.1f}"
                f" | {(p['tree_cpu_s'] + p['moto_cpu_s'] + p['postgres_cpu_s']) / p['wall_s']:.2f}"
                f" | {p.get('task_cpu_s', '-')} | {p['load_before']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--records-per-object", type=int, default=5000)
    parser.add_argument("--purge-users", type=int, default=800, help="users erased by each purge (drawn from all)")
    parser.add_argument("--masters", default=MASTERS, help=f"comma-separated outside brackets ({MASTERS})")
    args = parser.parse_args(argv)
    masters = [m + ("]" if not m.endswith("]") else "") for m in args.masters.split("],") if m]
    users = args.objects * args.records_per_object // 50
    scale = pb.Scale(args.objects, args.records_per_object, users, 50, 1, 0, 0, 0, 0)
    from lakepurge.core import aws
    from lakepurge.local.postgres import start_postgres

    pb.progress(f"lake of {args.objects} objects x {args.records_per_object} records ...")
    lake = pb.generate_lake(scale)
    postgres = start_postgres()
    moto = pb.start_moto_process()
    aws.client.cache_clear()
    os.environ["LAKEPURGE_HASH_KEY"] = pb.HASH_KEY
    try:
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=pb.BUCKET)
        s3.create_bucket(Bucket=pb.REPORTS_BUCKET)
        pb.put_objects(s3, lake, lake.keys)
        chosen = random.Random(34).sample(range(users), args.purge_users)
        affected = lake.affected(chosen)
        out: dict[str, Any] = {
            "objects": len(lake.keys),
            "bytes": lake.total_bytes,
            "records": scale.records,
            "purge_users": args.purge_users,
            "purged_objects": len(affected),
            "purged_bytes": sum(len(lake.bodies[k]) for k in affected),
            "load_at_start": os.getloadavg(),
            "runs": [],
        }
        for n, master in enumerate(masters):
            out["runs"].append(run_master(master, lake, postgres, moto.process.pid, chosen, n))
        out["load_at_end"] = os.getloadavg()
    finally:
        moto.stop()
        postgres.stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    print(render(out))
    print(f"load average at start {out['load_at_start']}, at end {out['load_at_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
