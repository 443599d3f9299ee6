"""Inline purge vs a local spark-submit purge job, by report size: where should workflow.inline_max_objects be?

Run from the repository root::

    .venv/bin/python bench/inline_bench.py           # 1, 5, 20, 50, 100 objects (~4 min on 2 cores)
    .venv/bin/python bench/inline_bench.py --sizes 1,20 --spark-reps 1

One lake of 100 JSON Lines objects (--records records each, ~260 bytes a record) on a moto S3 server in its own
process, indexed in a throwaway PostgreSQL. One user has --lines-per-object lines in every object; the report for
size N is that user's report restricted to its first N objects (written and hashed as the workflow writes reports).
For each size, each contender purges the same report from the same starting state (the objects are put back with
their original bytes, so their ETags match the report again, and re-indexed between runs; not timed):

- inline: lakepurge.purge.launch.run_inline in this process (warm: imports and clients loaded, as in a warm Lambda):
  report read and hash check, the engine over the objects on purge.threads_per_task threads, verification of every
  touched object, certificate;
- spark-submit: LocalSparkLauncher.start, then status() every 0.1 s until it ends: JVM and Spark start, the same
  purge on executors (local[2]), verification, certificate, JVM stop.

Prints a table of medians and writes bench/results/inline_bench.json. It measures; it fails only if a purge does
not succeed and verify, or erases another number of lines than the report names.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

# The lake, its reports bucket and the hash key are purge_bench's (its settings_toml describes them).
from purge_bench import BUCKET, HASH_KEY, REPORTS_BUCKET

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).resolve().parent / "results" / "inline_bench.json"
TARGET = "u-target-0000001"
OBJECTS = 100


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _serve_moto(port: int, ready: Any) -> None:
    from lakepurge.local.moto import start_moto

    # moto 5.2.5 deep-copies every version of every key on each ListObjectVersions (which the engine sends for
    # each object): without purge_bench's patch the figures measure moto, and its process can die under the load.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from purge_bench import _patch_moto_list_object_versions

    _patch_moto_list_object_versions()
    start_moto(port)
    ready.set()
    while True:
        time.sleep(3600)


def start_moto_process() -> Any:
    """moto in its own process, so serving S3 does not share the inline purge's GIL."""
    from lakepurge.local.moto import DUMMY_CREDENTIALS
    from lakepurge.local.postgres import free_port

    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    port = free_port()
    process = context.Process(target=_serve_moto, args=(port, ready), daemon=True)
    process.start()
    if not ready.wait(60):
        process.terminate()
        raise RuntimeError("moto server did not start")
    os.environ.update(DUMMY_CREDENTIALS)
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{port}"
    return process


