"""``lakepurge pseudonymise``: an existing dataset of files converted into a protected one, and the check of how
identifying its clear columns are.

The conversion is a Spark job like the backfill (PySpark's wheel has no s3a: executors read and write each object
with boto3, one object per item): each object of the dataset is read, its records protected in batches through the
vault (lakepurge.protection.protect: the id becomes the person's pseudonym, each personal field ciphertext under the
person's key, keys created on first sight) and written under ``--to`` at the same relative key, in the same format
and compression (JSON Lines, Parquet; CSV datasets are not converted yet). A line the purge blanked (``{}``) or an
empty line is written as it is. A record that cannot be protected (not JSON, no id, a missing personal column)
fails its object, which is then not written at all, never written half or in clear; the run names the object and
the line.

Only when every object was converted is the output declared protected: ``_lakepurge_protection.json`` at the
output's root (hidden from Spark, Hive and the indexer by its leading underscore) records the fields and the
ciphers, and the command prints the ``[[datasets]]`` entry (``protection = "crypto-shred"``) to add to the
configuration.

Before anything is written, the clear columns are checked (lakepurge.protection.quasi): a column set that singles
rows out stops the conversion unless forced; the manifest records the check.
"""

from __future__ import annotations

import gzip
import random
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import orjson

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import head_object, list_objects, open_seekable
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.protection.aead import DETERMINISTIC, RANDOMISED
from lakepurge.protection.protect import Protection, RecordRefused, protect_batch, protect_records
from lakepurge.protection.quasi import (
    DEFAULT_MAX_COLUMNS,
    DEFAULT_MAX_UNIQUE_SHARE,
    DEFAULT_MIN_K,
    DEFAULT_SAMPLE_ROWS,
    QuasiReport,
    Reservoir,
    analyse,
    merge,
)
from lakepurge.protection.transforms import worker_vault
from lakepurge.protection.vault import Vault, vault_config
from lakepurge.records.limits import IN_MEMORY_BYTES
from lakepurge.records.lines import iter_line_batches, open_decompressed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

MANIFEST = "_lakepurge_protection.json"
MANIFEST_VERSION = 1
CIPHERS = {
    "personal_fields": "AES-256-GCM, random 96-bit nonce, the field name as associated data",
    "deterministic_fields": "AES-SIV (RFC 5297), the field name as associated data",
    "pseudonym": "HMAC-SHA256 of the id under the person's pseudonym key, 128 bits",
    "person_key": "256 bits from KMS GenerateDataKey, kept wrapped by the vault's KMS key; HKDF-SHA256 per purpose",
    "ciphertext_prefixes": f"{RANDOMISED} randomised, {DETERMINISTIC} deterministic",
}
RECORDS_PER_BATCH = 5000


class ConversionRefused(Exception):
    """The conversion cannot start as asked (a dataset, a field, the destination); nothing was written."""


class QuasiIdentifiersFound(ConversionRefused):
    """The clear columns single rows out (the check's warning): not converted unless forced."""

    def __init__(self, report: QuasiReport) -> None:
        sets = "; ".join(s.describe() for s in report.flagged[:5])
        super().__init__(
            f"the columns left in clear single rows out ({sets}): encrypt them too (--personal), or convert anyway"
            " with --force and record why"
        )
        self.report = report


@dataclass(frozen=True)
class ConvertedObject:
    source: str
    target: str
    records: int = 0
    passed_through: int = 0  # empty and {} lines, written as they were
    error: str = ""


@dataclass(frozen=True)
class Conversion:
    dataset: str
    to: str
    name: str
    format: str
    protection: Protection
    objects: tuple[ConvertedObject, ...]
    check: QuasiReport
    manifest: str | None  # written only when every object was converted
    entry: str  # the [[datasets]] entry declaring the output protected
    seconds: float

    @property
    def failed(self) -> tuple[ConvertedObject, ...]:
        return tuple(o for o in self.objects if o.error)

    def summary(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "to": self.to,
            "name": self.name,
            "objects": len(self.objects),
            "records": sum(o.records for o in self.objects),
            "failed": [{"object": o.source, "error": o.error} for o in self.failed],
            "declared_protected": self.manifest is not None,
            "manifest": self.manifest,
            "entry": self.entry if self.manifest is not None else None,
            "check": self.check.summary(),
            "seconds": round(self.seconds, 2),
        }


# -- checks before anything is read or written -----------------------------------------------------------------------


def source_dataset(settings: Settings, name: str) -> DatasetConfig:
    dataset = settings.dataset_named(name)
    if dataset.is_table or dataset.per_object or dataset.format not in ("jsonl", "parquet"):
        raise ConversionRefused(
            f"dataset {name}: only JSON Lines and Parquet datasets of records are converted (not CSV, not a table,"
            " not one user per object)"
        )
    if dataset.protection == "crypto-shred":
        raise ConversionRefused(f"dataset {name} is protected already")
    if dataset.id_fields is None or len(dataset.id_fields) != 1 or "." in dataset.id_fields[0]:
        raise ConversionRefused(f"dataset {name}: its records need one top-level id field to be pseudonymised")
    return dataset


