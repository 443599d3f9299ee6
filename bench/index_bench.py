"""Index benchmark: JSON Lines indexing throughput, bulk-load rate and lookup latency, on this machine.

Run from the repository root::

    .venv/bin/python bench/index_bench.py            # full size: a 5,000,000-row PostgreSQL index (~6-10 min)
    .venv/bin/python bench/index_bench.py --quick    # small data, ~2 min (what a smoke test runs)

It starts its own throwaway PostgreSQL cluster and in-process moto server, prints a table of figures, each next to
its target with PASS/MISS, and writes the same figures to bench/results/index_bench.json. It measures; it asserts
nothing. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import gzip
import io
import json
import os
import platform
import pstats
import random
import statistics
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import orjson

from lakepurge.index.base import Hits, Location, ObjectHits, ObjectIndex
from lakepurge.local.moto import DUMMY_CREDENTIALS
from lakepurge.local.samples import review_record, user_id
from lakepurge.records.formats import read_records

RESULTS = Path(__file__).resolve().parent / "results" / "index_bench.json"
BUCKET = "lake"
PREFIX = "reviews/dt=2026-01-01/"
DYNAMO_TABLE = "lakepurge-bench-index"
USER_POOL = 1_000_000  # user ids are drawn from u0000001 .. u1000000
LINES_PER_OBJECT = 500  # synthetic ObjectIndex shape for the bulk loads: objects x 500 lines
LOAD_BATCH_OBJECTS = 400  # objects per replace_objects call: 200,000 rows, the backfill's FLUSH_ROWS
MAX_RECORD_BYTES = 16 * 1024 * 1024
MB = 1_000_000

# Targets: (comparison, threshold). Figures without one are context for reading the others.
READER_MB_S = (">=", 100.0)
PG_LOAD_ROWS_S = (">=", 150_000.0)
ONE_USER_P99_MS = ("<=", 1.0)
BIG_BATCH_S = ("<=", 1.0)
CPU_NOTE = "CPU time of this process: close to the wall-time figure on an idle machine, steadier on a busy one"


# -- the report -----------------------------------------------------------------------------------------------------


@dataclass
class Figure:
    section: str
    name: str
    value: float
    unit: str
    target: str = ""
    verdict: str = ""  # PASS, MISS, n/a (a target that does not apply, e.g. on moto) or "" (context only)
    note: str = ""


@dataclass
class Report:
    mode: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def add(
        self,
        section: str,
        name: str,
        value: float,
        unit: str,
        target: tuple[str, float] | None = None,
        note: str = "",
        applies: bool = True,
    ) -> Figure:
        text = verdict = ""
        if target is not None:
            op, threshold = target
            text = f"{op} {_number(threshold)} {unit}"
            passed = value >= threshold if op == ">=" else value <= threshold
            verdict = ("PASS" if passed else "MISS") if applies else "n/a"
        figure = Figure(section, name, value, unit, text, verdict, note)
        self.figures.append(figure)
        progress(f"  {name}: {_number(value)} {unit}" + (f"  [{verdict}]" if verdict else ""))
        return figure

    def table(self) -> str:
        width = max(len(f.name) for f in self.figures) + 2
        lines: list[str] = []
        header = f"{'measurement':<{width}}{'value':>14}  {'unit':<10}{'target':<20}verdict"
        section = None
        for figure in self.figures:
            if figure.section != section:
                section = figure.section
                lines += ["", section, header, "-" * len(header)]
            value = _number(figure.value)
            lines.append(
                f"{figure.name:<{width}}{value:>14}  {figure.unit:<10}{figure.target:<20}{figure.verdict}".rstrip()
            )
            if figure.note:
                lines.append(f"{'':<4}{figure.note}")
        if self.notes:
            lines += ["", "Notes"] + [f"- {note}" for note in self.notes]
        return "\n".join(lines)

    def save(self, path: Path, meta: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"meta": meta, "figures": [asdict(f) for f in self.figures], "notes": self.notes}
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _number(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median_time(fn: Callable[[], object], repeats: int = 3) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds of this process over `repeats` calls."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- synthetic data -------------------------------------------------------------------------------------------------


def review_lines(seed: int, total_bytes: int) -> list[bytes]:
    """JSON Lines review records of ~300-600 bytes (mean ~430): samples.review_record plus the product and
    client fields a review export carries. Texts come from a pool of 20,000 generated records (generating
    each line from scratch costs ~25 s for 200 MB); user and review ids are fresh on every line."""
    rng = random.Random(seed)
    templates = []
    for n in range(20_000):
        record = review_record(rng, "", n)
        record.update(
            product_id=f"B0{rng.randrange(10**8):08d}",
            verified_purchase=rng.random() < 0.8,
            helpful_votes=rng.randint(0, 200),
            lang=rng.choice(["en", "fr", "de", "ja"]),
            source=rng.choice(["web", "app-ios", "app-android"]),
            product={"sku": f"SKU-{rng.randrange(10**6):06d}", "category": rng.choice(["books", "garden", "toys"])},
        )
        templates.append(record)
    lines: list[bytes] = []
    size = 0
    number = 0
    while size < total_bytes:
        record = dict(templates[number % len(templates)])
        record["user_id"] = user_id(rng.randint(1, USER_POOL))
        record["review_id"] = f"r{number}"
        line = orjson.dumps(record)
        lines.append(line)
        size += len(line) + 1
        number += 1
    return lines


def split_objects(lines: list[bytes], count: int, object_bytes: int) -> list[bytes]:
    """count JSON Lines objects of about object_bytes each, cut from lines (wrapping round if needed)."""
    objects: list[bytes] = []
    index = 0
    for _ in range(count):
        chunk: list[bytes] = []
        size = 0
        while size < object_bytes:
            line = lines[index % len(lines)]
            chunk.append(line)
            size += len(line) + 1
            index += 1
        objects.append(b"\n".join(chunk) + b"\n")
    return objects


def synthetic_objects(rng: random.Random, start: int, count: int) -> list[ObjectIndex]:
    """ObjectIndex values shaped like an indexed lake: 500 lines each, one random user (of 1M) per line."""
    objects = []
    base = datetime(2026, 1, 1, tzinfo=UTC)
    randint = rng.randint
    for number in range(start, start + count):
        lines_by_user: dict[str, list[int]] = defaultdict(list)
        for line in range(LINES_PER_OBJECT):
            lines_by_user[f"u{randint(1, USER_POOL):07d}"].append(line)
        day = base + timedelta(days=number // 100)
        objects.append(
            ObjectIndex(
                s3path=f"s3://{BUCKET}/reviews/dt={day:%Y-%m-%d}/part-{number % 100:05d}.jsonl.gz",
                dataset="reviews",
                etag=f'"{rng.getrandbits(128):032x}"',
                version_id=None,
                last_modified=day + timedelta(hours=1),
                lines_by_user=dict(lines_by_user),
                records=LINES_PER_OBJECT,
            )
        )
    return objects


def bench_settings(dsn: str) -> Any:
    from lakepurge.core.config import parse_settings

    return parse_settings(
        {
            "index": {"backend": "postgres", "dsn": dsn},
            "reports": {"location": "s3://lake-reports/"},
            "datasets": [
                {"name": "reviews", "location": f"s3://{BUCKET}/reviews/", "format": "jsonl", "id_fields": ["user_id"]}
            ],
        }
    )


# -- 1a: the reader alone -------------------------------------------------------------------------------------------


def parse_only(lines: list[bytes]) -> None:
    loads = orjson.loads
    for line in lines:
        loads(line)


def inflate_only(compressed: bytes) -> None:
    """The floor for .gz: decompress in 1 MiB input chunks, as lines.GzipReader does, and drop the output."""
    inflate = zlib.decompressobj(wbits=31)
    for start in range(0, len(compressed), 1 << 20):
        inflate.decompress(compressed[start : start + (1 << 20)])


def count_records(data: bytes, key: str) -> int:
    count = 0
    for _ in read_records(io.BytesIO(data), key, "jsonl", ("user_id",), MAX_RECORD_BYTES):
        count += 1
    return count


def bench_reader(report: Report, lines: list[bytes], profile: bool) -> None:
    section = "1a. JSON Lines reader alone (formats.read_records on in-memory bytes, one core)"
    data = b"\n".join(lines) + b"\n"
    mb = len(data) / MB
    progress(f"reader: {mb:.0f} MB, {len(lines):,} records, mean line {len(data) / len(lines):.0f} bytes")
    seconds, _ = median_time(lambda: parse_only(lines))
    report.add(section, "orjson.loads alone (baseline, no reader)", mb / seconds, "MB/s")
    seconds, cpu = median_time(lambda: count_records(data, "part.jsonl"))
    plain = report.add(section, "read_records, plain .jsonl", mb / seconds, "MB/s", READER_MB_S)
    report.add(section, "read_records, plain .jsonl: records", len(lines) / seconds, "records/s")
    report.add(section, "read_records, plain .jsonl: per CPU-second", mb / cpu, "MB/cpu-s", note=CPU_NOTE)
    compressed = gzip.compress(data, compresslevel=6, mtime=0)
    seconds, cpu = median_time(functools.partial(count_records, compressed, "part.jsonl.gz"))
    report.add(
        section,
        "read_records, .jsonl.gz (MB of JSON out)",
        mb / seconds,
        "MB/s",
        READER_MB_S,
        note=f"gzip level 6, ratio {len(data) / len(compressed):.1f}:1; {len(compressed) / MB / seconds:.0f} MB/s"
        " of compressed input",
    )
    report.add(section, "read_records, .jsonl.gz: records", len(lines) / seconds, "records/s")
    report.add(section, "read_records, .jsonl.gz: per CPU-second", mb / cpu, "MB/cpu-s")
    seconds, _ = median_time(functools.partial(inflate_only, compressed))
    report.add(section, "zlib decompression alone (context)", mb / seconds, "MB/s")
    del compressed
    if profile or plain.verdict == "MISS":
        report.notes.append("reader profile (cProfile, plain .jsonl, top by own time):\n" + profile_reader(data))


def profile_reader(data: bytes) -> str:
    sample = data[: 40 * MB]
    profiler = cProfile.Profile()
    profiler.runcall(count_records, sample, "part.jsonl")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(8)
    body = out.getvalue()
    start = body.find("   ncalls")
    return body[start:].rstrip() if start >= 0 else body


# -- 1b: the Lambda path --------------------------------------------------------------------------------------------


class TimedStore:
    """An IndexStore that adds up the time spent writing (the rest of index_object is HEAD, GET and parsing)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.write_seconds = 0.0

    def replace_objects(self, objects: Sequence[ObjectIndex], force: bool = False) -> int:
        start = time.perf_counter()
        try:
            return int(self._store.replace_objects(objects, force=force))
        finally:
            self.write_seconds += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def lambda_worker(dsn: str, keys: list[str]) -> dict[str, float]:
    """One process indexing objects one at a time, as the indexer Lambda does (runs in a child process, so it
    does not share the GIL with the moto server)."""
    from lakepurge.core import aws
    from lakepurge.index.postgres import PostgresIndexStore
    from lakepurge.indexing.indexer import index_object

    settings = bench_settings(dsn)
    s3 = aws.client("s3")
    store = TimedStore(PostgresIndexStore(dsn))
    try:
        index_object(s3, store, settings, BUCKET, keys[0], force=True)  # warm-up: client, connection, imports
        store.write_seconds = 0.0
        wall, cpu = time.perf_counter(), time.process_time()
        records = 0
        for key in keys:
            outcome = index_object(s3, store, settings, BUCKET, key, force=True)
            if outcome.action != "indexed":
                raise RuntimeError(f"{key}: {outcome.action}")
            records += outcome.records
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        get_start = time.perf_counter()
        for key in keys:
            s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        get_seconds = time.perf_counter() - get_start
    finally:
        store.close()
    return {
        "seconds": wall,
        "cpu_seconds": cpu,
        "records": records,
        "write_seconds": store.write_seconds,
        "get_seconds": get_seconds,
    }


