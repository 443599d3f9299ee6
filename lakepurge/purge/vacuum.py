"""Vacuum: remove the placeholders the purges wrote (`{}` lines, blanked CSV records), and nothing else.

Blanking keeps line numbers valid so the index needs no shifting between purges; the vacuum, run offline, pays that
debt back. It removes only what a purge recorded writing: each blanking purge stores, per object version it wrote,
the spans of the placeholders it left (lakepurge.purge.placeholders). Starting from the object's current version,
the vacuum follows those records back through consecutive purges; a version written by anyone else ends the chain
(its positions cannot be trusted), and every span is checked to still be a placeholder byte for byte before the
object is rewritten: an empty line or a line of commas inside someone's quoted CSV field is never touched.

It is a dry run unless applied (`lakepurge vacuum --yes`). Noncurrent versions are deleted only when they hold a
user on the suppression list (an erased user whose old version was kept), never a version holding only other
people's data; `[vacuum] delete_versions = "none"` keeps them all. Every applied run writes its own record under
``vacuum/`` in the reports location (lakepurge.reports.layout).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import exempt_datasets
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import ObjectChanged, ObjectHead, head_object, noncurrent_versions, open_body
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.indexing.indexer import index_object, scan_object
from lakepurge.purge.placeholders import (
    PlaceholderRecord,
    Span,
    file_batches,
    forget_records,
    placeholder_spans,
    recorded_objects,
)
from lakepurge.purge.s3write import WriteConflict, preserved_attributes, write_in_place
from lakepurge.purge.streams import LastByte, Staged, gzip_chunks
from lakepurge.records.lines import GzipReader, iter_lines
from lakepurge.reports import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

VersionPolicy = Literal["erased-users", "none"]


class PlaceholderMismatch(Exception):
    """A recorded placeholder is no longer a placeholder: the object was changed in a way the records do not know."""


@dataclass
class VacuumOutcome:
    s3path: str
    placeholders: int = 0  # placeholder lines removed (or, in a dry run, that would be)
    versions_deleted: list[str] = field(default_factory=list)  # (or that would be)
    before_etag: str | None = None
    after_etag: str | None = None
    after_version: str | None = None
    error: str = ""


def _placeholder_lines(spans: list[Span]) -> dict[int, bool]:
    """line -> whether it is the first line of its placeholder (`{}` or `,,,`); the others are empty lines."""
    lines: dict[int, bool] = {}
    for first, count in spans:
        lines[first] = True
        for line in range(first + 1, first + count):
            lines.setdefault(line, False)
    return lines


def _is_placeholder(content: bytes, first: bool, csv: bool) -> bool:
    content = content.removesuffix(b"\r")
    if not first:
        return content == b""
    return not content.strip(b",") if csv else content == b"{}"


def _without(source: LastByte, remove: dict[int, bool], csv: bool, max_bytes: int) -> Iterator[bytes]:
    """The object's lines without the recorded placeholders, each checked byte for byte first."""
    batch: list[bytes] = []
    found = 0
    for number, line in iter_lines(source, max_bytes):
        if line is None:
            raise ValueError(f"line {number} is longer than max_record_bytes; cannot rewrite it safely")
        if number in remove:
            if not _is_placeholder(line, remove[number], csv):
                raise PlaceholderMismatch(f"line {number} is no longer the placeholder a purge wrote there")
            found += 1
            continue
        batch.append(line + b"\n")
        if len(batch) >= 4096:
            yield b"".join(batch)
            batch.clear()
    if found != len(remove):
        raise PlaceholderMismatch(f"{len(remove) - found} recorded placeholder line(s) are past the object's end")
    if batch and source.last != b"\n":
        batch[-1] = batch[-1][:-1]  # the object had no final newline: neither has the vacuumed one
    yield b"".join(batch)


