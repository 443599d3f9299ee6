"""The purge report: exactly what a request will erase, written once per request and bound to its SHA-256.

An approver approves a report's hash and the purge refuses a report whose bytes hash differently, so what was
approved is what is erased. The report names users only by keyed hashes, and the objects of one-user-per-object
datasets (whose key may be the user's id) only by keyed references, resolved against the lake at purge time
(:func:`resolve_references`). Where it is stored, and reading it back with its hash checked: lakepurge.reports.layout.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from lakepurge.core.config import DatasetConfig, Settings
from lakepurge.core.config_identity import dataset_kinds
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import OBJECT_REFERENCE, HashedUsers, Pseudonymizer, object_reference
from lakepurge.core.s3io import ever_versioned, list_noncurrent, list_objects, sidecar_subjects
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import relational_dsn
from lakepurge.index.base import WHOLE_OBJECT, IndexStore
from lakepurge.indexing import unindexable
from lakepurge.indexing.coverage import DatasetCoverage, assess
from lakepurge.indexing.resolution import expands, resolve
from lakepurge.protection.shred import ShredPlan, plan_shred
from lakepurge.records.identifiers import typed_kinds
from lakepurge.reports import kept
from lakepurge.tables.plan import TablePlan, plan_table

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

# 3: objects of one-user-per-object datasets are named by reference (OBJECT_REFERENCE), not by their key.
# 4: unindexable lines are stated per dataset and were read for the requested users (lakepurge.indexing.unindexable).
REPORT_VERSION = 4
UNINDEXABLE_CHECKED = 4  # reports before it never read unindexable lines: they certify nothing


def stored_name(s3path: str, dataset: DatasetConfig, pseudonymizer: Pseudonymizer) -> str:
    """How the reports bucket names an object: by reference in a one-user-per-object dataset, else by its path (a
    reference that resolved to no object stays itself)."""
    if s3path.startswith(OBJECT_REFERENCE) or not dataset.per_object:
        return s3path
    return object_reference(s3path, pseudonymizer)


class SafetyLimitExceeded(Exception):
    """The request would erase more than the configured share of an object or dataset. The message names objects
    as logs do (keys that name a user are masked)."""


class ReportTampered(Exception):
    """The report's bytes do not hash to the approved SHA-256."""


@dataclass(frozen=True)
class ReportObject:
    s3path: str
    dataset: str
    format: str
    erase: str
    etag: str
    lines: tuple[int, ...]


@dataclass(frozen=True)
class ReportVersions:
    """Noncurrent versions of an object (versioned bucket) that the index says hold some of the users: an
    overwritten or deleted object's old data. The purge deletes every noncurrent version of the key that holds them
    (these and any the index missed); versions are immutable, so there is nothing to rewrite."""

    s3path: str
    dataset: str
    version_ids: tuple[str, ...]


@dataclass(frozen=True)
class ReportTable:
    name: str
    table: str
    column: str
    rows: int
    total_rows: int = 0  # count(*) of the table when the report was made: the approver sees the share


