"""Unindexable lines against a request: may any of them hold the requested users?

A line the indexer could not read (invalid JSON, an unterminated CSV quote, an id too long to store, a record whose
id field is not a string) is recorded, never dropped, and no lookup finds it: it may hold anyone's record. The rule
(docs/ARCHITECTURE.md, *Coverage and unindexable lines*): when a report is made, the raw ids are at hand, so each
unindexable line of the covered datasets is read at the version indexed and searched for the bytes of every requested
id, as written raw, JSON-escaped (ASCII escapes or UTF-8), CSV-quoted or in Latin-1. A line holding any of them, a
line that cannot be read (the object changed or broke before it; a line standing for the rest of its object: a
broken stream, an unreadable CSV header) and lines beyond the report's bound (``[purge]
max_unindexable_lines_checked``) make the dataset not covered for this request, with the object, the line and the
fix; the request is then not certifiable. A line that holds none
of them cannot be a requested user's record and does not stop the request. Either way the report, the approval page
and the certificate state each dataset's unindexable lines (counts, the objects, line numbers; never content).

Objects of one-user-per-object datasets that are not located at all (no owner known) and objects that could not be
read are coverage gaps of their own (lakepurge.indexing.coverage): they are stated here, never read.

The search is for bytes, so it errs one way only: a line holding a requested id inside another value (an id "42" in a
price) counts as possibly holding it, never the reverse, except for an id spelled with escapes of plain ASCII
characters (``\\u0061lice``), which no common writer of the lake's formats produces (docs/LIMITS.md).
"""

from __future__ import annotations

import bisect
import json
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

import orjson

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.logs import get_logger
from lakepurge.core.s3io import ObjectChanged, ObjectHead, head_object, head_version, open_body, open_seekable
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import WHOLE_OBJECT, DatasetProblems, IndexStore, UnindexableObject
from lakepurge.indexing.coverage import DatasetCoverage
from lakepurge.indexing.indexer import content_error
from lakepurge.records.csv_records import HEADER_PROBLEM
from lakepurge.records.formats import UNREAD_FROM_HERE, read_records
from lakepurge.records.identifiers import kind_of
from lakepurge.records.ids import Unindexable
from lakepurge.records.lines import CHUNK_BYTES, open_decompressed

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

NameOf = Callable[[str, DatasetConfig], str]  # how a report names an object of a dataset

LISTED_OBJECTS = 20  # objects a report names per dataset (the counts cover them all)
LISTED_LINES = 20  # line numbers it names per object
LISTED_SUSPECTS = 20  # lines that may hold a requested user, named per dataset
_LINES_FETCHED = 100  # unindexable lines asked of the index per object; an object with more is read for the rest
_FEW_FORMS = 64  # up to this many byte forms, each is searched for in turn; beyond, through their prefixes