def bench_lambda(report: Report, dsn: str, keys: list[str], total_bytes: int) -> None:
    section = "1b. Lambda path: indexer.index_object (HEAD + streaming GET + parse + COPY), one process"
    mb = total_bytes / MB
    progress(f"lambda path: {len(keys)} objects, {mb:.0f} MB")
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        result = pool.submit(lambda_worker, dsn, keys).result()
    seconds = result["seconds"]
    report.add(
        section,
        "index_object per CPU-second of the indexing process (per core)",
        mb / result["cpu_seconds"],
        "MB/cpu-s",
        (">=", READER_MB_S[1]),
        note=f"the process was on CPU {100 * result['cpu_seconds'] / seconds:.0f}% of the wall time; the rest is"
        " waiting for PostgreSQL's COPY and moto's GET, which run on the machine's other core",
    )
    report.add(
        section,
        "index_object end to end, wall",
        mb / seconds,
        "MB/s",
        note=f"{len(keys)} objects x {mb / len(keys):.1f} MB; bounded here by PostgreSQL taking the rows (section 2)"
        " and moto serving S3 on the same 2 cores",
    )
    report.add(section, "index_object end to end: records", result["records"] / seconds, "records/s")
    report.add(section, "share of wall time in replace_objects (COPY)", 100 * result["write_seconds"] / seconds, "%")
    report.add(section, "moto GET alone, same objects (context)", mb / result["get_seconds"], "MB/s")


