"""What erasure costs with lakepurge on AWS, per request and per month, for lakes of 1, 10 and 50 TB: a model from
per-core and per-request figures measured on this machine, beside Find and Forget's published table.

Run from the repository root::

    .venv/bin/python bench/cost_model.py              # the table, from the figures in FIGURES below
    .venv/bin/python bench/cost_model.py --measure    # measure the per-core figures again here (~2 min), then the table
    .venv/bin/python bench/cost_model.py --object-mib 256 --requests 100

Every price, figure and assumption the table uses is printed above it; docs/COST.md explains the model.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1 << 20
GiB = 1 << 30
TB = 10**12

# us-east-1 list prices (USD), on-demand, x86, as published on the AWS pricing pages named; read 2026-11-26 from
# the figures quoted in this project's notes, not fetched live (this machine has no internet): check them first.
PRICES = {
    # PUT, COPY, POST, LIST (UploadPart, UploadPartCopy, Create/Complete MPU too): aws.amazon.com/s3/pricing
    "s3_put_per_1000": 0.005,
    "s3_get_per_1000": 0.0004,  # GET, HEAD, SELECT
    "s3_transfer_in_region_per_gb": 0.0,  # S3 to EMR/Lambda in the same region
    "emr_vcpu_hour": 0.052624,  # EMR Serverless: aws.amazon.com/emr/pricing (x86)
    "emr_gb_hour": 0.0057785,
    "lambda_gb_second": 0.0000166667,  # aws.amazon.com/lambda/pricing (x86)
    "lambda_per_million": 0.20,
    "sfn_per_1000_transitions": 0.025,  # Standard workflows: aws.amazon.com/step-functions/pricing
    "ddb_per_million_wru": 0.625,  # on-demand, since 2024-11-01: aws.amazon.com/dynamodb/pricing/on-demand
    "ddb_per_million_rru": 0.125,
    "ddb_gb_month": 0.25,
    "rds_pg_instance_month": 0.065 * 730,  # db.t4g.medium PostgreSQL single-AZ: aws.amazon.com/rds/postgresql/pricing
    "rds_gb_month": 0.115,  # gp3 storage
    "kms_key_month": 1.0,
    "secret_month": 0.40,
}

# Per-core and per-request figures measured on this machine (2 cores, shared); the command that gave each.
FIGURES = {
    # bench/index_bench.py (README "Results on main", 2026-11-21): the Lambda indexing path, MB of JSON Lines per
    # CPU-second of the process (HEAD + GET + group + COPY), and the Spark backfill's tasks.
    "index_jsonl_mb_per_cpu_s": 110.0,
    "backfill_jsonl_mb_per_cpu_s": 118.0,
    # cost_model.py --measure: formats.group_records over a Parquet object (the id column read), MB of file per CPU-s.
    "index_parquet_mb_per_cpu_s": 83.4,
    # cost_model.py --measure: purge.rewrite + the check before the write, MB of object per CPU-second (whole rewrite).
    "rewrite_jsonl_mb_per_cpu_s": 591.1,
    "rewrite_parquet_mb_per_cpu_s": 26.8,
    # bench/index_bench.py section 2: PostgreSQL COPY into user_rows with its indexes, rows per second (one backend).
    "pg_rows_per_s": 200_000.0,
    # bench/index_bench.py: bytes per user_rows row with its indexes (740 MB for 5,000,000 rows).
    "pg_bytes_per_row": 148.0,
    # bench/splice_bench.py (2026-11-26): S3 requests of one spliced object, 1 window (JSON Lines) / 1 of 8 row
    # groups (Parquet); 4 more per further window, 10 per further group. A whole rewrite: GET, multipart PUT, HEAD.
    "requests_splice_jsonl_1_window": 12,
    "requests_splice_parquet_1_group": 20,
    # bench/spark_scale_bench.py on local[1], quiet run of 22:15: CPU of the bench's processes over the wall time held
    # (backfill 0.42, purge 0.62; the rest waiting on moto and PostgreSQL, which have their own cores on AWS).
    "spark_utilisation": 0.5,
}
FIGURES_FILE = Path(__file__).resolve().parent / "results" / "cost_figures.json"

# Find and Forget's own table (docs/COST_OVERVIEW.md, scenarios 3 and 4, published 2020-05-07, eu-west-1).
FIND_AND_FORGET = {
    10: {"objects": 11_000, "athena_gb": 156, "total": 75.69, "fargate": 73.82, "hours": 2.5},
    50: {"objects": 45_300, "athena_gb": 671, "total": 316.80, "fargate": 310.03, "hours": 10.5},
}


@dataclass(frozen=True)
class Assumptions:
    object_bytes: int = GiB  # compacted objects (Find and Forget's scenarios: 10 TB in ~11,000 objects)
    jsonl_record_bytes: int = 400
    parquet_row_bytes: int = 100  # the same record, snappy columnar (~4x smaller)
    row_groups: int = 8
    users: int = 10_000_000  # people in the lake, whatever its size
    clustered_objects: int = 2  # half the users: records in 2 objects (time or user partitions), adjacent in each
    scattered_objects: int = 50  # the other half: records spread over 50 objects (the benches' worst case)
    window_bytes: int = 5 * MiB  # S3's smallest part: a JSON Lines window read and sent
    part_bytes: int = 64 * MiB  # multipart part of a whole rewrite
    requests_per_month: int = 100
    ingest_share_per_month: float = 0.05  # new objects a month, indexed on arrival, as a share of the lake
    driver_vcpu: int = 4  # EMR Serverless defaults: driver and executors of 4 vCPU and 16 GB
    worker_gb: int = 16
    job_fixed_s: float = 120.0  # a job's start and stop (driver + 1 executor held, at least 1 minute each)
    s3_mb_per_vcpu_s: float = 100.0  # what one vCPU's threads move to and from S3 (not measured: moto is no S3)
    sfn_transitions: int = 40  # a request's workflow, with a few polls of the Spark job
    lambda_s: float = 20.0  # the request's Lambda time (report, start, status, certificate) at 1 GB
    ddb_item_bytes: int = 300  # a row item without its line list (keys, path, ETag, counts)
    ddb_gsi_bytes: int = 150  # its by_object index entry (keys only)
    ddb_bytes_per_line: int = 5  # one line number in the item's list


@dataclass
class Cost:
    objects: int = 0
    requests_get: float = 0
    requests_put: float = 0
    bytes_in: float = 0  # through the purge (read)
    bytes_out: float = 0  # through the purge (written)
    cpu_s: float = 0  # compute CPU-seconds of the work (excluding fixed job time)
    index_wru: float = 0  # DynamoDB write units of index rows written again
    index_rows: float = 0  # PostgreSQL rows written again

    def s3_dollars(self) -> float:
        return (self.requests_get * PRICES["s3_get_per_1000"] + self.requests_put * PRICES["s3_put_per_1000"]) / 1000

    def emr_dollars(self, a: Assumptions, utilisation: float) -> float:
        """Executors are held while they compute or move bytes (whichever is longer), plus a job's fixed time."""
        moving = (self.bytes_in + self.bytes_out) / 1e6 / a.s3_mb_per_vcpu_s
        held_vcpu_s = max(self.cpu_s / utilisation, moving) + 2 * a.driver_vcpu * a.job_fixed_s
        held_gb_s = held_vcpu_s * a.worker_gb / a.driver_vcpu
        return (held_vcpu_s * PRICES["emr_vcpu_hour"] + held_gb_s * PRICES["emr_gb_hour"]) / 3600

    def workflow_dollars(self, a: Assumptions) -> float:
        return (
            a.sfn_transitions * PRICES["sfn_per_1000_transitions"] / 1000
            + a.lambda_s * PRICES["lambda_gb_second"]
            + 10 * PRICES["lambda_per_million"] / 1e6
        )

    def index_dollars(self) -> float:
        return self.index_wru * PRICES["ddb_per_million_wru"] / 1e6


