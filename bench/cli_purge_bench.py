"""What an operator waits for: `lakepurge purge USER --yes` for one user, next to `lakepurge status` on the same lake.

Run from the repository root::

    .venv/bin/python bench/cli_purge_bench.py                 # 5 inline purges, 2 Spark purges (~3 min on 2 cores)
    .venv/bin/python bench/cli_purge_bench.py --reps 3 --spark-reps 1

A small lake (--objects JSON Lines objects x --records records, ~260 bytes a record) on a moto S3 server in its own
process, indexed in a throwaway PostgreSQL and reconciled (so coverage is recorded and a purge may certify). Every
timing is a whole CLI process, started as an operator starts it (`.venv/bin/lakepurge ...`: interpreter, imports,
configuration, clients), measured by wall clock:

- `lakepurge status`: the yardstick (a command that reads the index and nothing else);
- `lakepurge purge USER --yes` (engine auto, which picks inline for a report this small): lookup, report, the engine
  over the user's objects, verification of every touched object, certificate;
- the same with `--engine spark`: the local Spark session around the same purge;
- `lakepurge purge NOBODY --yes`: nothing found (no Spark at all).

Each purge erases a different user (each present in --lines-per-user objects), so every run does the same work from
the same kind of state. Prints medians with min-max and the ratios to `status`; writes
bench/results/cli_purge_bench.json. It measures; it fails only if a purge does not end verified or erases another
number of lines than it should.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from inline_bench import start_moto_process
from purge_bench import BUCKET, HASH_KEY, REPORTS_BUCKET, settings_toml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "cli_purge_bench.json"
LAKEPURGE = Path(sys.executable).parent / "lakepurge"
TARGET_TARGET = "<= 3x status"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def target(number: int) -> str:
    return f"u-cli-bench-{number:04d}"


def make_lake(objects: int, records: int, targets: int, lines_per_user: int, seed: int = 5) -> dict[str, bytes]:
    """--objects objects of review records; target user n has one line in each of lines_per_user objects."""
    from lakepurge.local.samples import review_record, user_id

    rng = random.Random(seed)
    placed: dict[int, list[tuple[int, int]]] = {}
    for n in range(targets):
        for index in rng.sample(range(objects), lines_per_user):
            placed.setdefault(index, []).append((rng.randrange(records), n))
    bodies = {}
    number = 0
    for index in range(objects):
        owners = dict(placed.get(index, []))
        lines = []
        for line in range(records):
            number += 1
            user = target(owners[line]) if line in owners else user_id(rng.randint(1, 50_000))
            lines.append(orjson.dumps(review_record(rng, user, number)))
        bodies[f"reviews/part-{index:05d}.jsonl"] = b"\n".join(lines) + b"\n"
    return bodies


def timed(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    try:
        document = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    except json.JSONDecodeError:
        document = {}
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:3])} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, document


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--lines-per-user", type=int, default=3, help="objects each target user appears in")
    parser.add_argument("--reps", type=int, default=5, help="inline purges and status runs")
    parser.add_argument("--spark-reps", type=int, default=2)
    args = parser.parse_args()

    from lakepurge.core import aws
    from lakepurge.core.config import load_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.indexing.indexer import index_object
    from lakepurge.local.postgres import start_postgres

    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-cli-bench-"))
    os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
    progress("starting moto and PostgreSQL ...")
    moto = start_moto_process()
    postgres = start_postgres()
    try:
        config = workdir / "lakepurge.toml"
        config.write_text(settings_toml(postgres.dsn))
        settings = load_settings(config)
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        s3.create_bucket(Bucket=REPORTS_BUCKET)
        users = args.reps + args.spark_reps
        progress(f"writing {args.objects} objects x {args.records} records, indexing and reconciling ...")
        bodies = make_lake(args.objects, args.records, users, args.lines_per_user)
        store = open_store(settings.index)
        for key, body in bodies.items():
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            index_object(s3, store, settings, BUCKET, key)
        store.close()
        run_reconcile(None, settings)
        lake_bytes = sum(map(len, bodies.values()))

        env = dict(os.environ)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        cli = [str(LAKEPURGE)]
        with_config = ["--config", str(config), "--json"]

        figures: dict[str, list[float]] = {"status": [], "purge inline": [], "purge spark": [], "nothing found": []}
        for rep in range(args.reps):
            progress(f"rep {rep + 1}/{args.reps}: status, inline purge, nothing found")
            figures["status"].append(timed([*cli, "status", *with_config], env)[0])
            seconds, document = timed([*cli, "purge", target(rep), "--yes", *with_config], env)
            if not document.get("verified") or document.get("lines_erased") != args.lines_per_user:
                raise RuntimeError(f"inline purge did not verify or erased other lines: {document}")
            figures["purge inline"].append(seconds)
            seconds, document = timed([*cli, "purge", "u-cli-bench-nobody", "--yes", *with_config], env)
            figures["nothing found"].append(seconds)
        for rep in range(args.spark_reps):
            progress(f"spark rep {rep + 1}/{args.spark_reps}")
            user = target(args.reps + rep)
            seconds, document = timed([*cli, "purge", user, "--yes", "--engine", "spark", *with_config], env)
            if not document.get("verified") or document.get("lines_erased") != args.lines_per_user:
                raise RuntimeError(f"spark purge did not verify or erased other lines: {document}")
            figures["purge spark"].append(seconds)
    finally:
        postgres.stop()
        moto.terminate()
        moto.join(10)

    results = {name: summary(values) for name, values in figures.items() if values}
    status = results["status"]["median"]
    ratios = {name: result["median"] / status for name, result in results.items()}
    print(
        f"\nCLI one-user purge vs `lakepurge status` ({args.objects} objects, {lake_bytes / 1e6:.1f} MB, "
        f"user in {args.lines_per_user} objects); wall seconds of the whole process"
    )
    print(f"{'command':<34}{'median':>9}{'min':>9}{'max':>9}{'runs':>6}{'x status':>10}")
    for name, result in results.items():
        print(
            f"{name:<34}{result['median']:>9.2f}{result['min']:>9.2f}{result['max']:>9.2f}"
            f"{int(result['runs']):>6}{ratios[name]:>10.1f}"
        )
    verdict = "PASS" if ratios["purge inline"] <= 3 else "MISS"
    print(f"\ninline one-user purge / status: {ratios['purge inline']:.1f}x (target {TARGET_TARGET}): {verdict}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "meta": {
                    "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "cores": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average": os.getloadavg(),
                    "objects": args.objects,
                    "records": args.records,
                    "lake_bytes": lake_bytes,
                },
                "seconds": results,
                "ratio_to_status": ratios,
                "verdict": verdict,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