@dataclass(frozen=True)
class Report:
    request_id: str
    created_at: str
    user_hashes: tuple[str, ...]
    users_found: int
    objects: tuple[ReportObject, ...]
    relational: tuple[ReportTable, ...] = ()
    version: int = REPORT_VERSION
    forced: bool = False
    datasets: dict[str, dict[str, int]] = field(default_factory=dict)
    versions: tuple[ReportVersions, ...] = ()
    # Every configured dataset's coverage when the report was made (lakepurge.indexing.coverage), incomplete too where
    # an unindexable line may hold a requested user: a request is certified only if all are complete.
    coverage: tuple[dict[str, Any], ...] = ()
    # Each dataset's unindexable lines and what reading them for the users found (unindexable.DatasetLines.to_dict).
    unindexable: tuple[dict[str, Any], ...] = ()
    # Table datasets (format = "delta"): what the erasure does to each table and its history (lakepurge.tables).
    tables: tuple[TablePlan, ...] = ()
    # Crypto-shred datasets (lakepurge.protection.shred): the persons' keys the purge destroys, what keeps ciphertext.
    shred: ShredPlan | None = None
    # Typed datasets the request names no id of the kind of ({dataset, kind}): not searched, and so stated.
    not_searched: tuple[dict[str, str], ...] = ()
    # A typed request's resolution (lakepurge.indexing.resolution.Expansion.to_report): the identifiers found per kind
    # and link, as keyed hashes, and the request's own ("requested"); user_hashes holds them all. {}: not resolved.
    identifiers: dict[str, Any] = field(default_factory=dict)

    @property
    def requested_hashes(self) -> tuple[str, ...]:
        """The keyed hashes of the ids the request named (user_hashes adds those its resolution found)."""
        return tuple(self.identifiers.get("requested", self.user_hashes))

    # [[exemptions]] as the report found them (lakepurge.reports.kept): what is kept and why, or that one has ended.
    exemptions: tuple[dict[str, Any], ...] = ()

    @property
    def lines(self) -> int:
        return sum(0 if o.lines == (WHOLE_OBJECT,) else len(o.lines) for o in self.objects)

    @property
    def empty(self) -> bool:
        tables_empty = all(t.empty for t in self.tables)
        shred_empty = self.shred is None or not self.shred.persons
        # Records kept under an exemption are not "nothing found": the approver approves keeping them, and the
        # certificate states them (the workflow would otherwise end NOTHING_FOUND, telling the person no data exists).
        return (
            not kept.keeps_anything(self.exemptions)
            and not self.objects
            and not self.versions
            and not any(t.rows for t in self.relational)
            and tables_empty
            and shred_empty
        )

    @property
    def rewritten_datasets(self) -> list[str]:
        """The datasets this report erases by rewriting objects (files, noncurrent versions, tables)."""
        tables = {t.dataset for t in self.tables if not t.empty}
        return sorted({o.dataset for o in self.objects} | {v.dataset for v in self.versions} | tables)

    @property
    def gaps(self) -> list[DatasetCoverage]:
        """The datasets whose coverage is not complete: while there is any, the request cannot be certified."""
        # A kept dataset is not erased, so its coverage (stated with it) cannot leave anything of this erasure behind.
        kept_datasets = kept.kept_datasets(self.exemptions)
        gaps = [DatasetCoverage(**c) for c in self.coverage if not c["complete"] and c["dataset"] not in kept_datasets]
        if self.version < UNINDEXABLE_CHECKED:
            gaps.append(
                DatasetCoverage(
                    "(every dataset)",
                    False,
                    "the report predates reading unindexable lines for the requested users",
                    "make a new report: file the request again",
                )
            )
        return gaps

    @property
    def version_count(self) -> int:
        return sum(len(v.version_ids) for v in self.versions)

    def to_bytes(self) -> bytes:
        # The bytes asdict's would give, without its deep copy of every object and line (a purge's largest step in
        # the main thread): each dataclass is handed to orjson as its own field dict, whose keys it then sorts.
        options = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_DATACLASS
        return orjson.dumps(self, option=options, default=vars)

    @classmethod
    def from_bytes(cls, data: bytes) -> Report:
        document: dict[str, Any] = orjson.loads(data)
        document["user_hashes"] = tuple(document["user_hashes"])
        document["objects"] = tuple(ReportObject(**{**o, "lines": tuple(o["lines"])}) for o in document["objects"])
        document["relational"] = tuple(ReportTable(**t) for t in document["relational"])
        document["versions"] = tuple(
            ReportVersions(**{**v, "version_ids": tuple(v["version_ids"])}) for v in document.get("versions", ())
        )
        document["coverage"] = tuple(document.get("coverage", ()))
        document["unindexable"] = tuple(document.get("unindexable", ()))
        document["tables"] = tuple(TablePlan.from_json(t) for t in document.get("tables", ()))
        document["shred"] = ShredPlan.from_json(document["shred"]) if document.get("shred") else None
        document["not_searched"] = tuple(document.get("not_searched", ()))
        document["exemptions"] = tuple(document.get("exemptions", ()))
        return cls(**document)

    def summary(self) -> dict[str, Any]:
        """What an approver sees: counts per dataset and table, never an id."""
        return {
            "request_id": self.request_id,
            "users_requested": len(self.requested_hashes),
            "users_found": self.users_found,
            "objects": len(self.objects),
            "lines": self.lines,
            "noncurrent_versions": self.version_count,
            "datasets": self.datasets,
            "relational_rows": {t.name: t.rows for t in self.relational},
            "relational_totals": {t.name: t.total_rows for t in self.relational},
            "coverage": {c["dataset"]: "complete" if c["complete"] else c["reason"] for c in self.coverage},
            "unindexable": unindexable.summary(self.unindexable),
            **({"tables": {t.dataset: t.summary() for t in self.tables}} if self.tables else {}),
            **({"crypto_shred": self.shred.summary(self.rewritten_datasets)} if self.shred else {}),
            **(
                {"not_searched": {n["dataset"]: NOT_SEARCHED.format(**n) for n in self.not_searched}}
                if self.not_searched
                else {}
            ),
            **({"identifiers": identifiers_summary(self.identifiers)} if self.identifiers else {}),
            **({"exemptions": list(self.exemptions)} if self.exemptions else {}),
        }


