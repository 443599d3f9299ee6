"""Erase-path benchmark: the engine's CPU per byte against a reference splice (its check before the write shown
apart and included), and the whole erase path against a plain copy through the same S3 endpoint, on two lakes.

Run from the repository root on an otherwise idle machine::

    .venv/bin/python bench/erase_path_bench.py            # both lakes, 200 objects x 5,000 records each: ~40 min
    .venv/bin/python bench/erase_path_bench.py --quick    # 40 objects x 1,000 records: a few minutes, a smoke test

The lakes are purge_bench's generator (JSON Lines review records, samples.review_record):

- *easy*: orjson's compact output, ~260 bytes a line, non-ASCII as UTF-8, no escapes; 20,000 users of 50 records,
  half *clustered* (all their records in 2 objects), half *scattered* (over 50 objects);
- *hard*: Python's json.dumps defaults (`", "` and `": "`, every non-ASCII character a \\uXXXX escape), ~600 bytes
  a line with escapes in every text (line breaks, tabs, quotes), and 200,000 users of 5 records (clustered in 2
  objects, scattered over 5): more users than any memory of ids, so a check that hashes the ids it reads meets
  mostly new ones.

Every user set (1 user, 100 users, 1% and 10% of the users) is drawn afresh for each repetition from one layout's
users.

Part 1, on local bytes (no S3, one core, process CPU time), for the lake's formats: the engine's rewrite of the
affected objects (purge.rewrite with the ownership check, the CRC64NVME the write states) and its check before the
write (engine.still_holding: the produced bytes read for the users with the indexer's grammar), each timed, against
a reference splice written here (bulk read, newline offsets from one split, `{}` spliced in by memoryview, one
output buffer; gzip: inflate, the same splice, deflate at the engine's level; Parquet: drop the rows known from the
ground truth) and, for JSON Lines, against a regex full scan of the same objects (re.finditer of the id field's
values over the whole object, each checked against the users' raw ids in a set, the lines holding them spliced out
by position; no keyed hash, no escape handling). The engine runs with the users as the purge holds them: by their
keyed hashes and the ids the launcher sealed for the executors (`sealed ids`: a Spark executor, which opens them,
lakepurge.core.executor_ids, and builds HashedUsers(known=...) from them; `hashes` with code from before them), and
with their ids in memory besides (an inline purge, whose process holds them). An executor's worker process opens the
sealed ids and builds its HashedUsers once per request (its later tasks reuse them), never per object: the figure
counts one opening (decrypt and build) per pass over the objects, as if they were one task's, the most a task of
them pays; the opening's CPU is also printed on its own. (The document's GET, one round trip per worker process and
request, is not on local bytes.) In each repetition every contender is timed as the minimum of 3 interleaved
passes over the same objects (as timeit recommends: the minimum is the cost without interference; every engine
pass starts from no memory of ids), and the ratios of those minimums are kept; the figures are the medians of the
repetitions' ratios, with the min-max.

Part 2, through moto (its own process) and a throwaway PostgreSQL index loaded with the ground truth: the full
erase path without Spark, `ops.manual_purge.purge_users(..., engine="inline")` (index lookup, report, rewrite,
check, verification, certificate; the CLI's `lakepurge purge --yes --engine inline`), against a plain copy (GET and
PUT back each affected object, on as many threads as the purge uses), in wall time and in CPU (this process and
moto's). Between runs the objects are put back and the index comes from a template database (not timed).

It asserts nothing about time; a run that erased the wrong lines, or did not end verified, is an error.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import inspect
import io
import itertools
import json
import os
import random
import re
import statistics
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import purge_bench as pb  # the lake, moto in its own process, the template index)

RESULTS = Path(__file__).resolve().parent / "results" / "erase_path_bench.json"
# Targets (issue 29): the engine with its check <= 2x the splice (moonshot 1.3x); a regex full scan never faster than
# the engine (100 users, 1%); the full path <= 1.5x a copy at 100 users and 1% (moonshot 1.2x).
ENGINE_VS_SPLICE_MAX = 2.0
ENGINE_VS_SPLICE_MOONSHOT = 1.3
REGEX_VS_ENGINE_MIN = 1.0
PATH_VS_COPY_MAX = 1.5
PATH_VS_COPY_MOONSHOT = 1.2
PASSES = 3  # part 1: every contender timed as the minimum of this many interleaved passes a rep
FORMATS = ("jsonl", "jsonl.gz", "csv", "parquet")
CSV_COLUMNS = ("review_id", "user_id", "rating", "title", "body", "ts")
JUDGED = ("100 users", "1% of users", "10% of users")
PATH_JUDGED = ("100 users", "1% of users")
HASHES, SEALED, IDS = "hashes", "sealed ids", "ids in memory"


@dataclass(frozen=True)
class LakeSpec:
    name: str
    scale: pb.Scale
    style: str  # purge_bench.generate_lake's
    formats: tuple[str, ...]  # part 1's, unless --formats says


def scale(objects: int, records: int, users: int, per_user: int, reps: int) -> pb.Scale:
    return pb.Scale(
        objects, records, users, per_user, reps=reps, slow_engine_reps=1, e2e_reps=0, e2e_reps_100=0, versioned_reps=0
    )


def lakes(quick: bool, reps: int) -> dict[str, LakeSpec]:
    if quick:
        return {
            "easy": LakeSpec("easy", scale(40, 1000, 2_000, 10, reps), "orjson", FORMATS),
            "hard": LakeSpec("hard", scale(40, 1000, 8_000, 5, reps), "json.dumps", ("jsonl", "jsonl.gz")),
        }
    return {
        "easy": LakeSpec("easy", scale(200, 5000, 20_000, 50, reps), "orjson", FORMATS),
        "hard": LakeSpec("hard", scale(200, 5000, 200_000, 5, reps), "json.dumps", ("jsonl", "jsonl.gz")),
    }


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


LAYOUTS = ("clustered", "scattered")


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

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

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


# The id field's value as a plain JSON string, at any spacing (what a regex scan looks for; escapes are not read).
_ID_VALUE = re.compile(rb'"user_id"[ \t\r]*:[ \t\r]*"([^"\\\n]*)"')


def regex_full_scan(fmt: str, stored: bytes, wanted: frozenset[bytes]) -> bytes:
    """What a tool without an index does to each object: one regular expression over all of it finds the id
    field's values, each is checked against the users' raw ids, and the lines holding one are spliced out by
    position (`{}`), every other byte kept. gzip: inflated first and deflated after, as the engine does."""
    body = io.BytesIO(stored).read()
    data = zlib.decompress(body, 47) if fmt == "jsonl.gz" else body
    view = memoryview(data)
    out = bytearray()
    passed = 0
    for match in _ID_VALUE.finditer(data):
        if match.group(1) not in wanted:
            continue
        begin = data.rfind(b"\n", 0, match.start()) + 1
        if begin < passed:
            continue  # the same line again
        end = data.find(b"\n", match.end())
        out += view[passed:begin]
        out += b"{}"
        passed = len(data) if end < 0 else end
    out += view[passed:]
    if fmt != "jsonl.gz":
        return bytes(out)
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    return deflate.compress(out) + deflate.flush()


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


def check_before_write(fmt: str, staged: Any, users: Any, dataset: Any, settings: Any) -> int:
    """What the purge runs on the produced bytes before the write: the lines still holding a user."""
    from lakepurge.purge.engine import still_holding

    key = "x.jsonl.gz" if fmt == "jsonl.gz" else f"x.{fmt}"
    return len(still_holding(staged, key, dataset, settings.indexing, users))


def cpu_seconds(calls: list[Callable[[], object]]) -> float:
    """CPU seconds of the calls (one an object), one at a time, each output dropped as it is written."""
    seconds = 0.0
    for call in calls:
        start = time.process_time()
        call()
        seconds += time.process_time() - start
    return seconds


@dataclass
class EnginePass:
    rewrite_s: float = 0.0
    check_s: float = 0.0
    erased: int = 0
    left: int = 0
    outputs: dict[str, bytes] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return self.rewrite_s + self.check_s


def run_engine(
    fmt: str,
    bodies: dict[str, bytes],
    work: list[tuple[str, list[int]]],
    users: Any,
    dataset: Any,
    settings: Any,
    keep: bool = False,
) -> EnginePass:
    """CPU seconds of the engine over the objects, one at a time: its rewrite, then its check of what it produced
    (each staged object closed before the next, as the purge does). keep: the produced bytes, to compare."""
    done = EnginePass()
    expect = getattr(users, "expect", None)  # (HashedUsers before it: none)
    if expect is not None:  # the objects of the pass, as a task tells its users how many it will check
        expect(len(work))
    for key, lines in work:
        start = time.process_time()
        staged, count = engine_rewrite(fmt, bodies[key], lines, users, dataset, settings)
        middle = time.process_time()
        done.left += check_before_write(fmt, staged, users, dataset, settings)
        done.check_s += time.process_time() - middle
        done.rewrite_s += middle - start
        done.erased += count
        if keep:
            done.outputs[key] = staged.reader().read()
        staged.close()
    return done


def ids_in_memory_supported() -> bool:
    """Whether HashedUsers can be given the users' ids (this branch); the engine before it knew hashes only."""
    from lakepurge.core.privacy import HashedUsers

    return "known" in inspect.signature(HashedUsers).parameters


