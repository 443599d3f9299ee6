"""The reports bucket: the one place that knows where each stored document lives and what it holds.

Everything lakepurge keeps for the record lives under ``[reports] location`` (an ``s3://bucket/prefix/``):

- ``reports/<request id>.json``: the purge report (lakepurge.reports.report.Report), written once, its SHA-256 in the
  object's metadata;
- ``results/<request id>/``: what the purge job did to each object (lakepurge.purge.engine.ObjectOutcome), so that
  a rerun resumes: ``intents/`` the intents recorded before the writes, ``batches/`` the finished outcomes, several
  objects a document (earlier versions wrote one ``<sha256(s3path)>.json`` per object, still read); an object of a
  one-user-per-object dataset is named there by a keyed reference, never its key (report.stored_name);
- ``certificates/<request id>.json``: the erasure certificate (:class:`CertificateDocument`), under
  ``[reports] evidence_location`` instead when that is set (an Object Lock bucket: evidence is never rewritten);
- ``requests/<request id>/``: the request's own documents (lakepurge.workflow.store): ``request.json`` (user ids
  sealed until the request ends, then shredded), ``state.json``, ``approval.json`` (:class:`ApprovalDocument`),
  ``decision.json`` (:class:`DecisionDocument`), ``relational.json`` (the relational DELETEs the workflow ran
  before the purge job, :class:`RelationalDocument`), ``purge-start.json`` (which StartPurge invocation started the
  purge, :class:`PurgeStartDocument`);
- ``placeholders/<sha256(s3path)>/<sha256(etag)>.json``: the placeholders a blanking purge left in one object
  version (lakepurge.purge.placeholders.PlaceholderRecord); a purge job writes them together, many objects'
  records to a ``placeholders/batches/<id>.json``, which the vacuum files under each object;
- ``vacuum/<run id>.json``: what an applied vacuum removed (:class:`VacuumDocument`);
- ``verifications/<id>/hashes.json`` and ``result.json``: a `verify --on emr-serverless` run's input (the users'
  keyed hashes) and answer;
- ``exports/<request id>.json``: what an access export (GDPR Art. 15, lakepurge.access.export) put in its archive and
  where the archive is (:class:`ExportDocument`; users as keyed hashes, objects as logs name them).

The documents' field names are their on-disk JSON: the models here read back what earlier versions wrote.
A report is read, and its bytes checked against the approved SHA-256, by :func:`load_report`: once per step, and
the :class:`~lakepurge.reports.report.Report` is passed down from there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field

from lakepurge.core.config import Settings
from lakepurge.core.s3io import condition_failed, error_code
from lakepurge.core.s3uri import S3Uri
from lakepurge.reports.report import Report, ReportTampered, sha256

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# The documents of a request, under requests/<request id>/.
REQUEST: Final = "request.json"
STATE: Final = "state.json"
APPROVAL: Final = "approval.json"
DECISION: Final = "decision.json"
RELATIONAL: Final = "relational.json"
PURGE_START: Final = "purge-start.json"

_MISSING = ("NoSuchKey", "404")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# -- where ------------------------------------------------------------------------------------------------------------


def root(settings: Settings) -> S3Uri:
    """The reports location itself (``[reports] location``)."""
    return S3Uri.parse(settings.reports.location)


def _under(settings: Settings, key: str) -> S3Uri:
    base = root(settings)
    return S3Uri(base.bucket, f"{base.key}{key}")


def report(settings: Settings, request_id: str) -> S3Uri:
    return _under(settings, f"reports/{request_id}.json")


def certificate(settings: Settings, request_id: str) -> S3Uri:
    folder = certificates_prefix(settings)
    return S3Uri(folder.bucket, f"{folder.key}{request_id}.json")


def reports_prefix(settings: Settings) -> S3Uri:
    return _under(settings, "reports/")


def certificates_prefix(settings: Settings) -> S3Uri:
    """Under ``[reports] evidence_location`` when set (an Object Lock bucket), else under the reports location."""
    if settings.reports.evidence_location is not None:
        evidence = S3Uri.parse(settings.reports.evidence_location)
        return S3Uri(evidence.bucket, f"{evidence.key}certificates/")
    return _under(settings, "certificates/")


def request_ids_under(s3: S3Client, folder: S3Uri) -> list[str]:
    """The request ids of the ``<id>.json`` documents directly in a folder (reports/, certificates/)."""
    ids = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=folder.bucket, Prefix=folder.key, Delimiter="/"):
        for item in page.get("Contents", []):
            name = item["Key"][len(folder.key) :]
            if name.endswith(".json"):
                ids.append(name.removesuffix(".json"))
    return ids


def results_prefix(settings: Settings, request_id: str) -> S3Uri:
    """The folder of the purge job's per-object outcomes for one request."""
    return _under(settings, f"results/{request_id}/")


