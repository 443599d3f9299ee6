"""Synthetic sample lakes with their ground-truth index, for the demo, the tests and the benchmarks.

Every record is generated here, so the generator knows exactly which user is on which line of which object; the
indexer's output is checked against that knowledge, never against itself.
"""

from __future__ import annotations

import csv
import gzip
import io
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from lakepurge.index.base import WHOLE_OBJECT

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

WORDS = (
    "great product arrived late quality excellent would buy again colour size fit small large the a and it "
    "was very good bad ok fine nice café naïve 東京 smile 👍 refund broken box gift delivery"
).split()

DATASETS_TOML = """
[[datasets]]
name = "reviews"
location = "s3://{bucket}/reviews/"
format = "jsonl"
id_fields = ["user_id"]
erase = "blank"

[[datasets]]
name = "orders"
location = "s3://{bucket}/orders/"
format = "jsonl"
id_fields = ["buyer.id", "gift.recipients"]
erase = "blank"

[[datasets]]
name = "profiles"
location = "s3://{bucket}/profiles/"
format = "csv"
id_fields = ["customer_id"]
erase = "blank"

[[datasets]]
name = "events"
location = "s3://{bucket}/events/"
format = "parquet"
id_fields = ["user_id"]
erase = "drop"

[[datasets]]
name = "clicks"
location = "s3://{bucket}/clicks/"
id_from_key = '(?P<id>[^/]+)-[^/]*\\.csv$'
erase = "delete-object"

[[datasets]]
name = "attachments"
location = "s3://{bucket}/attachments/"
id_sidecar = {{ suffix = ".meta.json", field = "owner" }}
erase = "delete-object"

[[datasets]]
name = "avatars"
location = "s3://{bucket}/avatars/"
id_tag = "owner"
erase = "delete-object"
"""


def settings_toml(bucket: str, index: str, reports: str) -> str:
    """A complete configuration for a sample lake; index is the [index] table's body."""
    return f'[index]\n{index}\n\n[reports]\nlocation = "{reports}"\n' + DATASETS_TOML.format(bucket=bucket)


@dataclass
class SampleObject:
    key: str
    body: bytes
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class SampleLake:
    bucket: str
    objects: list[SampleObject]
    # (user, s3path, line) for every record a correct index must hold.
    truth: set[tuple[str, str, int]]
    users: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(len(o.body) for o in self.objects)

    def upload(self, s3: S3Client) -> None:
        for obj in self.objects:
            extra: dict[str, Any] = {}
            if obj.tags:
                extra["Tagging"] = "&".join(f"{k}={v}" for k, v in obj.tags.items())
            s3.put_object(Bucket=self.bucket, Key=obj.key, Body=obj.body, **extra)


def user_id(number: int) -> str:
    return f"u{number:07d}"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def review_record(rng: random.Random, user: str, number: int) -> dict[str, Any]:
    return {
        "review_id": f"r{number}",
        "user_id": user,
        "rating": rng.randint(1, 5),
        "title": _text(rng, 4),
        "body": _text(rng, rng.randint(8, 40)),
        "ts": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
    }


def jsonl_lines(
    rng: random.Random, users: list[str], count: int, blank_every: int = 0
) -> Iterator[tuple[bytes, str | None]]:
    """Review lines with their owner; every blank_every-th line is an already-erased `{}` (owner None)."""
    for n in range(count):
        if blank_every and n % blank_every == blank_every - 1:
            yield b"{}", None
            continue
        user = rng.choice(users)
        yield orjson.dumps(review_record(rng, user, n)), user


