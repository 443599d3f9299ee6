"""The reports bucket's layout without S3: every path, and every stored document read back through its model.

The fixtures under fixtures/layout/ are documents as the code writes them (compact JSON for a request's documents,
indented for certificates and vacuum records): each must read into its model and be written back byte for byte, so
the models keep the on-disk JSON exactly. Reading a missing document (NoSuchKey -> None) is exercised against S3
by the integration and e2e tests.
"""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import Coverage, ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.reports import layout
from lakepurge.reports.report import Report, ReportTampered, build_report

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "layout"
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def settings(location: str = "s3://lake-reports/") -> Settings:
    return parse_settings(
        {
            "index": {"backend": "dynamodb", "table": "never-used"},
            "reports": {"location": location},
            "purge": {"max_dataset_fraction": 1.0},
            "datasets": [{"name": "reviews", "location": "s3://lake/reviews/", "id_fields": ["user_id"]}],
        }
    )


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


# -- paths ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("location", ["s3://lake-reports/", "s3://shared/lakepurge/prod/"])
def test_given_a_reports_location_when_asking_where_each_document_lives_then_the_layout_is_this_table(
    location: str,
) -> None:
    s = settings(location)
    root = location
    object_path = "s3://lake/reviews/dt=2026-03/part-00001.jsonl"
    results = layout.results_prefix(s, "req-1")
    expected = {
        layout.root(s): root,
        layout.report(s, "req-1"): f"{root}reports/req-1.json",
        layout.certificate(s, "req-1"): f"{root}certificates/req-1.json",
        results: f"{root}results/req-1/",
        layout.result(results, object_path): f"{root}results/req-1/{sha(object_path)}.json",
        layout.requests_prefix(s): f"{root}requests/",
        layout.request_document(s, "req-1", layout.REQUEST): f"{root}requests/req-1/request.json",
        layout.request_document(s, "req-1", layout.STATE): f"{root}requests/req-1/state.json",
        layout.request_document(s, "req-1", layout.APPROVAL): f"{root}requests/req-1/approval.json",
        layout.request_document(s, "req-1", layout.DECISION): f"{root}requests/req-1/decision.json",
        layout.relational(s, "req-1"): f"{root}requests/req-1/relational.json",
        layout.placeholders_prefix(s): f"{root}placeholders/",
        layout.placeholders_prefix(s, object_path): f"{root}placeholders/{sha(object_path)}/",
        layout.placeholder_record(
            s, object_path, '"e1"'
        ): f"{root}placeholders/{sha(object_path)}/{sha(chr(34) + 'e1' + chr(34))}.json",
        layout.placeholder_batches_prefix(s): f"{root}placeholders/batches/",
        layout.placeholder_batch(s, "b1"): f"{root}placeholders/batches/b1.json",
        layout.vacuum_record(s, "vac-1"): f"{root}vacuum/vac-1.json",
    }
    for uri, spelled in expected.items():
        assert isinstance(uri, S3Uri)
        assert str(uri) == spelled


def test_given_the_workflow_and_the_purge_job_when_both_ask_for_the_relational_record_then_it_is_one_path() -> None:
    s = settings()
    assert layout.relational(s, "req-9") == layout.request_document(s, "req-9", "relational.json")


def test_given_one_objects_placeholder_records_when_listing_them_then_they_all_lie_under_its_folder() -> None:
    s = settings()
    folder = layout.placeholders_prefix(s, "s3://lake/reviews/a.jsonl")
    for etag in ('"a"', '"b"'):
        assert layout.placeholder_record(s, "s3://lake/reviews/a.jsonl", etag).key.startswith(folder.key)
    assert not layout.placeholder_record(s, "s3://lake/reviews/ab.jsonl", '"a"').key.startswith(folder.key)


# -- documents --------------------------------------------------------------------------------------------------------

ROUND_TRIPS: list[tuple[str, type[BaseModel], int]] = [
    ("approval.json", layout.ApprovalDocument, 0),
    ("decision-approved.json", layout.DecisionDocument, 0),
    ("decision-rejected-undelivered.json", layout.DecisionDocument, 0),
    ("relational.json", layout.RelationalDocument, 0),
    ("certificate.json", layout.CertificateDocument, orjson.OPT_INDENT_2),
    ("vacuum.json", layout.VacuumDocument, orjson.OPT_INDENT_2),
]