def result(prefix: S3Uri, s3path: str) -> S3Uri:
    """One object's outcome under a request's :func:`results_prefix` (the executors get the prefix, not settings)."""
    return S3Uri(prefix.bucket, f"{prefix.key}{_digest(s3path)}.json")


def results_batch(prefix: S3Uri, batch_id: str) -> S3Uri:
    """Finished outcomes of several objects, written together (``{"outcomes": [...]}``): a task records its
    objects' outcomes in batches."""
    return S3Uri(prefix.bucket, f"{prefix.key}{RESULTS_BATCHES}{batch_id}.json")


def intents_batch(prefix: S3Uri, batch_id: str) -> S3Uri:
    """Intents of several objects, each recorded before its object's write (``{"outcomes": [...]}``, committed
    false). batch_id starts with the time it was written: listed in name order, a later intent of an object comes
    after an earlier one. (Earlier versions wrote each intent on its own, at :func:`result`.)"""
    return S3Uri(prefix.bucket, f"{prefix.key}{INTENTS_BATCHES}{batch_id}.json")


RESULTS_BATCHES = "batches/"
INTENTS_BATCHES = "intents/"
EXECUTOR_IDS = "executor-ids.sealed"


def executor_ids(prefix: S3Uri) -> S3Uri:
    """The request's requested ids sealed for its Spark executors (lakepurge.core.executor_ids), written by whoever
    started the purge holding the raw ids, opened by the executors only, deleted when they are done: beside the
    intents, not in the approved report (its hash is what was signed)."""
    return S3Uri(prefix.bucket, prefix.key + EXECUTOR_IDS)


def requests_prefix(settings: Settings) -> S3Uri:
    """The folder holding one folder per request."""
    return _under(settings, "requests/")


def request_document(settings: Settings, request_id: str, name: str) -> S3Uri:
    """One of a request's documents: :data:`REQUEST`, :data:`STATE`, :data:`APPROVAL`, :data:`DECISION`,
    :data:`RELATIONAL`."""
    folder = requests_prefix(settings)
    return S3Uri(folder.bucket, f"{folder.key}{request_id}/{name}")


def relational(settings: Settings, request_id: str) -> S3Uri:
    """The relational DELETEs the workflow ran for a request (it holds the raw ids; the purge job does not)."""
    return request_document(settings, request_id, RELATIONAL)


PLACEHOLDER_BATCHES = "batches"  # beside the objects' folders, which are named by a hex digest


def placeholders_prefix(settings: Settings, s3path: str | None = None) -> S3Uri:
    """The placeholder records: all of them, or one object's."""
    folder = _under(settings, "placeholders/")
    return folder if s3path is None else S3Uri(folder.bucket, f"{folder.key}{_digest(s3path)}/")


def placeholder_record(settings: Settings, s3path: str, etag: str) -> S3Uri:
    """The record of the placeholders a purge left in the version ``etag`` of an object."""
    folder = placeholders_prefix(settings, s3path)
    return S3Uri(folder.bucket, f"{folder.key}{_digest(etag)}.json")


def placeholder_batches_prefix(settings: Settings) -> S3Uri:
    # Under placeholders/, so the records' permissions and retention (infra/template.yaml) cover them too.
    return _under(settings, f"placeholders/{PLACEHOLDER_BATCHES}/")


def placeholder_batch(settings: Settings, batch_id: str) -> S3Uri:
    """Placeholder records of many objects, written by a purge job in one request (``{"records": [...]}``)."""
    folder = placeholder_batches_prefix(settings)
    return S3Uri(folder.bucket, f"{folder.key}{batch_id}.json")


def operations_view(settings: Settings) -> S3Uri:
    """The operations page's view, precomputed by the hourly RequestMetrics function (lakepurge.ops.dashboard)."""
    return _under(settings, "operations/view.json")


