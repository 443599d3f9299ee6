"""The privacy team's view of the work: the operations page's typed view model, and who may read the page.

Built from the same sources as ``lakepurge requests`` (:func:`lakepurge.ops.history.list_history`, the evidence in the
reports location) and ``lakepurge status`` (the index store's counts and recorded coverage, the indexer's
dead-letter queue). It holds request ids, states, dates and counts only: never a user id, nor an object key (a key
of a one-user-per-object dataset may name its user). Returning users are counted, not named.

The view is built by the hourly RequestMetrics function (:func:`refresh_view`: a full pass over the index and the
evidence) and stored in the reports location; the page (GET /ops of the approval API) only reads that document
(:func:`stored_view`), so the internet-facing function neither scans nor may read the index. The page needs the
operations password (HTTP Basic) unless the API's optional JWT authorizer checked a token (:func:`may_read`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from lakepurge.core import aws
from lakepurge.core.config import Settings
from lakepurge.index.base import IndexStatus, IndexStore
from lakepurge.indexing.coverage import DatasetCoverage, dead_letter_count, of_index
from lakepurge.indexing.returning import DEFAULT_LIMIT
from lakepurge.ops.history import RequestRecord, list_history, split_plans
from lakepurge.reports import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient


@dataclass(frozen=True)
class RequestRow:
    request_id: str
    kind: str
    state: str
    open: bool
    overdue: bool
    created_at: str
    deadline: str | None
    days_left: int | None
    users: int | None
    objects: int | None
    lines_erased: int | None
    verified: bool | None


@dataclass(frozen=True)
class ErasedDay:
    """What verified erasures removed, by the day their request was received or reported."""

    day: str
    requests: int
    objects: int
    lines: int


@dataclass(frozen=True)
class DatasetRow:
    dataset: str
    complete: bool
    reason: str
    method: str | None
    indexed_at: str | None
    objects: int
    versions: int


@dataclass(frozen=True)
class OperationsView:
    generated_at: str
    requests: tuple[RequestRow, ...]  # overdue first, then open by deadline, then ended newest first
    by_state: dict[str, int]
    open: int
    overdue: int
    erased: tuple[ErasedDay, ...]  # oldest day first
    lines_erased: int
    objects_erased: int
    index_objects: int
    index_records: int
    index_users: int
    unindexable_lines: int
    objects_with_unindexable: int
    returning_users: int  # erased users found again, counted per object holding them
    objects_with_returning: int
    coverage: tuple[DatasetRow, ...]
    plans: int = 0  # dry runs never executed: plans, not requests (counted, not listed)

    @property
    def datasets_covered(self) -> int:
        return sum(d.complete for d in self.coverage)


ENDED_ERASED = ("ERASED",)


def _row(record: RequestRecord) -> RequestRow:
    return RequestRow(
        request_id=record.request_id,
        kind=record.kind,
        state=record.state,
        open=record.open,
        overdue=record.overdue,
        created_at=record.created_at,
        deadline=record.deadline,
        days_left=record.days_left,
        users=record.users,
        objects=record.objects,
        lines_erased=record.lines_erased,
        verified=record.verified,
    )


def ordered(rows: list[RequestRow]) -> list[RequestRow]:
    """Overdue first (most overdue first), then the other open requests by deadline (those without one last), then
    the ended ones, newest first."""
    ended = sorted((r for r in rows if not r.open), key=lambda r: r.created_at, reverse=True)
    open_rows = sorted(
        (r for r in rows if r.open),
        key=lambda r: (not r.overdue, r.deadline is None, r.deadline or "", r.created_at),
    )
    return open_rows + ended


def assemble(
    records: list[RequestRecord],
    status: IndexStatus,
    coverage: list[DatasetCoverage],
    returning_users: int,
    now: datetime | None = None,
) -> OperationsView:
    """The view from what was read (pure: the unit tests build it from plain values). Dry runs never executed are
    plans, not requests: counted apart, never among the requests and their states."""
    now = now or datetime.now(UTC)
    records, plans = split_plans(records)
    rows = ordered([_row(r) for r in records])
    days: dict[str, list[RequestRow]] = {}
    for row in rows:
        if row.state in ENDED_ERASED and row.verified and row.lines_erased is not None:
            days.setdefault(row.created_at[:10], []).append(row)
    erased = tuple(
        ErasedDay(
            day=day,
            requests=len(done),
            objects=sum(r.objects or 0 for r in done),
            lines=sum(r.lines_erased or 0 for r in done),
        )
        for day, done in sorted(days.items())
    )
    return OperationsView(
        generated_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        requests=tuple(rows),
        by_state=dict(sorted(Counter(r.state for r in rows).items())),
        open=sum(r.open for r in rows),
        overdue=sum(r.overdue for r in rows),
        erased=erased,
        lines_erased=sum(d.lines for d in erased),
        objects_erased=sum(d.objects for d in erased),
        index_objects=status.objects,
        index_records=status.records,
        index_users=status.users,
        unindexable_lines=status.unindexable_lines,
        objects_with_unindexable=status.objects_with_unindexable,
        returning_users=returning_users,
        objects_with_returning=status.objects_with_returning_users,
        coverage=tuple(
            DatasetRow(c.dataset, c.complete, c.reason, c.method, c.indexed_at, c.objects, c.versions) for c in coverage
        ),
        plans=len(plans),
    )


def count_returning(store: IndexStore, limit: int = DEFAULT_LIMIT) -> int:
    """Erased users found again, per object holding them (the indexer's count): no hash key, no id leaves here."""
    total = 0
    for s3path in store.returning_user_objects(limit):
        held = store.get_object(s3path)
        total += held.returning_users if held is not None else 0
    return total


def build_view(
    settings: Settings, s3: S3Client, store: IndexStore, sqs: SQSClient | None = None, now: datetime | None = None
) -> OperationsView:
    """Read everything the page shows: the requests from the reports location, the index's counts and coverage."""
    now = now or datetime.now(UTC)
    records = list_history(settings, s3, None, now)
    status = store.status()
    queue = settings.indexing.dead_letter_queue_url
    dead_letters = dead_letter_count(sqs, queue) if sqs is not None and queue else 0
    coverage = of_index(settings, store, dead_letters)
    returning = count_returning(store) if status.objects_with_returning_users else 0
    return assemble(records, status, coverage, returning, now)


_VIEW = TypeAdapter(OperationsView)


def refresh_view(
    settings: Settings, s3: S3Client, store: IndexStore, sqs: SQSClient | None = None, now: datetime | None = None
) -> OperationsView:
    """Build the view and store it where the page reads it (the hourly RequestMetrics function)."""
    view = build_view(settings, s3, store, sqs, now)
    where = layout.operations_view(settings)
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=_VIEW.dump_json(view), ContentType="application/json")
    return view


