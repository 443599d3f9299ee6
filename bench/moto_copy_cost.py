"""What one S3 request of a server-side splice costs moto, as a function of the object's size.

Run from the repository root::

    .venv/bin/python bench/moto_copy_cost.py                    # objects of 128 and 1,024 MiB: ~2 min
    .venv/bin/python bench/moto_copy_cost.py --sizes-mib 64,256

For each size, one object of random bytes is put into a moto server in its own process (as splice_bench runs it),
then each request a splice makes is timed alone, wall and the moto process's CPU: a ranged GET of 5 MiB, an
UploadPart of 5 MiB, an UploadPartCopy of a 5 MiB range, an UploadPartCopy of the rest of the object as one part,
and the CompleteMultipartUpload of those parts; beside them the whole GET and PUT a plain copy makes. Against S3 the
ranged and copy requests cost the size of their range; a row that grows with the object is moto's cost, which a
splice through moto pays and S3 would not. The median of --reps runs of each small request is shown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import purge_bench as pb  # moto in its own process

MiB = 1 << 20
BUCKET = "moto-copy-cost"
PART = 5 * MiB


def timed(pid: int, call: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall seconds and moto's CPU seconds of one call, and its result."""
    cpu, start = pb.process_cpu(pid), time.perf_counter()
    result = call()
    return time.perf_counter() - start, pb.process_cpu(pid) - cpu, result


def measure(s3: Any, pid: int, size: int, reps: int) -> dict[str, tuple[float, float]]:
    key = f"object-{size // MiB}"
    rows: dict[str, tuple[float, float]] = {}
    put = partial(s3.put_object, Bucket=BUCKET, Key=key, Body=os.urandom(size))
    rows["PutObject, whole object"] = timed(pid, put)[:2]
    del put

    def read(**ranged: str) -> bytes:
        return bytes(s3.get_object(Bucket=BUCKET, Key=key, **ranged)["Body"].read())

    rows["GetObject, whole object"] = timed(pid, read)[:2]
    middle = size // 2

    def median(call: Callable[[], Any]) -> tuple[float, float]:
        runs = [timed(pid, call)[:2] for _ in range(reps)]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    window = f"bytes={middle}-{middle + PART - 1}"
    rows["GetObject, 5 MiB range"] = median(partial(read, Range=window))
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    part = os.urandom(PART)

    def upload_part() -> Any:
        return s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=part)

    def copy_part(number: int, first: int, last: int) -> Any:
        return s3.upload_part_copy(
            Bucket=BUCKET,
            Key=key,
            UploadId=upload,
            PartNumber=number,
            CopySource={"Bucket": BUCKET, "Key": key},
            CopySourceRange=f"bytes={first}-{last}",
        )

    rows["UploadPart, 5 MiB"] = median(upload_part)
    rows["UploadPartCopy, 5 MiB range"] = median(lambda: copy_part(2, middle, middle + PART - 1))
    wall, cpu, copied = timed(pid, lambda: copy_part(2, PART, size - 1))
    rows[f"UploadPartCopy, the other {(size - PART) / MiB:,.0f} MiB"] = (wall, cpu)
    first = upload_part()
    parts = [
        {"PartNumber": 1, "ETag": first["ETag"]},
        {"PartNumber": 2, "ETag": copied["CopyPartResult"]["ETag"]},
    ]
    rows["CompleteMultipartUpload (2 parts, whole object)"] = timed(
        pid,
        lambda: s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}),
    )[:2]
    s3.delete_object(Bucket=BUCKET, Key=key)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mib", default="128,1024", help="object sizes in MiB, comma-separated (>= 16)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each 5 MiB request (median shown)")
    args = parser.parse_args(argv)
    sizes = [int(s) * MiB for s in args.sizes_mib.split(",")]
    if min(sizes) < 16 * MiB:
        parser.error("--sizes-mib: 16 and up")
    moto = pb.start_moto_process()
    try:
        from lakepurge.core import aws

        s3 = aws.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        results = {size: measure(s3, moto.process.pid, size, args.reps) for size in sizes}
    finally:
        moto.stop()
    names = list(results[sizes[0]])
    header = "| request | " + " | ".join(f"{s // MiB:,} MiB: wall s / moto CPU s" for s in sizes) + " |"
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    print(header)
    print("| --- |" + " ---: |" * len(sizes))
    for index, name in enumerate(names):
        cells = [list(results[size].values())[index] for size in sizes]
        label = name if "other" not in name else "UploadPartCopy, the rest of the object as one part"
        print(f"| {label} | " + " | ".join(f"{wall:.3f} / {cpu:.3f}" for wall, cpu in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