@dataclass(frozen=True)
class Lake:
    fmt: str
    size: int
    a: Assumptions

    @property
    def objects(self) -> int:
        return self.size // self.a.object_bytes

    @property
    def records(self) -> float:
        return self.size / (self.a.jsonl_record_bytes if self.fmt == "jsonl" else self.a.parquet_row_bytes)

    def objects_per_user(self, layout: str) -> int:
        return min(self.a.clustered_objects if layout == "clustered" else self.a.scattered_objects, self.objects)

    @property
    def pairs(self) -> float:
        """(user, object) pairs: DynamoDB row items."""
        half = self.a.users / 2
        return half * self.objects_per_user("clustered") + half * self.objects_per_user("scattered")

    @property
    def item_wru(self) -> float:
        """Write units of one row item and its index entry (1 KB each, rounded up)."""
        lines = self.records / self.pairs
        return math.ceil((self.a.ddb_item_bytes + lines * self.a.ddb_bytes_per_line) / 1024) + 1

    @property
    def ddb_bytes(self) -> float:
        a = self.a
        return self.pairs * (a.ddb_item_bytes + a.ddb_gsi_bytes) + self.records * a.ddb_bytes_per_line


def objects_touched(lake: Lake, layout: str, users: int) -> int:
    """Distinct objects holding any of `users` users (placed at random: the expected union)."""
    n = lake.objects
    return round(n * (1 - (1 - lake.objects_per_user(layout) / n) ** users))


