"""What a request keeps: the datasets exempt from erasure ([[exemptions]], GDPR Art. 17(3): invoices under tax law,
records under a legal hold). The report looks them up like any dataset and states, per exemption, what it keeps and
why (counts only), or that the exemption has ended and the dataset is erased as usual; the purge never sees their
objects, the certificate and the approval page repeat the statement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

from lakepurge.core.config import Settings
from lakepurge.core.config_identity import exempt_datasets
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import WHOLE_OBJECT, ObjectHits


def statements(
    settings: Settings,
    on: date,
    hits: Mapping[str, ObjectHits],
    noncurrent: Mapping[str, Iterable[str]],
    coverage: Iterable[dict[str, Any]],
) -> tuple[dict[str, Any], ...]:
    """Each exemption as the report states it on that day: kept (with what the index found there and its coverage,
    which an exemption never makes complete) or ended."""
    if not settings.exemptions:
        return ()  # nothing to state, and no object of a large report looked at again
    counts = {e.dataset: {"objects": 0, "records": 0, "noncurrent_versions": 0} for e in settings.exemptions}

    def counted(s3path: str) -> dict[str, int] | None:
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        return counts.get(dataset.name) if dataset is not None else None

    for s3path, hit in hits.items():
        if (count := counted(s3path)) is not None:
            count["objects"] += 1
            count["records"] += 1 if hit.lines == (WHOLE_OBJECT,) else len(hit.lines)
    for s3path, version_ids in noncurrent.items():
        if (count := counted(s3path)) is not None:
            count["noncurrent_versions"] += len(set(version_ids))
    covered = {c["dataset"]: "complete" if c["complete"] else c["reason"] for c in coverage}
    stated = []
    for exemption in settings.exemptions:
        until = exemption.kept_until(on)
        statement: dict[str, Any] = {
            "dataset": exemption.dataset,
            "basis": exemption.basis,
            "legal_hold": exemption.legal_hold,
            "kept_until": until.isoformat() if until is not None else None,
        }
        if exemption.expired(on):
            stated.append({**statement, "kept": False})
        else:
            coverage_of = covered.get(exemption.dataset, "not assessed")
            stated.append({**statement, "kept": True, **counts[exemption.dataset], "coverage": coverage_of})
    return tuple(stated)


def kept_datasets(stated: Iterable[dict[str, Any]]) -> set[str]:
    """The datasets these statements keep (an ended exemption keeps nothing)."""
    return {s["dataset"] for s in stated if s["kept"]}


def keeps_anything(stated: Iterable[dict[str, Any]]) -> bool:
    """Whether these statements keep any record or version of the users."""
    return any(s["kept"] and (s["records"] or s["noncurrent_versions"]) for s in stated)


def plan_lines(stated: Iterable[dict[str, Any]]) -> list[str]:
    """The statements in words, for the operator, the approval email and page: dataset, basis, until when, counts."""
    lines = []
    for s in stated:
        if not s["kept"]:
            lines.append(
                f"  dataset {s['dataset']}: its exemption ({s['basis']}) ended on {s['kept_until']}: erased as usual"
            )
            continue
        held = "under a legal hold" if s["legal_hold"] else "kept"
        until = f"until {s['kept_until']}" if s["kept_until"] else "until the hold is lifted"
        found = (
            f"{s['records']} record(s) in {s['objects']} object(s), {s['noncurrent_versions']} noncurrent version(s)"
        )
        line = f"  dataset {s['dataset']}: NOT erased, {held} ({s['basis']}) {until}; {found} kept as they are"
        if s["coverage"] != "complete":
            line += f"; the index does not fully cover it ({s['coverage']}): it may hold more"
        lines.append(line)
    return lines


class ExemptionsChanged(Exception):
    """The exemptions in force now differ from those the report applied, for a dataset it names: one keeps a dataset
    the report erases (a legal hold placed, a retention extended, after the report was made), or one the report kept
    by has ended or gone. Executing that report would erase what must be kept, or keep what must now be erased: it is
    refused before anything is erased. Names datasets only."""


def check_unchanged(settings: Settings, erased: Iterable[str], stated: Iterable[dict[str, Any]], on: date) -> None:
    """Raise ExemptionsChanged unless the exemptions in force on that day keep exactly the datasets the report kept
    (``stated``), among those it erases (``erased``) or keeps. Checked before anything is erased."""
    kept_now = set(exempt_datasets(settings.exemptions, on))
    kept_then = kept_datasets(stated)
    newly = sorted(set(erased) & kept_now - kept_then)
    ended = sorted(kept_then - kept_now)
    problems = [f"{', '.join(newly)} kept by an exemption made after the report"] if newly else []
    problems += [f"{', '.join(ended)} no longer kept (the exemption ended or was removed)"] if ended else []
    if problems:
        raise ExemptionsChanged(
            f"the exemptions changed since the report ([[exemptions]]): dataset(s) {'; '.join(problems)}; nothing was"
            " erased: file the request again (a new report applies them)"
        )
