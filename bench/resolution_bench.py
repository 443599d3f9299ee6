"""Resolution benchmark (issue 31): a typed request's lookup with expansion, for 1 and for 1,000 people, on an index
holding >= 1,000,000 links, on this machine.

Run from the repository root::

    .venv/bin/python bench/resolution_bench.py            # 1,000,000 people: 4,000,000 index rows, 1,000,000 links
                                                          # in records and a 1,000,000-row CRM link table (~5 min)
    .venv/bin/python bench/resolution_bench.py --quick    # 20,000 people, a smoke run (~1 min)

Each person has a signup (her email), an order holding her email and customer id on one line (a link in records)
and a purchase (her customer id); the CRM link table holds her email, spelled otherwise, beside her customer id. A
lookup with expansion is what `lakepurge lookup --id email=...` and a report do first: resolution (two steps, the
index's ids_beside and one SELECT on the CRM per step, then the guard's third look) and the lookup of every
identifier found. It starts its own PostgreSQL cluster and moto server; DynamoDB runs on moto, at a smaller size
(moto sorts the whole table on every Query, so its figures say nothing of DynamoDB's). It prints the figures and
writes them to bench/results/resolution_bench.json; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "resolution_bench.json"
LINES_PER_OBJECT = 500
BATCH_OBJECTS = 200  # objects per replace_objects call
DATASETS = ("signups", "orders", "purchases")


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def settings_for(index: str, crm_dsn: str | None) -> Any:
    from lakepurge.core.config import parse_settings

    link = (
        f'[[identifier_links]]\nname = "crm"\ndsn = "{crm_dsn}"\ntable = "crm_customers"\n'
        'columns = { email = "email_address", customer_id = "cust_id" }\n'
        if crm_dsn
        else ""
    )
    datasets = "".join(
        f'[[datasets]]\nname = "{name}"\nlocation = "s3://lake/{name}/"\nid_fields = ["id"]\n' for name in DATASETS
    )
    toml = (
        f'[index]\n{index}\n[reports]\nlocation = "s3://reports/r/"\n'
        '[identifiers.email]\nnormalise = ["trim", "casefold"]\n[identifiers.customer_id]\n' + datasets + link
    )
    return parse_settings(tomllib.loads(toml), "bench")


def email(n: int) -> str:
    return f"person{n:07d}@example.com"


def customer(n: int) -> str:
    return f"C{n:07d}"


def load_index(store: Any, settings: Any, people: int) -> float:
    """Signups, orders (email and customer id on one line) and purchases of `people`, LINES_PER_OBJECT a object."""
    from lakepurge.index.base import ObjectIndex

    kinds = settings.identifier_kinds
    mail, cust = kinds["email"], kinds["customer_id"]
    when = datetime(2026, 1, 1, tzinfo=UTC)
    started = time.monotonic()
    batch: list[ObjectIndex] = []
    for first in range(0, people, LINES_PER_OBJECT):
        persons = range(first, min(people, first + LINES_PER_OBJECT))
        part = first // LINES_PER_OBJECT
        rows: dict[str, dict[str, list[int]]] = {"signups": {}, "orders": {}, "purchases": {}}
        for line, n in enumerate(persons):
            m, c = mail.index_form(email(n)), cust.index_form(customer(n))
            rows["signups"][m] = [line]
            rows["orders"][m] = [line]
            rows["orders"][c] = [line]
            rows["purchases"][c] = [line]
        for dataset, by_user in rows.items():
            path = f"s3://lake/{dataset}/part-{part:05d}.jsonl"
            batch.append(ObjectIndex(path, dataset, f'"{part}"', None, when, by_user, records=len(persons)))
        if len(batch) >= BATCH_OBJECTS:
            store.replace_objects(batch)
            batch = []
    if batch:
        store.replace_objects(batch)
    return time.monotonic() - started


def load_crm(dsn: str, people: int) -> float:
    """The CRM: each person's email upper-cased with a space around, beside her customer id; indexed on the
    expressions resolution's SELECT compares (the kinds' normalisations in SQL)."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS crm_customers")
        conn.execute("CREATE TABLE crm_customers (email_address text, cust_id text, name text)")
        with conn.cursor() as cur, cur.copy("COPY crm_customers FROM STDIN") as copy:
            for n in range(people):
                copy.write_row((f" {email(n).upper()} ", customer(n), "x"))
        conn.execute("CREATE INDEX ON crm_customers (lower(btrim(email_address::text)))")
        conn.execute("CREATE INDEX ON crm_customers (cust_id)")
        conn.execute("VACUUM ANALYZE crm_customers")
    return time.monotonic() - started