def identifiers_summary(identifiers: dict[str, Any]) -> dict[str, Any]:
    """A resolution as the approver sees it: identifiers per kind and per link, counts only (no value, no hash)."""
    return {
        "kinds": identifiers["kinds"],
        "links": identifiers["links"],
        "not_expanded": len(identifiers["not_expanded"]),
        "beyond_depth": identifiers["beyond_depth"],
        "max_depth": identifiers["max_depth"],
    }


NOT_SEARCHED = "not searched: the request names no {kind}"


def not_searched(settings: Settings, users: list[str]) -> tuple[dict[str, str], ...]:
    """The typed datasets a request (after its resolution) names no id of any kind of: no untyped id matches a
    typed dataset, so nothing of the person's there is found. Stated per dataset (the report, the approval page,
    the certificate), so that the gap is approved, never silent."""
    named = set(typed_kinds(users))
    gaps = []
    for dataset in settings.datasets:
        kinds = dataset_kinds(dataset)
        if kinds and named.isdisjoint(kinds):
            gaps.append({"dataset": dataset.name, "kind": " or ".join(kinds)})
    return tuple(gaps)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_relational(settings: Settings, users: list[str]) -> tuple[ReportTable, ...]:
    import psycopg
    from psycopg import sql

    tables = []
    for table in settings.relational:
        with psycopg.connect(relational_dsn(table, deleting=False), autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FILTER (WHERE {} = ANY(%s)), count(*) FROM {}").format(
                sql.Identifier(table.column), sql.Identifier(*table.table.split("."))
            )
            row = conn.execute(query, (users,)).fetchone()
        matching, total = (int(row[0]), int(row[1])) if row else (0, 0)
        tables.append(ReportTable(table.name, table.table, table.column, matching, total))
    return tuple(tables)


def check_sentinels(settings: Settings, users: list[str]) -> list[str]:
    """The problems of ids that stand for nobody (empty, '0', 'null', ...): erasing them erases everyone."""
    sentinels = {s.casefold() for s in settings.purge.sentinel_ids}
    problems = []
    if any(not u.strip() for u in users):
        problems.append("the request names an empty (or blank) id")
    named = sorted({u for u in users if u.strip() and u.strip().casefold() in sentinels})
    if named:
        # Sentinels are placeholders from the configured list, not personal data: naming them helps the operator.
        problems.append(
            f"the request names placeholder id(s) {', '.join(repr(u) for u in named)} ([purge] sentinel_ids)"
        )
    return problems