@dataclass
class DatasetLines:
    """One dataset's unindexable lines as a report states them (to_dict is what the report stores)."""

    dataset: str
    lines: int  # unindexable lines in its current objects
    objects: int  # objects holding them
    failed_objects: int  # objects that could not be read at all
    unowned_objects: int  # one-user objects whose owner is unknown
    checked: int = 0  # lines read for the requested users
    not_read: int = 0  # lines not read (the bound reached, the dataset not covered anyway, a one-user dataset)
    may_hold_lines: int = 0  # lines that may hold a requested user (read, or unreadable)
    may_hold: list[dict[str, Any]] = field(default_factory=list)  # the first: {object, line, why}
    listed: list[dict[str, Any]] = field(default_factory=list)  # the first objects: {object, lines, count}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Needles:
    """The byte forms of the requested ids a line may hold them in: raw UTF-8, JSON-escaped (ASCII \\u escapes, or
    UTF-8 with only quotes, backslashes and control characters escaped), CSV-quoted (quotes doubled), and Latin-1
    (the usual encoding of a line that is not UTF-8). A typed id (an index form) is searched for by its normalised
    value, lower-cased, in the line lower-cased too: a line holds it in any case and so may hold it (a normalisation
    that removes characters, as digits does, is not undone: docs/LIMITS.md)."""

    def __init__(self, users: Sequence[str]) -> None:
        forms: set[bytes] = set()
        self._lowered = any(kind_of(user) is not None for user in users)
        for requested in users:
            kind = kind_of(requested)
            user = requested if kind is None else requested[len(kind) + 2 :].lower()
            raw = user.encode("utf-8", "surrogatepass")
            forms.update((raw, json.dumps(user)[1:-1].encode(), raw.replace(b'"', b'""')))
            with suppress(orjson.JSONEncodeError):  # a lone surrogate: its ASCII-escaped form is there already
                forms.add(orjson.dumps(user)[1:-1])
            with suppress(UnicodeEncodeError):
                forms.add(user.encode("latin-1"))
        self._forms = sorted(forms)
        self.longest = max(map(len, self._forms), default=0)
        width = min(map(len, self._forms), default=0)
        self._width = width
        self._by_prefix: dict[bytes, list[bytes]] = {}
        for form in self._forms:
            self._by_prefix.setdefault(form[:width], []).append(form)

    def found_in(self, data: bytes) -> bool:
        if not self._forms:
            return False
        if self._lowered:
            data = data + b"\n" + data.decode("utf-8", "replace").lower().encode()
        if len(self._forms) <= _FEW_FORMS or not self._width:
            return any(form in data for form in self._forms)
        width, prefixes = self._width, self._by_prefix
        for start in range(len(data) - width + 1):
            candidates = prefixes.get(data[start : start + width])
            if candidates is not None and any(data.startswith(form, start) for form in candidates):
                return True
        return False


def check(
    store: IndexStore,
    settings: Settings,
    users: Sequence[str],
    coverage: list[DatasetCoverage],
    problems: dict[str, DatasetProblems],
    name_of: NameOf,
    s3: S3Client | None = None,
) -> tuple[list[DatasetCoverage], list[DatasetLines]]:
    """Read the covered datasets' unindexable lines for the users (within the report's bound); returns the coverage
    with the datasets where one may hold them made incomplete (reason and fix), and each dataset's statement.
    name_of(s3path, dataset) is how the report names an object (a keyed reference where a key may name a person)."""
    budget = settings.purge.max_unindexable_lines_checked
    needles = Needles(users)
    covered = {c.dataset: c for c in coverage}
    statements = []
    for dataset in settings.datasets:
        found = problems.get(dataset.name)
        if found is None or not found.objects:
            continue
        statement = DatasetLines(dataset.name, found.lines, found.objects, found.failed, found.unowned)
        readable = covered[dataset.name].complete and not dataset.per_object
        objects = store.problem_objects(
            dataset.name, limit=max(LISTED_OBJECTS, budget + 1 if readable else 0), lines=_LINES_FETCHED
        )
        statement.listed = [
            {
                "object": name_of(o.s3path, dataset),
                "lines": [u.line for u in o.lines[:LISTED_LINES]],
                "count": o.count,
            }
            for o in objects[:LISTED_OBJECTS]
        ]
        if readable:
            s3 = s3 if s3 is not None else aws.client("s3")
            budget -= _read_dataset(s3, settings, dataset, objects, needles, budget, statement, name_of)
        statement.not_read = max(statement.lines - statement.checked, 0)
        statements.append(statement)
        if readable and (statement.may_hold_lines or statement.not_read):
            covered[dataset.name] = _not_covered(covered[dataset.name], statement, settings)
    return [covered[c.dataset] for c in coverage], statements


def _read_dataset(
    s3: S3Client,
    settings: Settings,
    dataset: DatasetConfig,
    objects: list[UnindexableObject],
    needles: Needles,
    budget: int,
    statement: DatasetLines,
    name_of: NameOf,
) -> int:
    """Read the dataset's objects' unindexable lines within the budget into the statement; returns the lines read."""
    read = 0
    for obj in objects:
        if read >= budget:
            break
        lines = [(u.line, u.reason) for u in obj.lines]
        if obj.count > len(lines) and len(lines) < budget - read:
            # Only the first lines of the object came from the index: find the others in the object.
            lines = _recorded_lines(s3, settings, dataset, obj, budget - read)
        lines = lines[: budget - read]
        verdicts = _verdicts(s3, settings, dataset, obj, lines, needles)
        read += len(lines)
        for line, why in sorted(verdicts.items()):
            statement.may_hold_lines += 1
            if len(statement.may_hold) < LISTED_SUSPECTS:
                statement.may_hold.append({"object": name_of(obj.s3path, dataset), "line": line, "why": why})
    statement.checked = read
    return read