def erase(fmt: str, layout: str, users: int, lake_bytes: int, a: Assumptions, figures: dict[str, Any]) -> Cost:
    """The purge of `users` users' records in one run: per touched object, what lakepurge reads, sends, asks S3
    and computes. A user's records in an object are adjacent (one window, one row group)."""
    lake = Lake(fmt, lake_bytes, a)
    touched = objects_touched(lake, layout, users)
    windows = max(1.0, users * lake.objects_per_user(layout) / touched)  # windows (row groups) per touched object
    cost = Cost(objects=touched)
    if fmt == "jsonl":
        moved = min(windows * a.window_bytes, a.object_bytes)
        if moved > 0.75 * a.object_bytes:  # server_splice.worth_splicing: rewritten whole
            return whole(lake, touched, figures)
        requests = figures["requests_splice_jsonl_1_window"] + 4 * (windows - 1)
        cost.requests_get = touched * (windows + 2)
        cost.requests_put = touched * (requests - windows - 2)
        cost.bytes_in = cost.bytes_out = touched * moved
        cost.cpu_s = cost.bytes_in / 1e6 / figures["rewrite_jsonl_mb_per_cpu_s"]
        return cost
    groups = min(float(a.row_groups), windows)
    if groups >= a.row_groups:
        return whole(lake, touched, figures)
    cost.requests_get = touched * (groups + 3)
    cost.requests_put = touched * (figures["requests_splice_parquet_1_group"] + 10 * (groups - 1) - groups - 3)
    cost.bytes_in = cost.bytes_out = touched * groups * a.object_bytes / a.row_groups
    cost.cpu_s = cost.bytes_in / 1e6 / figures["rewrite_parquet_mb_per_cpu_s"]
    reindexed(lake, touched, cost, figures)
    return cost


def reindexed(lake: Lake, touched: int, cost: Cost, figures: dict[str, Any]) -> None:
    """Dropping Parquet rows shifts the rows after them: today every index row of the object is written again (the
    executors wait for it: PostgreSQL's COPY rate counted as their time)."""
    cost.index_wru += touched * lake.pairs / lake.objects * lake.item_wru
    cost.index_rows += touched * lake.records / lake.objects
    cost.cpu_s += touched * lake.records / lake.objects / figures["pg_rows_per_s"]


def whole(lake: Lake, touched: int, figures: dict[str, Any]) -> Cost:
    """Read every touched object whole and write it back (a multipart PUT), verify by checksum."""
    a = lake.a
    parts = math.ceil(a.object_bytes / a.part_bytes)
    rate = figures["rewrite_jsonl_mb_per_cpu_s" if lake.fmt == "jsonl" else "rewrite_parquet_mb_per_cpu_s"]
    cost = Cost(objects=touched, requests_get=touched * 2, requests_put=touched * (parts + 3))
    cost.bytes_in = cost.bytes_out = touched * a.object_bytes
    cost.cpu_s = cost.bytes_in / 1e6 / rate
    if lake.fmt == "parquet":
        reindexed(lake, touched, cost, figures)
    return cost