def build_report(
    store: IndexStore,
    settings: Settings,
    users: list[str],
    request_id: str,
    pseudonymizer: Pseudonymizer,
    force: bool = False,
    dead_letters: int = 0,
    s3: S3Client | None = None,
    no_expand: Sequence[str] = (),
    keeping: bool = True,
) -> Report:
    """Look the users up and plan the erasure, refusing one that breaks a safety limit unless forced. The report
    states every dataset's coverage and unindexable lines, read for the users (s3: the client that reads them; the
    process's when None); whether an incomplete dataset stops the request is the caller's decision. A typed request
    is first resolved to every identifier of the person (lakepurge.indexing.resolution; no_expand: index forms not
    followed), ExpansionRefused when a guard stops it, even forced. keeping: the [[exemptions]] apply (an access
    request's report keeps nothing back: Art. 15 covers kept records too)."""
    requested = users
    expansion = resolve(store, settings, users, no_expand, pseudonymizer) if expands(settings, users) else None
    if expansion is not None:
        users = expansion.forms
    sentinel_problems = check_sentinels(settings, users)
    if sentinel_problems and not force:
        raise SafetyLimitExceeded("; ".join(sentinel_problems))
    problems = store.problems()
    coverage = assess(settings, store.coverage(), dead_letters, problems)
    coverage, lines = unindexable.check(
        store, settings, users, coverage, problems, lambda path, d: stored_name(path, d, pseudonymizer), s3
    )
    hits = store.lookup_objects(users)
    noncurrent = store.noncurrent_of(users)
    created = datetime.now(UTC)
    exemptions = (
        kept.statements(settings, created.date(), hits.objects, noncurrent, (c.to_dict() for c in coverage))
        if keeping
        else ()
    )
    kept_datasets = kept.kept_datasets(exemptions)
    objects = []
    for s3path in sorted(hits.objects):
        hit = hits.objects[s3path]
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is None or dataset.is_table or dataset.name in kept_datasets:
            continue  # removed from the configuration since indexed; a table's files: planned below; kept: stated
        objects.append(
            ReportObject(
                s3path=stored_name(s3path, dataset, pseudonymizer),
                dataset=dataset.name,
                format=dataset.format,
                erase=dataset.erase,
                etag=hit.etag,
                lines=hit.lines,
            )
        )
    relational = count_relational(settings, requested) if settings.relational else ()
    tables = plan_tables(store, settings, users, pseudonymizer)
    datasets = _check_limits(store, settings, objects + table_objects(tables), relational, force)
    versions = []
    for s3path, version_ids in sorted(noncurrent.items()):
        uri = S3Uri.parse(s3path)
        dataset = settings.dataset_for(uri.bucket, uri.key)
        if dataset is not None and version_ids and not dataset.is_table and dataset.name not in kept_datasets:
            name = stored_name(s3path, dataset, pseudonymizer)
            versions.append(ReportVersions(name, dataset.name, tuple(sorted(version_ids))))
    return Report(
        request_id=request_id,
        created_at=created.isoformat(timespec="seconds"),
        user_hashes=tuple(pseudonymizer.many(users)),
        users_found=hits.users_found,
        objects=tuple(objects),
        relational=relational,
        forced=force,
        datasets=datasets,
        versions=tuple(versions),
        coverage=tuple(with_table_gaps(c.to_dict(), tables) for c in coverage),
        unindexable=tuple(statement.to_dict() for statement in lines),
        tables=tables,
        shred=plan_shred(store, settings, users),
        not_searched=not_searched(settings, users),
        identifiers=(
            expansion.to_report(pseudonymizer) | {"requested": pseudonymizer.many(requested)} if expansion else {}
        ),
        exemptions=exemptions,
    )


def plan_tables(
    store: IndexStore, settings: Settings, users: list[str], pseudonymizer: Pseudonymizer
) -> tuple[TablePlan, ...]:
    """Each table dataset's erasure plan (lakepurge.tables.plan), the table followed to its newest version first."""
    tables = [d for d in settings.datasets if d.is_table]
    if not tables:
        return ()
    from lakepurge.core import aws

    hashed = HashedUsers(pseudonymizer.many(users), pseudonymizer)
    return tuple(plan_table(aws.client("s3"), store, settings, d, users, hashed) for d in tables)


def table_objects(tables: Iterable[TablePlan]) -> list[ReportObject]:
    """A table's rewritten files as report objects, for the safety limits (share of a file, of a dataset)."""
    return [
        ReportObject(f.s3path, t.dataset, t.format, "drop", f.etag, f.rows) for t in tables for f in t.files if f.rows
    ]


def with_table_gaps(coverage: dict[str, Any], tables: Iterable[TablePlan]) -> dict[str, Any]:
    """A dataset's coverage, incomplete when its table could not be planned (the index cannot follow it)."""
    for table in tables:
        if table.dataset == coverage["dataset"] and table.not_certifiable and coverage["complete"]:
            fix = f"lakepurge index reconcile --dataset {table.dataset}"
            return {**coverage, "complete": False, "reason": table.not_certifiable, "fix": fix}
    return coverage


