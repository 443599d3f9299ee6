"""The least time any tool needs, through moto on this machine, for the S3 requests a table erasure cannot avoid.

Issues 27 and 28 ask for an index-located erasure 10x faster than deltalake's delete + vacuum and pyiceberg's delete
+ expiry at 100 users. On the bench table (200 files, 1,000,000 rows, 200,000 users, a user's ~5 rows scattered),
100 users have rows in ~185 of the 200 files. Whatever finds them, an erasure must then at least read each of those
files (GET) and write its rewrite (PUT); the second reader the issues ask for reads each new file again (GET). This
measures what moto alone takes for those requests, with nothing else done: moto in its own process as the other
benches start it (inline_bench.start_moto_process; without the table benches' byte-counting layer, so a floor below
what they see), objects of the files' size, on 1, 4, 8 and 16 client threads (moto serves requests under one
interpreter lock: past a few threads more only queue). The fastest time per request kind, times the requests, is the
floor; it is set beside the goals.

    .venv/bin/python bench/moto_request_floor.py                 # 185 files of 115 KB: ~1 minute
    .venv/bin/python bench/moto_request_floor.py --files 80      # the clustered layout's 100 users

It asserts nothing about time. Compare with bench/README.md's Delta and Iceberg tables (the contenders' times).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inline_bench import start_moto_process

BUCKET = "floor-bench"


def best_of(runs: int, threads: int, call: Callable[[int], Any], count: int) -> float:
    """The fastest of `runs` rounds of `count` calls on `threads` threads (seconds)."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(call, range(count)))
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=185, help="files rewritten (185: 100 scattered users)")
    parser.add_argument("--size", type=int, default=115_000, help="bytes a file (the bench table's: ~115 KB)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    import boto3
    from botocore.config import Config

    moto = start_moto_process()  # the other benches' moto, in its own process
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=32),
        )
        s3.create_bucket(Bucket=BUCKET)
        body = os.urandom(args.size)
        for number in range(args.files):
            s3.put_object(Bucket=BUCKET, Key=f"table/part-{number}.parquet", Body=body)

        def get(number: int) -> bytes:
            data: bytes = s3.get_object(Bucket=BUCKET, Key=f"table/part-{number}.parquet")["Body"].read()
            return data

        def put(number: int) -> object:
            return s3.put_object(Bucket=BUCKET, Key=f"table/new-{number}.parquet", Body=body)

        best: dict[str, float] = {}
        print(f"moto at {endpoint}: {args.files} objects of {args.size:,} bytes; fastest of {args.runs} rounds")
        for threads in (1, 4, 8, 16):
            for name, call in (("GET", get), ("PUT", put)):
                seconds = best_of(args.runs, threads, call, args.files)
                best[name] = min(best.get(name, seconds), seconds)
                each = seconds / args.files * 1e3
                print(f"  {threads:2} threads: {args.files} {name}s {seconds:.3f} s ({each:.2f} ms each)")
        rewrite = best["GET"] + best["PUT"]
        print(f"floor, read and rewrite every file:        {rewrite:.3f} s ({2 * args.files} requests)")
        reread = rewrite + best["GET"]
        print(f"floor, and the second reader reading them: {reread:.3f} s ({3 * args.files} requests)")
    finally:
        moto.terminate()
        moto.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
