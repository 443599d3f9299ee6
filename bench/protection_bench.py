"""Pseudonymisation and crypto-shredding (issue 33): what converting a dataset costs per core, what the vault costs
per 1,000 people, and erasing one person by crypto-shredding against erasing the same person by rewriting.

Run from the repository root::

    .venv/bin/python bench/protection_bench.py                  # ~3 min on 2 cores
    .venv/bin/python bench/protection_bench.py --objects 4 --records 2000 --people 1000 --reps 1   # quick

The lake: --objects JSON Lines objects of --records order records (user_id, email, name, address, amount, zip,
~230 bytes a line) of --people persons, on a moto server in its own process (S3, KMS, DynamoDB), a throwaway
PostgreSQL for the index and the vault (backup_retention_days 7). Measured, in this process (one core: no Spark,
the conversion's own code as each Spark task runs it):

1. **pseudonymise throughput**: ``pseudonymise_dataset`` of the dataset (email, name, address encrypted, email
   deterministic), twice: first with every person's key created on first sight (KMS GenerateDataKey each), then
   again into another prefix with the keys in the vault but no process cache (KMS Decrypt each, once per process),
   and a third time with the keys cached in the process (the records' own work: JSON, AES, the writes to S3). The
   quasi-identifier check that runs first is timed apart. MB/s = source bytes / seconds of one core.
2. **the vault per 1,000 people**: creating 1,000 persons' keys, looking 1,000 up by id and by pseudonym with a
   cold cache (one read of the table, 1,000 KMS Decrypt calls on 16 threads), and again from the cache.
3. **erasure of one person**: the dataset as it was (raw, erased by rewriting the objects that hold the person)
   and its pseudonymised copy (erased by destroying the person's key), each configured alone with its own index,
   ``purge_users`` (inline engine, report, erasure, verification, certificate) for the same person, --reps persons.

KMS here is moto: a real KMS call costs a few milliseconds of network more, and the account's KMS request quota
(thousands a second, shared) bounds the creation of keys for many new persons at once. It prints the table and
writes bench/results/protection_bench.json; it fails if a purge does not end verified or a conversion fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from cli_purge_bench import progress
from inline_bench import start_moto_process

RESULTS = Path(__file__).resolve().parent / "results" / "protection_bench.json"
BUCKET = "lake"
REPORTS = "lake-reports"
HASH_KEY = "protection-bench-hash-key-0123456789abcdef"
PERSONAL = ("email", "name", "address")


def person(number: int) -> str:
    return f"u-protect-bench-{number:05d}"


def make_lake(objects: int, records: int, people: int, seed: int = 5) -> dict[str, bytes]:
    rng = random.Random(seed)
    bodies = {}
    for part in range(objects):
        lines = []
        for n in range(records):
            who = rng.randrange(people)
            record = {
                "user_id": person(who),
                "order_id": f"o-{part}-{n}",
                "email": f"person{who}@example.com",
                "name": f"Person {who} Example",
                "address": {"street": f"{rng.randrange(1, 200)} Long Road", "city": "Leeds"},
                "amount": rng.randrange(5, 500),
                "zip": f"LS{rng.randrange(1, 30)}",
            }
            lines.append(orjson.dumps(record))
        bodies[f"raw/orders/part-{part:03d}.jsonl"] = b"\n".join(lines) + b"\n"
    return bodies


def settings_toml(index_dsn: str, vault_dsn: str, kms_key: str, datasets: str) -> str:
    return f"""
[index]
backend = "postgres"
dsn = "{index_dsn}"

[reports]
location = "s3://{REPORTS}/"

[purge]
max_dataset_fraction = 1.0