def executor_mode() -> str:
    """How a Spark executor holds the users: by the ids sealed for it, where the code has them, else their hashes."""
    return SEALED if importlib.util.find_spec("lakepurge.core.executor_ids") is not None else HASHES


def users_as(mode: str, hashes: list[str], ids: list[str], pseudonymizer: Any) -> Any:
    """The users as the engine gets them; for SEALED, a function that opens the sealed ids as an executor's task does
    (the sealing is the launcher's, not timed)."""
    from lakepurge.core.privacy import HashedUsers

    if mode == IDS:
        return HashedUsers(hashes, pseudonymizer, known=ids)  # type: ignore[call-arg]
    if mode == SEALED:
        from lakepurge.core import executor_ids  # type: ignore[attr-defined,unused-ignore]

        key, request = pb.HASH_KEY.encode(), "bench-request"
        body = executor_ids.seal(key, request, ids)
        if hasattr(executor_ids, "users_of"):  # as a task builds them: bound to these hashes, no id hashed again
            return lambda: executor_ids.users_of(executor_ids.unseal_bound(body, key, request), hashes, key)
        return lambda: HashedUsers(hashes, pseudonymizer, known=executor_ids.unseal(body, key, request))
    return HashedUsers(hashes, pseudonymizer)


def part_one(
    lake: pb.Lake, spec: LakeSpec, objects: int, reps: int, formats: Sequence[str], out: dict[str, Any]
) -> None:
    from lakepurge.core.config import DatasetConfig
    from lakepurge.core.privacy import Pseudonymizer

    settings = settings_for("postgresql://unused/unused")  # its [indexing] limits, as the purge has them
    pseudonymizer = Pseudonymizer(pb.HASH_KEY.encode())
    keys = lake.keys[:objects]
    positions = {key: index for index, key in enumerate(lake.keys)}
    modes = (executor_mode(), IDS) if ids_in_memory_supported() else (HASHES,)
    rng = random.Random(7)
    for fmt in formats:
        pb.progress(f"part 1, {spec.name} lake: encoding {len(keys)} objects as {fmt} ...")
        bodies = {key: encoded(fmt, lake.bodies[key]) for key in keys}
        dataset = DatasetConfig(
            name="reviews",
            location="s3://lake/reviews/",
            format="parquet" if fmt == "parquet" else ("csv" if fmt == "csv" else "jsonl"),
            id_fields=("user_id",),
            erase="drop" if fmt == "parquet" else "blank",
        )
        scanned = fmt in ("jsonl", "jsonl.gz")
        for layout in ("clustered", "scattered"):
            for user_set in USER_SETS:
                ratios: dict[str, dict[str, Series]] = {
                    mode: {"engine": Series(), "check": Series(), "with_check": Series(), "regex": Series()}
                    for mode in modes
                }
                openings: list[float] = []  # CPU seconds of each opening of the sealed ids
                for _ in range(reps):
                    chosen = draw(spec.scale, layout, user_set, rng)
                    ids = [lake.user_ids[u] for u in chosen]
                    wanted = set(ids)
                    work = []
                    for key in keys:
                        owners = lake.owners[positions[key]]
                        lines = [n for n, user in enumerate(owners) if lake.user_ids[user] in wanted]
                        if lines:
                            work.append((key, lines))
                    if not work:
                        continue
                    hashes = pseudonymizer.many(wanted)
                    raw = frozenset(i.encode() for i in ids)
                    expected = sum(len(lines) for _, lines in work)
                    ref_passes: list[float] = []
                    regex_passes: list[float] = []
                    passes: dict[str, list[EnginePass]] = {mode: [] for mode in modes}
                    for number in range(PASSES):  # interleaved; the minimum of each is its cost without interference
                        gc.collect()
                        ref_passes.append(cpu_seconds([partial(reference, fmt, bodies[k], lines) for k, lines in work]))
                        if scanned:
                            gc.collect()
                            regex_passes.append(
                                cpu_seconds([partial(regex_full_scan, fmt, bodies[k], raw) for k, _ in work])
                            )
                        for mode in modes:
                            users = users_as(mode, hashes, ids, pseudonymizer)  # afresh: no memory of ids
                            gc.collect()
                            opening = 0.0
                            if callable(users):  # an executor's task opens the sealed ids: counted in its check
                                start = time.process_time()
                                users = users()
                                opening = time.process_time() - start
                                openings.append(opening)
                            done = run_engine(fmt, bodies, work, users, dataset, settings, keep=number == 0)
                            done.check_s += opening
                            if done.erased != expected or done.left:
                                raise RuntimeError(
                                    f"{spec.name} {fmt} {layout} {user_set.name} ({mode}): erased {done.erased} lines"
                                    f" of {expected}, {done.left} still holding a user"
                                )
                            if number == 0 and scanned:
                                for key, _ in work:  # the regex scan erases the same lines, byte for byte
                                    produced = regex_full_scan(fmt, bodies[key], raw)
                                    if fmt == "jsonl.gz":
                                        produced, engine_out = (
                                            gzip.decompress(produced),
                                            gzip.decompress(done.outputs[key]),
                                        )
                                    else:
                                        engine_out = done.outputs[key]
                                    if produced != engine_out:
                                        raise RuntimeError(f"{fmt}: the regex scan and the engine differ on {key}")
                            done.outputs.clear()
                            passes[mode].append(done)
                    ref_s = min(ref_passes)
                    for mode in modes:
                        best_rewrite = min(p.rewrite_s for p in passes[mode])
                        best_check = min(p.check_s for p in passes[mode])
                        best_total = min(p.total_s for p in passes[mode])
                        ratios[mode]["engine"].add(best_rewrite / ref_s)
                        ratios[mode]["check"].add(best_check / ref_s)
                        ratios[mode]["with_check"].add(best_total / ref_s)
                        if regex_passes:
                            ratios[mode]["regex"].add(min(regex_passes) / best_total)
                for mode in modes:
                    row = {
                        "lake": spec.name,
                        "format": fmt,
                        "layout": layout,
                        "set": user_set.name,
                        "users": mode,
                        **{
                            f"{name}_vs_splice": series.values
                            for name, series in ratios[mode].items()
                            if name != "regex"
                        },
                        "regex_vs_engine": ratios[mode]["regex"].values,
                        **({"opening_ms": [round(o * 1000, 3) for o in openings]} if mode == SEALED else {}),
                    }
                    out.setdefault("part1", []).append(row)
                    mine = ratios[mode]
                    pb.progress(
                        f"  {spec.name} {fmt:9} {layout:9} {user_set.name:13} {mode:13}"
                        f" engine {mine['engine'].summary()}  check {mine['check'].summary()}"
                        f"  with check {mine['with_check'].summary()}  regex/engine {mine['regex'].summary()}"
                        + (f"  opening {1000 * min(openings):.2f} ms" if mode == SEALED and openings else "")
                    )