def index_cost(fmt: str, lake_bytes: int, a: Assumptions, figures: dict[str, Any]) -> dict[str, float]:
    """The backfill (once) and the monthly indexing of new objects, with the index's size on either backend."""
    lake = Lake(fmt, lake_bytes, a)
    rate = figures["backfill_jsonl_mb_per_cpu_s" if fmt == "jsonl" else "index_parquet_mb_per_cpu_s"]
    held = max(lake_bytes / 1e6 / rate / figures["spark_utilisation"], lake_bytes / 1e6 / a.s3_mb_per_vcpu_s)
    backfill_emr = (held * PRICES["emr_vcpu_hour"] + held * a.worker_gb / a.driver_vcpu * PRICES["emr_gb_hour"]) / 3600
    requests = lake.objects * 2 * PRICES["s3_get_per_1000"] / 1000  # HEAD + GET per object
    writes = lake.pairs * lake.item_wru * PRICES["ddb_per_million_wru"] / 1e6
    lambda_rate = figures["index_jsonl_mb_per_cpu_s"] if fmt == "jsonl" else figures["index_parquet_mb_per_cpu_s"]
    share = a.ingest_share_per_month
    # Lambda at 1,769 MB has one vCPU: GB-seconds = CPU-seconds x 1.769.
    ingest_lambda = share * lake_bytes / 1e6 / lambda_rate * 1.769 * PRICES["lambda_gb_second"]
    pg_bytes = lake.records * figures["pg_bytes_per_row"]
    return {
        "items": lake.pairs,
        "rows": lake.records,
        "backfill_cpu_h": lake_bytes / 1e6 / rate / 3600,
        "backfill_dollars_ddb": backfill_emr + requests + writes,
        "backfill_dollars_pg": backfill_emr + requests,
        "backfill_pg_copy_hours": lake.records / figures["pg_rows_per_s"] / 3600,
        "ddb_gb": lake.ddb_bytes / 1e9,
        "pg_gb": pg_bytes / 1e9,
        "ddb_storage_month": lake.ddb_bytes / 1e9 * PRICES["ddb_gb_month"],
        "pg_storage_month": pg_bytes / 1e9 * PRICES["rds_gb_month"] + PRICES["rds_pg_instance_month"],
        "ingest_month_ddb": ingest_lambda + share * writes,
        "ingest_month_pg": ingest_lambda,
    }


def dollars(c: Cost, a: Assumptions, figures: dict[str, Any], dynamodb: bool = True) -> float:
    """What a run costs; with a PostgreSQL index its writes are the instance's time (a monthly charge), not billed."""
    index = c.index_dollars() if dynamodb else 0.0
    return c.s3_dollars() + c.emr_dollars(a, figures["spark_utilisation"]) + c.workflow_dollars(a) + index


EMR_VCPUS = (16, 64, 256)  # EMR Serverless jobs of 4, 16 and 64 executors of 4 vCPU
DYNAMODB_WRU_PER_S = 40_000  # an on-demand table's default write throughput limit (raise it for a backfill)


def hours_on(vcpus: int, cpu_s: float, moved: float, a: Assumptions, figures: dict[str, Any]) -> float:
    """Wall hours of Spark work of cpu_s CPU-seconds moving `moved` bytes, on vcpus executor vCPUs: the longer of
    the CPU over the vCPUs at the measured utilisation and the bytes at s3_mb_per_vcpu_s, plus the fixed time."""
    compute = cpu_s / (vcpus * figures["spark_utilisation"])
    transfer = moved / 1e6 / (vcpus * a.s3_mb_per_vcpu_s)
    return (max(compute, transfer) + a.job_fixed_s) / 3600