def vacuum_record(settings: Settings, run_id: str) -> S3Uri:
    return _under(settings, f"vacuum/{run_id}.json")


def verification(settings: Settings, verification_id: str) -> S3Uri:
    """The users' keyed hashes a verify job on EMR reads (``{"hashes": [...]}``; never raw ids)."""
    return _under(settings, f"verifications/{verification_id}/hashes.json")


def verification_result(settings: Settings, verification_id: str) -> S3Uri:
    """What that job found: ``{"objects_checked": N, "remaining": [...]}``."""
    return _under(settings, f"verifications/{verification_id}/result.json")


def export_record(settings: Settings, request_id: str) -> S3Uri:
    """The record of an access export (:class:`ExportDocument`), written once."""
    return _under(settings, f"exports/{request_id}.json")


# -- the documents ----------------------------------------------------------------------------------------------------


class Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The document as stored (every field, ``None`` as null)."""
        return self.model_dump(mode="json")


class Approver(Document):
    email: str
    secret_sha256: str  # the link's secret is never stored


class ApprovalDocument(Document):
    """``approval.json``: what the approvers are asked to approve, and how to wake the waiting execution."""

    report_uri: str
    report_sha256: str
    task_token: str
    opened_at: str
    expires_at: str
    approvers: tuple[Approver, ...]
    # HMAC-SHA256 by the approval signing key ([workflow] approval_signing_key_env) over the other fields
    # (lakepurge.workflow.signing); the approval page refuses a document without a valid one.
    signature: str | None = None

    def to_json(self) -> dict[str, Any]:
        """An unsigned document (one written before signatures) stays without a ``signature`` field."""
        return self.model_dump(mode="json", exclude_none=True)


class DecisionDocument(Document):
    """``decision.json``: claimed once (If-None-Match); ``sent_at`` recorded (If-Match on the claim) before the task
    token is first sent, after which the claim is never removed; then ``delivered_at`` once the execution took it, or
    ``not_taken`` when its history shows it did not (the wait had ended)."""

    decision: str  # "approved" | "rejected"
    approved_by: str | None = None  # exactly one of approved_by / rejected_by is stored
    rejected_by: str | None = None
    by: str
    decided_at: str
    report_uri: str
    report_sha256: str
    sent_at: str | None = None
    delivered_at: str | None = None
    not_taken: str | None = None  # why the execution did not take it (it no longer waited), from its history
    # Who decided, as API Gateway saw the POST: its source IP, its user agent (truncated to 200 characters) and,
    # behind the optional JWT authorizer, the token's subject. Absent in documents written before they existed.
    source_ip: str | None = None
    user_agent: str | None = None
    authorized_subject: str | None = None
    # HMAC-SHA256 by the approval signing key over the other fields (lakepurge.workflow.signing).
    signature: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Absent fields stay absent (a rejection has no ``approved_by``, an undelivered claim no ``delivered_at``)."""
        return self.model_dump(mode="json", exclude_none=True)


class RelationalDeletion(Document):
    name: str
    table: str
    rows_planned: int
    rows_deleted: int


class RelationalDocument(Document):
    """``relational.json``: one entry per configured table, written once before the purge starts."""

    tables: tuple[RelationalDeletion, ...]


class PurgeStartDocument(Document):
    """``purge-start.json``: the StartPurge invocation that starts the purge, claimed once (If-None-Match); another
    delivery of the Task finds it and waits for that purge instead of starting a second one."""

    attempt: str
    claimed_at: str
    holder_until: str  # when the claiming invocation has ended for sure (its Lambda's time left at the claim)
    backend: str | None = None  # a Spark job's launcher and id, once started; an inline purge records none
    job_id: str | None = None


class VersionRef(Document):
    etag: str | None
    version_id: str | None


class CertificateObject(Document):
    object: str  # as logs name it (a key that names a user is masked)
    dataset: str
    erase: str
    status: str
    before: VersionRef
    after: VersionRef
    lines_erased: int
    stale_index: bool
    noncurrent_versions_deleted: int
    deleted_version_ids: list[str]
    sidecar_versions_deleted: list[str]
    error: str
    # A large object spliced in S3 (docs/ARCHITECTURE.md, "Server-side splice"): bytes read, sent and copied, and what
    # proves the copied ranges hold none of the users. Absent for an object rewritten whole.
    splice: dict[str, Any] | None = Field(default=None, exclude_if=lambda value: value is None)