# -- 1c: the Spark backfill -----------------------------------------------------------------------------------------


def bench_spark(report: Report, settings: Any, store: Any, objects: int, total_bytes: int) -> None:
    from lakepurge.core.sparkutil import local_session
    from lakepurge.indexing.backfill import run_backfill

    section = "1c. Spark backfill: backfill.run_backfill, local[2] (2 cores), same objects"
    cores = 2
    progress(f"spark backfill: {objects} objects, {total_bytes / MB:.0f} MB, {cores} cores")
    # No console progress bar: set before the JVM starts (local_session builds its own config).
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    spark = local_session("lakepurge-bench", cores=cores)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        # Start the Python workers, import lakepurge and load the S3 model in them before the clock starts.
        spark.sparkContext.parallelize(range(cores * 4), cores * 4).map(_import_lakepurge).collect()
        store.truncate()
        start = time.perf_counter()
        result = run_backfill(spark, settings, force=True)
        seconds = time.perf_counter() - start
    finally:
        spark.stop()
    if result.failed or result.bytes_read != total_bytes:
        raise RuntimeError(f"backfill read {result.bytes_read} of {total_bytes} bytes; failed: {result.failed[:3]}")
    mb = result.bytes_read / MB
    report.add(
        section,
        "run_backfill per CPU-second of its indexing tasks (per core)",
        mb / result.cpu_seconds,
        "MB/cpu-s",
        (">=", READER_MB_S[1]),
        note=f"BackfillResult.cpu_seconds: {result.cpu_seconds:.1f} CPU-s in the Python tasks (S3 reads, parsing,"
        " COPY); not the JVM",
    )
    report.add(section, "run_backfill total, wall", mb / seconds, "MB/s", note=f"{seconds:.1f} s for {mb:.0f} MB")
    report.add(
        section,
        "run_backfill wall per core",
        mb / seconds / cores,
        "MB/s",
        note="the same 2 cores also run moto (serving S3), PostgreSQL (taking the rows) and the JVM",
    )
    report.add(section, "run_backfill: records", result.records / seconds, "records/s")


