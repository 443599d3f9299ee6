"""Datasets a request may not erase ([[exemptions]], GDPR Art. 17(3)): configuration errors that name the key, and
what the report, the operator's plan and the approval page state about them (docs/design/PERSON.md, section 5)."""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, date, datetime, timedelta
from html import unescape

import pytest

from lakepurge.core.config import ConfigError, Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.base import Coverage, NoncurrentVersion, ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.ops.manual_purge import plan_lines
from lakepurge.reports import kept
from lakepurge.reports.report import Report, build_report
from lakepurge.workflow.approval import ApprovalLink, PendingApproval
from lakepurge.workflow.pages import approval_email, confirmation_page
from lakepurge.workflow.store import ErasureRequest

TODAY = datetime.now(UTC).date()
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
BASE = """
[index]
backend = "dynamodb"
table = "never-used"
[reports]
location = "s3://lake-reports/"
[[datasets]]
name = "events"
location = "s3://lake/events/"
id_fields = ["user_id"]
[[datasets]]
name = "invoices"
location = "s3://lake/invoices/"
format = "csv"
id_fields = ["customer"]
"""
TAX = 'basis = "Art. 17(3)(b): tax law"'


def settings(exemptions: str) -> Settings:
    return parse_settings(tomllib.loads(BASE + exemptions), "lakepurge.toml")


