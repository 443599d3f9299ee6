"""The purge as a Spark job: the report's objects on executors, verification, and the erasure certificate.

Task closures carry the users as keyed hashes only (the report's), never raw ids: executors open the ids their
starter sealed for them (lakepurge.core.executor_ids), and a purge run in this process (inline) is given the raw ids
its caller holds; either makes the check before each write a lookup instead of a hash per id. Each
object's intent is recorded under
the request's results prefix before its write, and finished outcomes in batches, so a job killed half-way and run
again skips what was done, settles the rest from their intents, and ends in the same state, with the same
certificate, as one clean run.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from lakepurge.core import aws, executor_ids
from lakepurge.core.config import Settings
from lakepurge.core.config_identity import exempt_datasets
from lakepurge.core.executor_ids import SealedIdsRef
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.privacy import OBJECT_REFERENCE, HashedUsers, Pseudonymizer, object_reference
from lakepurge.core.s3io import ever_versioned, head_object, head_version, list_noncurrent, list_objects
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import apply_job_environment, job_environment, on_executors
from lakepurge.index import open_store, relational_dsn
from lakepurge.index.base import IndexStore
from lakepurge.purge.certificate import PurgeResult, purge_targets, verification_proof, write_certificate
from lakepurge.purge.engine import ObjectOutcome, PurgeTarget, purge_object, verify_object
from lakepurge.purge.intents import INTENTS_LINGER_SECONDS, IntentJournal
from lakepurge.purge.listed_proof import listable, listed_etags, proven_by_listing
from lakepurge.purge.placeholders import recorded_from
from lakepurge.purge.placeholders import write_batch as write_placeholder_batch
from lakepurge.purge.shredding import shred_persons
from lakepurge.purge.tables import purge_tables, verify_table
from lakepurge.reports import layout
from lakepurge.reports.kept import check_unchanged
from lakepurge.reports.report import Report, ReportTable, resolve_references, stored_name

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()


RESULTS_PER_BATCH = 50

UNRESOLVED = (
    "no object or version of its dataset resolves its reference: deleted since the report by something other than"
    " this purge, or the hash key changed; check with lakepurge verify"
)


# A verifying HEAD takes about a tenth of an object's purge (1.2 of 14.5 thread-seconds on bench/README's hard lake):
# one verifier thread keeps up with four purge threads, and a task of up to 64 of them has one per four.
PURGE_THREADS_PER_VERIFIER = 4


def recorded_outcomes(
    s3: Any, prefix: S3Uri, s3paths: Iterable[str], pseudonymizer: Pseudonymizer
) -> dict[str, ObjectOutcome]:
    """The outcomes recorded under a request's results prefix for the given objects (the report's, resolved), by
    object. An object of a one-user-per-object dataset is stored by its reference (report.stored_name), which the
    path resolves."""
    paths: dict[str, str] = {}
    names: dict[str, str] = {}
    for s3path in s3paths:
        reference = object_reference(s3path, pseudonymizer)
        paths[layout.result(prefix, s3path).key] = s3path
        paths[layout.result(prefix, reference).key] = s3path
        names[s3path] = names[reference] = s3path
    alone: dict[str, ObjectOutcome] = {}
    intents: dict[str, ObjectOutcome] = {}
    finished: dict[str, ObjectOutcome] = {}
    in_batches = {prefix.key + layout.RESULTS_BATCHES: finished, prefix.key + layout.INTENTS_BATCHES: intents}

    def read(key: str) -> Any:
        return orjson.loads(s3.get_object(Bucket=prefix.bucket, Key=key)["Body"].read())

    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=prefix.bucket, Prefix=prefix.key):
        for item in page.get("Contents", []):
            key = item["Key"]
            batch = next((into for folder, into in in_batches.items() if key.startswith(folder)), None)
            if batch is not None:
                for recorded in read(key)["outcomes"]:  # listed in name order: an object's later intent wins
                    if recorded["s3path"] in names:
                        outcome = ObjectOutcome(**{**recorded, "s3path": names[recorded["s3path"]]})
                        batch[outcome.s3path] = outcome
                continue
            if key not in paths:
                continue  # an object the report does not name (a rerun of an older report's results)
            outcome = ObjectOutcome(**{**read(key), "s3path": paths[key]})
            alone[outcome.s3path] = outcome
    # A finished outcome supersedes the intents recorded before the object's write (an earlier version of lakepurge
    # wrote each of those on its own).
    return {**alone, **intents, **finished}


def _taken_as_written(outcome: ObjectOutcome, intent: ObjectOutcome) -> bool:
    return True


def _settle(
    outcome: ObjectOutcome,
    intent: ObjectOutcome | None,
    written: Callable[[ObjectOutcome, ObjectOutcome], bool] = _taken_as_written,
) -> ObjectOutcome:
    """A rerun's outcome, completed with what an earlier, killed run recorded doing. Finding nothing left to erase
    where the earlier run recorded the intent to write means that write happened (the object is no longer the
    version it read), if ``written(outcome, intent)`` confirms the version found is that write's
    (_found_its_write): its erasure is the outcome. Versions the earlier run recorded deleting were deleted by it."""
    if intent is None:
        return outcome
    unchanged = outcome.before_etag == intent.before_etag
    if unchanged or outcome.status not in ("nothing-to-erase", "gone") or not written(outcome, intent):
        settled = replace(outcome)
    else:
        settled = replace(intent, committed=True, after_etag=outcome.before_etag, after_version=outcome.before_version)
    earlier = [v for v in intent.deleted_versions if v not in outcome.deleted_versions]
    settled.deleted_versions = earlier + outcome.deleted_versions
    settled.noncurrent_versions_deleted = len(settled.deleted_versions)
    settled.clean_versions = list(dict.fromkeys([*intent.clean_versions, *outcome.clean_versions]))
    sidecars = [v for v in intent.sidecar_versions_deleted if v not in outcome.sidecar_versions_deleted]
    settled.sidecar_versions_deleted = sidecars + outcome.sidecar_versions_deleted
    if settled.status == "nothing-to-erase" and settled.deleted_versions:
        settled.status = "versions-deleted"
    return settled


def _found_its_write(s3: Any) -> Callable[[ObjectOutcome, ObjectOutcome], bool]:
    """Whether the version a rerun found (outcome.before_*) is the one the intent's rewrite produced: S3 states for it
    the CRC64NVME of the bytes the intent staged. An intent without a checksum (an earlier version of lakepurge, a
    delete) is taken as done, as it always was."""

    def found(outcome: ObjectOutcome, intent: ObjectOutcome) -> bool:
        if intent.status != "erased" or not intent.after_checksum or outcome.status != "nothing-to-erase":
            return True
        uri = S3Uri.parse(outcome.s3path)
        if outcome.before_version:
            head = head_version(s3, uri.bucket, uri.key, outcome.before_version, checksum=True)
        else:
            head = head_object(s3, uri.bucket, uri.key, checksum=True)
        return (
            head is not None
            and head.etag == outcome.before_etag
            and head.headers.get("ChecksumCRC64NVME") == intent.after_checksum
        )

    return found


def _task_attempt() -> int:
    """The Spark task's attempt number: 0 for its first, more when Spark runs it again (its executor was lost, or a
    speculative copy); 0 outside Spark (the inline purge)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # a Lambda's inline purge: no Spark installed
        return 0
    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def _purge_partition(
    settings: Settings,
    env: dict[str, str],
    key: bytes,
    user_hashes: tuple[str, ...],
    prefix: S3Uri,
    intents: dict[str, ObjectOutcome],
    targets: Iterable[PurgeTarget],
    known: tuple[str, ...] = (),
    gaps: frozenset[str] = frozenset(),
    sealed: SealedIdsRef | None = None,
) -> Iterator[dict[str, Any]]:
    apply_job_environment(env)
    task = _PartitionPurge(settings, key, user_hashes, prefix, intents, list(targets), known, gaps, sealed)
    by_ids = task.users.ids_held() is not None  # (the driver counts them: a worker's fallback is logged there only)
    for found in task.run():
        yield {**found, "by_ids": by_ids}