def _import_lakepurge(value: int) -> int:
    """Warm a Python worker: import lakepurge and load botocore's S3 model (~0.15 s of CPU once per worker)."""
    from lakepurge.core import aws
    from lakepurge.indexing import backfill  # noqa: F401

    aws.client("s3")
    return value


# -- 2 and 3: bulk load and lookups ---------------------------------------------------------------------------------


def object_batches(rows: int, seed: int) -> Iterator[list[ObjectIndex]]:
    """The synthetic index in replace_objects batches (the same objects for the same seed)."""
    rng = random.Random(seed)
    objects_total = max(1, rows // LINES_PER_OBJECT)
    for start in range(0, objects_total, LOAD_BATCH_OBJECTS):
        yield synthetic_objects(rng, start, min(LOAD_BATCH_OBJECTS, objects_total - start))


@dataclass
class Load:
    rows: int = 0
    seconds: float = 0.0  # wall time inside the load calls only (generating the data is not counted)
    cpu_seconds: float = 0.0  # this process's CPU time inside them (formatting COPY text, requests)
    users: set[str] = field(default_factory=set)


def bulk_load(
    write: Callable[[list[ObjectIndex]], int], rows: int, seed: int, budget_seconds: float | None = None
) -> Load:
    """Load about `rows` rows through write (replace_objects or a prototype)."""
    load = Load()
    for objects in object_batches(rows, seed):
        for obj in objects:
            load.users.update(obj.lines_by_user)
        wall, cpu = time.perf_counter(), time.process_time()
        written = write(objects)
        load.seconds += time.perf_counter() - wall
        load.cpu_seconds += time.process_time() - cpu
        if written != len(objects):
            raise RuntimeError(f"replace_objects wrote {written} of {len(objects)} objects")
        load.rows += sum(obj.row_count for obj in objects)
        progress(f"    {load.rows:,} rows, {load.rows / load.seconds:,.0f} rows/s")
        if budget_seconds is not None and load.seconds > budget_seconds:
            progress(f"    stopping the load at its time budget ({budget_seconds:.0f} s)")
            break
    return load


def bench_pg_load(report: Report, store: Any, dsn: str, rows: int) -> list[str]:
    import psycopg

    section = f"2. Bulk load: PostgresIndexStore.replace_objects (COPY, indexes in place), {rows:,} rows"
    progress(f"postgres bulk load: {rows:,} rows")
    store.truncate()
    load = bulk_load(store.replace_objects, rows, seed=11)
    report.add(
        section,
        "PostgreSQL bulk load",
        load.rows / load.seconds,
        "rows/s",
        PG_LOAD_ROWS_S,
        note=f"{load.rows:,} rows, {load.rows // LINES_PER_OBJECT:,} objects x {LINES_PER_OBJECT} lines,"
        f" {len(load.users):,} users; batches of {LOAD_BATCH_OBJECTS} objects; {load.seconds:.1f} s, of which"
        f" {load.cpu_seconds:.1f} s CPU in this process",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The rows' table: user_rows since object ids (user_objects became a view over it), user_objects before.
        table = "user_rows" if conn.execute("SELECT to_regclass('user_rows')").fetchone()[0] else "user_objects"
        conn.execute(f"VACUUM ANALYZE {table}")
        conn.execute("VACUUM ANALYZE indexed_objects")
        # An autovacuum of the fresh rows running at the same time holds back the visibility map: then the last
        # pages stay not all-visible and index-only scans visit the heap for them (~10% slower lookups), which a
        # settled production index does not. Vacuum again until every page is all-visible.
        for _ in range(5):
            pages = conn.execute(f"SELECT relpages, relallvisible FROM pg_class WHERE relname = '{table}'").fetchone()
            if pages is None or pages[1] >= pages[0]:
                break
            time.sleep(1)
            conn.execute(f"VACUUM {table}")
        size = conn.execute(f"SELECT pg_total_relation_size('{table}')").fetchone()
    report.add(section, f"{table} size with its indexes", (size[0] if size else 0) / MB, "MB")
    return sorted(load.users)


def bench_lookups(
    report: Report,
    section: str,
    store: Any,
    users: list[str],
    singles: int,
    big: int | None,
    on_moto: bool = False,
) -> None:
    """p50/p99 of one-user lookups, then batches."""
    rng = random.Random(5)
    warm = 10 if on_moto else min(200, singles)
    sample = rng.sample(users, min(len(users), singles + warm))
    for user in sample[:warm]:  # warm: connection, plan, caches
        store.lookup([user])
    latencies = []
    for user in sample[warm:]:
        start = time.perf_counter()
        found = store.lookup([user])
        latencies.append((time.perf_counter() - start) * 1000)
        if user not in found:
            raise RuntimeError("an indexed user was not found")
    applies = not on_moto
    report.add(section, f"lookup(1 user) p50, {len(latencies):,} users", percentile(latencies, 0.5), "ms")
    report.add(section, "lookup(1 user) p99", percentile(latencies, 0.99), "ms", ONE_USER_P99_MS, applies=applies)
    repeats = 1 if on_moto else 3
    sets = [rng.sample(users, 100) for _ in range(repeats)]
    seconds = statistics.median(_timed(store.lookup, s) for s in sets)
    report.add(section, f"lookup(100 users), median of {repeats}", seconds * 1000, "ms")
    if big is None:
        return
    big = min(big, len(users))
    sets = [rng.sample(users, big) for _ in range(3)]
    seconds = statistics.median(_timed(store.lookup, s) for s in sets)
    report.add(section, f"lookup({big:,} users), median of 3", seconds, "s", BIG_BATCH_S, applies=big >= 100_000)
    if hasattr(store, "lookup_objects"):
        small = statistics.median(_timed(store.lookup_objects, rng.sample(users, 100)) for _ in range(3))
        report.add(section, "lookup_objects(100 users), median of 3", small * 1000, "ms")
        grouped = statistics.median(_timed(store.lookup_objects, s) for s in sets)
        report.add(
            section,
            f"lookup_objects({big:,} users), median of 3",
            grouped,
            "s",
            BIG_BATCH_S,
            applies=big >= 100_000,
            note="the batch lookup a purge plan is built from: one row per object, not per (user, object)",
        )


def _timed(fn: Callable[[Sequence[str]], object], users: Sequence[str]) -> float:
    gc.collect()
    start = time.perf_counter()
    answer = fn(users)
    elapsed = time.perf_counter() - start
    del answer  # a caller keeps the answer: freeing it is not part of the lookup
    return elapsed


# -- 3b: other ways to answer a big lookup (candidates for a change to postgres.py) ---------------------------------

# Written for this layout of the adapter's tables; the section is skipped (with a note) if the layout changes.
EXPECTED_COLUMNS = {"user_objects": {"userid", "s3path", "recordline"}, "indexed_objects": {"s3path", "etag"}}


def _grouped(source: str) -> str:
    """lookup's query shape: one row per (user, object) with its sorted lines, the ETag from indexed_objects."""
    return (
        "SELECT u.userid, u.s3path, o.etag, u.lines FROM (SELECT userid, s3path,"
        f" array_agg(recordline ORDER BY recordline) AS lines FROM {source} GROUP BY userid, s3path) u"
        " JOIN indexed_objects o USING (s3path)"
    )


_ANY = _grouped("user_objects WHERE userid = ANY(%s::text[])")
_FLAT = (
    "SELECT u.userid, u.s3path, o.etag, u.recordline FROM user_objects u JOIN indexed_objects o USING (s3path)"
    " WHERE u.userid = ANY(%s::text[])"
)

LookupFn = Callable[[Any, Sequence[str]], dict[str, list[Location]]]


def _locations(rows: Iterator[tuple[str, str, str, list[int]]] | list[Any]) -> dict[str, list[Location]]:
    found: dict[str, list[Location]] = defaultdict(list)
    for user, s3path, etag, lines in rows:
        found[user].append(Location(s3path, etag, tuple(lines)))
    return {user: sorted(locations, key=lambda loc: loc.s3path) for user, locations in found.items()}


def _normalized(found: dict[str, list[Location]]) -> dict[str, list[Location]]:
    return {user: sorted(locations, key=lambda loc: loc.s3path) for user, locations in found.items()}


def lookup_binary(conn: Any, users: Sequence[str]) -> dict[str, list[Location]]:
    """lookup's query with = ANY(text[]), no ORDER BY, results in binary format (no text parsing of arrays)."""
    with conn.cursor(binary=True) as cur:
        return _locations(cur.execute(_ANY, (list(users),)).fetchall())


def lookup_flat(conn: Any, users: Sequence[str]) -> dict[str, list[Location]]:
    """= ANY(text[]) returning plain rows in binary format (no GROUP BY in the server), grouped here."""
    grouped: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    with conn.cursor(binary=True) as cur:
        cur.execute(_FLAT, (list(users),))
        for user, s3path, etag, line in cur:
            grouped[user, s3path, etag].append(line)
    return _locations((user, path, etag, sorted(lines)) for (user, path, etag), lines in grouped.items())


def lookup_unnest_join(conn: Any, users: Sequence[str]) -> dict[str, list[Location]]:
    """A join with unnest(text[]) instead of = ANY(text[])."""
    with conn.cursor(binary=True) as cur:
        source = "user_objects JOIN unnest(%s::text[]) AS wanted(userid) USING (userid)"
        return _locations(cur.execute(_grouped(source), (list(users),)).fetchall())


def lookup_temp_table(conn: Any, users: Sequence[str]) -> dict[str, list[Location]]:
    """COPY the ids into a temporary table, ANALYZE it, join."""
    with conn.transaction(), conn.cursor(binary=True) as cur:
        cur.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (userid TEXT NOT NULL) ON COMMIT DELETE ROWS")
        with cur.copy("COPY wanted (userid) FROM STDIN") as copy:
            copy.write("".join(f"{user}\n" for user in users))
        cur.execute("ANALYZE wanted")
        return _locations(cur.execute(_grouped("user_objects JOIN wanted USING (userid)")).fetchall())


ALTERNATIVES: tuple[tuple[str, LookupFn, bool], ...] = (
    # (name, function, run the big batch 3 times; False: once, it is known to be slow)
    ("= ANY(text[]), binary results, no ORDER BY", lookup_binary, True),
    ("= ANY(text[]), flat rows in binary, grouped in Python", lookup_flat, True),
    ("COPY ids into a temp table + ANALYZE + JOIN", lookup_temp_table, True),
    ("JOIN unnest(text[])", lookup_unnest_join, False),
)


def schema_matches(conn: Any) -> bool:
    rows = conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_name = ANY(%s)",
        (list(EXPECTED_COLUMNS),),
    ).fetchall()
    found: dict[str, set[str]] = defaultdict(set)
    for table, column in rows:
        found[table].add(column)
    return all(columns <= found[table] for table, columns in EXPECTED_COLUMNS.items()) and found["user_objects"] == set(
        EXPECTED_COLUMNS["user_objects"]
    )


def bench_lookup_alternatives(report: Report, store: Any, dsn: str, users: list[str], big: int) -> bool:
    """Returns False (and measures nothing) when the adapter's tables no longer have the layout written for."""
    import psycopg

    section = "3b. PostgreSQL lookup alternatives, same index (candidates for postgres.py; results checked equal)"
    progress("postgres lookup alternatives")
    rng = random.Random(9)
    big = min(big, len(users))
    sets = [rng.sample(users, big) for _ in range(3)]
    small = [rng.sample(users, 100) for _ in range(3)]
    target = BIG_BATCH_S if big >= 100_000 else None
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not schema_matches(conn):
            report.notes.append(
                "3b and 2c/3c skipped: the adapter's tables no longer have the columns these alternatives were"
                f" written for ({EXPECTED_COLUMNS}); update bench/index_bench.py"
            )
            return False
        expected = _normalized(store.lookup(sets[0]))
        server = _lookup_server_seconds(conn, sets[0])
        report.add(
            section,
            f"lookup's query as one statement, {big:,} users: server execution only",
            server,
            "s",
            note=f"{sum(len(v) for v in expected.values()):,} (user, object) locations; from 20,000 ids lookup splits"
            " this work over two backends and overlaps it with building the answer",
        )
        for name, fn, repeat in ALTERNATIVES:
            first = _timed(lambda u, fn=fn, name=name: fn(conn, u) == expected or _mismatch(name), sets[0])
            times = [first] + ([_timed(lambda u, fn=fn: fn(conn, u), s) for s in sets[1:]] if repeat else [])
            label = f"{name}, {big:,} users" + ("" if repeat else " (1 run)")
            report.add(section, label, statistics.median(times), "s", target)
            seconds = statistics.median(_timed(lambda u, fn=fn: fn(conn, u), s) for s in small)
            report.add(section, f"{name}, 100 users", seconds * 1000, "ms")
    return True


def _lookup_server_seconds(conn: Any, users: list[str]) -> float:
    """EXPLAIN ANALYZE of the query lookup runs for this many users: the adapter's own (query and settings) when it
    exposes them, else the = ANY(text[]) shape written here."""
    from lakepurge.index import postgres_sql

    query, settings = getattr(postgres_sql, "LOOKUP", None), getattr(postgres_sql, "BIG_LOOKUP_SETTINGS", None)
    with conn.transaction():
        if query is None or settings is None:
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _ANY, (users,)).fetchone()
        else:
            conn.execute(settings)
            sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + query.replace("{ids}", postgres_sql.IDS_SPLIT)
            plan = conn.execute(sql, {"ids": "\n".join(users)}).fetchone()
    return plan[0][0]["Execution Time"] / 1000 if plan else float("nan")


