"""What an access export (GDPR Art. 15) costs beside the purge of the same users, on cli_purge_bench's lake.

Run from the repository root::

    .venv/bin/python bench/export_bench.py                 # ~1 min on 2 cores
    .venv/bin/python bench/export_bench.py --reps 3 --objects 20 --records 4000

The lake of bench/cli_purge_bench.py (--objects JSON Lines objects x --records review records, on a moto server in
its own process, a throwaway PostgreSQL index, reconciled so a purge certifies), with --reps single target users and
one group of 100 target users, each user in --lines-per-user objects. For each, as an operator runs them (whole
`.venv/bin/lakepurge` processes, wall clock):

- `lakepurge export USER... --to s3://exports/ --kms-key K` (archive built, encrypted, uploaded, record written);
- then `lakepurge purge USER... --yes` of the same users (inline engine: a report this small).

Both print the seconds of their own work (`"seconds"` of --json, the process's start and imports excluded): shown
beside the wall times. Prints the table; writes bench/results/export_bench.json. It asserts nothing about time; it
fails only if an export holds another number of records than the users have, or a purge does not end verified.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
from cli_purge_bench import LAKEPURGE, make_lake, progress, target, timed
from inline_bench import start_moto_process
from purge_bench import BUCKET, HASH_KEY, REPORTS_BUCKET, settings_toml

RESULTS = Path(__file__).resolve().parent / "results" / "export_bench.json"
EXPORTS_BUCKET = "exports"
GROUP = 100


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--lines-per-user", type=int, default=3, help="objects each target user appears in")
    parser.add_argument("--reps", type=int, default=3, help="single-user export + purge pairs")
    args = parser.parse_args()

    from lakepurge.core import aws
    from lakepurge.core.config import load_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.indexing.indexer import index_object
    from lakepurge.local.postgres import start_postgres

    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-export-bench-"))
    os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
    progress("starting moto and PostgreSQL ...")
    moto = start_moto_process()
    postgres = start_postgres()
    figures: dict[str, list[float]] = {}
    inner: dict[str, list[float]] = {}
    try:
        config = workdir / "lakepurge.toml"
        config.write_text(settings_toml(postgres.dsn))
        settings = load_settings(config)
        s3 = aws.client("s3")
        for bucket in (BUCKET, REPORTS_BUCKET, EXPORTS_BUCKET):
            s3.create_bucket(Bucket=bucket)
        key = aws.client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]
        users = args.reps + GROUP
        progress(f"writing {args.objects} objects x {args.records} records, indexing and reconciling ...")
        bodies = make_lake(args.objects, args.records, users, args.lines_per_user)
        store = open_store(settings.index)
        for name, body in bodies.items():
            s3.put_object(Bucket=BUCKET, Key=name, Body=body)
            index_object(s3, store, settings, BUCKET, name)
        store.close()
        run_reconcile(None, settings)
        lake_bytes = sum(map(len, bodies.values()))

        env = dict(os.environ)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        common = ["--config", str(config), "--json"]
        export = [str(LAKEPURGE), "export", "--to", f"s3://{EXPORTS_BUCKET}/", "--kms-key", key]

        def lines_of(named: list[str]) -> int:
            """The users' lines in the lake as generated (two targets can share a line: counted, not assumed)."""
            wanted = set(named)
            return sum(
                orjson.loads(line)["user_id"] in wanted for body in bodies.values() for line in body.splitlines()
            )

        def pair(label: str, named: list[str]) -> None:
            expected_lines = lines_of(named)
            users_file = workdir / f"{label.replace(' ', '-')}.txt"
            users_file.write_text("\n".join(named) + "\n")
            chosen = ["--users-file", str(users_file)]
            seconds, document = timed([*export, *chosen, *common], env)
            if sum(document.get("records", {}).values()) != expected_lines:
                raise RuntimeError(f"export of {label} holds other records than the users': {document}")
            figures.setdefault(f"export {label}", []).append(seconds)
            inner.setdefault(f"export {label}", []).append(document["seconds"])
            seconds, document = timed([str(LAKEPURGE), "purge", *chosen, "--yes", *common], env)
            if not document.get("verified") or document.get("lines_erased") != expected_lines:
                raise RuntimeError(f"purge of {label} did not verify or erased other lines: {document}")
            figures.setdefault(f"purge {label}", []).append(seconds)
            inner.setdefault(f"purge {label}", []).append(document["seconds"])

        for rep in range(args.reps):
            progress(f"1 user, rep {rep + 1}/{args.reps}: export, then purge")
            pair("1 user", [target(rep)])
        progress(f"{GROUP} users: export, then purge")
        pair(f"{GROUP} users", [target(args.reps + n) for n in range(GROUP)])
    finally:
        postgres.stop()
        moto.terminate()
        moto.join(10)

    results = {name: summary(values) for name, values in figures.items()}
    work = {name: summary(values) for name, values in inner.items()}
    print(
        f"\nexport vs purge of the same users ({args.objects} objects, {lake_bytes / 1e6:.1f} MB of JSON Lines, each"
        f" user in {args.lines_per_user} objects); wall seconds of the whole CLI process, and the command's own"
        " seconds (--json)"
    )
    print(f"{'command':<22}{'median':>9}{'min':>9}{'max':>9}{'runs':>6}{'own s':>9}")
    for name, result in results.items():
        print(
            f"{name:<22}{result['median']:>9.2f}{result['min']:>9.2f}{result['max']:>9.2f}"
            f"{int(result['runs']):>6}{work[name]['median']:>9.2f}"
        )
    for label in ("1 user", f"{GROUP} users"):
        ratio = results[f"export {label}"]["median"] / results[f"purge {label}"]["median"]
        print(f"export / purge, {label}: {ratio:.2f}x (wall)")
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
                "wall_seconds": results,
                "own_seconds": work,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