def _check_limits(
    store: IndexStore,
    settings: Settings,
    objects: list[ReportObject],
    relational: tuple[ReportTable, ...],
    force: bool,
) -> dict[str, dict[str, int]]:
    limits = settings.purge
    per_dataset: dict[str, dict[str, int]] = defaultdict(lambda: {"objects": 0, "records": 0})
    problems = []
    checked = [o.s3path for o in objects if o.lines != (WHOLE_OBJECT,)] if limits.max_object_fraction < 1 else []
    records_of = store.object_records(checked) if checked else {}
    for obj in objects:
        erased = 1 if obj.lines == (WHOLE_OBJECT,) else len(obj.lines)
        per_dataset[obj.dataset]["objects"] += 1
        per_dataset[obj.dataset]["records"] += erased
        records = records_of.get(obj.s3path, 0)
        big_enough = records >= limits.min_records_for_object_fraction  # one person is a large share of a small one
        if records and big_enough and erased / records > limits.max_object_fraction:
            where = object_ref(obj.s3path, settings.dataset_named(obj.dataset))
            problems.append(
                f"{where}: {erased} of {records} records (max_object_fraction {limits.max_object_fraction})"
            )
    totals = store.dataset_records()
    for name, counts in per_dataset.items():
        total = totals.get(name, 0)
        big_enough = total >= limits.min_records_for_dataset_fraction  # one person is a large share of a small one
        if total and big_enough and counts["records"] / total > limits.max_dataset_fraction:
            problems.append(
                f"dataset {name}: {counts['records']} of {total} records"
                f" (max_dataset_fraction {limits.max_dataset_fraction})"
            )
    for table in relational:
        if table.total_rows and table.rows / table.total_rows > limits.max_table_fraction:
            problems.append(
                f"table {table.name}: {table.rows} of {table.total_rows} rows"
                f" (max_table_fraction {limits.max_table_fraction})"
            )
    if problems and not force:
        raise SafetyLimitExceeded("; ".join(problems[:20]) + ("; ..." if len(problems) > 20 else ""))
    return dict(per_dataset)


def resolve_references(s3: S3Client, settings: Settings, report: Report, pseudonymizer: Pseudonymizer) -> Report:
    """The report with each object reference replaced by the object's path, found in the lake: the dataset's current
    keys, then (a versioned bucket) the keys that only noncurrent versions hold, then the keys whose sidecar is left
    without them (a run killed between the two deletes: the purge deletes the sidecar, verification checks it). The
    resolved report lives in memory only. A reference that nothing in the lake resolves is kept as it is: no version
    of that object or its sidecar is left (an earlier run of this purge deleted it, as its recorded outcome says, or
    something else did); the purge never counts it erased without its own record of doing so."""
    wanted: dict[str, set[str]] = defaultdict(set)
    named: list[tuple[str, str]] = [(o.dataset, o.s3path) for o in report.objects]
    named += [(v.dataset, v.s3path) for v in report.versions]
    for dataset, s3path in named:
        if s3path.startswith(OBJECT_REFERENCE):
            wanted[dataset].add(s3path)
    if not wanted:
        return report
    paths: dict[str, str] = {}
    for name, references in wanted.items():
        paths.update(_find_in_lake(s3, settings.dataset_named(name), references, pseudonymizer))
    gone = sum(len(references) for references in wanted.values()) - len(paths)
    if gone:
        log.info("objects named by reference have no version left in the lake", extra={"objects": gone})

    return replace(
        report,
        objects=tuple(replace(o, s3path=paths.get(o.s3path, o.s3path)) for o in report.objects),
        versions=tuple(replace(v, s3path=paths.get(v.s3path, v.s3path)) for v in report.versions),
    )


def _find_in_lake(
    s3: S3Client, dataset: DatasetConfig, references: set[str], pseudonymizer: Pseudonymizer
) -> dict[str, str]:
    found: dict[str, str] = {}

    def scan(s3paths: Iterable[str]) -> bool:
        for s3path in s3paths:
            reference = object_reference(s3path, pseudonymizer)
            if reference in references:
                found[reference] = s3path
                if len(found) == len(references):
                    return True
        return False

    bucket = dataset.uri.bucket
    if scan(f"s3://{bucket}/{key}" for _, key, _ in list_objects(s3, dataset)):
        return found
    if ever_versioned(s3, bucket) and scan(version.s3path for version in list_noncurrent(s3, dataset)):
        return found
    scan(f"s3://{bucket}/{key}" for key in sidecar_subjects(s3, dataset))
    return found