def _not_covered(coverage: DatasetCoverage, statement: DatasetLines, settings: Settings) -> DatasetCoverage:
    reasons = []
    if statement.may_hold:
        first = statement.may_hold[0]
        more = statement.may_hold_lines - 1
        reasons.append(
            f"{statement.may_hold_lines} unindexable line(s) may hold a requested user's records: line {first['line']}"
            f" of {first['object']} may hold one ({first['why']})" + (f", and {more} more" if more else "")
        )
    if statement.not_read:
        reasons.append(
            f"{statement.not_read} unindexable line(s) were not read for the requested users"
            f" ([purge] max_unindexable_lines_checked = {settings.purge.max_unindexable_lines_checked})"
        )
    fix = (
        "repair or remove those lines (lakepurge status lists them): the object's next event indexes it again"
        f" (or: lakepurge index reconcile --dataset {coverage.dataset}); then run the request again"
    )
    if statement.not_read:
        fix += " (or raise [purge] max_unindexable_lines_checked)"
    return replace(coverage, complete=False, reason="; ".join(reasons), fix=fix)


def _indexed_head(s3: S3Client, obj: UnindexableObject) -> ObjectHead | None:
    """The head of the version the index read, or None when that version is no longer there (or no longer current
    in an unversioned bucket)."""
    uri = S3Uri.parse(obj.s3path)
    if obj.version_id:
        return head_version(s3, uri.bucket, uri.key, obj.version_id)
    head = head_object(s3, uri.bucket, uri.key)
    return head if head is not None and head.etag == obj.etag else None


def _open(s3: S3Client, dataset: DatasetConfig, head: ObjectHead) -> IO[bytes]:
    return open_seekable(s3, head) if dataset.format == "parquet" else open_body(s3, head)


def _recorded_lines(
    s3: S3Client, settings: Settings, dataset: DatasetConfig, obj: UnindexableObject, limit: int
) -> list[tuple[int, str]]:
    """The object's unindexable lines as the indexer's reader finds them (up to limit), when the index kept fewer."""
    head = _indexed_head(s3, obj)
    if head is None:
        return [(u.line, u.reason) for u in obj.lines]  # gone or changed: _verdicts says so for those
    assert dataset.id_fields is not None
    indexing = settings.indexing
    raw = _open(s3, dataset, head)
    try:
        fields, rules = dataset.id_fields, id_rules(dataset)
        items = read_records(
            raw, head.key, dataset.format, fields, indexing.max_record_bytes, indexing.inflation, rules=rules
        )
        found: list[tuple[int, str]] = []
        for item in items:
            if isinstance(item, Unindexable):
                found.append((item.line, item.reason))
                if len(found) >= limit:
                    break
        return found
    finally:
        raw.close()


def _verdicts(
    s3: S3Client,
    settings: Settings,
    dataset: DatasetConfig,
    obj: UnindexableObject,
    lines: list[tuple[int, str]],
    needles: Needles,
) -> dict[int, str]:
    """line -> why it may hold a requested user, for the given unindexable lines of one object (those that cannot
    hold one are absent)."""
    verdicts: dict[int, str] = {}
    targets: dict[int, str] = {}
    for line, reason in lines:
        if line == WHOLE_OBJECT or reason.startswith(HEADER_PROBLEM) or reason.endswith(UNREAD_FROM_HERE):
            verdicts[line] = f"the object is not read past it: {reason}"
        else:
            targets[line] = reason
    if not targets:
        return verdicts
    head = _indexed_head(s3, obj)
    if head is None:
        return verdicts | {
            line: "the object changed since it was indexed (its event indexes it again)" for line in targets
        }
    try:
        raw = _open(s3, dataset, head)
        try:
            if dataset.format == "parquet":
                holding, read_to = _parquet_rows(raw, sorted(targets), needles)
            else:
                stream = open_decompressed(raw, head.key, settings.indexing.inflation)
                holding, read_to = _text_lines(stream, sorted(targets), needles)
        finally:
            raw.close()
    except ObjectChanged:
        return verdicts | {
            line: "the object changed since it was indexed (its event indexes it again)" for line in targets
        }
    except Exception as exc:
        if not content_error(exc, dataset):
            raise  # reaching S3 failed: the step is retried
        return verdicts | {line: f"the object could not be read ({type(exc).__name__})" for line in targets}
    for line, reason in targets.items():
        if line in holding:
            verdicts[line] = f"a requested id's bytes are in it; unindexable: {reason}"
        elif line > read_to:
            verdicts[line] = "the object could not be read to this line"
    return verdicts


