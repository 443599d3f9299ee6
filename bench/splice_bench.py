"""Server-side splice benchmark: erasing 1 and 100 records of one large object through the purge engine, against a
plain copy of that object (GET it whole, PUT it back), through the same moto server.

Run from the repository root::

    .venv/bin/python bench/splice_bench.py                  # 1 GiB objects (the issue's figures): ~12 min
    .venv/bin/python bench/splice_bench.py --size-mib 128   # a smoke test: ~1-2 min

Each format gets one object of the given size in an unversioned bucket of a moto server in its own process (so
serving S3 does not share this process's interpreter), indexed in a throwaway PostgreSQL (not timed):

- JSON Lines: ~1.5 KB records, ids 8 characters wide; one user on 1 line (the middle of the object), another on 100
  lines spread evenly over it (every one in its own window of at least 5 MiB: at 1 GiB they move half of the
  object and are spliced; in a small object they would move over three quarters of it, and it is rewritten whole:
  lakepurge.purge.server_splice.worth_splicing).
- Parquet (pyarrow), 8 row groups, ~1 KB rows; one user on 1 row, another on 100 rows in two row groups (rows
  clustered by time, as lakes partition them; rows in every group would leave nothing to copy: rewritten whole).

Then, in one run: the plain copy (client-side GET + PUT of the whole object; put_object for up to 5 GiB), then the
purge of the 1-record user, then the purge of the 100-record user (`lakepurge.purge.engine.purge_object`, with
`purge.splice.min_bytes` at 16 MiB): wall time, and the bytes that passed through the client, counted on the wire
by botocore event hooks (bytes read from GET response bodies, PUT and UploadPart request bodies), not by the
splice's own figures; and the time spent waiting on each S3 operation.
A purge that did not erase exactly the planted records, or left the user's id in the object, is an error.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import purge_bench as pb  # moto in its own process

MiB = 1 << 20
BUCKET = "splice-bench"
ONE, HUNDRED = "one-0001", "hund-0100"  # as wide as every other id (u0000000)
HASH_KEY = "splice-bench-hash-key-of-32-bytes!!"


@dataclass
class Wire:
    """Bytes and requests through one S3 client, as botocore sends and receives them: request bodies sent, and the
    bytes read from response bodies (a body closed unread costs its GET request, not its length)."""

    sent: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    bodies: list[Any] = field(default_factory=list)
    seconds: Counter[str] = field(default_factory=Counter)  # per operation, summed over the threads that call it
    _started: threading.local = field(default_factory=threading.local)

    @property
    def received(self) -> int:
        return sum(body._amount_read for body in self.bodies)

    def attach(self, s3: Any) -> Any:
        s3.meta.events.register("before-send.s3", self._send)
        s3.meta.events.register("after-call.s3.GetObject", self._got)
        s3.meta.events.register("before-call.s3", self._start)
        s3.meta.events.register("after-call.s3", self._end)
        return s3

    def _start(self, **_: Any) -> None:
        self._started.at = time.perf_counter()

    def _end(self, event_name: str, **_: Any) -> None:
        self.seconds[event_name.rsplit(".", 1)[-1]] += time.perf_counter() - self._started.at

    def _send(self, request: Any, event_name: str, **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        self.requests[operation] += 1
        if operation in ("PutObject", "UploadPart"):
            headers = request.headers
            length = headers.get("x-amz-decoded-content-length") or headers.get("Content-Length")
            if length is None:
                body = request.body
                length = len(body) if isinstance(body, bytes | bytearray) else 0
            self.sent += int(length)

    def _got(self, parsed: dict[str, Any], **_: Any) -> None:
        self.bodies.append(parsed["Body"])

    def reset(self) -> None:
        self.sent = 0
        self.requests.clear()
        self.bodies.clear()
        self.seconds.clear()


def jsonl_object(size: int) -> tuple[bytes, list[int], list[int]]:
    """JSON Lines of about `size` bytes, and the lines of the 1-record and the 100-record user."""
    rnd = random.Random(34)
    lines: list[bytes] = []
    total = 0
    while total < size:
        note = rnd.randbytes(700).hex()
        line = orjson.dumps({"user_id": f"u{rnd.randrange(10**7):07d}", "n": len(lines), "note": note}) + b"\n"
        lines.append(line)
        total += len(line)
    count = len(lines)
    one = [count // 2 + 7]
    hundred = [count * k // 100 + 3 for k in range(100)]
    for user, planted in ((ONE, one), (HUNDRED, hundred)):
        for number in planted:
            record = orjson.loads(lines[number])
            record["user_id"] = user
            lines[number] = orjson.dumps(record) + b"\n"
    return b"".join(lines), one, hundred


def parquet_object(size: int) -> tuple[bytes, list[int], list[int]]:
    """Parquet of about `size` bytes in 8 row groups, and the rows of the 1-record and the 100-record user."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rnd = random.Random(34)
    rows = size // 1040
    users = [f"u{rnd.randrange(10**7):07d}" for _ in range(rows)]
    group = rows // 8
    one = [rows // 2 + 7]  # row group 4
    hundred = sorted([group + 11 * k for k in range(50)] + [6 * group + 13 * k for k in range(50)])  # groups 1 and 6
    for row in one:
        users[row] = ONE
    for row in hundred:
        users[row] = HUNDRED
    blob = b"".join(rnd.randbytes(1000 * 1024) for _ in range(-(-rows // 1024)))  # randbytes takes < 2 GiB
    table = pa.table(
        {
            "user_id": users,
            "n": pa.array(range(rows), pa.int64()),
            "blob": pa.array([blob[i * 1000 : (i + 1) * 1000] for i in range(rows)], pa.binary()),
            "score": pa.array([rnd.random() for _ in range(rows)], pa.float64()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=group,
        compression={"user_id": "zstd", "n": "snappy", "blob": "none", "score": "snappy"},
    )
    return sink.getvalue(), one, hundred


def settings_for(dsn: str, fmt: str) -> Any:
    from lakepurge.core.config import parse_settings

    return parse_settings(
        {
            "index": {"backend": "postgres", "dsn": dsn},
            "reports": {"location": f"s3://{BUCKET}-reports/"},
            "purge": {"max_dataset_fraction": 1.0, "max_object_fraction": 1.0, "splice": {"min_bytes": 16 * MiB}},
            "datasets": [
                {"name": "events", "location": f"s3://{BUCKET}/{fmt}/", "format": fmt, "id_fields": ["user_id"]}
            ],
        }
    )


@dataclass
class Row:
    case: str
    seconds: float
    received: int
    sent: int
    requests: int
    spliced: bool = False
    calls: dict[str, float] = field(default_factory=dict)  # seconds waiting on each S3 operation
    cpu: tuple[float, float] = (0.0, 0.0)  # CPU seconds of this process (the purge) and of the moto server

    def note(self) -> str:
        slowest = sorted(self.calls.items(), key=lambda item: -item[1])[:5]
        return (
            f"- {self.case}: "
            + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in slowest)
            + f"; CPU: this process {self.cpu[0]:.2f} s, moto {self.cpu[1]:.2f} s"
        )

    def line(self, size: int, copy: Row | None) -> str:
        through = self.received + self.sent
        share = f"{100 * through / size:7.2f}%"
        speedup = f"{copy.seconds / self.seconds:6.1f}x" if copy is not None else "     - "
        how = "spliced" if self.spliced else ("copy" if copy is None else "rewritten whole")
        return (
            f"| {self.case:<30} | {self.seconds:8.2f} | {self.received / MiB:9.1f} | {self.sent / MiB:9.1f} | "
            f"{share} | {self.requests:5d} | {speedup} | {how} |"
        )


HEADER = (
    "| case                           |   wall s | GET MiB   | sent MiB  | of object | reqs  | vs copy | how |\n"
    "|--------------------------------|----------|-----------|-----------|-----------|-------|---------|-----|"
)


def cpu_now(moto_pid: int) -> tuple[float, float]:
    return time.process_time(), pb.process_cpu(moto_pid)


def cpu_since(before: tuple[float, float], moto_pid: int) -> tuple[float, float]:
    after = cpu_now(moto_pid)
    return after[0] - before[0], after[1] - before[1]


def timed_copy(s3: Any, wire: Wire, key: str, moto_pid: int) -> Row:
    wire.reset()
    gc.collect()
    cpu = cpu_now(moto_pid)
    start = time.perf_counter()
    data = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    seconds = time.perf_counter() - start
    used = cpu_since(cpu, moto_pid)
    del data
    requests = sum(wire.requests.values())
    return Row("plain GET + PUT copy", seconds, wire.received, wire.sent, requests, calls=dict(wire.seconds), cpu=used)


def timed_purge(
    s3: Any, wire: Wire, store: Any, cfg: Any, key: str, user: str, planted: list[int], case: str, moto_pid: int
) -> Row:
    from lakepurge.purge.engine import PurgeTarget, purge_object

    s3path = f"s3://{BUCKET}/{key}"
    held = store.get_object(s3path)
    lines = tuple(sorted(held.lines_by_user[user]))
    if len(lines) != len(planted):  # Parquet rows after an erased one have moved up
        raise AssertionError(f"{case}: the index names {len(lines)} records, {len(planted)} were planted")
    wire.reset()
    gc.collect()
    cpu = cpu_now(moto_pid)
    start = time.perf_counter()
    outcome = purge_object(s3, store, cfg, PurgeTarget(s3path, "events", held.etag, lines), {user})
    seconds = time.perf_counter() - start
    used = cpu_since(cpu, moto_pid)
    requests = sum(wire.requests.values())
    row = Row(case, seconds, wire.received, wire.sent, requests, outcome.splice is not None, dict(wire.seconds), used)
    if outcome.status != "erased" or outcome.lines_erased != len(planted):
        raise AssertionError(f"{case}: {outcome.status}, {outcome.lines_erased} erased of {len(planted)}")
    return row


def left_in(s3: Any, key: str, user: str, fmt: str) -> bool:
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    if fmt == "jsonl":
        return user.encode() in body
    import pyarrow.parquet as pq

    return user in pq.read_table(io.BytesIO(body), columns=["user_id"]).column("user_id").to_pylist()


def run_format(fmt: str, size: int, s3: Any, wire: Wire, dsn: str, moto_pid: int) -> list[str]:
    from lakepurge.index import open_store
    from lakepurge.indexing.indexer import index_object

    cfg = settings_for(dsn, fmt)
    store = open_store(cfg.index)
    try:
        pb.progress(f"{fmt}: generating ~{size / MiB:,.0f} MiB ...")
        data, one, hundred = (jsonl_object if fmt == "jsonl" else parquet_object)(size)
        key = f"{fmt}/big-{uuid.uuid4().hex[:6]}.{fmt}"
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)
        actual = len(data)
        del data
        pb.progress(f"{fmt}: {actual / MiB:,.0f} MiB uploaded; copying ...")
        copy = timed_copy(s3, wire, key, moto_pid)
        pb.progress(f"{fmt}: copied in {copy.seconds:.1f} s; indexing (not timed) ...")
        index_object(s3, store, cfg, BUCKET, key)
        rows = [copy]
        for user, planted, case in ((ONE, one, "erase 1 record"), (HUNDRED, hundred, "erase 100 records")):
            pb.progress(f"{fmt}: {case} ...")
            rows.append(timed_purge(s3, wire, store, cfg, key, user, planted, case, moto_pid))
            if left_in(s3, key, user, fmt):
                raise AssertionError(f"{fmt}, {case}: the user's id is still in the object")
        table = [r.line(actual, None if r is copy else copy) for r in rows]
        waits = "Time waiting on S3 operations (summed over the threads that wait), and CPU time:"
        notes = ["", waits, *(r.note() for r in rows)]
        return [f"\n{fmt}, {actual / MiB:,.0f} MiB ({actual:,} bytes):\n", HEADER, *table, *notes]
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="each object's size (default 1024: 1 GiB)")
    parser.add_argument("--formats", default="jsonl,parquet", help="comma-separated: jsonl, parquet")
    args = parser.parse_args(argv)
    if args.size_mib < 64:
        parser.error("--size-mib: at least 64 (a splice needs ranges of 5 MiB to copy)")
    from lakepurge.core import aws
    from lakepurge.local.postgres import start_postgres

    pb.progress("starting PostgreSQL and moto (own process) ...")
    postgres = start_postgres()
    moto = pb.start_moto_process()
    os.environ["LAKEPURGE_HASH_KEY"] = HASH_KEY
    try:
        wire = Wire()
        s3 = wire.attach(aws.client("s3"))
        s3.create_bucket(Bucket=BUCKET)
        s3.create_bucket(Bucket=f"{BUCKET}-reports")
        started = time.perf_counter()
        print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
        for fmt in args.formats.split(","):
            lines = run_format(fmt.strip(), args.size_mib * MiB, s3, wire, postgres.dsn, moto.process.pid)
            print("\n".join(lines), flush=True)
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}; {time.perf_counter() - started:.0f} s")
    finally:
        moto.stop()
        postgres.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