def extrapolation(a: Assumptions, figures: dict[str, Any]) -> list[str]:
    out = [
        "",
        "## On EMR Serverless: wall hours by job size (executor vCPUs), from the per-core figures",
        "",
        "| lake | format | work | "
        + " | ".join(f"{v} vCPU" for v in EMR_VCPUS)
        + " | bound by the index (PostgreSQL one backend / DynamoDB at 40,000 WRU/s) |",
        "| --- | --- | --- |" + " ---: |" * len(EMR_VCPUS) + " --- |",
    ]
    for tb in (1, 10, 50):
        for fmt in ("jsonl", "parquet"):
            lake = Lake(fmt, tb * TB, a)
            rate = figures["backfill_jsonl_mb_per_cpu_s" if fmt == "jsonl" else "index_parquet_mb_per_cpu_s"]
            cpu = tb * TB / 1e6 / rate
            pg_h = lake.records / figures["pg_rows_per_s"] / 3600
            ddb_h = lake.pairs * lake.item_wru / DYNAMODB_WRU_PER_S / 3600
            cells = " | ".join(f"{hours_on(v, cpu, tb * TB, a, figures):.2f}" for v in EMR_VCPUS)
            out.append(f"| {tb} TB | {fmt} | backfill | {cells} | {pg_h:,.1f} h / {ddb_h:,.1f} h |")
            run = erase(fmt, "scattered", a.requests_per_month, tb * TB, a, figures)
            moved = run.bytes_in + run.bytes_out
            cells = " | ".join(f"{hours_on(v, run.cpu_s, moved, a, figures):.2f}" for v in EMR_VCPUS)
            out.append(f"| {tb} TB | {fmt} | purge of 100 scattered people | {cells} | included |")
    return out