class CertificateTotals(Document):
    objects_rewritten: int
    lines_erased: int
    objects_failed: int
    noncurrent_versions_deleted: int
    relational_rows_deleted: int


class CertificateVerification(Document):
    passed: bool
    objects_checked: int
    versions_checked: str
    remaining: list[dict[str, Any]]  # {object, version_id, lines}
    coverage_gaps: list[str]


class CertificateDocument(Document):
    """``certificates/<id>.json``: what was erased, where, when, verified how; hashed ids only."""

    certificate_version: int
    request_id: str
    user_hashes: list[str]
    report_sha256: str
    approved_by: str | None
    approved_at: str | None
    started_at: str
    finished_at: str
    coverage: list[dict[str, Any]]  # lakepurge.indexing.coverage.DatasetCoverage.to_dict(), as in the report
    # lakepurge.indexing.unindexable.DatasetLines.to_dict(), as in the report: the lines lakepurge cannot locate, per
    # dataset, and what reading them for the users found (absent from certificates written before they were stated)
    unindexable: list[dict[str, Any]] = []
    objects: list[CertificateObject]
    relational: list[RelationalDeletion]
    # Table datasets (lakepurge.purge.tables.TableOutcome.as_dict): versions read and committed, files replaced,
    # objects and S3 versions deleted (data and log), versions time travel can no longer read, the second reader.
    tables: list[dict[str, Any]] = []
    # Crypto-shred datasets (lakepurge.purge.shredding): keys destroyed, what still holds ciphertext, the vault's
    # copies checked, the legal statement; and which datasets each method erased. Absent without a protected dataset.
    crypto_shred: dict[str, Any] | None = None
    erasure_methods: dict[str, list[str]] | None = None
    # Typed datasets the request named no id of the kind of ({dataset, kind}: reports.report.not_searched), as approved
    not_searched: list[dict[str, str]] = []
    # A typed request's resolution (lakepurge.indexing.resolution.certified): identifiers erased per kind, as keyed
    # hashes, and the links they were found by. Absent for a request that was not resolved.
    identifiers: dict[str, Any] | None = None
    # [[exemptions]] as the report stated them (lakepurge.reports.kept): each dataset kept, with its basis, until when
    # and what the index found there (counts), or that its exemption ended. Absent when none is configured.
    exemptions: list[dict[str, Any]] | None = None
    totals: CertificateTotals
    verification: CertificateVerification

    def to_json(self) -> dict[str, Any]:
        """A certificate without crypto-shred datasets is written as it always was (no null fields for them)."""
        document = self.model_dump(mode="json")
        for name in ("crypto_shred", "erasure_methods", "exemptions"):
            if document[name] is None:
                del document[name]
        if not document["not_searched"]:  # nor, without typed datasets left unsearched, for those
            del document["not_searched"]
        if document["identifiers"] is None:
            del document["identifiers"]
        return document


class EtagRef(Document):
    etag: str | None


class VacuumObject(Document):
    object: str
    before: EtagRef
    after: VersionRef
    placeholders_removed: int
    versions_deleted: list[str]
    error: str


class VacuumDocument(Document):
    """``vacuum/<run id>.json``: which versions replaced the certified ones and which old versions went."""

    vacuum_version: int
    run_id: str
    started_at: str
    finished_at: str
    delete_versions: str
    objects: list[VacuumObject]


class ExportObject(Document):
    object: str  # as logs name it (logs.object_ref: a key that may name a user by its keyed reference)
    dataset: str
    version_id: str | None
    etag: str
    records: int  # 1 for a whole object of a one-user-per-object dataset
    stale_index: bool  # the object had moved on since indexing: its current version was searched again


class ExportTable(Document):
    name: str
    table: str
    rows: int