[vault]
backend = "postgres"
dsn = "{vault_dsn}"
table = "bench_vault"
kms_key_id = "{kms_key}"
backup_retention_days = 7
cache_seconds = 600
{datasets}"""


RAW = f"""
[[datasets]]
name = "orders"
location = "s3://{BUCKET}/raw/orders/"
id_fields = ["user_id"]
"""
PROTECTED = f"""
[[datasets]]
name = "orders_protected"
location = "s3://{BUCKET}/protected/orders/"
id_fields = ["user_id"]
protection = "crypto-shred"
personal_fields = {json.dumps(list(PERSONAL))}
"""


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=8)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--people", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3, help="persons erased each way")
    args = parser.parse_args()

    import psycopg

    from lakepurge.core import aws
    from lakepurge.core.config import parse_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_reconcile
    from lakepurge.indexing.indexer import index_object
    from lakepurge.local.postgres import start_postgres
    from lakepurge.ops.manual_purge import purge_users
    from lakepurge.protection import transforms
    from lakepurge.protection.convert import check_dataset, pseudonymise_dataset
    from lakepurge.protection.vault import Vault

    os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
    progress("starting moto and PostgreSQL ...")
    moto = start_moto_process()
    postgres = start_postgres()
    figures: dict[str, Any] = {}
    try:
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:
            for database in ("rewrite", "shred"):
                conn.execute(f"CREATE DATABASE {database}")
        base = postgres.dsn.rsplit("/", 1)[0]
        s3 = aws.client("s3")
        for bucket in (BUCKET, REPORTS):
            s3.create_bucket(Bucket=bucket)
        kms_key = aws.client("kms").create_key(Description="vault")["KeyMetadata"]["Arn"]
        progress(f"writing {args.objects} objects x {args.records} records of {args.people} persons ...")
        bodies = make_lake(args.objects, args.records, args.people)
        for key, body in bodies.items():
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        source_bytes = sum(map(len, bodies.values()))

        def parse(index_database: str, datasets: str) -> Any:
            """Each way of erasing its own index (one dataset each), one vault for both."""
            import tomllib

            toml = settings_toml(f"{base}/{index_database}", postgres.dsn, kms_key, datasets)
            return parse_settings(tomllib.loads(toml))

        raw = parse("rewrite", RAW)

        # 1. pseudonymise throughput
        progress("the quasi-identifier check ...")
        started = time.perf_counter()
        check_dataset(None, raw, raw.dataset_named("orders"), PERSONAL)
        check_seconds = time.perf_counter() - started
        conversions = {}
        runs = (
            ("keys created on first sight", "protected/orders/", True),
            ("keys in the vault", "again/", True),  # no process cache: every key unwrapped once
            ("keys cached in the process", "cached/", False),  # the records' own work
        )
        for label, prefix, cold in runs:
            if cold:
                transforms._workers_vault.clear()
            progress(f"pseudonymise, {label} ...")
            started = time.perf_counter()
            run = pseudonymise_dataset(None, raw, "orders", f"s3://{BUCKET}/{prefix}", PERSONAL, ("email",), force=True)
            seconds = time.perf_counter() - started
            if run.failed or run.manifest is None:
                raise RuntimeError(f"conversion failed: {run.summary()}")
            converted = seconds - check_seconds
            conversions[label] = {
                "seconds_with_check": seconds,
                "seconds": converted,
                "records": sum(o.records for o in run.objects),
                "mb_per_s_per_core": source_bytes / 1e6 / converted,
            }
        figures["pseudonymise"] = {"source_mb": source_bytes / 1e6, "check_seconds": check_seconds, **conversions}

        # 2. the vault per 1,000 people
        progress("the vault, 1,000 people ...")
        vault_figures: dict[str, float] = {}
        newcomers = [f"u-new-{n:05d}" for n in range(1000)]
        with Vault.open(raw) as vault:
            started = time.perf_counter()
            made = vault.keys_for(newcomers, create=True)
            vault_figures["create 1,000 keys (KMS GenerateDataKey, vault insert)"] = time.perf_counter() - started
        pseudonyms = [pseudonym for _, pseudonym in made.values()]
        with Vault.open(raw) as vault:
            started = time.perf_counter()
            assert len(vault.keys_for(newcomers)) == 1000
            vault_figures["1,000 by id, cold (vault read, KMS Decrypt)"] = time.perf_counter() - started
            started = time.perf_counter()
            vault.keys_for(newcomers)
            vault_figures["1,000 by id, cached"] = time.perf_counter() - started
        with Vault.open(raw) as vault:
            started = time.perf_counter()
            assert len(vault.keys_of_pseudonyms(pseudonyms)) == 1000
            vault_figures["1,000 by pseudonym, cold (a reader)"] = time.perf_counter() - started
            started = time.perf_counter()
            vault.keys_of_pseudonyms(pseudonyms)
            vault_figures["1,000 by pseudonym, cached"] = time.perf_counter() - started
        figures["vault_per_1000_people_seconds"] = vault_figures

        # 3. erasing the same person both ways
        protected = parse("shred", PROTECTED)
        for settings, keys in ((raw, list(bodies)), (protected, _keys(s3, "protected/orders/"))):
            store = open_store(settings.index)
            for key in keys:
                index_object(s3, store, settings, BUCKET, key)
            store.close()
            run_reconcile(None, settings, [d.name for d in settings.datasets])
        erasures: dict[str, list[float]] = {"rewrite": [], "crypto-shred": []}
        touched: dict[str, list[int]] = {"rewrite": [], "crypto-shred": []}
        for rep in range(args.reps):
            who = person(rep)
            for method, settings in (("rewrite", raw), ("crypto-shred", protected)):
                progress(f"erasing person {rep + 1}/{args.reps} by {method} ...")
                started = time.perf_counter()
                done = purge_users(settings, [who], dry_run=False, force=True, engine="inline", say=lambda _: None)
                erasures[method].append(time.perf_counter() - started)
                if not done.result.verified:
                    raise RuntimeError(f"the {method} erasure of {who} did not verify")
                touched[method].append(done.result.objects_rewritten)
        figures["erasure_seconds"] = {method: summary(values) for method, values in erasures.items()}
        figures["objects_rewritten"] = touched
    finally:
        postgres.stop()
        moto.terminate()
        moto.join(10)

    print(f"\npseudonymise, {figures['pseudonymise']['source_mb']:.1f} MB of JSON Lines, one core (no Spark)")
    print(f"  quasi-identifier check: {figures['pseudonymise']['check_seconds']:.2f} s")
    for label, *_ in runs:
        row = figures["pseudonymise"][label]
        print(f"  {label:<30} {row['seconds']:7.2f} s  {row['mb_per_s_per_core']:6.2f} MB/s per core")
    print("the vault, per 1,000 people")
    for label, seconds in figures["vault_per_1000_people_seconds"].items():
        print(f"  {label:<55} {seconds * 1000:9.1f} ms")
    print(f"erasing one person, {args.reps} person(s), inline purge (report, erasure, verification, certificate)")
    for method, result in figures["erasure_seconds"].items():
        print(
            f"  {method:<14} median {result['median']:6.2f} s (min {result['min']:.2f}, max {result['max']:.2f});"
            f" objects rewritten {figures['objects_rewritten'][method]}"
        )
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
                    "people": args.people,
                },
                **figures,
            },
            indent=1,
        )
    )
    return 0


def _keys(s3: Any, prefix: str) -> list[str]:
    """The data objects under a prefix (not the protection manifest)."""
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return [item["Key"] for item in listed if not item["Key"].rsplit("/", 1)[-1].startswith("_")]


if __name__ == "__main__":
    sys.exit(main())