def protection_for(dataset: DatasetConfig, personal: Sequence[str], deterministic: Sequence[str]) -> Protection:
    assert dataset.id_fields is not None
    try:
        return Protection(dataset.id_fields[0], tuple(dict.fromkeys(personal)), tuple(dict.fromkeys(deterministic)))
    except ValueError as exc:
        raise ConversionRefused(f"dataset {dataset.name}: {exc}") from None


def destination(settings: Settings, to: str, s3: S3Client) -> S3Uri:
    """--to: an s3:// prefix ending in '/', outside every configured dataset, holding nothing yet."""
    try:
        target = S3Uri.parse(to)
    except ValueError as exc:
        raise ConversionRefused(f"--to {to}: {exc}") from None
    if not target.key.endswith("/"):
        raise ConversionRefused(f"--to {to}: a prefix ending in '/' (s3://bucket/prefix/)")
    for dataset in settings.datasets:
        if dataset.configured_location is None:
            continue
        where = dataset.uri
        if where.bucket == target.bucket and (target.key.startswith(where.key) or where.key.startswith(target.key)):
            raise ConversionRefused(f"--to {to} overlaps dataset {dataset.name} ({dataset.location})")
    listed = s3.list_objects_v2(Bucket=target.bucket, Prefix=target.key, MaxKeys=1)
    if listed.get("KeyCount", 0):
        raise ConversionRefused(f"--to {to} holds objects already: convert into an empty prefix")
    return target


# -- reading records (the check, and the conversion of JSON Lines) -----------------------------------------------


def _body(s3: S3Client, bucket: str, key: str) -> IO[bytes]:
    return s3.get_object(Bucket=bucket, Key=key)["Body"]  # type: ignore[return-value]


def _jsonl_lines(settings: Settings, raw: IO[bytes], key: str) -> Iterator[tuple[int, bytes]]:
    stream = open_decompressed(raw, key, settings.indexing.inflation)
    for first, lines in iter_line_batches(stream, settings.indexing.max_record_bytes):
        for number, line in enumerate(lines, first):
            if line is None:
                raise RecordRefused(f"line {number}: longer than indexing.max_record_bytes")
            yield number, line


def _parsed(number: int, line: bytes) -> dict[str, Any] | None:
    """A JSON Lines record, or None for a line written as it is (empty, or a purge's ``{}``)."""
    if not line.strip() or line.strip() == b"{}":
        return None
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise RecordRefused(f"line {number}: not valid JSON") from None
    if not isinstance(record, dict):
        raise RecordRefused(f"line {number}: not a JSON object")
    return record


def _records(s3: S3Client, settings: Settings, dataset: DatasetConfig, bucket: str, key: str) -> Iterator[dict]:
    """Every record of an object as a dict (the check's reading)."""
    if dataset.format == "parquet":
        import pyarrow.parquet as pq

        head = head_object(s3, bucket, key)
        if head is None:
            return
        for batch in pq.ParquetFile(open_seekable(s3, head)).iter_batches(batch_size=RECORDS_PER_BATCH):
            yield from batch.to_pylist()
    else:
        for number, line in _jsonl_lines(settings, _body(s3, bucket, key), key):
            record = _parsed(number, line)
            if record is not None:
                yield record