def generate_lake(
    bucket: str = "lake",
    objects: int = 200,
    users: int = 60,
    records_per_object: int = 40,
    seed: int = 7,
) -> SampleLake:
    """A lake mixing JSONL, JSONL.gz, CSV, Parquet, nested and multiple id fields, ids in arrays, and
    one-user-per-object datasets (id in the key, in a sidecar, in a tag)."""
    rng = random.Random(seed)  # noqa: S311 - synthetic data, not security
    pool = [user_id(n) for n in range(1, users + 1)]
    lake = SampleLake(bucket, [], set(), pool)
    shares = {"reviews": 0.35, "orders": 0.2, "profiles": 0.15, "events": 0.1, "clicks": 0.1, "attachments": 0.05}
    counts = {name: max(2, int(objects * share)) for name, share in shares.items()}
    counts["avatars"] = max(2, objects - sum(counts.values()))
    for i in range(counts["reviews"]):
        key = f"reviews/dt=2026-{i % 12 + 1:02d}/part-{i:05d}.jsonl" + (".gz" if i % 2 else "")
        _add_lines(lake, key, jsonl_lines(rng, pool, rng.randint(1, records_per_object), blank_every=17))
    for i in range(counts["orders"]):
        key = f"orders/part-{i:05d}.jsonl" + (".gz" if i % 3 == 0 else "")
        _add_lines(lake, key, _order_lines(rng, pool, rng.randint(1, records_per_object)))
    for i in range(counts["profiles"]):
        _add_csv(lake, rng, pool, f"profiles/part-{i:05d}.csv", rng.randint(1, records_per_object))
    for i in range(counts["events"]):
        _add_parquet(lake, rng, pool, f"events/part-{i:05d}.parquet", rng.randint(1, records_per_object * 2))
    for i in range(counts["clicks"]):
        user = rng.choice(pool)
        _add_owned(lake, SampleObject(f"clicks/{user}-{i:05d}.csv", b"ts,url\n2026-01-01,/home\n"), user)
    for i in range(counts["attachments"]):
        user = rng.choice(pool)
        key = f"attachments/doc-{i:05d}.pdf"
        _add_owned(lake, SampleObject(key, b"%PDF-1.4 synthetic"), user)
        lake.objects.append(SampleObject(key + ".meta.json", orjson.dumps({"owner": user, "pages": 1})))
    for i in range(counts["avatars"]):
        user = rng.choice(pool)
        _add_owned(lake, SampleObject(f"avatars/{i:05d}.png", b"\x89PNG synthetic", {"owner": user}), user)
    return lake


def _add_owned(lake: SampleLake, obj: SampleObject, user: str) -> None:
    lake.objects.append(obj)
    lake.truth.add((user, f"s3://{lake.bucket}/{obj.key}", WHOLE_OBJECT))


def _add_lines(lake: SampleLake, key: str, lines: Iterator[tuple[bytes, str | set[str] | None]]) -> None:
    path = f"s3://{lake.bucket}/{key}"
    out = io.BytesIO()
    for number, (line, owners) in enumerate(lines):
        out.write(line + b"\n")
        for owner in {owners} if isinstance(owners, str) else owners or ():
            lake.truth.add((owner, path, number))
    body = out.getvalue()
    lake.objects.append(SampleObject(key, gzip.compress(body, mtime=0) if key.endswith(".gz") else body))


def _order_lines(rng: random.Random, pool: list[str], count: int) -> Iterator[tuple[bytes, set[str]]]:
    for n in range(count):
        buyer = rng.choice(pool)
        recipients = rng.sample(pool, rng.randint(0, 2))
        record: dict[str, Any] = {"order_id": f"o{n}", "buyer": {"id": buyer, "country": "FR"}, "total": n * 3.5}
        if recipients:
            record["gift"] = {"recipients": recipients, "note": _text(rng, 3)}
        yield orjson.dumps(record), {buyer, *recipients}


def _add_csv(lake: SampleLake, rng: random.Random, pool: list[str], key: str, rows: int) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["customer_id", "name", "city", "note"])
    path = f"s3://{lake.bucket}/{key}"
    line = 1
    for n in range(rows):
        user = rng.choice(pool)
        note = _text(rng, 5)
        if n % 7 == 3:
            # A multi-line quoted note holding an empty line and a line of only commas: physical lines that must
            # never be taken for records or placeholders.
            note = f"{note}\n\n,,,\n{_text(rng, 2)}"
        writer.writerow([user, f"Name {n}", rng.choice(["Paris", "Zürich", "Oslo, NO"]), note])
        lake.truth.add((user, path, line))  # a record's position is the line it starts on
        line += 1 + note.count("\n")
    lake.objects.append(SampleObject(key, out.getvalue().encode()))


def _add_parquet(lake: SampleLake, rng: random.Random, pool: list[str], key: str, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    owners = [rng.choice(pool) for _ in range(rows)]
    table = pa.table(
        {
            "user_id": owners,
            "event": [rng.choice(["view", "click", "buy"]) for _ in range(rows)],
            "value": [rng.random() for _ in range(rows)],
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy", row_group_size=max(1, rows // 3))
    path = f"s3://{lake.bucket}/{key}"
    lake.truth.update((owner, path, row) for row, owner in enumerate(owners))
    lake.objects.append(SampleObject(key, out.getvalue()))