# -- part 2: the full erase path through moto ------------------------------------------------------------------------


def part_two(
    lake: pb.Lake,
    spec: LakeSpec,
    reps: int,
    workers: int,
    out: dict[str, Any],
    user_sets: Sequence[UserSet] = USER_SETS,
    layouts: Sequence[str] = LAYOUTS,
) -> None:
    from lakepurge.core import aws
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.local.postgres import start_postgres
    from lakepurge.ops.manual_purge import purge_users

    pb.progress(f"part 2, {spec.name} lake: PostgreSQL, moto (own process), upload, template index ...")
    postgres = start_postgres()
    moto = pb.start_moto_process()
    aws.client.cache_clear()  # clients of the endpoint started for this lake
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
        for layout in layouts:
            for user_set in user_sets:
                wall, cpu = Series(), Series()
                detail = []
                for _ in range(reps):
                    chosen = draw(spec.scale, layout, user_set, rng)
                    keys = lake.affected(chosen)
                    load = os.getloadavg()[0]
                    cpu_before = time.process_time() + pb.process_cpu(moto.process.pid)
                    copy_s = pb.plain_copy(s3, keys, workers)
                    copy_cpu = time.process_time() + pb.process_cpu(moto.process.pid) - cpu_before
                    dsn = databases.fresh()
                    settings = settings_for(dsn, workers)
                    wanted = [lake.user_ids[u] for u in chosen]
                    chosen_set = set(chosen)
                    positions = {key: index for index, key in enumerate(lake.keys)}
                    expected = sum(1 for key in keys for u in lake.owners[positions[key]] if u in chosen_set)
                    gc.collect()
                    cpu_before = time.process_time() + pb.process_cpu(moto.process.pid)
                    start = time.perf_counter()
                    with counted_requests() as requests:
                        run = purge_users(settings, wanted, dry_run=False, force=True, say=quiet, engine="inline")
                    path_s = time.perf_counter() - start
                    path_cpu = time.process_time() + pb.process_cpu(moto.process.pid) - cpu_before
                    result = run.result
                    if result is None or not result.verified or result.lines_erased != expected:
                        raise RuntimeError(
                            f"{spec.name} {layout} {user_set.name}: verified={getattr(result, 'verified', None)}, "
                            f"{getattr(result, 'lines_erased', None)} lines erased, {expected} expected"
                        )
                    pb.put_objects(s3, lake, keys)  # back to the original bytes (same ETags) for the next run
                    databases.drop(dsn)
                    wall.add(path_s / copy_s)
                    cpu.add(path_cpu / copy_cpu)
                    detail.append(
                        {
                            "objects": len(keys),
                            "copy_s": copy_s,
                            "path_s": path_s,
                            "copy_cpu_s": copy_cpu,
                            "path_cpu_s": path_cpu,
                            "lines": expected,
                            "load_average": round(load, 2),
                            "requests": dict(sorted(requests.items())),
                        }
                    )
                out.setdefault("part2", []).append(
                    {
                        "lake": spec.name,
                        "layout": layout,
                        "set": user_set.name,
                        "path_vs_copy": wall.values,
                        "path_vs_copy_cpu": cpu.values,
                        "runs": detail,
                    }
                )
                seconds = statistics.median(d["path_s"] for d in detail)
                objects = statistics.median(d["objects"] for d in detail)
                pb.progress(
                    f"  {spec.name} {layout:9} {user_set.name:13} {objects:6.0f} objects  path {seconds:6.2f} s"
                    f"  path/copy wall {wall.summary()}  CPU {cpu.summary()}"
                    f"  load {', '.join(str(d['load_average']) for d in detail)}"
                )
                per_object = {kind: n / detail[-1]["objects"] for kind, n in detail[-1]["requests"].items()}
                each = ", ".join(f"{kind} {n:.2f}" for kind, n in per_object.items())
                pb.progress(f"    requests per object (last run): {each}")
    finally:
        moto.stop()
        postgres.stop()