def timed(store: Any, settings: Any, people: Sequence[int]) -> tuple[float, int]:
    """One lookup with expansion of these people: (seconds, identifiers found)."""
    from lakepurge.indexing.resolution import resolve

    mail = settings.identifier_kinds["email"]
    forms = [mail.index_form(email(n)) for n in people]
    started = time.perf_counter()
    expansion = resolve(store, settings, forms)
    store.lookup_objects(expansion.forms)
    return time.perf_counter() - started, len(expansion.identifiers)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": p99 * 1000, "samples": len(ordered)}


def measure(
    label: str, store: Any, settings: Any, people: int, singles: int, batches: int, batch: int, warm: int = 20
) -> dict[str, Any]:
    rng = random.Random(7)
    for n in rng.sample(range(people), min(warm, people)):  # warm the caches and the connection
        timed(store, settings, [n])
    one, found_one = [], set()
    for n in rng.sample(range(people), singles):
        seconds, found = timed(store, settings, [n])
        one.append(seconds)
        found_one.add(found)
    many, found_many = [], set()
    batch = min(batch, people)
    for _ in range(batches):
        seconds, found = timed(store, settings, rng.sample(range(people), batch))
        many.append(seconds)
        found_many.add(found)
    result = {
        "one_person": percentiles(one) | {"identifiers_found": sorted(found_one)},
        f"{batch}_people": percentiles(many) | {"identifiers_found": sorted(found_many)},
    }
    for name, figures in result.items():
        progress(
            f"{label} {name}: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms"
            f" ({figures['samples']} runs; identifiers found {figures['identifiers_found']})"
        )
    return result


def with_store(make: Callable[[], Any], body: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    store = make()
    try:
        store.ensure_schema()
        return body(store)
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--people", type=int, default=0, help="PostgreSQL: people (default 1,000,000; quick 20,000)")
    parser.add_argument("--dynamo-people", type=int, default=0, help="DynamoDB on moto (default 200; quick 100)")
    parser.add_argument("--quick", action="store_true", help="small data, a smoke run")
    parser.add_argument("--skip-dynamodb", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    people = args.people or (20_000 if args.quick else 1_000_000)
    dynamo_people = args.dynamo_people or (100 if args.quick else 200)
    from lakepurge.local.moto import DUMMY_CREDENTIALS, start_moto
    from lakepurge.local.postgres import start_postgres

    os.environ.update(DUMMY_CREDENTIALS)  # never a real AWS account: only this bench's moto server
    for leaked in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(leaked, None)
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "load_before": os.getloadavg()[0]}
    postgres = start_postgres()
    moto = None
    try:
        from lakepurge.index.postgres import PostgresIndexStore

        settings = settings_for(f'backend = "postgres"\ndsn = "{postgres.dsn}"', postgres.dsn)

        def postgres_body(store: Any) -> dict[str, Any]:
            progress(f"postgres: loading {people:,} people ({4 * people:,} rows, {people:,} links in records)")
            seconds = load_index(store, settings, people)
            crm = load_crm(postgres.dsn, people)
            import psycopg

            with psycopg.connect(postgres.dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE user_rows")
                conn.execute("VACUUM ANALYZE indexed_objects")
            progress(f"postgres: index loaded in {seconds:.0f} s, CRM in {crm:.0f} s")
            figures = measure("postgres", store, settings, people, 200, 3 if args.quick else 20, 1000)
            return {"people": people, "rows": 4 * people, "links_in_records": people, "crm_rows": people} | figures

        results["postgres"] = with_store(lambda: PostgresIndexStore(postgres.dsn), postgres_body)
        if not args.skip_dynamodb:
            from lakepurge.index.dynamodb import DynamoIndexStore

            moto = start_moto()
            dynamo_settings = settings_for('backend = "dynamodb"\ntable = "bench-resolution"', postgres.dsn)

            def dynamo_body(store: Any) -> dict[str, Any]:
                progress(f"dynamodb (moto): loading {dynamo_people:,} people")
                load_index(store, dynamo_settings, dynamo_people)
                load_crm(postgres.dsn, dynamo_people)
                singles = 10 if args.quick else 20
                figures = measure("dynamodb (moto)", store, dynamo_settings, dynamo_people, singles, 1, 1000, warm=3)
                return {"people": dynamo_people, "rows": 4 * dynamo_people, "links_in_records": dynamo_people} | figures

            results["dynamodb_moto"] = with_store(lambda: DynamoIndexStore("bench-resolution"), dynamo_body)
    finally:
        if moto is not None:
            moto.stop()
        postgres.stop()
    results["load_after"] = os.getloadavg()[0]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