def _mismatch(name: str) -> bool:
    raise RuntimeError(f"lookup alternative '{name}' returned different locations")


# -- 2c/3c: a narrower schema, prototyped here (a candidate for postgres.py) ----------------------------------------

NARROW_SCHEMA = """
DROP TABLE IF EXISTS narrow_rows, narrow_objects;
CREATE TABLE narrow_objects (
    object_id SERIAL PRIMARY KEY,
    s3path    TEXT COLLATE "C" NOT NULL UNIQUE,
    etag      TEXT NOT NULL
);
CREATE TABLE narrow_rows (
    userid     TEXT COLLATE "C" NOT NULL,
    object_id  INTEGER NOT NULL,
    recordline INTEGER NOT NULL
);
CREATE INDEX narrow_rows_userid ON narrow_rows (userid);
CREATE INDEX narrow_rows_object ON narrow_rows (object_id);
"""


class NarrowPrototype:
    """user_objects with the path and ETag moved to a per-object table (an integer id per row) and byte-order
    (COLLATE "C") ids: the same rows and the same lookup result, about a third of the bytes per row."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        conn.execute(NARROW_SCHEMA)

    def replace_objects(self, objects: Sequence[ObjectIndex]) -> int:
        paths = [o.s3path for o in objects]
        with self._conn.transaction(), self._conn.cursor() as cur:
            # One statement claims every object of the batch (the real one keeps the last-modified/ETag test).
            cur.execute(
                "INSERT INTO narrow_objects (s3path, etag) SELECT * FROM unnest(%s::text[], %s::text[])"
                " ON CONFLICT (s3path) DO UPDATE SET etag = EXCLUDED.etag RETURNING s3path, object_id",
                (paths, [o.etag for o in objects]),
            )
            ids = dict(cur.fetchall())
            cur.execute("DELETE FROM narrow_rows WHERE object_id = ANY(%s::int[])", (list(ids.values()),))
            with cur.copy("COPY narrow_rows (userid, object_id, recordline) FROM STDIN") as copy:
                buffer: list[str] = []
                for obj in objects:
                    suffix = f"\t{ids[obj.s3path]}\t"
                    for user, lines in obj.lines_by_user.items():
                        prefix = user + suffix
                        buffer.extend(f"{prefix}{line}\n" for line in lines)
                copy.write("".join(buffer))
        return len(ids)

    def lookup(self, users: Sequence[str]) -> dict[str, list[Location]]:
        with self._conn.cursor(binary=True) as cur:
            rows = cur.execute(
                "SELECT userid, object_id, array_agg(recordline ORDER BY recordline) FROM narrow_rows"
                " WHERE userid = ANY(%s::text[]) GROUP BY userid, object_id",
                (list(users),),
            ).fetchall()
            ids = list({object_id for _, object_id, _ in rows})
            objects = {
                object_id: (path, etag)
                for object_id, path, etag in cur.execute(
                    "SELECT object_id, s3path, etag FROM narrow_objects WHERE object_id = ANY(%s::int[])", (ids,)
                )
            }
        return _locations((user, *objects[object_id], lines) for user, object_id, lines in rows)

    def lookup_objects(self, users: Sequence[str]) -> Hits:
        """The adapter's lookup_objects query (since 73d8cad: no per-object DISTINCT or user count) on the narrow
        rows."""
        with self._conn.cursor(binary=True) as cur:
            rows = cur.execute(
                "WITH hits AS ("
                "  SELECT userid, object_id, recordline FROM narrow_rows WHERE userid = ANY(%s::text[]))"
                " SELECT o.s3path, o.etag, h.lines, NULL::bigint FROM ("
                "  SELECT object_id, array_agg(recordline) AS lines FROM hits GROUP BY object_id) h"
                " JOIN narrow_objects o USING (object_id)"
                " UNION ALL SELECT NULL, NULL, NULL, count(*) FROM (SELECT DISTINCT userid FROM hits) found",
                (list(users),),
            ).fetchall()
        found = 0
        objects: dict[str, ObjectHits] = {}
        for s3path, etag, lines, count in rows:
            if s3path is None:
                found = count
            else:
                objects[s3path] = ObjectHits(s3path, etag, tuple(sorted(set(lines))))
        return Hits(objects, found)


def bench_narrow(report: Report, store: Any, dsn: str, rows: int, users: list[str], big: int) -> None:
    import psycopg

    section = '2c/3c. Prototype: narrower rows (an object id instead of the path in every row, COLLATE "C" ids)'
    progress(f"narrow-schema prototype: {rows:,} rows")
    rng = random.Random(9)  # the same user sets as 3b
    big = min(big, len(users))
    sets = [rng.sample(users, big) for _ in range(3)]
    expected = _normalized(store.lookup(sets[0]))
    expected_hits = store.lookup_objects(sets[0]) if hasattr(store, "lookup_objects") else None
    store.truncate()  # room and cache for the prototype; the adapter's figures are taken
    with psycopg.connect(dsn, autocommit=True) as conn:
        narrow = NarrowPrototype(conn)
        load = bulk_load(narrow.replace_objects, rows, seed=11)
        report.add(
            section,
            "narrow prototype bulk load",
            load.rows / load.seconds,
            "rows/s",
            PG_LOAD_ROWS_S,
            note=f"same objects as 2; {load.seconds:.1f} s, of which {load.cpu_seconds:.1f} s CPU in this process",
        )
        conn.execute("VACUUM ANALYZE narrow_rows")
        size = conn.execute("SELECT pg_total_relation_size('narrow_rows')").fetchone()
        report.add(section, "narrow_rows size with its indexes", (size[0] if size else 0) / MB, "MB")
        if narrow.lookup(sets[0]) != expected:
            _mismatch("narrow prototype")
        seconds = statistics.median(_timed(narrow.lookup, s) for s in sets)
        label = f"narrow prototype lookup, {big:,} users"
        report.add(section, label, seconds, "s", BIG_BATCH_S, applies=big >= 100_000)
        if expected_hits is not None:
            if narrow.lookup_objects(sets[0]) != expected_hits:
                _mismatch("narrow prototype lookup_objects")
            seconds = statistics.median(_timed(narrow.lookup_objects, s) for s in sets)
            label = f"narrow prototype lookup_objects, {big:,} users"
            report.add(section, label, seconds, "s", BIG_BATCH_S, applies=big >= 100_000)
        conn.execute("DROP TABLE narrow_rows, narrow_objects")


# -- 4: DynamoDB on moto --------------------------------------------------------------------------------------------


def bench_dynamodb(report: Report, rows: int, singles: int) -> None:
    from lakepurge.index.dynamodb import DynamoIndexStore

    section = f"4. DynamoDB adapter against MOTO (NOT DynamoDB: says nothing of AWS), {rows:,}-row index"
    progress(f"dynamodb (moto) bulk load: {rows:,} rows")
    store = DynamoIndexStore(DYNAMO_TABLE)
    store.ensure_schema()
    try:
        load = bulk_load(store.replace_objects, rows, seed=13)
        report.add(
            section,
            "DynamoDB (moto) bulk load",
            load.rows / load.seconds,
            "rows/s",
            PG_LOAD_ROWS_S,
            note=f"{load.rows:,} rows, {load.rows // LINES_PER_OBJECT} objects; BatchWriteItem + GSI queries to moto",
            applies=False,
        )
        progress("dynamodb (moto) lookups")
        bench_lookups(report, section, store, sorted(load.users), singles, None, on_moto=True)
    finally:
        store.close()
    report.notes.append(
        "DynamoDB figures come from moto, an in-process Python emulation sharing the bench's GIL: they exercise the"
        " adapter's requests end to end and say nothing of DynamoDB's latency or throughput. moto's Query sorts"
        " every item of the table on each call (moto 5.2.5, Table.query -> all_items()), so its cost grows with the"
        " table: that is why the moto index is small and why no 100,000-user lookup is run on it."
    )


# -- main -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    rows: int  # PostgreSQL index rows
    reader_bytes: int  # in-memory JSON Lines for the reader alone
    objects: int  # S3 objects for the Lambda path and the backfill
    object_bytes: int
    singles: int  # one-user lookups timed
    big: int  # the big lookup batch
    dynamo_rows: int
    dynamo_singles: int


def sizes_for(args: argparse.Namespace) -> Sizes:
    if args.quick:
        return Sizes(
            rows=args.rows or 200_000,
            reader_bytes=20 * MB,
            objects=10,
            object_bytes=2 * MB,
            singles=2_000,
            big=100_000,
            dynamo_rows=args.dynamo_rows or 2_000,
            dynamo_singles=30,
        )
    return Sizes(
        rows=args.rows or 5_000_000,
        reader_bytes=200 * MB,
        objects=100,
        object_bytes=2 * MB,
        singles=5_000,
        big=100_000,
        dynamo_rows=args.dynamo_rows or 10_000,
        dynamo_singles=200,
    )


def busy_cores() -> float:
    """The 1-minute load average: other work on the machine skews every figure."""
    return os.getloadavg()[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=0, help="PostgreSQL index rows (default 5,000,000; quick 200,000)")
    parser.add_argument("--dynamo-rows", type=int, default=0, help="DynamoDB (moto) rows (default 10,000; quick 2,000)")
    parser.add_argument("--quick", action="store_true", help="small data, ~2 minutes: the smoke-test size")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of the reader to the notes")
    parser.add_argument("--skip-spark", action="store_true", help="leave out the Spark backfill")
    parser.add_argument("--skip-prototype", action="store_true", help="leave out the narrow-schema prototype")
    parser.add_argument("--skip-dynamodb", action="store_true", help="leave out the DynamoDB (moto) figures")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    args = parser.parse_args(argv)
    sizes = sizes_for(args)
    # Never reach a real AWS account, whatever the environment holds: only this bench's moto server (start_moto
    # sets the endpoint; child processes inherit it).
    os.environ.update(DUMMY_CREDENTIALS)
    for leaked in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(leaked, None)
    report = Report("quick" if args.quick else "full")
    load_before = busy_cores()

    progress(f"generating {sizes.reader_bytes / MB:.0f} MB of review records")
    lines = review_lines(seed=1, total_bytes=max(sizes.reader_bytes, sizes.objects * sizes.object_bytes))
    bench_reader(report, lines, args.profile)
    bodies = split_objects(lines, sizes.objects, sizes.object_bytes)
    del lines
    gc.collect()

    from lakepurge.core import aws
    from lakepurge.index.postgres import PostgresIndexStore
    from lakepurge.local.moto import start_moto
    from lakepurge.local.postgres import start_postgres

    postgres = start_postgres()
    moto = None
    store = None
    try:
        moto = start_moto()
        store = PostgresIndexStore(postgres.dsn)
        store.ensure_schema()
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        keys = [f"{PREFIX}part-{n:05d}.jsonl" for n in range(len(bodies))]
        for key, body in zip(keys, bodies, strict=True):
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        total = sum(len(body) for body in bodies)
        del bodies
        bench_lambda(report, postgres.dsn, keys, total)
        if not args.skip_spark:
            bench_spark(report, bench_settings(postgres.dsn), store, len(keys), total)
        users = bench_pg_load(report, store, postgres.dsn, sizes.rows)
        progress("postgres lookups")
        section = f"3. Lookup latency: PostgresIndexStore.lookup on the {sizes.rows:,}-row index (warm)"
        bench_lookups(report, section, store, users, sizes.singles, sizes.big)
        matches = bench_lookup_alternatives(report, store, postgres.dsn, users, sizes.big)
        if matches and not args.skip_prototype:
            bench_narrow(report, store, postgres.dsn, sizes.rows, users, sizes.big)
        del users
        if not args.skip_dynamodb:
            moto.reset()
            bench_dynamodb(report, sizes.dynamo_rows, sizes.dynamo_singles)
    finally:
        if store is not None:
            store.close()
        if moto is not None:
            moto.stop()
        postgres.stop()

    elapsed = time.monotonic() - report.started
    load_after = busy_cores()
    report.notes.append(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}; took {elapsed:.0f} s; load average"
        f" {load_before:.1f} at the start, {load_after:.1f} at the end"
        + (" (other work was running: figures are pessimistic)" if min(load_before, load_after) > 1.0 else "")
    )
    print(f"lakepurge index benchmark ({report.mode})")
    print(report.table())
    meta = {
        "mode": report.mode,
        "sizes": asdict(sizes),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "seconds": round(elapsed, 1),
        "load_average": [round(load_before, 2), round(load_after, 2)],
    }
    report.save(args.output, meta)
    print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