@pytest.mark.parametrize(
    ("exemption", "message"),
    [
        (
            f'dataset = "invoice"\n{TAX}\nretention_days = 3650',
            "exemptions[0].dataset: 'invoice' names no [[datasets]] (configured: events, invoices)",
        ),
        ('dataset = "invoices"\nretention_days = 3650', "exemptions[0].basis: required key missing"),
        (
            f'dataset = "invoices"\n{TAX}',
            "exemptions[0]: exemption of dataset 'invoices' says for how long: retain_until = YYYY-MM-DD or"
            " retention_days = N (a legal hold without an end: legal_hold = true)",
        ),
        (
            f'dataset = "invoices"\n{TAX}\nretain_until = 2031-12-31\nretention_days = 3650',
            "exemptions[0]: exemption of dataset 'invoices': give retain_until or retention_days, not both",
        ),
        (f'dataset = "invoices"\n{TAX}\nretention_days = 0', "exemptions[0].retention_days: must be greater than 0"),
        (
            f'dataset = "invoices"\n{TAX}\nretain_until = "31.12.2031"',
            "exemptions[0].retain_until: must be a valid date",
        ),
        (
            f'dataset = "invoices"\n{TAX}\nlegal_hold = true\n[[exemptions]]\ndataset = "invoices"\n{TAX}\n'
            "legal_hold = true",
            "exemptions[1].dataset: dataset 'invoices' has another exemption before: merge them",
        ),
        (f'dataset = "invoices"\n{TAX}\nlegal_hold = true\nreason = "x"', "exemptions[0].reason: unknown key"),
    ],
    ids=["unknown-dataset", "no-basis", "no-retention", "both-retentions", "zero-days", "bad-date", "twice", "typo"],
)
def test_given_a_wrong_exemption_when_the_configuration_is_read_then_the_error_names_its_key(
    exemption: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings(f"[[exemptions]]\n{exemption}\n")
    assert message in str(raised.value)


def test_given_a_pseudonymised_dataset_when_exempted_then_refused_because_its_keys_are_shared() -> None:
    shredded = BASE.replace(
        'id_fields = ["user_id"]',
        'id_fields = ["user_id"]\nprotection = "crypto-shred"\npersonal_fields = ["email"]',
        1,
    )
    vault = '[vault]\nbackend = "dynamodb"\ntable = "vault"\nkms_key_id = "alias/vault"\n'
    with pytest.raises(ConfigError, match=r"exemptions\[0\]\.dataset: dataset 'events' is a table or pseudonymised"):
        parse_settings(
            tomllib.loads(shredded + vault + f'[[exemptions]]\ndataset = "events"\n{TAX}\nlegal_hold = true')
        )


def store_with_alice() -> MemoryIndexStore:
    """alice in one events object and in one invoice, whose older version held her too; both datasets covered."""
    store = MemoryIndexStore()
    for name, objects in (("events", 1), ("invoices", 1)):
        store.record_coverage(Coverage(name, f"s3://lake/{name}/", "backfill", T0, T0, objects, 1, 0))
    store.replace_objects(
        [
            ObjectIndex("s3://lake/events/a.jsonl", "events", '"e"', None, T0, {"alice": [0], "bob": [1]}, 2),
            ObjectIndex("s3://lake/invoices/2025.csv", "invoices", '"i"', "v2", T0, {"alice": [1, 3], "bob": [2]}, 3),
        ]
    )
    store.record_noncurrent([NoncurrentVersion("s3://lake/invoices/2025.csv", "invoices", "v1", ("alice",))])
    return store


def report_of(cfg: Settings, store: MemoryIndexStore | None = None, keeping: bool = True) -> Report:
    store = store or store_with_alice()
    pseudonymizer = Pseudonymizer(b"unit-test-hash-key-0123")
    return build_report(store, cfg, ["alice"], "req-1", pseudonymizer, force=True, keeping=keeping)


def test_given_invoices_kept_for_tax_law_when_reporting_then_they_are_counted_and_stated_but_not_planned() -> None:
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretention_days = 3650\n')

    report = report_of(cfg)

    assert [o.dataset for o in report.objects] == ["events"]
    assert report.versions == ()  # the invoice's old version is kept too
    assert report.rewritten_datasets == ["events"]
    until = (TODAY + timedelta(days=3650)).isoformat()
    assert report.exemptions == (
        {
            "dataset": "invoices",
            "basis": "Art. 17(3)(b): tax law",
            "legal_hold": False,
            "kept_until": until,
            "kept": True,
            "objects": 1,
            "records": 2,
            "noncurrent_versions": 1,
            "coverage": "complete",
        },
    )
    assert Report.from_bytes(report.to_bytes()) == report
    assert report.summary()["exemptions"] == list(report.exemptions)
    assert (
        "  dataset invoices: NOT erased, kept (Art. 17(3)(b): tax law) until"
        f" {until}; 2 record(s) in 1 object(s), 1 noncurrent version(s) kept as they are"
    ) in plan_lines(report)


def test_given_an_exemption_whose_date_has_passed_when_reporting_then_the_dataset_is_erased_and_the_report_says_so():
    ended = TODAY - timedelta(days=1)
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretain_until = {ended.isoformat()}\n')

    report = report_of(cfg)

    assert sorted(o.dataset for o in report.objects) == ["events", "invoices"]
    assert [(v.dataset, v.version_ids) for v in report.versions] == [("invoices", ("v1",))]
    [statement] = report.exemptions
    assert statement["kept"] is False and statement["kept_until"] == ended.isoformat()
    assert (
        f"  dataset invoices: its exemption (Art. 17(3)(b): tax law) ended on {ended.isoformat()}: erased as usual"
        in plan_lines(report)
    )


def test_given_an_exemption_ending_today_when_reporting_then_it_still_keeps() -> None:
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretain_until = {TODAY.isoformat()}\n')
    assert [o.dataset for o in report_of(cfg).objects] == ["events"]


def test_given_a_kept_dataset_never_fully_indexed_when_reporting_then_its_coverage_stays_incomplete_and_is_said():
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nlegal_hold = true\n')
    store = store_with_alice()
    store.record_coverage(Coverage("invoices", "s3://lake/invoices/", "backfill", T0, T0, 1, 1, failed=2))

    report = report_of(cfg, store)

    # The coverage stays as the index has it: the exemption vouches for nothing...
    [invoices] = [c for c in report.coverage if c["dataset"] == "invoices"]
    assert invoices["complete"] is False
    assert report.exemptions[0]["coverage"] == invoices["reason"]
    assert f"the index does not fully cover it ({invoices['reason']}): it may hold more" in "".join(plan_lines(report))
    # ...but nothing of it is erased, so the erasure of the rest can still be certified
    assert report.gaps == []
    # while a gap in a dataset that is erased still stops it
    store.record_coverage(Coverage("events", "s3://lake/events/", "backfill", T0, T0, 1, 1, failed=1))
    assert [g.dataset for g in report_of(cfg, store).gaps] == ["events"]


def test_given_a_user_only_in_a_kept_dataset_when_reporting_then_the_report_is_not_empty_nothing_is_planned() -> None:
    # Not "nothing found": the workflow asks for approval of keeping her invoices and certifies it, instead of
    # ending NOTHING_FOUND ("no data"), which would tell her nothing is held about her.
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nlegal_hold = true\n')
    store = MemoryIndexStore()
    for name in ("events", "invoices"):
        store.record_coverage(Coverage(name, f"s3://lake/{name}/", "backfill", T0, T0, 1, 0, 0))
    store.replace_objects([ObjectIndex("s3://lake/invoices/a.csv", "invoices", '"i"', None, T0, {"carol": [1]}, 1)])
    pseudonymizer = Pseudonymizer(b"unit-test-hash-key-0123")

    carol = build_report(store, cfg, ["carol"], "req-2", pseudonymizer)
    nobody = build_report(store, cfg, ["dave"], "req-3", pseudonymizer)

    assert carol.objects == () and carol.versions == () and not carol.empty
    assert carol.exemptions[0]["records"] == 1
    assert nobody.empty  # an exemption that keeps nothing of the request adds nothing to approve


def test_given_an_access_request_when_reporting_then_nothing_is_kept_back_from_its_plan() -> None:
    cfg = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nlegal_hold = true\n')
    report = report_of(cfg, keeping=False)
    assert sorted(o.dataset for o in report.objects) == ["events", "invoices"]
    assert report.exemptions == () and "exemptions" not in report.summary()


def _request() -> ErasureRequest:
    return ErasureRequest("req-1", "2026-03-01T12:00:00+00:00", "2026-03-31T12:00:00+00:00", ("h",), "alias/requests")


def test_given_a_kept_dataset_when_an_approver_opens_the_page_then_it_is_its_own_section_with_its_basis() -> None:
    cfg = settings(
        f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretain_until = 2099-12-31\n'
        '[[exemptions]]\ndataset = "events"\nbasis = "legal hold: case 2026-17"\nlegal_hold = true\n'
        "retain_until = 2000-01-01\n"
    )
    report = report_of(cfg)
    view = PendingApproval(_request(), report, "0" * 64, "dpo@example.com", "2026-03-02T12:00:00+00:00")

    page = confirmation_page(view, "0", "secret", "/approval")

    section = re.search(r"<h2>Exemptions from erasure</h2><ul id='kept'>(.*?)</ul>", page)
    assert section is not None
    items = [unescape(item) for item in re.findall(r"<li>(.*?)</li>", section.group(1))]
    assert items == [
        "dataset invoices: NOT erased, kept (Art. 17(3)(b): tax law) until 2099-12-31; 2 record(s) in 1 object(s),"
        " 1 noncurrent version(s) kept as they are",
        "dataset events: its exemption (legal hold: case 2026-17) ended on 2000-01-01: erased as usual",
    ]
    assert "alice" not in page
    _, email = approval_email(_request(), report.summary(), _link(), "2026-03-02T12:00:00+00:00")
    assert "Exemptions from erasure:\n  dataset invoices: NOT erased, kept (Art. 17(3)(b): tax law)" in email


def _link() -> ApprovalLink:
    return ApprovalLink(approver="dpo@example.com", url="https://approve.example/x")


def test_given_a_legal_hold_without_an_end_when_stated_then_it_is_kept_until_the_hold_is_lifted() -> None:
    cfg = settings('[[exemptions]]\ndataset = "invoices"\nbasis = "legal hold: case 2026-17"\nlegal_hold = true\n')
    [statement] = report_of(cfg).exemptions
    assert statement["kept_until"] is None and statement["legal_hold"] is True
    assert "NOT erased, under a legal hold (legal hold: case 2026-17) until the hold is lifted" in "".join(
        plan_lines(report_of(cfg))
    )


def test_given_retention_days_when_asked_then_kept_until_counts_from_the_request_day() -> None:
    [exemption] = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretention_days = 10\n').exemptions
    assert exemption.kept_until(date(2026, 3, 1)) == date(2026, 3, 11)
    assert not exemption.expired(date(2999, 1, 1))  # counted from each request, it never ends for a new one


def test_given_exemptions_changed_since_the_report_when_checked_before_erasing_then_refused_either_way() -> None:
    held = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nlegal_hold = true\n')
    ended = settings(f'[[exemptions]]\ndataset = "invoices"\n{TAX}\nretain_until = {TODAY - timedelta(days=1)}\n')
    keeping, erasing = report_of(held), report_of(settings(""))

    def check(cfg: Settings, report: Report) -> None:
        kept.check_unchanged(cfg, report.rewritten_datasets, report.exemptions, TODAY)

    check(held, keeping)  # unchanged: goes ahead
    check(settings(""), erasing)
    check(ended, erasing)  # an ended exemption keeps nothing, as the report did not
    with pytest.raises(kept.ExemptionsChanged, match=r"dataset\(s\) invoices kept by an exemption made after"):
        check(held, erasing)  # a legal hold placed after the report
    for now in (settings(""), ended):  # the hold lifted, or its date passed
        with pytest.raises(kept.ExemptionsChanged, match=r"dataset\(s\) invoices no longer kept"):
            check(now, keeping)