def _clear_value(value: Any) -> str | None:
    """A clear column's value as the check groups it: text as it is, anything else as its JSON text."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


# -- the check ------------------------------------------------------------------------------------------------------


def check_dataset(
    spark: Any,
    settings: Settings,
    dataset: DatasetConfig,
    hidden: Sequence[str],
    columns: Sequence[str] = (),
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    max_columns: int = DEFAULT_MAX_COLUMNS,
    max_unique_share: float = DEFAULT_MAX_UNIQUE_SHARE,
    min_k: int = DEFAULT_MIN_K,
) -> QuasiReport:
    """How identifying the dataset's clear columns are: every column but the id and ``hidden`` (the personal fields,
    which become ciphertext), or only ``columns`` when named. Read on Spark, a uniform sample of at most
    ``sample_rows`` rows analysed on the driver (lakepurge.protection.quasi)."""
    import pyarrow as pa

    s3 = aws.client("s3")
    assert dataset.id_fields is not None
    left_out = {dataset.id_fields[0], *hidden}
    keys = [key for _, key, _ in list_objects(s3, dataset)]
    env = job_environment(settings)
    bucket = dataset.uri.bucket
    per_task = max(1, sample_rows)

    def sample(items: Iterable[str]) -> Iterator[Reservoir]:
        apply_job_environment(env)
        client = aws.client("s3")
        chance = random.Random(len(keys))  # noqa: S311 - sampling, not cryptography
        reservoir = Reservoir(per_task)
        for key in items:
            for record in _records(client, settings, dataset, bucket, key):
                wanted = columns or [name for name in record if name not in left_out]
                reservoir.add(tuple((name, _clear_value(record.get(name))) for name in wanted), chance)
        yield reservoir

    reservoirs = on_executors(spark, keys, sample, label="objects read for the check")
    rows, seen = merge(reservoirs, sample_rows, random.Random(0))  # noqa: S311
    names = list(columns) or list(dict.fromkeys(name for row in rows for name, _ in row))
    table = pa.table({name: pa.array([dict(row).get(name) for row in rows], pa.string()) for name in names})
    return analyse(table, seen, max_columns, max_unique_share, min_k)


# -- the conversion -------------------------------------------------------------------------------------------------


def pseudonymise_dataset(
    spark: Any,
    settings: Settings,
    dataset_name: str,
    to: str,
    personal: Sequence[str],
    deterministic: Sequence[str] = (),
    name: str | None = None,
    force: bool = False,
    check_columns: Sequence[str] = (),
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    max_columns: int = DEFAULT_MAX_COLUMNS,
    max_unique_share: float = DEFAULT_MAX_UNIQUE_SHARE,
    min_k: int = DEFAULT_MIN_K,
) -> Conversion:
    """Convert a dataset into a protected one under ``to`` (see the module docstring). Raises ConversionRefused
    before anything is written (QuasiIdentifiersFound when the check flags a column set and ``force`` is not set)."""
    started = time.monotonic()
    s3 = aws.client("s3")
    dataset = source_dataset(settings, dataset_name)
    protection = protection_for(dataset, personal, deterministic)
    target = destination(settings, to, s3)
    vault_config(settings)
    name = name or f"{dataset.name}_protected"
    if any(d.name == name for d in settings.datasets):
        raise ConversionRefused(f"a dataset named {name} is configured already: choose another --name")
    check = check_dataset(
        spark, settings, dataset, protection.personal_fields, check_columns, sample_rows, max_columns,
        max_unique_share, min_k,
    )  # fmt: skip
    if check.flagged and not force:
        raise QuasiIdentifiersFound(check)
    Vault.open(settings).close()  # the vault's schema, created once here, not by every executor
    source = dataset.uri
    items = [(key, target.key + key[len(source.key) :]) for _, key, _ in list_objects(s3, dataset)]
    env = job_environment(settings)

    def convert(batch: Iterable[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        apply_job_environment(env)
        client = aws.client("s3")
        vault = worker_vault(settings)
        for key, target_key in batch:
            yield asdict(_convert_object(client, settings, dataset, vault, protection, key, target.bucket, target_key))

    objects = tuple(ConvertedObject(**o) for o in on_executors(spark, items, convert, label="objects pseudonymised"))
    entry = dataset_entry(name, dataset.format, str(target), protection)
    manifest = None
    if not any(o.error for o in objects):
        manifest = _declare(s3, target, dataset, name, protection, objects, check, entry)
    log.info(
        "dataset pseudonymised",
        extra={"dataset": dataset.name, "objects": len(objects), "failed": sum(1 for o in objects if o.error)},
    )
    return Conversion(
        dataset.name,
        str(target),
        name,
        dataset.format,
        protection,
        objects,
        check,
        manifest,
        entry,
        time.monotonic() - started,
    )


def _convert_object(
    s3: S3Client,
    settings: Settings,
    dataset: DatasetConfig,
    vault: Vault,
    protection: Protection,
    key: str,
    bucket: str,
    target_key: str,
) -> ConvertedObject:
    source = f"s3://{dataset.uri.bucket}/{key}"
    target = f"s3://{bucket}/{target_key}"
    with tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES) as staged:
        try:
            if dataset.format == "parquet":
                records, passed = _parquet(s3, dataset, vault, protection, key, staged), 0
            else:
                compressed = key.endswith(".gz")
                out: IO[bytes] = gzip.GzipFile(fileobj=staged, mode="wb") if compressed else staged  # type: ignore[assignment]
                records, passed = _jsonl(settings, vault, protection, _body(s3, dataset.uri.bucket, key), key, out)
                if compressed:
                    out.close()
        except RecordRefused as exc:
            return ConvertedObject(source, target, error=str(exc))
        staged.seek(0)
        s3.upload_fileobj(staged, bucket, target_key)
    return ConvertedObject(source, target, records, passed)


def _jsonl(
    settings: Settings, vault: Vault, protection: Protection, raw: IO[bytes], key: str, out: IO[bytes]
) -> tuple[int, int]:
    records = passed = 0
    pending: list[tuple[int, bytes, dict[str, Any] | None]] = []

    def flush() -> None:
        nonlocal records
        batch = [record for _, _, record in pending if record is not None]
        protected = iter(_protected(vault, batch, protection, [n for n, _, r in pending if r is not None]))
        for _, line, record in pending:
            out.write((line if record is None else orjson.dumps(next(protected))) + b"\n")
        records += len(batch)
        pending.clear()

    for number, line in _jsonl_lines(settings, raw, key):
        record = _parsed(number, line)
        passed += record is None
        pending.append((number, line, record))
        if len(pending) >= RECORDS_PER_BATCH:
            flush()
    flush()
    return records, passed


def _protected(
    vault: Vault, batch: list[dict[str, Any]], protection: Protection, lines: list[int]
) -> list[dict[str, Any]]:
    """protect_records, its errors named by the object's line numbers instead of the batch's positions."""
    try:
        return protect_records(vault, batch, protection)
    except RecordRefused as exc:
        position, _, reason = str(exc).removeprefix("record ").partition(":")
        line = lines[int(position)] if position.isdigit() else "?"
        raise RecordRefused(f"line {line}:{reason}") from None


def _parquet(
    s3: S3Client, dataset: DatasetConfig, vault: Vault, protection: Protection, key: str, out: IO[bytes]
) -> int:
    import pyarrow.parquet as pq

    head = head_object(s3, dataset.uri.bucket, key)
    if head is None:
        raise RecordRefused("the object is gone")
    source = pq.ParquetFile(open_seekable(s3, head))
    names = source.schema_arrow.names
    missing = [f for f in (protection.id_field, *protection.personal_fields) if f not in names]
    if missing:
        raise RecordRefused(f"no column(s) {', '.join(missing)}")
    writer = None
    records = 0
    try:
        for batch in source.iter_batches(batch_size=RECORDS_PER_BATCH):
            try:
                protected = protect_batch(vault, batch, protection)
            except RecordRefused as exc:
                position, _, reason = str(exc).removeprefix("record ").partition(":")
                row = records + int(position) if position.isdigit() else "?"
                raise RecordRefused(f"row {row}:{reason}") from None
            if writer is None:
                writer = pq.ParquetWriter(out, protected.schema)
            writer.write_batch(protected)
            records += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:  # no rows: the protected schema still
        import pyarrow as pa

        changed = {protection.id_field, *protection.personal_fields}
        schema = pa.schema([pa.field(f.name, pa.string()) if f.name in changed else f for f in source.schema_arrow])
        pq.write_table(schema.empty_table(), out)
    return records


# -- declaring the output protected ---------------------------------------------------------------------------------


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(orjson.dumps(v).decode() for v in values) + "]"


def dataset_entry(name: str, fmt: str, location: str, protection: Protection) -> str:
    """The [[datasets]] entry that declares the converted output protected."""
    return "\n".join(
        [
            "[[datasets]]",
            f"name = {orjson.dumps(name).decode()}",
            f'format = "{fmt}"',
            f"location = {orjson.dumps(location).decode()}",
            f"id_fields = {_toml_list([protection.id_field])}",
            'protection = "crypto-shred"',
            f"personal_fields = {_toml_list(protection.personal_fields)}",
            "",
        ]
    )


def _declare(
    s3: S3Client,
    target: S3Uri,
    dataset: DatasetConfig,
    name: str,
    protection: Protection,
    objects: Sequence[ConvertedObject],
    check: QuasiReport,
    entry: str,
) -> str:
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "protection": "crypto-shred",
        "name": name,
        "converted_from": dataset.name,
        "format": dataset.format,
        "id_field": protection.id_field,
        "personal_fields": list(protection.personal_fields),
        "deterministic_fields": list(protection.deterministic),
        "ciphers": CIPHERS,
        "objects": len(objects),
        "records": sum(o.records for o in objects),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quasi_identifier_check": check.summary() | {"flagged_and_forced": bool(check.flagged)},
        "dataset_entry": entry,
    }
    where = S3Uri(target.bucket, target.key + MANIFEST)
    s3.put_object(
        Bucket=where.bucket,
        Key=where.key,
        Body=orjson.dumps(manifest, option=orjson.OPT_INDENT_2),
        ContentType="application/json",
    )
    return str(where)


def read_manifest(s3: S3Client, location: str) -> dict[str, Any] | None:
    """A protected output's manifest (what ``pseudonymise --on emr-serverless`` prints the entry from), or None."""
    target = S3Uri.parse(location)
    try:
        body = s3.get_object(Bucket=target.bucket, Key=target.key + MANIFEST)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    manifest: dict[str, Any] = orjson.loads(body)
    return manifest