class ExportDocument(Document):
    """``exports/<request id>.json``: what an access export put in its archive; hashed ids only."""

    export_version: int
    request_id: str
    created_at: str
    user_hashes: list[str]
    users_found: int
    format: str  # "original", "jsonl" or "csv"
    records: dict[str, int]  # per dataset
    objects: list[ExportObject]
    relational: list[ExportTable]
    archive: str  # s3:// URI of the encrypted archive
    archive_sha256: str  # of the stored (encrypted) bytes
    plaintext_sha256: str  # of the archive before encryption
    kms_key_id: str
    encryption_context: dict[str, str]
    link_expires_at: str
    coverage_gaps: list[str]  # datasets the index did not fully cover: their records may be missing
    archive_version_id: str | None = None  # the archive's S3 version (a versioned bucket); the others were deleted
    archive_expires_at: str | None = None  # when the archive is deleted ([workflow] export_retention_days)
    # a typed request's resolution (lakepurge.indexing.resolution.Expansion.to_report): keyed hashes, kinds, links
    identifiers: dict[str, Any] | None = None


# -- reading and writing ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    body: bytes
    etag: str
    metadata: dict[str, str]


def read_or_none(s3: S3Client, uri: S3Uri) -> Stored | None:
    """A stored document's bytes, or None when there is none (NoSuchKey / 404); any other error is raised."""
    try:
        response = s3.get_object(Bucket=uri.bucket, Key=uri.key)
    except ClientError as exc:
        if error_code(exc) in _MISSING:
            return None
        raise
    return Stored(response["Body"].read(), str(response.get("ETag", "")), dict(response.get("Metadata") or {}))


Model = TypeVar("Model", bound=BaseModel)


def read_document(s3: S3Client, uri: S3Uri, model: type[Model]) -> Model | None:
    """A stored document read into its model, or None when there is none."""
    stored = read_or_none(s3, uri)
    return None if stored is None else model.model_validate_json(stored.body)


class AlreadyWritten(Exception):
    """A write-once document is there already (another run, or another delivery of the same step, wrote it first)."""


def write_once(s3: S3Client, uri: S3Uri, body: Any, content_type: str = "application/json", **attributes: Any) -> Any:
    """Write a document that is never overwritten: the write is conditional on no object being there yet
    (If-None-Match: *), so of two writers one wins and the other gets AlreadyWritten, whoever wrote first. body:
    bytes or a file; attributes: put_object's others (Metadata, checksums). Returns put_object's answer (ETag,
    VersionId)."""
    try:
        return s3.put_object(
            Bucket=uri.bucket, Key=uri.key, Body=body, ContentType=content_type, IfNoneMatch="*", **attributes
        )
    except ClientError as exc:
        if condition_failed(exc):
            raise AlreadyWritten(str(uri)) from None
        raise


def write_report(s3: S3Client, settings: Settings, planned: Report) -> tuple[str, str]:
    """Store the report (SSE-KMS when the bucket's default says so; never overwritten). Returns (uri, sha256)."""
    data = planned.to_bytes()
    uri = report(settings, planned.request_id)
    digest = sha256(data)
    write_once(s3, uri, data, Metadata={"sha256": digest})
    return str(uri), digest


def load_report(s3: S3Client, uri: S3Uri | str, expected_sha256: str | None = None) -> tuple[Report, str]:
    """Read a report and check its bytes against the approved SHA-256 (ReportTampered when they differ); with no
    hash given, against the one recorded in the object's metadata when it was written. Returns the report and the
    hash it was checked against. Read it once per step and pass the report down."""
    location = S3Uri.parse(uri) if isinstance(uri, str) else uri
    response = s3.get_object(Bucket=location.bucket, Key=location.key)
    data = response["Body"].read()
    expected = expected_sha256 if expected_sha256 is not None else (response.get("Metadata") or {}).get("sha256", "")
    actual = sha256(data)
    if actual != expected:
        raise ReportTampered(f"report {location} hashes to {actual[:12]}..., approved {expected[:12]}...")
    return Report.from_bytes(data), actual


def find_report(s3: S3Client, settings: Settings, request_id: str) -> tuple[Report, str, str] | None:
    """The request's report if one was written (a retried step reuses it): (report, uri, sha256), or None."""
    uri = report(settings, request_id)
    stored = read_or_none(s3, uri)
    if stored is None:
        return None
    return Report.from_bytes(stored.body), str(uri), sha256(stored.body)


def read_relational(s3: S3Client, settings: Settings, request_id: str) -> RelationalDocument | None:
    return read_document(s3, relational(settings, request_id), RelationalDocument)


def read_certificate(s3: S3Client, uri: S3Uri | str) -> CertificateDocument | None:
    return read_document(s3, S3Uri.parse(uri) if isinstance(uri, str) else uri, CertificateDocument)