def money(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


STANDING_MONTH = 3 * PRICES["kms_key_month"] + 4 * PRICES["secret_month"]  # 3 KMS keys, 4 secrets


def render(a: Assumptions, figures: dict[str, Any]) -> str:
    out = ["## Prices (us-east-1, USD)", ""]
    out += [f"- {name}: {value:g}" for name, value in PRICES.items()]
    out += ["", "## Measured figures (per core, this machine)", ""]
    out += [f"- {name}: {value:g}" for name, value in figures.items()]
    out += ["", "## Assumptions", ""]
    out += [f"- {name}: {value:g}" for name, value in vars(a).items()]
    out += [
        "",
        f"## One erasure request (1 user), and a month of {a.requests_per_month} requests run one by one",
        "",
        "Erasure only: the index's own costs are in the last table; a month adds"
        f" ${STANDING_MONTH:.2f} of KMS keys and secrets.",
        "",
        "| lake | format | layout | objects in lake | objects touched | GB through the purge (read + written)"
        " | S3 requests | compute CPU-h | $ per request (DynamoDB / PostgreSQL index) | $ a month (DynamoDB)"
        " | whole rewrite instead: GB, $ per request |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for tb in (1, 10, 50):
        for fmt in ("jsonl", "parquet"):
            for layout in ("clustered", "scattered"):
                c = erase(fmt, layout, 1, tb * TB, a, figures)
                w = whole(Lake(fmt, tb * TB, a), c.objects, figures)
                one = dollars(c, a, figures)
                out.append(
                    f"| {tb} TB | {fmt} | {layout} | {tb * TB // a.object_bytes:,} | {c.objects:,}"
                    f" | {(c.bytes_in + c.bytes_out) / 1e9:,.2f} | {c.requests_get + c.requests_put:,.0f}"
                    f" | {c.cpu_s / 3600:.3f} | {money(one)} / {money(dollars(c, a, figures, dynamodb=False))}"
                    f" | {money(one * a.requests_per_month)}"
                    f" | {(w.bytes_in + w.bytes_out) / 1e9:,.0f} GB, ${money(dollars(w, a, figures))} |"
                )
    out += [
        "",
        f"## A month's {a.requests_per_month} requests in one run (what Find and Forget's table prices)",
        "",
        "| lake | format | layout | objects touched | GB through the purge | compute CPU-h"
        " | index rows moved (Parquet): rows, DynamoDB $ | $ per run (DynamoDB / PostgreSQL index)"
        " | Find and Forget, $ per run (objects modified) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for tb in (1, 10, 50):
        for fmt in ("jsonl", "parquet"):
            for layout in ("clustered", "scattered"):
                c = erase(fmt, layout, a.requests_per_month, tb * TB, a, figures)
                faf = FIND_AND_FORGET.get(tb)
                theirs = f"${faf['total']:.2f} ({faf['objects']:,})" if faf and fmt == "parquet" else "-"
                out.append(
                    f"| {tb} TB | {fmt} | {layout} | {c.objects:,} | {(c.bytes_in + c.bytes_out) / 1e9:,.0f}"
                    f" | {c.cpu_s / 3600:.2f} | {c.index_rows:.1e}, ${money(c.index_dollars())}"
                    f" | {money(dollars(c, a, figures))} / {money(dollars(c, a, figures, dynamodb=False))} | {theirs} |"
                )
    out += [
        "",
        "## The index: backfill once, then new objects as they arrive",
        "",
        "| lake | format | DynamoDB items / GB | PostgreSQL rows / GB | backfill CPU-h"
        " | backfill $ (DynamoDB / PostgreSQL)"
        " | PostgreSQL COPY hours (one backend) | storage $ a month (DynamoDB / RDS PostgreSQL)"
        f" | indexing {a.ingest_share_per_month:.0%} new objects, $ a month (DynamoDB / PostgreSQL) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for tb in (1, 10, 50):
        for fmt in ("jsonl", "parquet"):
            i = index_cost(fmt, tb * TB, a, figures)
            out.append(
                f"| {tb} TB | {fmt} | {i['items']:.1e} / {i['ddb_gb']:,.0f} | {i['rows']:.1e} / {i['pg_gb']:,.0f}"
                f" | {i['backfill_cpu_h']:,.1f}"
                f" | {money(i['backfill_dollars_ddb'])} / {money(i['backfill_dollars_pg'])}"
                f" | {i['backfill_pg_copy_hours']:,.0f}"
                f" | {money(i['ddb_storage_month'])} / {money(i['pg_storage_month'])}"
                f" | {money(i['ingest_month_ddb'])} / {money(i['ingest_month_pg'])} |"
            )
    return "\n".join(out + extrapolation(a, figures))


def measure(figures: dict[str, Any]) -> dict[str, Any]:
    """The per-core figures of this machine: the engine's whole rewrite (with its check before the write) and the
    indexer's reader over Parquet, in CPU-seconds of this process, on erase_path_bench's objects."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import erase_path_bench as eb
    import purge_bench as pb

    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.records.formats import group_records

    scale = eb.scale(20, 5000, 2_000, 50, 1)
    lake = pb.generate_lake(scale)
    settings = eb.settings_for("postgresql://unused/unused")
    pseudonymizer = Pseudonymizer(pb.HASH_KEY.encode())
    chosen = list(range(scale.scattered_users, scale.scattered_users + 20))  # 20 clustered users
    ids = [lake.user_ids[u] for u in chosen]
    hashes = pseudonymizer.many(ids)
    out = dict(figures)
    for fmt in ("jsonl", "parquet"):
        from lakepurge.core.config import parse_settings

        dataset = parse_settings(
            {
                "index": {"backend": "postgres", "dsn": "postgresql://unused/unused"},
                "reports": {"location": "s3://r/"},
                "datasets": [{"name": "d", "location": "s3://b/d/", "format": fmt, "id_fields": ["user_id"]}],
            }
        ).datasets[0]
        bodies = {key: eb.encoded(fmt, body) for key, body in lake.bodies.items()}
        work = []
        for index, key in enumerate(lake.keys):
            lines = [line for line, user in enumerate(lake.owners[index]) if user in set(chosen)]
            work.append((key, lines))
        users = eb.users_as("hashes", hashes, ids, pseudonymizer)
        best = min(eb.run_engine(fmt, bodies, work, users, dataset, settings).total_s for _ in range(3))
        size = sum(len(b) for b in bodies.values()) / 1e6
        out[f"rewrite_{fmt}_mb_per_cpu_s"] = round(size / best, 1)
        if fmt == "parquet":
            start = time.process_time()
            for key, body in bodies.items():
                group_records(io.BytesIO(body), key, "parquet", ("user_id",), 16 * MiB)
            out["index_parquet_mb_per_cpu_s"] = round(size / (time.process_time() - start), 1)
        print(f"{fmt}: {size:.0f} MB, engine with check {size / best:.1f} MB per CPU-second", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", action="store_true", help="measure the per-core figures here first")
    parser.add_argument("--object-mib", type=int, default=Assumptions.object_bytes // MiB)
    parser.add_argument("--requests", type=int, default=Assumptions.requests_per_month, help="requests a month")
    args = parser.parse_args(argv)
    figures = dict(FIGURES)
    if args.measure:
        figures = measure(figures)
        FIGURES_FILE.parent.mkdir(exist_ok=True)
        FIGURES_FILE.write_text(json.dumps(figures, indent=2))
    a = Assumptions(object_bytes=args.object_mib * MiB, requests_per_month=args.requests)
    print(render(a, figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