def _text_lines(
    stream: IO[bytes], targets: list[int], needles: Needles, chunk_bytes: int = CHUNK_BYTES
) -> tuple[set[int], int]:
    """The target lines (sorted) of a text stream that hold a needle, and the last line read whole. Chunks without a
    target are only counted; a target line over several chunks is searched across their joins."""
    holding: set[int] = set()
    wanted = set(targets)
    line = 0  # the number of the line the next chunk starts in
    tail = b""  # the end of the target line the last chunk ended in (a needle may span the join)
    keep = max(needles.longest - 1, 0)
    last = targets[-1]
    try:
        while line <= last:
            chunk = stream.read(chunk_bytes)
            if not chunk:
                return holding, line
            breaks = chunk.count(b"\n")
            first = bisect.bisect_left(targets, line)
            if first == len(targets) or targets[first] > line + breaks:
                line, tail = line + breaks, b""
                continue
            pieces = chunk.split(b"\n")
            for offset, piece in _target_pieces(pieces, line, targets, first):
                data = tail + piece if offset == 0 else piece
                if line + offset not in holding and needles.found_in(data):
                    holding.add(line + offset)
                if offset == breaks:
                    tail = data[-keep:] if keep else b""
            if line + breaks not in wanted:
                tail = b""
            line += breaks
    except (EOFError, zlib.error):  # a broken or over-inflating stream: the lines from here on are unread
        return holding, line - 1
    return holding, line


def _target_pieces(pieces: list[bytes], line: int, targets: list[int], first: int) -> Iterator[tuple[int, bytes]]:
    for target in targets[first:]:
        offset = target - line
        if offset >= len(pieces):
            return
        yield offset, pieces[offset]


def _parquet_rows(source: IO[bytes], targets: list[int], needles: Needles) -> tuple[set[int], int]:
    """The target rows (sorted) of a Parquet object whose values, written as JSON, hold a needle; and the last row."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
    holding: set[int] = set()
    row = 0
    for batch in parquet.iter_batches(batch_size=65536):
        first = bisect.bisect_left(targets, row)
        wanted = [t - row for t in targets[first:] if t < row + batch.num_rows]
        if wanted:
            for offset, record in zip(wanted, batch.take(wanted).to_pylist(), strict=True):
                text = orjson.dumps(record, default=str, option=orjson.OPT_NON_STR_KEYS)
                if needles.found_in(text):
                    holding.add(row + offset)
        row += batch.num_rows
        if row > targets[-1]:
            break
    return holding, row - 1


def summary(statements: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per dataset, what an approver reads first: lines, objects, lines that may hold a requested user, lines not
    read."""
    return {
        s["dataset"]: {
            "lines": s["lines"],
            "objects": s["objects"],
            "may_hold": s["may_hold_lines"],
            "not_read": s["not_read"],
        }
        for s in statements
    }


def plan_lines(summarised: dict[str, dict[str, int]]) -> list[str]:
    """The plan's lines about unindexable lines (the approval email and page, the operator's plan): counts only."""
    lines = []
    for name, counts in sorted(summarised.items()):
        text = f"  dataset {name}: {counts['lines']} unindexable line(s) in {counts['objects']} object(s)"
        if counts["may_hold"]:
            text += f", {counts['may_hold']} may hold the requested users: NOT CERTIFIABLE"
        elif counts["not_read"] == counts["lines"]:
            text += ", not read for the requested users"
        elif counts["not_read"]:
            text += f", read for the requested users: none holds them, {counts['not_read']} not read"
        else:
            text += ", read for the requested users: none holds them"
        lines.append(text)
    return lines
