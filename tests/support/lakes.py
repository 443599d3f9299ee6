"""Helpers shared by integration tests: a configured sample lake on the moto server."""

from __future__ import annotations

import io
import os
import re
import tomllib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.index.base import IndexStore
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.local.samples import SampleLake, generate_lake, settings_toml

REPORTS = "s3://lake-reports/"


def index_toml(backend: str, pg_dsn: str | None = None, table: str = "lakepurge-index-test") -> str:
    if backend == "postgres":
        return f'backend = "postgres"\ndsn = "{pg_dsn}"'
    return f'backend = "dynamodb"\ntable = "{table}"'


def events_lake(pg_dsn: str, prefix: str) -> tuple[Any, str, Settings]:
    """A fresh bucket named from ``prefix`` with one JSON Lines dataset (``events/``, ids in ``user_id``), its reports
    bucket beside it, the index in PostgreSQL, the purge's safety limits open: (s3 client, bucket, settings)."""
    import uuid

    bucket = f"{prefix}-{uuid.uuid4().hex[:10]}"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=f"{bucket}-reports")
    return s3, bucket, parse_settings(tomllib.loads(events_toml(bucket, pg_dsn)))


def events_toml(bucket: str, pg_dsn: str) -> str:
    """The configuration of :func:`events_lake`'s bucket (for a process of its own)."""
    return (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://{bucket}-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n"
        f'[[datasets]]\nname = "events"\nlocation = "s3://{bucket}/events/"\nformat = "jsonl"\n'
        'id_fields = ["user_id"]\n'
    )


@dataclass
class LakeCase:
    lake: SampleLake
    settings: Settings
    toml: str


def partitioned_by_dt(lake: SampleLake, datasets: tuple[str, ...]) -> tuple[set[tuple[str, str, int]], list[str]]:
    """The sample lake cut to the named datasets' objects, its events objects moved under dt=... partitions (the
    reviews are partitioned already), as a catalog's partitioned tables hold them: the ground truth of exactly
    those objects (also set as the lake's) and the partition values."""
    moved: dict[str, str] = {}
    kept = []
    for number, obj in enumerate(o for o in lake.objects if o.key.startswith(tuple(f"{d}/" for d in datasets))):
        if obj.key.startswith("events/"):
            new_key = f"events/dt=2026-0{number % 2 + 1}/{obj.key.removeprefix('events/')}"
            moved[f"s3://{lake.bucket}/{obj.key}"] = f"s3://{lake.bucket}/{new_key}"
            obj.key = new_key
        kept.append(obj)
    lake.objects = kept
    prefixes = tuple(f"s3://{lake.bucket}/{d}/" for d in datasets)
    lake.truth = {(user, moved.get(path, path), line) for user, path, line in lake.truth if path.startswith(prefixes)}
    return lake.truth, sorted({m.group(1) for o in kept if (m := re.search(r"/dt=([^/]+)/", o.key))})


def make_lake(index: str, bucket: str = "lake", versioned: bool = False, **sizes: int) -> LakeCase:
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket="lake-reports")
    if versioned:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    lake = generate_lake(bucket=bucket, **sizes)
    lake.upload(s3)
    toml = settings_toml(bucket, index, REPORTS)
    return LakeCase(lake, parse_settings(tomllib.loads(toml)), toml)


@dataclass(frozen=True)
class HandMadeLake:
    s3: Any
    settings: Settings
    store: IndexStore
    config: str  # the path of the configuration file, for the CLI's --config


@contextmanager
def hand_made_lake(
    index: str,
    tmp_path: Path,
    toml_tail: str,
    objects: Iterable[tuple[str, bytes]],
    buckets: tuple[str, ...] = (),
    versioned: bool = False,
    reconciled: bool = False,
) -> Iterator[HandMadeLake]:
    """A lake of a test's own objects in bucket `lake` on moto (reports in `reports`, any other buckets named),
    configured by toml_tail (its identifiers and datasets) as the process's and the CLI's configuration: each object
    written and indexed in order as its S3 event would (a key written twice makes a noncurrent version in a versioned
    lake), then, if reconciled, every dataset reconciled (the coverage a certified purge needs)."""
    s3 = aws.client("s3")
    for bucket in ("lake", "reports", *buckets):
        s3.create_bucket(Bucket=bucket)
    if versioned:
        s3.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
    toml = f'[index]\n{index}\n[reports]\nlocation = "s3://reports/r/"\n{toml_tail}'
    os.environ["LAKEPURGE_CONFIG_TOML"] = toml
    runtime.reset()
    try:
        settings = parse_settings(tomllib.loads(toml))
        store = runtime.index_store()
        for key, body in objects:
            s3.put_object(Bucket="lake", Key=key, Body=body)
            assert index_object(s3, store, settings, "lake", key).action == "indexed"
        if reconciled:
            run_reconcile(None, settings, [d.name for d in settings.datasets])
        config = tmp_path / "lakepurge.toml"
        config.write_text(toml)
        yield HandMadeLake(s3, settings, store, str(config))
    finally:
        os.environ.pop("LAKEPURGE_CONFIG_TOML", None)
        runtime.reset()


@dataclass(frozen=True)
class SidecarCase:
    """An object of the sample lake's `attachments` dataset (one user per object, owner named in a sidecar)."""

    data_key: str
    sidecar_key: str
    owner: str


def an_attachment(lake: SampleLake) -> SidecarCase:
    sidecar = next(o for o in lake.objects if o.key.startswith("attachments/") and o.key.endswith(".meta.json"))
    return SidecarCase(sidecar.key.removesuffix(".meta.json"), sidecar.key, orjson.loads(sidecar.body)["owner"])


def every_version_bytes(bucket: str, prefix: str) -> dict[tuple[str, str], bytes]:
    """Every version of every object under the prefix: (key, version id) -> bytes."""
    s3 = aws.client("s3")
    out = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for version in page.get("Versions", []):
            body = s3.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"].read()
            out[version["Key"], version["VersionId"]] = body
    return out


def parquet_of(rows: list[dict[str, Any]]) -> bytes:
    """A Parquet object of these rows (pyarrow's types inferred from the values)."""
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def rows_of(body: bytes) -> list[dict[str, Any]]:
    return list(pq.read_table(io.BytesIO(body)).to_pylist())