def stored_view(settings: Settings, s3: S3Client) -> OperationsView | None:
    """The view RequestMetrics stored last, or None before its first run."""
    stored = layout.read_or_none(s3, layout.operations_view(settings))
    return None if stored is None else _VIEW.validate_json(stored.body)


MIN_PASSWORD_LENGTH = 16


class PageLocked(Exception):
    """No operations password is configured or readable: the page is refused to everyone."""


def _password(settings: Settings) -> str:
    workflow = settings.workflow
    if workflow is None:
        raise PageLocked("no [workflow] section: the operations page has no password")
    if workflow.operations_password_secret is not None:
        try:
            value = aws.secret_string(workflow.operations_password_secret)
        except aws.SecretUnavailable as exc:
            raise PageLocked(str(exc)) from None
    else:
        value = os.environ.get(workflow.operations_password_env, "")
    if len(value) < MIN_PASSWORD_LENGTH:
        raise PageLocked(
            f"workflow.operations_password_secret / {workflow.operations_password_env}: the operations page needs a"
            f" password of at least {MIN_PASSWORD_LENGTH} characters"
        )
    return value


def basic_password(authorization: str | None) -> str | None:
    """The password of an HTTP Basic ``Authorization`` header (any user name), or None for anything else."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon else None


def may_read(settings: Settings, authorization: str | None, jwt_subject: str | None) -> bool:
    """Whether a GET /ops may see the page: the API's JWT authorizer checked a token (its subject is set only
    then), or the request carries the operations password. PageLocked when no password is configured."""
    if jwt_subject:
        return True
    password = _password(settings)
    given = basic_password(authorization)
    if given is None:
        return False
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(password.encode()).digest())
