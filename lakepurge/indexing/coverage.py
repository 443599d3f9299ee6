"""Coverage: whether the index can be trusted to name every place a person's records are.

An index only knows what it was shown. A dataset that was never backfilled, was moved, had objects that could not
be indexed, or drifted from the lake (missed events, a dead-letter queue holding some) would make a lookup answer
"nothing here" while the person's records are there. So would an object the index holds now as not located, whatever
the last listing said: one that could not be read (an event after the listing recorded it failed), or, in a
one-user-per-object dataset, one whose owner is unknown (no sidecar, no owner tag). A request is certified only when
every dataset it covers (every configured dataset: a person's records may be anywhere) is complete. The check reads
recorded facts (the last listing, and the index's own record of the objects with problems), never the lake, so its
cost per request does not grow with the lake. Unindexable lines of otherwise located objects are the report's to
check against the requested users (lakepurge.indexing.unindexable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import dataset_id_forms
from lakepurge.index.base import Coverage, DatasetProblems, IndexStore

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


@dataclass(frozen=True, slots=True)
class DatasetCoverage:
    """One dataset's coverage as a report states it."""

    dataset: str
    complete: bool
    reason: str  # why it is not complete ("" when it is)
    fix: str  # the command that makes it complete ("" when it is)
    method: str | None = None  # "backfill" or "reconcile"
    indexed_from: str | None = None  # when the last full listing began (ISO-8601)
    indexed_at: str | None = None  # when it finished
    objects: int = 0
    versions: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class IndexIncomplete(Exception):
    """A request covers datasets the index does not fully cover: it cannot be certified."""

    def __init__(self, gaps: list[DatasetCoverage]) -> None:
        self.gaps = gaps
        super().__init__(describe_gaps(gaps))


def describe_gaps(gaps: list[DatasetCoverage]) -> str:
    return "; ".join(f"dataset {g.dataset}: {g.reason} (run: {g.fix})" for g in gaps)


def of_index(settings: Settings, store: IndexStore, dead_letters: int = 0) -> list[DatasetCoverage]:
    """Each configured dataset's coverage, from what the index holds (its listings and its objects' problems)."""
    return assess(settings, store.coverage(), dead_letters, store.problems())


def assess(
    settings: Settings,
    recorded: Mapping[str, Coverage],
    dead_letters: int = 0,
    problems: Mapping[str, DatasetProblems] | None = None,
) -> list[DatasetCoverage]:
    """Each configured dataset's coverage, from what the index recorded (its listings and, through of_index, its
    objects' problems) and the indexer's dead-letter count."""
    assessed = []
    for dataset in settings.datasets:
        record = recorded.get(dataset.name)
        now = (problems or {}).get(dataset.name)
        backfill = f"lakepurge index backfill --dataset {dataset.name}"
        reconcile = f"lakepurge index reconcile --dataset {dataset.name}"
        reason, fix = "", ""
        if record is None:
            reason, fix = "never fully indexed (no backfill or reconciliation recorded)", backfill
        elif record.location != dataset.location:
            reason, fix = f"indexed at another location ({record.location})", backfill
        elif record.id_forms != dataset_id_forms(dataset):
            was = f"kind {record.id_forms}" if record.id_forms else "untyped"
            reason = f"indexed with other identifier forms ({was}): its id_kind or its normalisation changed"
            fix = f"lakepurge index backfill --force --dataset {dataset.name}"
        elif record.failed:
            reason = f"{record.failed} object(s) could not be indexed (listed by lakepurge status)"
            fix = f"fix or remove them, then {reconcile}"
        elif now is not None and now.failed:
            reason = f"{now.failed} object(s) could not be read, so none of their records is located (lakepurge status)"
            fix = f"fix or remove them: their next event indexes them again (or: {reconcile})"
        elif now is not None and now.unowned:
            source = "owner tag" if dataset.id_tag else "sidecar" if dataset.id_sidecar else "id in the key"
            reason = f"{now.unowned} object(s) whose owner is unknown (no valid {source}; lakepurge status)"
            fix = f"give them a valid {source} or remove them: the change's event indexes them again (or: {reconcile})"
        elif record.drift:
            reason, fix = f"{record.drift} difference(s) between the lake and the index not reconciled", reconcile
        elif dead_letters:
            reason = f"{dead_letters} S3 event(s) in the indexer's dead-letter queue were never indexed"
            fix = f"{reconcile}, then empty the dead-letter queue"
        assessed.append(
            DatasetCoverage(
                dataset=dataset.name,
                complete=not reason,
                reason=reason,
                fix=fix,
                method=record.method if record else None,
                indexed_from=record.started_at.isoformat(timespec="seconds") if record else None,
                indexed_at=record.finished_at.isoformat(timespec="seconds") if record else None,
                objects=record.objects if record else 0,
                versions=record.versions if record else 0,
            )
        )
    return assessed


def forms_indexed(dataset: DatasetConfig, previous: Coverage | None, every_object_read: bool) -> str:
    """The identifier forms a listing leaves a dataset indexed in: the configuration's when every object was read
    again (a forced backfill) or the last listing recorded the same; else those it recorded, since objects at an
    unchanged ETag are not read again and keep the forms they were indexed in."""
    configured = dataset_id_forms(dataset)
    if every_object_read or previous is None or previous.id_forms == configured:
        return configured
    return previous.id_forms


def dead_letter_count(sqs: SQSClient, queue_url: str | None) -> int:
    """Messages waiting in the indexer's dead-letter queue (events that were never indexed)."""
    if not queue_url:
        return 0
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes.get("ApproximateNumberOfMessages", 0)) + int(
        attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
    )
