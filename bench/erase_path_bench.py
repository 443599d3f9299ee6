"""Erase-path benchmark: the engine's CPU per byte against a reference splice, and the whole erase path against a
plain copy through the same S3 endpoint.

Run from the repository root on an otherwise idle machine::

    .venv/bin/python bench/erase_path_bench.py            # 200 objects x 5,000 records (~260 MB): ~15 min
    .venv/bin/python bench/erase_path_bench.py --quick    # 40 objects x 1,000 records: ~2 min, a smoke test

The lake is purge_bench's (JSON Lines review records, samples.review_record, ~260 bytes a line), half of its users
*clustered* (all their records in 2 objects) and half *scattered* (their records over 50 objects). Every user set
(1 user, 100 users, 1% and 10% of the users) is drawn afresh for each repetition from one layout's users.

Part 1, on local bytes (no S3, one core, process CPU time): for JSON Lines, JSON Lines gzip, CSV and Parquet copies
of the same objects, the engine's rewrite of the affected objects (purge.rewrite with the ownership check against
the users' keyed hashes, as the purge job holds them, and the CRC64NVME the write states) against a reference
splice written here: bulk read, newline offsets from one split, `{}` spliced in by memoryview, written to one
buffer (gzip: inflate, the same splice, deflate at the engine's level; Parquet: read each row group, drop the rows
known from the ground truth, write with the same settings). In each repetition both are timed as the minimum of
3 interleaved passes over the same objects (as timeit recommends: the minimum is the cost without interference from
the rest of the machine; every engine pass hashes the users' ids afresh), and the ratio of those minimums is kept;
the figures are the medians of the repetitions' ratios, with the min-max. The in-stream verification (the
rewritten bytes read for the users with the indexer's grammar, what replaces the second read) is shown beside them,
per byte too, from one pass.

Part 2, through moto (its own process) and a throwaway PostgreSQL index loaded with the ground truth: the full
erase path without Spark, `operator_purge.purge_users(..., engine="inline")` (index lookup, report, rewrite,
verification, certificate; the CLI's `lakepurge purge --yes --engine inline`), against a plain copy (GET and PUT
back each affected object, on as many threads as the purge uses). Between runs the objects are put back and the
index comes from a template database (not timed).

It asserts nothing about time; a run that erased the wrong number of lines, or did not end verified, is an error.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import itertools
import json
import os
import random
import statistics
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import purge_bench as pb  # the lake, moto in its own process, the template index)

RESULTS = Path(__file__).resolve().parent / "results" / "erase_path_bench.json"
ENGINE_VS_SPLICE_MAX = 1.3
PASSES = 3  # part 1: the reference and the engine each timed as the minimum of this many interleaved passes a rep
PATH_VS_COPY_MAX = 2.0
FORMATS = ("jsonl", "jsonl.gz", "csv", "parquet")
CSV_COLUMNS = ("review_id", "user_id", "rating", "title", "body", "ts")


@dataclass(frozen=True)
class UserSet:
    name: str
    count: int  # users; 0: `share` of all the lake's users (drawn from one layout's, who are half of them)
    share: float = 0.0


USER_SETS = (
    UserSet("1 user", 1),
    UserSet("100 users", 100),
    UserSet("1% of users", 0, 0.01),
    UserSet("10% of users", 0, 0.10),
)


def draw(scale: pb.Scale, layout: str, user_set: UserSet, rng: random.Random) -> list[int]:
    scattered = scale.scattered_users
    population = range(scattered) if layout == "scattered" else range(scattered, scale.users)
    count = user_set.count or max(1, round(scale.users * user_set.share))
    return sorted(rng.sample(population, count))


@dataclass
class Series:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    def summary(self) -> str:
        if not self.values:
            return "-"
        return f"{statistics.median(self.values):.2f}x ({min(self.values):.2f}-{max(self.values):.2f})"


# -- part 1: CPU per byte on local bytes -----------------------------------------------------------------------------


def csv_body(jsonl: bytes) -> bytes:
    import csv

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in jsonl.splitlines():
        record = json.loads(line)
        writer.writerow([record[c] for c in CSV_COLUMNS])
    return out.getvalue().encode()


def parquet_body(jsonl: bytes) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [json.loads(line) for line in jsonl.splitlines()]
    table = pa.Table.from_pylist(records)
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000, compression="snappy")
    return sink.getvalue()


def encoded(fmt: str, jsonl: bytes) -> bytes:
    if fmt == "jsonl":
        return jsonl
    if fmt == "jsonl.gz":
        return gzip.compress(jsonl, 6)
    if fmt == "csv":
        return csv_body(jsonl)
    return parquet_body(jsonl)


def reference_splice(data: bytes, lines: Sequence[int], blank: bytes) -> bytes:
    """The yardstick: newline offsets from one split, the blank spliced in by memoryview, one output buffer."""
    ends = list(itertools.accumulate(map(len, data.split(b"\n")), lambda a, b: a + b + 1, initial=0))
    view = memoryview(data)
    out = bytearray()
    start = 0
    for line in lines:
        out += view[start : ends[line]]
        out += blank
        start = ends[line + 1] - 1
    out += view[start:]
    return bytes(out)


def reference(fmt: str, stored: bytes, lines: Sequence[int]) -> bytes:
    body = io.BytesIO(stored).read()  # the bulk read (the engine reads its source as a stream too)
    if fmt == "jsonl":
        return reference_splice(body, lines, b"{}")
    if fmt == "csv":
        return reference_splice(body, [line + 1 for line in lines], b"," * (len(CSV_COLUMNS) - 1))
    if fmt == "jsonl.gz":
        deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
        spliced = reference_splice(zlib.decompress(body, 47), lines, b"{}")
        return deflate.compress(spliced) + deflate.flush()
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pq.ParquetFile(io.BytesIO(body))
    sink = io.BytesIO()
    writer = pq.ParquetWriter(sink, source.schema_arrow, compression="snappy")
    dropped = set(lines)
    first = 0
    for index in range(source.metadata.num_row_groups):
        table = source.read_row_group(index)
        keep = [first + row not in dropped for row in range(table.num_rows)]
        writer.write_table(table.filter(pa.array(keep)), row_group_size=table.num_rows)
        first += table.num_rows
    writer.close()
    return sink.getvalue()


def engine_rewrite(
    fmt: str, body: bytes, lines: Sequence[int], users: Any, dataset: Any, settings: Any
) -> tuple[Any, int]:
    from lakepurge.purge.ownership import Ownership
    from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl, rewrite_parquet

    if fmt == "parquet":
        staged, rows = rewrite_parquet(io.BytesIO(body), lines, users, dataset)
        staged.checksum  # noqa: B018 - the write states it
        return staged, len(rows)
    owner = Ownership(dataset, users)
    indexing = settings.indexing
    if fmt == "csv":
        staged = rewrite_csv(
            io.BytesIO(body), False, [line + 1 for line in lines], owner, False, indexing.max_record_bytes
        )
    else:
        staged = rewrite_jsonl(io.BytesIO(body), fmt == "jsonl.gz", lines, owner, False, indexing.inflation)
    staged.checksum  # noqa: B018
    return staged, len(owner.erased)


def verify_scan(fmt: str, staged: Any, users: Any, dataset: Any, settings: Any) -> int:
    """What the purge runs on the produced bytes before the write."""
    from lakepurge.purge.engine import still_holding

    key = "x.jsonl.gz" if fmt == "jsonl.gz" else f"x.{fmt}"
    return len(still_holding(staged, key, dataset, settings.indexing, users))


def run_reference(fmt: str, bodies: dict[str, bytes], work: list[tuple[str, list[int]]]) -> float:
    """CPU seconds of the reference splice over the objects, one at a time (each output dropped, as written)."""
    seconds = 0.0
    for key, lines in work:
        start = time.process_time()
        reference(fmt, bodies[key], lines)
        seconds += time.process_time() - start
    return seconds


def run_engine(
    fmt: str, bodies: dict[str, bytes], work: list[tuple[str, list[int]]], users: Any, dataset: Any, settings: Any
) -> tuple[float, int]:
    """CPU seconds of the engine's rewrite over the objects, one at a time (each staged object closed before the
    next, as the purge does); lines erased."""
    engine_s = 0.0
    erased = 0
    for key, lines in work:
        start = time.process_time()
        staged, count = engine_rewrite(fmt, bodies[key], lines, users, dataset, settings)
        engine_s += time.process_time() - start
        staged.close()
        erased += count
    return engine_s, erased


def run_verify(
    fmt: str, bodies: dict[str, bytes], work: list[tuple[str, list[int]]], users: Any, dataset: Any, settings: Any
) -> tuple[float, int]:
    """CPU seconds of the verification of what the engine produced (the rewrite itself not counted); lines still
    holding a user."""
    verify_s = 0.0
    left = 0
    for key, lines in work:
        staged, _ = engine_rewrite(fmt, bodies[key], lines, users, dataset, settings)
        start = time.process_time()
        left += verify_scan(fmt, staged, users, dataset, settings)
        verify_s += time.process_time() - start
        staged.close()
    return verify_s, left


def part_one(
    lake: pb.Lake, scale: pb.Scale, objects: int, reps: int, formats: Sequence[str], out: dict[str, Any]
) -> None:
    from lakepurge.core.config import DatasetConfig
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    settings = settings_for("postgresql://unused/unused")  # its [indexing] limits, as the purge has them
    pseudonymizer = Pseudonymizer(pb.HASH_KEY.encode())
    keys = lake.keys[:objects]
    positions = {key: index for index, key in enumerate(lake.keys)}
    rng = random.Random(7)
    for fmt in formats:
        pb.progress(f"part 1: encoding {len(keys)} objects as {fmt} ...")
        bodies = {key: encoded(fmt, lake.bodies[key]) for key in keys}
        dataset = DatasetConfig(
            name="reviews",
            location="s3://lake/reviews/",
            format="parquet" if fmt == "parquet" else ("csv" if fmt == "csv" else "jsonl"),
            id_fields=("user_id",),
            erase="drop" if fmt == "parquet" else "blank",
        )
        for layout in ("clustered", "scattered"):
            for user_set in USER_SETS:
                ratios, verify_ratios = Series(), Series()
                per_byte: list[float] = []
                for _ in range(reps):
                    chosen = draw(scale, layout, user_set, rng)
                    wanted = {lake.user_ids[u] for u in chosen}
                    work = []
                    for key in keys:
                        owners = lake.owners[positions[key]]
                        lines = [n for n, user in enumerate(owners) if lake.user_ids[user] in wanted]
                        if lines:
                            work.append((key, lines))
                    if not work:
                        continue
                    hashes = pseudonymizer.many(wanted)
                    size = sum(len(bodies[k]) for k, _ in work)
                    expected = sum(len(lines) for _, lines in work)
                    ref_passes: list[float] = []
                    eng_passes: list[float] = []
                    for _ in range(PASSES):  # interleaved; the minimum of each is its cost without interference
                        users = HashedUsers(hashes, pseudonymizer)  # afresh: every pass hashes the ids it meets
                        gc.collect()
                        ref_passes.append(run_reference(fmt, bodies, work))
                        gc.collect()
                        seconds, erased = run_engine(fmt, bodies, work, users, dataset, settings)
                        eng_passes.append(seconds)
                        if erased != expected:
                            raise RuntimeError(f"{fmt} {layout} {user_set.name}: erased {erased} lines, not {expected}")
                    ref_s, eng_s = min(ref_passes), min(eng_passes)
                    gc.collect()
                    ver_s, left = run_verify(fmt, bodies, work, users, dataset, settings)
                    if left:
                        raise RuntimeError(f"{fmt}: the rewritten bytes still hold {left} of the users' lines")
                    ratios.add(eng_s / ref_s)
                    verify_ratios.add(ver_s / ref_s)
                    per_byte.append(eng_s / size * 1e9)
                row = {
                    "format": fmt,
                    "layout": layout,
                    "set": user_set.name,
                    "engine_vs_splice": ratios.values,
                    "verify_scan_vs_splice": verify_ratios.values,
                    "engine_ns_per_byte": per_byte,
                }
                out.setdefault("part1", []).append(row)
                pb.progress(
                    f"  {fmt:9} {layout:9} {user_set.name:13} engine/splice {ratios.summary()}"
                    f"  verify scan/splice {verify_ratios.summary()}"
                )


# -- part 2: the full erase path through moto ------------------------------------------------------------------------


def part_two(lake: pb.Lake, scale: pb.Scale, reps: int, workers: int, out: dict[str, Any]) -> None:
    from lakepurge.core import aws
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.local.postgres import start_postgres
    from lakepurge.ops.manual_purge import purge_users

    pb.progress("part 2: PostgreSQL, moto (own process), upload, template index ...")
    postgres = start_postgres()
    moto = pb.start_moto_process()
    try:
        os.environ["LAKEPURGE_HASH_KEY"] = pb.HASH_KEY
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=pb.BUCKET)
        s3.create_bucket(Bucket=pb.REPORTS_BUCKET)
        pb.put_objects(s3, lake, lake.keys)
        databases = pb.IndexDatabases(postgres.dsn)
        template = databases.create_template()
        pb.load_index(s3, lake, template)
        run_reconcile(None, settings_for(template))  # the coverage a certified purge needs
        databases.seal_template()
        rng = random.Random(11)
        for layout in ("clustered", "scattered"):
            for user_set in USER_SETS:
                ratios = Series()
                detail = []
                for _ in range(reps):
                    chosen = draw(scale, layout, user_set, rng)
                    keys = lake.affected(chosen)
                    copy_s = pb.plain_copy(s3, keys, workers)
                    dsn = databases.fresh()
                    settings = settings_for(dsn, workers)
                    wanted = [lake.user_ids[u] for u in chosen]
                    expected = sum(1 for key in keys for u in lake.owners[lake.keys.index(key)] if u in set(chosen))
                    gc.collect()
                    start = time.perf_counter()
                    run = purge_users(settings, wanted, dry_run=False, force=True, say=quiet, engine="inline")
                    path_s = time.perf_counter() - start
                    result = run.result
                    if result is None or not result.verified or result.lines_erased != expected:
                        raise RuntimeError(
                            f"{layout} {user_set.name}: verified={getattr(result, 'verified', None)}, "
                            f"{getattr(result, 'lines_erased', None)} lines erased, {expected} expected"
                        )
                    pb.put_objects(s3, lake, keys)  # back to the original bytes (same ETags) for the next run
                    databases.drop(dsn)
                    ratios.add(path_s / copy_s)
                    detail.append({"objects": len(keys), "copy_s": copy_s, "path_s": path_s, "lines": expected})
                out.setdefault("part2", []).append(
                    {"layout": layout, "set": user_set.name, "path_vs_copy": ratios.values, "runs": detail}
                )
                seconds = statistics.median(d["path_s"] for d in detail)
                objects = statistics.median(d["objects"] for d in detail)
                pb.progress(
                    f"  {layout:9} {user_set.name:13} {objects:6.0f} objects  path {seconds:6.2f} s"
                    f"  path/copy {ratios.summary()}"
                )
    finally:
        moto.stop()
        postgres.stop()


def quiet(_: str) -> None:
    return None


def settings_for(dsn: str, threads: int = 4) -> Any:
    from lakepurge.core.config import parse_settings

    return parse_settings(
        {
            "index": {"backend": "postgres", "dsn": dsn},
            "reports": {"location": f"s3://{pb.REPORTS_BUCKET}/"},
            "datasets": [
                {
                    "name": pb.DATASET,
                    "location": f"s3://{pb.BUCKET}/reviews/",
                    "format": "jsonl",
                    "id_fields": ["user_id"],
                    "erase": "blank",
                }
            ],
            "purge": {"max_dataset_fraction": 1.0, "threads_per_task": threads},
        }
    )


def render(out: dict[str, Any]) -> str:
    lines = ["", "Part 1: engine CPU / reference splice (median of reps, min-max), local bytes"]
    lines.append(f"{'format':9} {'layout':9} {'set':13} {'engine/splice':22} {'verify scan/splice':22} target")
    for row in out.get("part1", []):
        ratio = Series(row["engine_vs_splice"])
        judged = row["set"] != "1 user"
        verdict = ""
        if judged and ratio.values:
            verdict = "PASS" if statistics.median(ratio.values) <= ENGINE_VS_SPLICE_MAX else "MISS"
        lines.append(
            f"{row['format']:9} {row['layout']:9} {row['set']:13} {ratio.summary():22} "
            f"{Series(row['verify_scan_vs_splice']).summary():22} {verdict}"
        )
    lines.append("")
    lines.append("Part 2: full erase path (lookup, report, rewrite, verify, certificate) / plain copy, through moto")
    for row in out.get("part2", []):
        ratio = Series(row["path_vs_copy"])
        judged = row["set"] in ("100 users", "1% of users")
        verdict = ""
        if judged and ratio.values:
            verdict = "PASS" if statistics.median(ratio.values) <= PATH_VS_COPY_MAX else "MISS"
        lines.append(f"{row['layout']:9} {row['set']:13} {ratio.summary():22} {verdict}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 objects x 1,000 records: a smoke test")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="threads of the copy and of the purge")
    parser.add_argument("--local-objects", type=int, default=40, help="objects of part 1 (per format)")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--skip-s3", action="store_true", help="part 1 only")
    parser.add_argument("--skip-local", action="store_true", help="part 2 only")
    args = parser.parse_args(argv)
    scale = (
        pb.Scale(40, 1000, 2_000, 10, reps=args.reps, slow_engine_reps=1, e2e_reps=0, e2e_reps_100=0, versioned_reps=0)
        if args.quick
        else pb.Scale(
            200, 5000, 20_000, 50, reps=args.reps, slow_engine_reps=1, e2e_reps=0, e2e_reps_100=0, versioned_reps=0
        )
    )
    started = time.perf_counter()
    load = os.getloadavg()[0]
    pb.progress(f"generating the lake: {scale.objects} objects x {scale.records_per_object} records ...")
    lake = pb.generate_lake(scale)
    out: dict[str, Any] = {"objects": scale.objects, "records_per_object": scale.records_per_object, "reps": args.reps}
    if not args.skip_local:
        part_one(lake, scale, min(args.local_objects, scale.objects), args.reps, args.formats.split(","), out)
    if not args.skip_s3:
        part_two(lake, scale, args.reps, args.workers, out)
    out["seconds"] = round(time.perf_counter() - started)
    out["load_average"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    print(render(out))
    print(
        f"\n{out['seconds']} s; load average {out['load_average'][0]} at the start, {out['load_average'][1]} at the end"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