def make_lake(records: int, lines_per_object: int, seed: int = 11) -> dict[str, bytes]:
    from lakepurge.local.samples import review_record, user_id

    rng = random.Random(seed)
    bodies = {}
    number = 0
    for i in range(OBJECTS):
        targets = set(rng.sample(range(records), lines_per_object))
        lines = []
        for n in range(records):
            number += 1
            user = TARGET if n in targets else user_id(rng.randint(1, 50_000))
            lines.append(orjson.dumps(review_record(rng, user, number)))
        bodies[f"reviews/part-{i:05d}.jsonl"] = b"\n".join(lines) + b"\n"
    return bodies


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="lakepurge-inline-bench-"))
        self.moto: Any = None
        self.postgres: Any = None
        self.full_report: Any = None

    def setup(self) -> None:
        from lakepurge.core import aws
        from lakepurge.core.config import load_settings
        from lakepurge.index import open_store
        from lakepurge.indexing.indexer import index_object
        from lakepurge.local.postgres import start_postgres

        os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
        progress("starting moto and PostgreSQL ...")
        self.moto = start_moto_process()
        self.postgres = start_postgres()
        config = self.tmp / "lakepurge.toml"
        from purge_bench import settings_toml  # the same lake layout and configuration

        config.write_text(settings_toml(self.postgres.dsn))
        self.config = config
        self.settings = load_settings(config)
        self.s3 = aws.client("s3")
        self.s3.create_bucket(Bucket=BUCKET)
        self.s3.create_bucket(Bucket=REPORTS_BUCKET)
        progress(f"writing {OBJECTS} objects x {self.args.records} records and indexing them ...")
        self.bodies = make_lake(self.args.records, self.args.lines_per_object)
        self.store = open_store(self.settings.index)
        self.index_object = index_object
        for key, body in self.bodies.items():
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            index_object(self.s3, self.store, self.settings, BUCKET, key)
        self.object_bytes = statistics.mean(len(b) for b in self.bodies.values())

    def stop(self) -> None:
        if self.postgres is not None:
            self.store.close()
            self.postgres.stop()
        if self.moto is not None:
            self.moto.terminate()
            self.moto.join(10)

    def restore(self, keys: list[str]) -> None:
        for key in keys:
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=self.bodies[key])
            self.index_object(self.s3, self.store, self.settings, BUCKET, key, force=True)

    def spec(self, size: int, request_id: str) -> tuple[Any, list[str]]:
        from lakepurge.core.privacy import Pseudonymizer
        from lakepurge.purge.launch import PurgeJobSpec
        from lakepurge.reports.layout import write_report
        from lakepurge.reports.report import build_report

        if self.full_report is None:  # built once from the freshly indexed lake; restored objects keep its ETags
            self.full_report = build_report(
                self.store, self.settings, [TARGET], "template", Pseudonymizer(HASH_KEY.encode())
            )
        full = self.full_report
        assert len(full.objects) == OBJECTS, f"the target user is in {len(full.objects)} objects, not {OBJECTS}"
        report = replace(full, request_id=request_id, objects=full.objects[:size])
        uri, digest = write_report(self.s3, self.settings, report)
        spec = PurgeJobSpec(request_id, uri, digest, "bench@example.com", "2026-05-04T00:00:00+00:00")
        return spec, [o.s3path.removeprefix(f"s3://{BUCKET}/") for o in report.objects]

    def certificate(self, request_id: str) -> dict[str, Any]:
        body = self.s3.get_object(Bucket=REPORTS_BUCKET, Key=f"certificates/{request_id}.json")["Body"].read()
        document: dict[str, Any] = orjson.loads(body)
        return document

    def check(self, request_id: str, size: int) -> None:
        document = self.certificate(request_id)
        expected = size * self.args.lines_per_object
        if not document["verification"]["passed"] or document["totals"]["lines_erased"] != expected:
            raise SystemExit(f"{request_id}: erased {document['totals']['lines_erased']} of {expected} lines")

    def inline(self, size: int, rep: int) -> float:
        from lakepurge.purge.launch import run_inline

        spec, keys = self.spec(size, f"inline-{size}-{rep}-{time.time_ns()}")
        started = time.perf_counter()
        result = run_inline(self.settings, spec)
        seconds = time.perf_counter() - started
        if not result.verified:
            raise SystemExit(f"inline purge of {size} objects did not verify")
        self.check(spec.request_id, size)
        self.restore(keys)
        return seconds

    def spark(self, size: int, rep: int) -> float:
        from lakepurge.core.config import LocalLauncherConfig
        from lakepurge.purge.launch import LocalSparkLauncher

        launcher = LocalSparkLauncher(LocalLauncherConfig(work_dir=str(self.tmp / "jobs")), self.settings, self.config)
        spec, keys = self.spec(size, f"spark-{size}-{rep}-{time.time_ns()}")
        started = time.perf_counter()
        job_id = launcher.start(spec)
        while (status := launcher.status(job_id)).state == "RUNNING":
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        if status.state != "SUCCEEDED":
            raise SystemExit(f"spark-submit purge of {size} objects: {status.detail}")
        self.check(spec.request_id, size)
        self.restore(keys)
        return seconds

    def run(self) -> dict[str, Any]:
        sizes = [int(s) for s in self.args.sizes.split(",")]
        self.inline(1, -1)  # warm-up: imports, clients, connections
        rows = []
        for size in sizes:
            inline = [self.inline(size, rep) for rep in range(self.args.inline_reps)]
            progress(f"{size:>4} objects  inline   {' '.join(f'{s:6.2f}' for s in inline)} s")
            spark = [self.spark(size, rep) for rep in range(self.args.spark_reps)]
            progress(f"{size:>4} objects  spark    {' '.join(f'{s:6.2f}' for s in spark)} s")
            rows.append(
                {
                    "objects": size,
                    "lines": size * self.args.lines_per_object,
                    "inline_s": inline,
                    "spark_s": spark,
                    "inline_median_s": statistics.median(inline),
                    "spark_median_s": statistics.median(spark),
                }
            )
        return {
            "lake": {
                "objects": OBJECTS,
                "records_per_object": self.args.records,
                "mean_object_bytes": round(self.object_bytes),
                "lines_per_object": self.args.lines_per_object,
            },
            "threads_per_task": self.settings.purge.threads_per_task,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
            "rows": rows,
        }


def print_table(results: dict[str, Any]) -> None:
    lake = results["lake"]
    print(
        f"\nInline purge vs local spark-submit (local[2]); {lake['objects']} JSONL objects of"
        f" {lake['records_per_object']} records (~{lake['mean_object_bytes'] / 1000:.0f} KB),"
        f" {lake['lines_per_object']} erased lines per object; moto S3, PostgreSQL index; medians\n"
    )
    print(f"{'objects':>8} {'lines':>6} {'inline s':>9} {'per obj ms':>11} {'spark s':>8} {'spark/inline':>13}")
    for row in results["rows"]:
        inline, spark = row["inline_median_s"], row["spark_median_s"]
        print(
            f"{row['objects']:>8} {row['lines']:>6} {inline:>9.2f} {inline / row['objects'] * 1000:>11.0f}"
            f" {spark:>8.2f} {spark / inline:>12.1f}x"
        )
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,5,20,50,100", help=f"report sizes in objects (at most {OBJECTS})")
    parser.add_argument("--records", type=int, default=1000, help="records per object")
    parser.add_argument("--lines-per-object", type=int, default=3)
    parser.add_argument("--inline-reps", type=int, default=3)
    parser.add_argument("--spark-reps", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    bench = Bench(args)
    started = time.monotonic()
    try:
        bench.setup()
        results = bench.run()
    finally:
        bench.stop()
    results["seconds"] = round(time.monotonic() - started, 1)
    print_table(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2))
    progress(f"wrote {args.output} ({results['seconds']} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