def _versions_with_erased_users(
    s3: S3Client, store: IndexStore, settings: Settings, dataset: DatasetConfig, uri: S3Uri, skip: str | None
) -> list[ObjectHead]:
    """The noncurrent versions that hold a user on the suppression list (hashes compared, never raw ids)."""
    pseudonymizer = Pseudonymizer.optional(settings.privacy)
    if pseudonymizer is None:
        return []  # without the hash key nobody can be recognised: delete nothing
    holding = []
    for version in noncurrent_versions(s3, uri):
        if version.version_id == skip:
            continue
        try:
            users = scan_object(s3, settings, dataset, version).lines_by_user
        except ObjectChanged:
            continue
        if users and store.erased_among(pseudonymizer.many(list(users))):
            holding.append(version)
    return holding


def vacuum_object(
    s3: S3Client,
    store: IndexStore,
    settings: Settings,
    dataset: DatasetConfig,
    s3path: str,
    apply: bool,
    versions: VersionPolicy = "erased-users",
    pending: Iterable[PlaceholderRecord] = (),
) -> VacuumOutcome:
    """pending: the object's placeholder records still in a purge job's batch (a dry run does not file them)."""
    uri = S3Uri.parse(s3path)
    csv = dataset.format == "csv"
    for _ in range(5):
        head = head_object(s3, uri.bucket, uri.key)
        if head is None:
            return VacuumOutcome(s3path, error="gone")
        outcome = VacuumOutcome(s3path, before_etag=head.etag)
        remove = _placeholder_lines(placeholder_spans(s3, settings, s3path, head.etag, pending))
        outcome.placeholders = len(remove)
        written = None
        if remove:
            body = open_body(s3, head)
            try:
                source = LastByte(GzipReader(body, settings.indexing.inflation) if head.key.endswith(".gz") else body)
                lines = _without(source, remove, csv, settings.indexing.max_record_bytes)
                staged = Staged.of(gzip_chunks(lines) if head.key.endswith(".gz") else lines)
            except ObjectChanged:
                continue
            finally:
                body.close()
            if not apply:
                staged.close()
            else:
                try:
                    written = write_in_place(s3, head, staged, preserved_attributes(s3, head))
                except WriteConflict:
                    continue
                finally:
                    staged.close()
                outcome.after_etag, outcome.after_version = written.etag, written.version_id
                index_object(s3, store, settings, uri.bucket, uri.key, force=True)
                forget_records(s3, settings, s3path)
        if versions == "erased-users":
            skip = written.version_id if written is not None else None
            for version in _versions_with_erased_users(s3, store, settings, dataset, uri, skip):
                if apply:
                    s3.delete_object(Bucket=uri.bucket, Key=uri.key, VersionId=version.version_id or "null")
                outcome.versions_deleted.append(str(version.version_id))
            if apply and outcome.versions_deleted:
                store.forget_noncurrent(s3path, outcome.versions_deleted)
        return outcome
    return VacuumOutcome(s3path, error="kept changing under concurrent writes")


VacuumItem = tuple[str, str, list[dict[str, Any]]]  # dataset, object, its records still in batches


def _vacuum_partition(
    settings: Settings, env: dict[str, str], apply: bool, items: Iterable[VacuumItem]
) -> Iterator[dict[str, Any]]:
    apply_job_environment(env)
    s3 = aws.client("s3")
    store = open_store(settings.index, create=False)
    versions = settings.vacuum.delete_versions
    try:
        for dataset_name, s3path, batched in items:
            dataset = settings.dataset_named(dataset_name)
            pending = [PlaceholderRecord.from_document(r) for r in batched]
            try:
                outcome = vacuum_object(s3, store, settings, dataset, s3path, apply, versions, pending)
            except PlaceholderMismatch as exc:
                # Left as it is: something other than a purge changed it. Its placeholders stay until reviewed.
                outcome = VacuumOutcome(s3path, error=f"not vacuumed: {exc}")
            except Exception as exc:  # reported per object, like the purge
                log.exception("vacuum of an object failed", extra={"object": object_ref(s3path, dataset)})
                outcome = VacuumOutcome(s3path, error=type(exc).__name__)
            yield asdict(outcome)
    finally:
        store.close()