def quiet(_: str) -> None:
    return None


@contextmanager
def counted_requests() -> Iterator[Counter[str]]:
    """The S3 requests (by operation; PUTs of the lake's objects apart from those of the results: intents, outcome
    batches, placeholder records, the certificate) and the index's statements (psycopg) made inside, on any thread."""
    import botocore.client
    import psycopg

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    api_call = botocore.client.BaseClient._make_api_call
    executes = {name: getattr(psycopg.Cursor, name) for name in ("execute", "executemany", "copy")}

    def count(kind: str) -> None:
        with lock:
            counts[kind] += 1

    def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        kind = operation
        if operation == "PutObject" and params.get("Bucket") != pb.BUCKET:
            key = str(params.get("Key", ""))
            kind += next((f" {part}" for part in RESULT_PARTS if part in key), " other")
        count(kind)
        return api_call(client, operation, params)

    def statement(original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            count("index statement")
            return original(*args, **kwargs)

        return counted

    botocore.client.BaseClient._make_api_call = make_api_call  # type: ignore[method-assign]
    for name, original in executes.items():
        setattr(psycopg.Cursor, name, statement(original))
    try:
        yield counts
    finally:
        botocore.client.BaseClient._make_api_call = api_call  # type: ignore[method-assign]
        for name, original in executes.items():
            setattr(psycopg.Cursor, name, original)


RESULT_PARTS = ("placeholders", "intents", "batches", "certificates", "reports")  # the first a key holds names it


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


def verdict(value: float | None, at_most: float, moonshot: float) -> str:
    if value is None:
        return ""
    return "MOONSHOT" if value <= moonshot else ("PASS" if value <= at_most else "MISS")


def render(out: dict[str, Any]) -> str:
    lines = ["", "Part 1: engine CPU / reference splice on local bytes (median of reps, min-max)"]
    lines.append(
        f"{'lake':5} {'format':9} {'layout':9} {'set':13} {'users':13} {'engine':20} {'check':20}"
        f" {'engine with check':20} target  {'regex scan/engine':20}"
    )
    for row in out.get("part1", []):
        with_check = Series(row["with_check_vs_splice"])
        regex = Series(row["regex_vs_engine"])
        judged = row["set"] in JUDGED
        target = verdict(with_check.median, ENGINE_VS_SPLICE_MAX, ENGINE_VS_SPLICE_MOONSHOT) if judged else ""
        regex_verdict = ""
        if row["set"] in PATH_JUDGED and regex.median is not None:
            regex_verdict = "PASS" if regex.median >= REGEX_VS_ENGINE_MIN else "MISS"
        lines.append(
            f"{row['lake']:5} {row['format']:9} {row['layout']:9} {row['set']:13} {row['users']:13}"
            f" {Series(row['engine_vs_splice']).summary():20} {Series(row['check_vs_splice']).summary():20}"
            f" {with_check.summary():20} {target:7} {regex.summary():20} {regex_verdict}"
        )
    lines.append("")
    lines.append(
        "Part 2: full erase path (lookup, report, rewrite, check, verification, certificate) / plain copy, moto"
    )
    lines.append(f"{'lake':5} {'layout':9} {'set':13} {'wall':22} target    {'CPU (this process + moto)':22}")
    for row in out.get("part2", []):
        wall = Series(row["path_vs_copy"])
        judged = row["set"] in PATH_JUDGED
        target = verdict(wall.median, PATH_VS_COPY_MAX, PATH_VS_COPY_MOONSHOT) if judged else ""
        lines.append(
            f"{row['lake']:5} {row['layout']:9} {row['set']:13} {wall.summary():22} {target:9}"
            f" {Series(row['path_vs_copy_cpu']).summary():22}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 objects x 1,000 records: a smoke test")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="threads of the copy and of the purge")
    parser.add_argument("--local-objects", type=int, default=40, help="objects of part 1 (per format)")
    parser.add_argument("--lakes", default="easy,hard", help="easy, hard or both")
    parser.add_argument("--formats", default="", help="part 1's formats (default: each lake's own)")
    parser.add_argument("--skip-s3", action="store_true", help="part 1 only")
    parser.add_argument("--skip-local", action="store_true", help="part 2 only")
    sets = ",".join(s.name for s in USER_SETS)
    parser.add_argument("--sets", default=sets, help=f"part 2's user sets (default: all, {sets})".replace("%", "%%"))
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="part 2's layouts (default: both)")
    args = parser.parse_args(argv)
    specs = lakes(args.quick, args.reps)
    started = time.perf_counter()
    load = os.getloadavg()[0]
    out: dict[str, Any] = {"reps": args.reps, "lakes": {}, "load_average_start": round(load, 2)}
    for name in args.lakes.split(","):
        spec = specs[name]
        pb.progress(f"generating the {name} lake: {spec.scale.objects} objects x {spec.scale.records_per_object} ...")
        lake = pb.generate_lake(spec.scale, style=spec.style)
        out["lakes"][name] = {
            "objects": spec.scale.objects,
            "records_per_object": spec.scale.records_per_object,
            "users": spec.scale.users,
            "bytes": lake.total_bytes,
            "style": spec.style,
        }
        formats = args.formats.split(",") if args.formats else spec.formats
        if not args.skip_local:
            part_one(lake, spec, min(args.local_objects, spec.scale.objects), args.reps, formats, out)
        if not args.skip_s3:
            user_sets = [s for s in USER_SETS if s.name in args.sets.split(",")]
            part_two(lake, spec, args.reps, args.workers, out, user_sets, args.layouts.split(","))
        del lake
        gc.collect()
    out["seconds"] = round(time.perf_counter() - started)
    out["load_average_end"] = round(os.getloadavg()[0], 2)
    print(render(out))
    loads = f"load average {out['load_average_start']} at the start, {out['load_average_end']} at the end"
    print(f"\n{out['seconds']} s; {loads}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