@pytest.mark.parametrize(("name", "model", "option"), ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_given_a_stored_document_when_read_into_its_model_and_written_again_then_the_bytes_are_the_same(
    name: str, model: type[layout.Document], option: int
) -> None:
    stored = (FIXTURES / name).read_bytes()
    document = model.model_validate_json(stored)
    assert orjson.dumps(document.to_json(), option=option) == stored


def test_given_decisions_when_read_then_the_fields_the_workflow_acts_on_are_typed() -> None:
    approved = layout.DecisionDocument.model_validate_json((FIXTURES / "decision-approved.json").read_bytes())
    assert (approved.decision, approved.approved_by, approved.rejected_by) == ("approved", "dpo@example.com", None)
    assert approved.delivered_at == "2026-03-01T12:30:01+00:00"
    rejected = layout.DecisionDocument.model_validate_json(
        (FIXTURES / "decision-rejected-undelivered.json").read_bytes()
    )
    assert (rejected.decision, rejected.rejected_by, rejected.delivered_at) == ("rejected", "legal@example.com", None)
    # A claim not yet delivered has no delivered_at at all (not null): the same approver's retry looks for it.
    assert "delivered_at" not in rejected.to_json() and "approved_by" not in rejected.to_json()
    delivered = rejected.model_copy(update={"delivered_at": "2026-03-01T12:31:02+00:00"})
    assert list(delivered.to_json())[-1] == "delivered_at"


def test_given_a_certificate_when_read_then_verification_and_totals_are_typed() -> None:
    certificate = layout.CertificateDocument.model_validate_json((FIXTURES / "certificate.json").read_bytes())
    assert certificate.verification.passed is True
    assert certificate.totals.relational_rows_deleted == 2
    assert certificate.approved_by is None  # the operator path without a named approver keeps the null
    assert [o.status for o in certificate.objects] == ["erased", "versions-deleted"]
    assert certificate.relational[0].rows_deleted == 2


def test_given_a_document_with_a_misspelt_field_when_read_then_it_is_refused() -> None:
    document = orjson.loads((FIXTURES / "approval.json").read_bytes())
    document["expire_at"] = document.pop("expires_at")
    with pytest.raises(ValidationError):
        layout.ApprovalDocument.model_validate(document)


def test_given_a_model_when_frozen_then_a_stored_document_is_not_changed_in_place() -> None:
    relational = layout.RelationalDocument.model_validate_json((FIXTURES / "relational.json").read_bytes())
    with pytest.raises(ValidationError):
        relational.tables[0].rows_deleted = 0


# -- the certificate as the purge job writes it ----------------------------------------------------------------------


class RecordingS3:
    """Records put_object calls (nothing is sent): what the writer would store."""

    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs)
        return {}


def a_report(s: Settings) -> Report:
    store = MemoryIndexStore()
    store.record_coverage(Coverage("reviews", "s3://lake/reviews/", "backfill", T0, T0, 1, 0, 0))
    store.replace_objects([ObjectIndex("s3://lake/reviews/a.jsonl", "reviews", '"a"', None, T0, {"al": [0, 2]}, 4)])
    return build_report(store, s, ["al"], "req-cert", Pseudonymizer(b"unit-test-hash-key-0123"))


def test_given_a_purge_result_when_the_certificate_is_written_then_its_model_reads_it_back_unchanged() -> None:
    from lakepurge.purge.certificate import PurgeResult, write_certificate
    from lakepurge.purge.engine import ObjectOutcome

    s = settings()
    report = a_report(s)
    outcome = ObjectOutcome("s3://lake/reviews/a.jsonl", "erased", '"a"', None, '"b"', None, lines_erased=2)
    relational = ({"name": "accounts", "table": "public.accounts", "rows_planned": 1, "rows_deleted": 1},)
    result = PurgeResult("req-cert", (outcome,), (), "", relational)
    s3 = RecordingS3()

    uri = write_certificate(s3, s, report, result, T0, "dpo@example.com", "ab" * 32, "2026-03-01T12:00:00+00:00")

    assert uri == str(layout.certificate(s, "req-cert"))
    [put] = s3.puts
    assert (put["Bucket"], put["Key"]) == ("lake-reports", "certificates/req-cert.json")
    certificate = layout.CertificateDocument.model_validate_json(put["Body"])
    assert orjson.dumps(certificate.to_json(), option=orjson.OPT_INDENT_2) == put["Body"]
    assert certificate.totals.lines_erased == 2 and certificate.totals.relational_rows_deleted == 1
    assert certificate.verification.passed and certificate.objects[0].after.etag == '"b"'


# -- the report, read and checked once --------------------------------------------------------------------------------


class OneObjectS3:
    """get_object of one stored object (bytes and metadata as put_object stored them)."""

    def __init__(self, body: bytes, metadata: dict[str, str]) -> None:
        self.body, self.metadata, self.gets = body, metadata, 0

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        self.gets += 1
        return {"Body": io.BytesIO(self.body), "Metadata": self.metadata, "ETag": '"r"'}


def test_given_a_report_when_loaded_then_its_bytes_are_checked_against_the_approved_hash() -> None:
    s = settings()
    report = a_report(s)
    data = report.to_bytes()
    digest = hashlib.sha256(data).hexdigest()
    uri = layout.report(s, "req-cert")

    s3 = OneObjectS3(data, {"sha256": digest})
    assert layout.load_report(s3, uri, digest) == (report, digest)
    assert layout.load_report(s3, str(uri)) == (report, digest)  # no hash given: the one recorded at writing
    assert s3.gets == 2  # one read per load

    changed = data.replace(b'"users_found": 1', b'"users_found": 2')
    assert changed != data
    tampered = OneObjectS3(changed, {"sha256": digest})
    with pytest.raises(ReportTampered, match="hashes to"):
        layout.load_report(tampered, uri, digest)
    with pytest.raises(ReportTampered):
        layout.load_report(tampered, uri)