@dataclass(frozen=True)
class VacuumRun:
    run_id: str
    applied: bool
    outcomes: tuple[VacuumOutcome, ...]
    record: str | None  # the vacuum's own record (applied runs)
    kept: int = 0  # objects with placeholders left as they are: their dataset is kept ([[exemptions]])

    @property
    def placeholders(self) -> int:
        return sum(o.placeholders for o in self.outcomes if not o.error)

    @property
    def versions(self) -> int:
        return sum(len(o.versions_deleted) for o in self.outcomes if not o.error)

    @property
    def failed(self) -> list[VacuumOutcome]:
        return [o for o in self.outcomes if o.error and o.error != "gone"]

    def summary(self) -> dict[str, Any]:
        """The run as the CLI and the Spark job print it (counts and the record's URI, never a record's content)."""
        return {
            "dry_run": not self.applied,
            "objects": len(self.outcomes),
            "lines_removed": self.placeholders,
            "versions_deleted": self.versions,
            "record": self.record,
            "failed": [asdict(o) for o in self.failed],
            **({"objects_kept": self.kept} if self.kept else {}),
        }


def run_vacuum(spark: Any, settings: Settings, datasets: Iterable[str] = (), apply: bool = False) -> VacuumRun:
    """Vacuum every object of which a purge recorded placeholders (blank-mode JSON Lines and CSV datasets), except
    those of a dataset an exemption keeps today: lakepurge neither rewrites a kept object nor deletes its versions
    (they hold erased users' records by right, and a record under a legal hold is not altered)."""
    started = datetime.now(UTC)
    wanted = set(datasets)
    exempt = exempt_datasets(settings.exemptions, started.date())
    kept = 0
    s3 = aws.client("s3")
    batched = file_batches(s3, settings, apply)
    items: list[VacuumItem] = []
    for s3path in dict.fromkeys([*recorded_objects(s3, settings), *batched]):
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is None or dataset.erase != "blank" or (wanted and dataset.name not in wanted):
            continue
        if dataset.name in exempt:
            kept += 1
            continue
        items.append((dataset.name, s3path, [asdict(r) for r in batched.get(s3path, [])]))
    env = job_environment(settings)
    rows = on_executors(
        spark, items, lambda part: _vacuum_partition(settings, env, apply, part), label="objects vacuumed"
    )
    outcomes = tuple(VacuumOutcome(**row) for row in rows)
    run_id = f"vac-{started.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
    record = _write_record(s3, settings, run_id, started, outcomes) if apply else None
    return VacuumRun(run_id, apply, outcomes, record, kept)


def _write_record(
    s3: S3Client, settings: Settings, run_id: str, started: datetime, outcomes: tuple[VacuumOutcome, ...]
) -> str:
    """What the vacuum removed, beside the certificates: placeholders hold no personal data, but the chain of
    evidence should say which versions replaced the certified ones and which old versions went."""
    where = layout.vacuum_record(settings, run_id)
    objects = []
    for o in outcomes:
        uri = S3Uri.parse(o.s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        objects.append(
            {
                "object": object_ref(o.s3path, dataset) if dataset is not None else o.s3path,
                "before": {"etag": o.before_etag},
                "after": {"etag": o.after_etag, "version_id": o.after_version},
                "placeholders_removed": 0 if o.error else o.placeholders,
                "versions_deleted": [] if o.error else o.versions_deleted,
                "error": o.error,
            }
        )
    document = {
        "vacuum_version": 1,
        "run_id": run_id,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "delete_versions": settings.vacuum.delete_versions,
        "objects": objects,
    }
    layout.write_once(s3, where, orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return str(where)