class _PartitionPurge:
    """One Spark task's objects, purged on a few threads (the work is S3 round trips), each thread with its own index
    connection (a connection runs one transaction at a time). Before an object is written (or a version deleted) its
    intent is recorded, shared with the threads that record theirs at the same time (IntentJournal); finished
    outcomes are written together, RESULTS_PER_BATCH at a time and at the end: one request for many objects. A task
    killed before a batch is written loses nothing: its objects' intents are recorded, and the rerun settles each from
    the intent and the object as it finds it (_settle). Each object is verified right after its purge, by the task's
    verifier threads (_verify); gaps: the datasets whose index coverage the report found incomplete; sealed: where
    the request's ids are sealed for executors, if its starter wrote them (opened here: lakepurge.core.executor_ids)."""

    def __init__(
        self,
        settings: Settings,
        key: bytes,
        user_hashes: tuple[str, ...],
        prefix: S3Uri,
        intents: dict[str, ObjectOutcome],
        targets: list[PurgeTarget],
        known: tuple[str, ...] = (),
        gaps: frozenset[str] = frozenset(),
        sealed: SealedIdsRef | None = None,
    ) -> None:
        self.settings = settings
        self.gaps = gaps
        self.prefix = prefix
        self.targets = targets
        self.s3: S3Client = aws.client("s3")
        self.pseudonymizer = Pseudonymizer(key)
        self.intents = intents
        self.finished_before: dict[str, ObjectOutcome] = {}
        if _task_attempt() > 0:
            # A task run again after its executor was lost: its earlier attempt may have rewritten objects (their
            # intents recorded) and finished some (their outcomes recorded), none of which the driver knew when it
            # started.
            recorded = recorded_outcomes(self.s3, prefix, [t.s3path for t in targets], self.pseudonymizer)
            self.intents = {**intents, **{path: o for path, o in recorded.items() if not o.committed}}
            self.finished_before = {path: o for path, o in recorded.items() if o.committed}
        self.written = _found_its_write(self.s3)
        self.users = executor_ids.task_users(self.s3, sealed, key, user_hashes, known)
        # The JSON Lines objects this task will check before writing them: the check's automaton of the ids is then
        # compiled before the first, when they will pay for it (HashedUsers.expect), not after the split paid for it.
        self.users.expect(sum(map(self._checked_by_ids, targets)))
        self.versioned = _bucket_versioning(self.s3)
        self.datasets = {t.s3path: t.dataset for t in targets}
        self.journal = IntentJournal(self._write_intents, INTENTS_LINGER_SECONDS)
        self._local = threading.local()
        self._stores: list[IndexStore] = []
        self._finished: list[ObjectOutcome] = []
        self._finished_lock = threading.Lock()
        self._with_maps: set[str] | None = None
        self._with_maps_lock = threading.Lock()

    def _checked_by_ids(self, target: PurgeTarget) -> bool:
        """Whether this task's purge of the target will check it by the users' ids before writing it (JSON Lines,
        CSV: records.search)."""
        pending = target.s3path not in self.finished_before and not target.s3path.startswith(OBJECT_REFERENCE)
        return pending and self.settings.dataset_named(target.dataset).format in ("jsonl", "csv")

    def run(self) -> Iterator[dict[str, Any]]:
        threads = self.settings.purge.threads_per_task
        try:
            with (
                ThreadPoolExecutor(threads) as pool,
                ThreadPoolExecutor(-(-threads // PURGE_THREADS_PER_VERIFIER), thread_name_prefix="verify") as verifier,
            ):

                def purge(target: PurgeTarget) -> tuple[dict[str, Any], Future[list[dict[str, Any]]] | None]:
                    outcome = self._purge_one(target)
                    if self._listable(target, outcome):
                        return outcome, None  # verified with the task's others like it by one listing, at the end
                    return outcome, verifier.submit(self._verify, target, outcome)

                listed: list[tuple[PurgeTarget, dict[str, Any]]] = []
                for target, (outcome, verified) in zip(self.targets, pool.map(purge, self.targets), strict=True):
                    if verified is None:
                        listed.append((target, outcome))
                    else:
                        yield {"outcome": outcome, "remaining": verified.result()}
                yield from self._verify_listed(listed, verifier)
        finally:
            self._flush(self._finished)
            for opened in self._stores:
                opened.close()

    def _verify(self, target: PurgeTarget, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        """The object's verification (engine.verify_object), queued as soon as its purge ends and run by the task's
        verifier threads while the purge threads go on to their next objects: nothing else in this run writes the
        object, so it is what verification after every object would find, and its round trips overlap the purge's
        instead of holding a purge thread or waiting for all objects. A reference that resolved to nothing has no
        version to check."""
        if target.s3path.startswith(OBJECT_REFERENCE):
            return []
        proof = None
        if self.settings.purge.verify == "checksum":
            proof = verification_proof(ObjectOutcome(**outcome), target.dataset not in self.gaps)
        check = (target.s3path, target.dataset, proof)
        return _verified(self.s3, self.settings, self.users, self.pseudonymizer, self.versioned, check)

    def _listable(self, target: PurgeTarget, outcome: dict[str, Any]) -> bool:
        """Whether the object's verification is a listing's (purge.listed_proof) rather than its own HEAD."""
        if self.settings.purge.verify != "checksum" or target.s3path.startswith(OBJECT_REFERENCE):
            return False
        dataset = self.settings.dataset_named(target.dataset)
        return listable(ObjectOutcome(**outcome), dataset, self.versioned(target.s3path))

    def _verify_listed(
        self, listed: list[tuple[PurgeTarget, dict[str, Any]]], verifier: ThreadPoolExecutor
    ) -> Iterator[dict[str, Any]]:
        """The task's listable objects, verified after its purges: one listing a bucket names their ETags (one
        request for many objects instead of a HEAD each); those it does not show to be the purge's own write (an
        overwrite since, a key the listing did not reach, a listing that failed) are verified one by one (_verify)."""
        keys: dict[str, list[str]] = {}
        for target, _ in listed:
            uri = S3Uri.parse(target.s3path)
            keys.setdefault(uri.bucket, []).append(uri.key)
        etags: dict[str, dict[str, str]] = {}
        for bucket, in_bucket in keys.items():
            try:
                etags[bucket] = listed_etags(self.s3, bucket, in_bucket)
            except Exception as exc:  # each object is then verified on its own, as without a listing
                log.warning("verification's listing failed; verifying each object", extra={"error": type(exc).__name__})
                etags[bucket] = {}
        pending = []
        for target, outcome in listed:
            uri = S3Uri.parse(target.s3path)
            if proven_by_listing(ObjectOutcome(**outcome), etags[uri.bucket], uri.key):
                yield {"outcome": outcome, "remaining": []}
            else:
                pending.append((outcome, verifier.submit(self._verify, target, outcome)))
        for outcome, verified in pending:
            yield {"outcome": outcome, "remaining": verified.result()}

    def _purge_one(self, target: PurgeTarget) -> dict[str, Any]:
        if target.s3path in self.finished_before:
            return self.finished_before[target.s3path].as_dict()
        if target.s3path.startswith(OBJECT_REFERENCE):
            return self._unresolved(target)
        try:
            index, bucket_versioned = self._store(), self.versioned(target.s3path)
            mapped = target.s3path in self._mapped(index)
        except Exception as exc:  # the index or S3 unreachable before the object was touched: it fails, others go on
            log.warning("purge of an object not started", extra={"error": type(exc).__name__})
            return ObjectOutcome(target.s3path, "failed", error=type(exc).__name__).as_dict()
        with self.journal.working():
            outcome = purge_object(
                self.s3,
                index,
                self.settings,
                target,
                self.users,
                before_write=self.journal.record,
                versioned=bucket_versioned,
                announce=self.journal.announce,
                mapped=mapped,
            )
        try:
            settled = _settle(outcome, self.intents.get(target.s3path), self.written)
        except Exception as exc:  # whether an earlier run's write happened cannot be asked now: a failure, not a guess
            settled = replace(outcome, status="failed", error=f"earlier run's write not checked: {type(exc).__name__}")
        return self._finish(settled)

    def _unresolved(self, target: PurgeTarget) -> dict[str, Any]:
        """No version of the object is left (report.resolve_references): erased by an earlier run of this purge
        only if that run recorded its intent; otherwise a failure, never a silent success."""
        intent = self.intents.get(target.s3path)
        if intent is not None:
            return self._finish(_settle(ObjectOutcome(target.s3path, "gone"), intent))
        return ObjectOutcome(target.s3path, "failed", error=UNRESOLVED).as_dict()

    def _finish(self, outcome: ObjectOutcome) -> dict[str, Any]:
        if outcome.status != "failed":
            with self._finished_lock:
                self._finished.append(outcome)
                full = self._finished[:] if len(self._finished) >= RESULTS_PER_BATCH else []
                if full:
                    self._finished.clear()
            self._flush(full)
        return outcome.as_dict()

    def _mapped(self, index: IndexStore) -> set[str]:
        """The task's objects the index holds a record map for (their purge starts from a HEAD, not a GET), asked
        once for all of them by the first thread to need it."""
        with self._with_maps_lock:
            if self._with_maps is None:
                self._with_maps = index.with_record_maps([t.s3path for t in self.targets])
            return self._with_maps

    def _store(self) -> IndexStore:
        """This thread's index connection, opened on its first object."""
        if not hasattr(self._local, "store"):
            self._local.store = open_store(self.settings.index, create=False)
            self._stores.append(self._local.store)
        current: IndexStore = self._local.store
        return current

    def _stored(self, outcome: ObjectOutcome) -> ObjectOutcome:
        dataset = self.settings.dataset_named(self.datasets[outcome.s3path])
        return replace(outcome, s3path=stored_name(outcome.s3path, dataset, self.pseudonymizer))

    def _write_intents(self, intents: list[ObjectOutcome]) -> None:
        where = layout.intents_batch(self.prefix, f"{time.time_ns():020d}-{uuid.uuid4().hex}")
        body = orjson.dumps({"outcomes": [self._stored(o) for o in intents]})
        self.s3.put_object(Bucket=where.bucket, Key=where.key, Body=body)

    def _flush(self, outcomes: list[ObjectOutcome]) -> None:
        if outcomes:
            # The placeholder records first: a run killed between the two requests redoes these objects (no
            # finished outcome), and its settled outcomes write the records again, never none.
            write_placeholder_batch(self.s3, self.settings, recorded_from(outcomes))
            where = layout.results_batch(self.prefix, uuid.uuid4().hex)
            body = orjson.dumps({"outcomes": [self._stored(o) for o in outcomes]})
            self.s3.put_object(Bucket=where.bucket, Key=where.key, Body=body)


VerifyItem = tuple[str, str, dict[str, Any] | None]  # object, dataset, the purge's outcome as proof (None: read all)


def _bucket_versioning(s3: Any) -> Callable[[str], bool]:
    """Whether an object's bucket ever had versioning, asked once per bucket (per task; safe across its threads)."""
    known: dict[str, bool] = {}
    lock = threading.Lock()

    def versioned(s3path: str) -> bool:
        bucket = S3Uri.parse(s3path).bucket
        with lock:
            if bucket not in known:
                known[bucket] = ever_versioned(s3, bucket)
            return known[bucket]

    return versioned


def _verify_partition(
    settings: Settings,
    env: dict[str, str],
    key: bytes,
    user_hashes: tuple[str, ...],
    items: Iterable[VerifyItem],
    known: tuple[str, ...] = (),
    sealed: SealedIdsRef | None = None,
) -> Iterator[dict[str, Any]]:
    apply_job_environment(env)
    s3 = aws.client("s3")
    pseudonymizer = Pseudonymizer(key)
    users = executor_ids.task_users(s3, sealed, key, user_hashes, known)
    verify = partial(_verified, s3, settings, users, pseudonymizer, _bucket_versioning(s3))
    # HEADs and listings are round trips: a few at once, as the purge does.
    with ThreadPoolExecutor(settings.purge.threads_per_task) as pool:
        for found in pool.map(verify, list(items)):
            yield from found


def _verified(
    s3: Any,
    settings: Settings,
    users: HashedUsers,
    pseudonymizer: Pseudonymizer,
    versioned: Callable[[str], bool],
    item: VerifyItem,
) -> list[dict[str, Any]]:
    """What verification finds left of the users in one object (engine.verify_object), as the result states it."""
    s3path, dataset_name, proof = item
    dataset = settings.dataset_named(dataset_name)
    outcome = ObjectOutcome(**proof) if proof is not None else None
    found = verify_object(s3, settings, dataset, s3path, users, outcome, versioned=versioned(s3path))
    return [
        {
            "object": object_ref(remaining.s3path, dataset, pseudonymizer),
            "version_id": remaining.version_id,
            "lines": remaining.lines,
            **({"reason": remaining.reason} if remaining.reason else {}),
        }
        for remaining in found
    ]


def run_purge(
    spark: Any,
    settings: Settings,
    report: Report,
    pseudonymizer_key: bytes,
    relational: Iterable[dict[str, Any]] | None = None,
    approved_by: str | None = None,
    report_sha256: str = "",
    approved_at: str | None = None,
    requested: Sequence[str] = (),
) -> PurgeResult:
    """Erase every object of the report, verify every touched object, and write the certificate. Each object is
    verified right after its purge, on the same executor (its task's verifier threads); those an earlier run of the
    request finished, after the others.

    ``spark`` None runs the same work in this process (the inline purge of a small report). ``relational``: the
    relational DELETEs the caller ran (the operator's CLI); None reads those the workflow recorded. ``requested``: the
    users' raw ids, when the caller holds them (the operator's CLI, the workflow's inline purge); used only in this
    process, never handed to Spark (in_process_ids)."""
    started = datetime.now(UTC)
    s3 = aws.client("s3")
    pseudonymizer = Pseudonymizer(pseudonymizer_key)
    check_unchanged(settings, report.rewritten_datasets, report.exemptions, started.date())
    report = resolve_references(s3, settings, report, pseudonymizer)
    prefix = layout.results_prefix(settings, report.request_id)
    targets = purge_targets(report)
    recorded = recorded_outcomes(s3, prefix, [t.s3path for t in targets], pseudonymizer)
    done = {path: o for path, o in recorded.items() if o.committed}
    intents = {path: o for path, o in recorded.items() if not o.committed}
    pending = [t for t in targets if t.s3path not in done]
    relational = tuple(relational) if relational is not None else recorded_relational(s3, settings, report.request_id)
    env = job_environment(settings)
    hashes = report.user_hashes
    known = in_process_ids(spark, requested)
    sealed = None if known else located_sealed_ids(s3, prefix, report)
    gaps = frozenset(g.dataset for g in report.gaps)
    try:
        fresh = on_executors(
            spark,
            pending,
            lambda items: _purge_partition(
                settings, env, pseudonymizer_key, hashes, prefix, intents, items, known, gaps, sealed
            ),
            label="objects purged and verified",
        )
        if sealed is not None:  # counts only: how many objects' checks the sealed ids served (the rest hashed)
            by_ids = sum(1 for d in fresh if d["by_ids"])
            log.info("objects checked by the sealed ids", extra={"objects": len(fresh), "checked_by_ids": by_ids})
        outcomes = {**done, **{d["outcome"]["s3path"]: ObjectOutcome(**d["outcome"]) for d in fresh}}
        ordered = tuple(outcomes[t.s3path] for t in targets)
        # Every version of every key the report names (current or noncurrent only) is checked: read again, or, with
        # verify = "checksum", proven by what this purge verified and S3 confirms (engine.verify_object). The objects
        # purged now were checked with their purge; those an earlier run finished are checked here. A reference that
        # resolved to nothing has no version to check (the listing found none).
        by_checksum = settings.purge.verify == "checksum"
        checks: list[VerifyItem] = [
            (t.s3path, t.dataset, verification_proof(done[t.s3path], t.dataset not in gaps) if by_checksum else None)
            for t in targets
            if t.s3path in done and not t.s3path.startswith(OBJECT_REFERENCE)
        ]
        remaining = [r for d in fresh for r in d["remaining"]]
        remaining += _verify_on_executors(spark, settings, checks, pseudonymizer_key, hashes, known, sealed=sealed)
        erased_tables = purge_tables(
            spark, settings, report.tables, pseudonymizer_key, hashes, report.request_id, known, sealed
        )
    finally:  # the executors are done with the sealed ids (lakepurge.core.executor_ids): none may outlive them
        if spark is not None:
            delete_sealed_ids(s3, prefix, report.request_id)
    tables = tuple(t.as_dict() for t in erased_tables)
    shred = None
    if report.shred is not None:
        shred = shred_persons(s3, settings, report.shred, report.user_hashes, prefix, report.rewritten_datasets)
    result = PurgeResult(
        report.request_id,
        ordered,
        tuple(remaining),
        "",
        tuple(relational),
        tuple(g.dataset for g in report.gaps),
        tables,
        shred,
    )
    certificate = write_certificate(
        s3, settings, report, result, started, approved_by, report_sha256, approved_at, pseudonymizer
    )
    return replace(result, certificate=certificate)


def recorded_relational(s3: Any, settings: Settings, request_id: str) -> tuple[dict[str, Any], ...]:
    """The relational DELETEs the workflow ran before starting this job (it holds the raw ids; the job does not),
    written by lakepurge.workflow.steps (layout.relational)."""
    recorded = layout.read_relational(s3, settings, request_id)
    return () if recorded is None else tuple(t.to_json() for t in recorded.tables)


def purge_relational(settings: Settings, users: list[str], tables: Iterable[ReportTable]) -> list[dict[str, Any]]:
    """DELETE the users' rows, one transaction per table; the counts go into the certificate."""
    import psycopg
    from psycopg import sql

    configured = {t.name: t for t in settings.relational}
    results = []
    for planned in tables:
        table = configured[planned.name]
        statement = sql.SQL("DELETE FROM {} WHERE {} = ANY(%s)").format(
            sql.Identifier(*table.table.split(".")), sql.Identifier(table.column)
        )
        with psycopg.connect(relational_dsn(table, deleting=True)) as conn, conn.transaction():
            deleted = conn.execute(statement, (users,)).rowcount
        results.append(
            {"name": table.name, "table": table.table, "rows_planned": planned.rows, "rows_deleted": deleted}
        )
    return results


def verify_everywhere(
    spark: Any, settings: Settings, user_hashes: tuple[str, ...], key: bytes, bound_hashes: tuple[str, ...] = ()
) -> tuple[int, list[dict[str, Any]]]:
    """Read every object of every dataset (and its noncurrent versions) for the users (Iceberg's manifests also for
    bound_hashes, the hashes of the forms their column bounds truncate long ids to). Returns (objects checked,
    places where any of them remains). A dataset an exemption keeps today ([[exemptions]]) holds them by right: it
    is not read."""
    s3 = aws.client("s3")
    kept = exempt_datasets(settings.exemptions, datetime.now(UTC).date())
    items: dict[str, str] = {}
    sizes: dict[str, int] = {}
    remaining: list[dict[str, Any]] = []
    checked = 0
    for dataset in (d for d in settings.datasets if d.name not in kept):
        if dataset.is_table:  # read whole by its own readers (lakepurge.purge.tables)
            table = verify_table(settings, dataset, key, user_hashes, bound_hashes)
            checked += table.objects_checked
            remaining += [{"dataset": dataset.name, **place} for place in table.remaining]
            continue
        for bucket, k, size in list_objects(s3, dataset):
            items[f"s3://{bucket}/{k}"] = dataset.name
            sizes[f"s3://{bucket}/{k}"] = size
        if ever_versioned(s3, dataset.uri.bucket):  # deleted keys: only noncurrent versions, behind a marker
            for version in list_noncurrent(s3, dataset):
                items.setdefault(version.s3path, dataset.name)
                sizes[version.s3path] = sizes.get(version.s3path, 0) + version.size  # every version is read
    checks: list[VerifyItem] = [(s3path, name, None) for s3path, name in items.items()]
    found = _verify_on_executors(spark, settings, checks, key, user_hashes, sizes=sizes)
    return len(items) + checked, remaining + found


def _verify_on_executors(
    spark: Any,
    settings: Settings,
    items: list[VerifyItem],
    key: bytes,
    user_hashes: tuple[str, ...],
    known: tuple[str, ...] = (),
    sizes: dict[str, int] | None = None,
    sealed: SealedIdsRef | None = None,
) -> list[dict[str, Any]]:
    env = job_environment(settings)
    return on_executors(
        spark,
        items,
        lambda part: _verify_partition(settings, env, key, user_hashes, part, known, sealed),
        label="objects verified",
        size=(lambda item: sizes.get(item[0], 0)) if sizes is not None else None,
    )


def located_sealed_ids(s3: Any, prefix: S3Uri, report: Report) -> SealedIdsRef | None:
    """Where the request's ids are sealed for executors, as its starter wrote them (launch.write_sealed_ids): its
    location and ETag only, which task closures carry; this driver never reads the document. Without one (a starter
    that held no ids, or from before them) executors hash every id they read. Logs counts only."""
    try:
        sealed = executor_ids.locate(s3, layout.executor_ids(prefix), report.request_id)
    except Exception as exc:  # refused, unreachable: the executors hash, the purge goes on
        log.warning("sealed ids not located", extra={"request_id": report.request_id, "error": type(exc).__name__})
        sealed = None
    if sealed is None:
        log.info(
            "no sealed ids for this request's executors: they hash every id they read",
            extra={"request_id": report.request_id, "user_hashes": len(report.user_hashes)},
        )
    return sealed


def delete_sealed_ids(s3: Any, prefix: S3Uri, request_id: str) -> None:
    """Delete every version of the request's sealed ids once its executors are done. A failure to delete is logged,
    never a failed purge: ending the request deletes them again (workflow.store.RequestStore.shred), and the reports
    bucket's lifecycle rule (ResultRetentionDays) removes what a driver killed before this left."""
    try:
        deleted = executor_ids.delete(s3, layout.executor_ids(prefix))
    except Exception as exc:
        log.warning("sealed ids not deleted", extra={"request_id": request_id, "error": type(exc).__name__})
        return
    if deleted:
        log.info("sealed ids deleted", extra={"request_id": request_id, "versions": deleted})


def in_process_ids(spark: Any, requested: Sequence[str]) -> tuple[str, ...]:
    """The raw ids the purge's own work may hold: those its caller holds when the work runs in this process, none
    when it runs on Spark. Task closures carry no raw id: they are serialized, may be broadcast and spilled to an
    executor's disk, and a failed task's error travels to the driver's log; raw ids in them would be personal data in
    places lakepurge does not control. Executors open the ids sealed for them instead (located_sealed_ids)."""
    return tuple(requested) if spark is None else ()
