"""The purge engine: erase the requested users' records from one object, exactly and completely.

For each object named by the report:

1. Read the current head. If the object is still the version the index saw, the indexed line numbers are used;
   otherwise (overwritten since indexing, lines may have shifted) the user's lines are found again in the
   current version. Either way every line is checked to hold one of the users before it is erased: a stale
   index never erases another person's record.
2. Rewrite (`blank`: the lines become `{}`, every other byte identical; `drop`: the records are removed;
   `delete-object`: the object goes), conditional on the version read; on a conflict, start again from 1.
3. Update the index for the new version, and delete the noncurrent versions that still hold the users' data.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Collection, Container, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any, Literal

import orjson
from botocore.exceptions import ClientError, FlexibleChecksumError

from lakepurge.core.config import DatasetConfig, IndexingConfig, Settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.s3io import (
    ObjectChanged,
    ObjectHead,
    error_code,
    ever_versioned,
    get_current,
    head_object,
    head_version,
    listed_head,
    noncurrent_versions,
    object_versions,
    open_body,
    open_seekable,
    transient,
)
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import WHOLE_OBJECT, IndexStore, NewVersion, ObjectIndex
from lakepurge.indexing.indexer import index_object, scan_object
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl, rewrite_parquet
from lakepurge.purge.s3write import WriteConflict, Written, delete_in_place, preserved_attributes, write_in_place
from lakepurge.purge.spliced_write import NotWorthSplicing
from lakepurge.purge.streams import Staged, tie_to_member
from lakepurge.records.ids import IdKeys, extract_ids, parse_paths, parse_record
from lakepurge.records.lines import InflationLimitExceeded
from lakepurge.records.search import lines_holding

log = get_logger()

Status = Literal["erased", "deleted", "versions-deleted", "nothing-to-erase", "gone", "failed"]


@dataclass(frozen=True, slots=True)
class PurgeTarget:
    """One object of a report: what the index said, at which version."""

    s3path: str
    dataset: str
    etag: str
    lines: tuple[int, ...]
    # Only noncurrent versions hold the users (the object was overwritten or deleted since): the current version,
    # if any, is left alone and every noncurrent version holding them is deleted. version_ids: those the index named.
    versions_only: bool = False
    version_ids: tuple[str, ...] = ()


@dataclass(slots=True)
class ObjectOutcome:
    s3path: str
    status: Status
    before_etag: str | None = None
    before_version: str | None = None
    after_etag: str | None = None
    after_version: str | None = None
    lines_erased: int = 0
    stale_index: bool = False
    index_lines_not_matching: int = 0  # lines the index named that did not hold any of the users
    noncurrent_versions_deleted: int = 0
    error: str = ""
    erased_lines: list[int] = field(default_factory=list)
    deleted_versions: list[str] = field(default_factory=list)  # ids of the noncurrent versions deleted
    sidecar_versions_deleted: list[str] = field(default_factory=list)  # versions of the sidecar naming the user
    # The proof verification reads instead of the lake (docs/ARCHITECTURE.md, "Verification by checksum"): the
    # CRC64NVME of the bytes written, verified before the write to hold none of the users, and the noncurrent
    # versions this purge read and found holding none of them (a version's bytes never change).
    after_checksum: str = ""
    clean_versions: list[str] = field(default_factory=list)
    # The write's ETag is the MD5 of the bytes S3 received (s3write.Written.etag_is_md5): in a bucket without
    # versioning, a listing that names it for the key proves the object is still that write (purge.listed_proof).
    after_etag_md5: bool = False
    # S3 stated after_checksum back for after_version (s3write.Written.checksum_stated): in a versioned bucket, a
    # listing naming that version as the current one proves it without a HEAD.
    after_checksum_stated: bool = False
    # False while the outcome is only an intent: recorded just before the write, so a run killed between the write
    # and its record can tell, when started again, that the erasure it finds done was its own.
    committed: bool = True
    # A blanking write's placeholders (first line, number of lines): what the vacuum may remove later and nothing
    # else, recorded by the job with the outcomes (lakepurge.purge.placeholders.recorded_from). None: no record.
    placeholder_spans: list[tuple[int, int]] | None = None
    # A spliced object (lakepurge.purge.splice_step): what was read, sent and copied, and what proves its copied
    # ranges (verify, basis). None: rewritten whole.
    splice: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The outcome as plain data (what the executors return and the results hold): dataclasses.asdict's
        result, without its deep copy of every field, which cost a purge more than half a millisecond an object.
        Its lists hold only immutable values, so copying each list is enough."""
        values = ((name, getattr(self, name)) for name in self.__slots__)
        return {name: list(value) if type(value) is list else value for name, value in values}


BeforeWrite = Callable[[ObjectOutcome], None]
# Announces an intent without waiting for it to be recorded; what it returns waits (job.IntentJournal.announce).
Announce = Callable[[ObjectOutcome], Callable[[], None]]


class OutputNotClean(Exception):
    """The bytes produced for an object still hold some of the users' records: nothing is written."""


def still_holding(
    staged: Staged, key: str, dataset: DatasetConfig, indexing: IndexingConfig, users: Container[str]
) -> list[int]:
    """The lines of produced bytes that hold one of the users, read with the indexer's grammar.

    A gzip member is read as the plaintext its deflater was fed, when the rewrite kept it (Staged.plaintext, up to
    IN_MEMORY_BYTES), tied to the member by its trailer's CRC-32 and size (tie_to_member: NotTheCheckedBytes when
    they differ): no second inflate. Past that size the member is inflated as it will be written."""
    assert dataset.id_fields is not None
    source: IO[bytes]
    plaintext = staged.plaintext
    if plaintext is not None and plaintext.kept:
        checked = plaintext.joined()
        plaintext.release()  # (not held through the write: the check's is the last read of it)
        tie_to_member(staged, checked)
        source, read_as = io.BytesIO(checked), key.removesuffix(".gz")
    else:
        source, read_as = staged.reader(), key
    each_contained = getattr(users, "each_contained", None)
    wanted = each_contained or (lambda ids: [user in users for user in ids])
    none_of = getattr(users, "none_of", None)
    limits = indexing.max_record_bytes, indexing.inflation
    fields = dataset.id_fields
    rules = id_rules(dataset)
    known = _raw_ids(users)
    return lines_holding(source, read_as, dataset.format, fields, *limits, wanted, none_of, rules, known)


def _raw_ids(users: Container[str]) -> Collection[str] | None:
    """The users' raw ids when this process holds them all (a set of ids; HashedUsers given every user's id, as an
    inline purge gives it), else None (a Spark executor holds only their keyed hashes)."""
    if isinstance(users, (set, frozenset)):
        return users
    held = getattr(users, "ids_held", None)
    return held() if held is not None else None


def find_user_lines(
    s3: Any, settings: Settings, dataset: DatasetConfig, head: ObjectHead, users: Container[str]
) -> tuple[ObjectIndex, list[int]]:
    """Scan one object version: its full index, and the lines holding any of the users."""
    scanned = scan_object(s3, settings, dataset, head)
    lines = sorted({line for user, found in scanned.lines_by_user.items() if user in users for line in found})
    return scanned, lines


def purge_object(
    s3: Any,
    store: IndexStore,
    settings: Settings,
    target: PurgeTarget,
    users: Container[str],
    attempts: int = 5,
    before_write: BeforeWrite | None = None,
    versioned: bool | None = None,
    announce: Announce | None = None,
    mapped: bool | None = None,
) -> ObjectOutcome:
    """Erase the users' records from one object (see the module docstring); never raises for a bad object:
    a failure is returned as a failed outcome naming the error class. before_write is given the intended outcome
    (committed=False) just before the object is rewritten or deleted; announce, if given, is given a rewrite's
    intent as soon as its bytes are produced (what it returns is called before the write). versioned says whether
    the bucket has ever had versioning (a job asks once per bucket); None asks S3. mapped says whether the index
    holds a record map for the object (a job asks once for all its objects: IndexStore.with_record_maps); None asks
    the index."""
    dataset = settings.dataset_named(target.dataset)
    uri = S3Uri.parse(target.s3path)
    ref = object_ref(target.s3path, dataset)
    step: _PurgeStep | None = None
    try:
        for _ in range(attempts):
            try:
                if versioned is None:
                    versioned = ever_versioned(s3, uri.bucket)
                step = _PurgeStep(
                    s3, store, settings, dataset, uri, users, before_write or _nothing, versioned, announce, mapped
                )
                return step.run(target)
            except (WriteConflict, ObjectChanged):
                log.info("object changed during purge; reading it again", extra={"object": ref})
        return ObjectOutcome(target.s3path, "failed", error="kept changing under concurrent writes")
    except Exception as exc:  # reported per object; the job fails the request if any object failed
        log.exception("purge of an object failed", extra={"object": ref, "error": type(exc).__name__})
        # A bomb's reason names the limit, never content: it tells the operator why the object was refused.
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, InflationLimitExceeded) else type(exc).__name__
        return _failed(target, step, reason)


def _failed(target: PurgeTarget, step: _PurgeStep | None, reason: str) -> ObjectOutcome:
    """A failed object's outcome, with what was erased before the failure (the rewrite or delete, if it happened,
    and the versions deleted): the certificate states it, though the object failed."""
    failed = ObjectOutcome(target.s3path, "failed", error=reason)
    if step is None or step.outcome is None:
        return failed
    done = step.outcome
    if step.written:
        failed = replace(done, status="failed", error=reason)
    failed.deleted_versions = done.deleted_versions
    failed.noncurrent_versions_deleted = len(done.deleted_versions)
    failed.sidecar_versions_deleted = done.sidecar_versions_deleted
    return failed


@dataclass
class _PurgeStep:
    """One attempt at one object (a write conflict starts a new attempt from the new version)."""

    s3: Any
    store: IndexStore
    settings: Settings
    dataset: DatasetConfig
    uri: S3Uri
    users: Container[str]
    before_write: BeforeWrite
    versioned: bool
    announce: Announce | None = None
    mapped: bool | None = None  # the index holds a record map for the object (None: ask it)
    spans: dict[int, int] = field(default_factory=dict)  # physical lines of each blanked record spanning several
    outcome: ObjectOutcome | None = None  # the outcome so far (what a failure after a write still reports)
    written: bool = False  # the object was rewritten or deleted

    def run(self, target: PurgeTarget) -> ObjectOutcome:
        if target.versions_only:
            outcome = self.outcome = ObjectOutcome(target.s3path, "nothing-to-erase")
            self._delete_noncurrent(None, outcome, target.version_ids)
            if outcome.deleted_versions:
                outcome.status = "versions-deleted"
            return outcome
        # Line-based objects are read with one GET whose response is also the head (ETag, attributes, tag
        # count); Parquet needs ranged reads, owned objects no body, and an object the index mapped for a splice
        # only its windows, so those start from a HEAD.
        body: IO[bytes] | None = None
        if self.dataset.format == "parquet" or self.dataset.erase == "delete-object" or self._mapped(target.s3path):
            head = head_object(self.s3, self.uri.bucket, self.uri.key)
        else:
            current = get_current(self.s3, self.uri.bucket, self.uri.key)
            head, body = current if current is not None else (None, None)
        try:
            return self._erase(target, head, body)
        finally:
            if body is not None:
                body.close()

    def _mapped(self, s3path: str) -> bool:
        return self.mapped if self.mapped is not None else self.store.record_map(s3path) is not None

    def _erase(self, target: PurgeTarget, head: ObjectHead | None, body: IO[bytes] | None) -> ObjectOutcome:
        s3, store, dataset, users = self.s3, self.store, self.dataset, self.users
        if head is None:
            store.remove_object(target.s3path)
            outcome = self.outcome = ObjectOutcome(target.s3path, "gone")
            self._delete_noncurrent(None, outcome, target.version_ids)
            self._delete_sidecar(outcome)
            return outcome
        outcome = self.outcome = ObjectOutcome(target.s3path, "nothing-to-erase", head.etag, head.version_id)
        stale = outcome.stale_index = head.etag != target.etag
        if dataset.erase == "delete-object":
            _, lines = find_user_lines(s3, self.settings, dataset, head, users)  # the owner, checked now
            if lines:
                outcome.status = "deleted"
                outcome.lines_erased = 1
                outcome.erased_lines = [WHOLE_OBJECT]
                self.before_write(replace(outcome, committed=False))
                delete_in_place(s3, head)
                self.written = True
                store.remove_object(target.s3path)
                # The data versions first: a noncurrent one's owner is read from the sidecar, which goes last.
                self._delete_noncurrent(None, outcome, target.version_ids)
                self._delete_sidecar(outcome)
            else:
                index_object(s3, store, self.settings, self.uri.bucket, self.uri.key)
            return outcome

        scanned = None
        if stale:
            scanned, lines = find_user_lines(s3, self.settings, dataset, head, users)
            if body is not None:
                body.close()  # read past by the rescan's own GET: read this version afresh
                body = None
        else:
            lines = sorted(set(target.lines))
        written, spliced = None, False
        if lines and _splice().spliceable(self, head):
            if body is not None:
                body.close()  # its bytes are not read: only the windows that change are
                body = None
            written, spliced = self._spliced(head, lines, outcome, scanned)
        if not spliced:
            written = self._rewrite(head, body, lines, outcome) if lines else None
        if written is None:
            # Nothing of the users' is in the current version (already erased, or a stale index): re-index it so
            # the index stops naming them here.
            index_object(s3, store, self.settings, self.uri.bucket, self.uri.key)
        else:
            outcome.status = "erased"
            outcome.after_etag, outcome.after_version = written.etag, written.version_id
            self.written = True
            if not spliced:  # a splice moved the index itself
                self._reindex_written(head, written, outcome, stale)
        # The version just rewritten held the users (its erased records were checked to be theirs): deleted unread.
        holding = head.version_id if written is not None else None
        self._delete_noncurrent(written, outcome, target.version_ids, holding)
        return outcome

    def _spliced(
        self, head: ObjectHead, lines: list[int], outcome: ObjectOutcome, scanned: ObjectIndex | None
    ) -> tuple[Written | None, bool]:
        """A large object erased by server-side splice (lakepurge.purge.splice_step): what was written, and whether
        it was spliced (False: rewrite it whole)."""
        try:
            return _splice().SpliceStep(self, head, lines, outcome, scanned).run(), True
        except NotWorthSplicing as exc:
            log.info("object rewritten whole", extra={"object": object_ref(head.s3path, self.dataset), "why": str(exc)})
            return None, False

    def _rewrite(
        self, head: ObjectHead, body: IO[bytes] | None, lines: list[int], outcome: ObjectOutcome
    ) -> Written | None:
        staged, erased = self._produce(head, body, lines, outcome)
        try:
            recorded = self._intend(staged, outcome) if erased else _nothing_to_wait
            left = self._still_holding(staged, head.key) if erased else []
            if left and not outcome.stale_index:
                # The index named some of the users' records in this version but not all: find every one in it
                # (a full read) and produce the object again.
                staged.close()
                log.warning(
                    "the index missed records in an object; re-reading it",
                    extra={"object": object_ref(head.s3path, self.dataset)},
                )
                _, lines = find_user_lines(self.s3, self.settings, self.dataset, head, self.users)
                staged, erased = self._produce(head, None, lines, outcome)
                recorded = self._intend(staged, outcome) if erased else _nothing_to_wait
                left = self._still_holding(staged, head.key) if erased else []
            if left:
                raise OutputNotClean(f"the rewritten bytes still hold {len(left)} of the users' records")
            if not erased:
                return None
            attributes = preserved_attributes(self.s3, head)
            recorded()
            written = write_in_place(self.s3, head, staged, attributes)
        finally:
            staged.close()
        outcome.after_checksum = written.checksum
        outcome.after_etag_md5 = written.etag_is_md5
        outcome.after_checksum_stated = written.checksum_stated
        return written

    def _intend(self, staged: Staged, outcome: ObjectOutcome) -> Callable[[], None]:
        """Record the intent to write the produced bytes; returns what waits until it is recorded. Announced before
        the check of the bytes, so the two overlap: an intent whose bytes the check then refuses names a checksum no
        version will have, and a rerun takes nothing from it (job._found_its_write)."""
        if self.dataset.erase != "drop":
            outcome.placeholder_spans = [(line, self.spans.get(line, 1)) for line in outcome.erased_lines]
        intent = replace(outcome, status="erased", committed=False, after_checksum=staged.checksum)
        if self.announce is not None:
            return self.announce(intent)
        self.before_write(intent)
        return _nothing_to_wait

    def _produce(
        self, head: ObjectHead, body: IO[bytes] | None, lines: list[int], outcome: ObjectOutcome
    ) -> tuple[Staged, int]:
        """The object's bytes with the named records of the users erased, and how many were."""
        s3, dataset = self.s3, self.dataset
        if dataset.format == "parquet":
            staged, rows = rewrite_parquet(open_seekable(s3, head), lines, self.users, dataset)
            outcome.lines_erased = len(rows)
            return staged, len(rows)
        if body is None:
            body = open_body(s3, head)
        owner = Ownership(dataset, self.users, id_rules(dataset))
        gz = head.key.endswith(".gz")
        drop = dataset.erase == "drop"
        indexing = self.settings.indexing
        try:
            if dataset.format == "jsonl":
                staged = rewrite_jsonl(body, gz, lines, owner, drop, indexing.inflation)
            else:
                staged = rewrite_csv(body, gz, lines, owner, drop, indexing.max_record_bytes, indexing.inflation)
        finally:
            body.close()
        outcome.index_lines_not_matching = owner.not_matching
        outcome.lines_erased = len(owner.erased)
        outcome.erased_lines = owner.erased
        self.spans = owner.lines_of
        return staged, len(owner.erased)

    def _still_holding(self, staged: Staged, key: str) -> list[int]:
        """Verification of the bytes produced, before they are written: the lines of the rewritten object that still
        hold one of the users, read with the indexer's own grammar (what a re-read of the written object would
        find; the checksum then binds what S3 stores to these bytes)."""
        return still_holding(staged, key, self.dataset, self.settings.indexing, self.users)

    def _reindex_written(self, before: ObjectHead, written: Written, outcome: ObjectOutcome, stale: bool) -> None:
        """Index the version just written, in the step that confirms the write.

        A blanked object keeps every line number: the index moves to the new version and loses only the erased
        lines' rows. Dropped rows shift line numbers, and a stale index has nothing to subtract from: those
        re-scan.
        """
        if not stale and self.dataset.erase == "blank":
            # The new version's LastModified is not in the PUT response. The read version's is a lower bound of it,
            # and no more: S3 reports whole seconds, so a later version written in the same second as the read one
            # has the same LastModified, and must still win the index's ordering (a bound 1 µs above it refused that
            # version's event and even a forced re-index: its rows were never indexed). The event of our own write
            # is skipped by its ETag. No HEAD needed.
            version = NewVersion(written.etag, written.version_id, before.last_modified)
            if self.store.apply_erasure(outcome.s3path, before.etag, version, outcome.erased_lines):
                return
        index_object(self.s3, self.store, self.settings, self.uri.bucket, self.uri.key, force=True)

    def _delete_sidecar(self, outcome: ObjectOutcome) -> None:
        """A one-user object's sidecar names its owner: every version of it that names one of the users goes with the
        object (deleted by version id, so no version of it stays behind a delete marker)."""
        for version in sidecar_versions_naming(self.s3, self.dataset, self.uri, self.users):
            if self.versioned and version.version_id:
                self.s3.delete_object(Bucket=version.bucket, Key=version.key, VersionId=version.version_id)
            else:
                self.s3.delete_object(Bucket=version.bucket, Key=version.key)
            outcome.sidecar_versions_deleted.append(version.version_id or "null")

    def _delete_noncurrent(
        self, written: Written | None, outcome: ObjectOutcome, named: Sequence[str] = (), holding: str | None = None
    ) -> None:
        """Delete the noncurrent versions that still hold any of the users' records (every one of the key, not only
        those the index named); other versions stay. The index forgets the deleted versions, and those it named
        that no longer exist (expired by a lifecycle rule, deleted by someone else). `holding`: a version known to
        hold them (the one this purge rewrote), deleted without being read again."""
        if not self.versioned:
            return
        listed = set()
        for version in list(noncurrent_versions(self.s3, self.uri)):
            listed.add(version.version_id)
            if written is not None and version.version_id == written.version_id:
                continue
            if not self.settings.purge.delete_noncurrent_versions:
                continue  # left to a lifecycle rule: verification reports them, the request is not certified
            try:
                holds = version.version_id == holding or self._holds_users(version)
            except ObjectChanged:
                continue  # deleted since listed
            if not holds:
                outcome.clean_versions.append(str(version.version_id))
            else:
                # Recorded first: a run killed right after the delete still lists the version on its rerun.
                intent = [*outcome.deleted_versions, str(version.version_id)]
                self.before_write(replace(outcome, committed=False, deleted_versions=intent))
                self.s3.delete_object(Bucket=self.uri.bucket, Key=self.uri.key, VersionId=version.version_id)
                outcome.deleted_versions.append(str(version.version_id))
        outcome.noncurrent_versions_deleted = len(outcome.deleted_versions)
        forget = [*outcome.deleted_versions, *(v for v in named if v not in listed)]
        if forget:
            self.store.forget_noncurrent(outcome.s3path, forget)

    def _holds_users(self, version: ObjectHead) -> bool:
        return bool(find_user_lines(self.s3, self.settings, self.dataset, version, self.users)[1])


def _splice() -> Any:
    """lakepurge.purge.splice_step, imported when first needed: it builds on this module."""
    from lakepurge.purge import splice_step

    return splice_step


def _nothing(outcome: ObjectOutcome) -> None:
    return None


def _nothing_to_wait() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Remaining:
    """A version of an object that still holds some of the users' records after a purge, or that could not be read
    to tell (reason says why)."""

    s3path: str
    version_id: str | None
    lines: int
    reason: str = ""


UNREADABLE = "its bytes do not match the checksum S3 states for them: it cannot be verified"

# Verification reads an object again after a transient error (throttling, a server error, a dropped connection, a
# body cut short) this many times in all, waiting VERIFY_BACKOFF seconds, then twice as long each time.
VERIFY_ATTEMPTS = 4
VERIFY_BACKOFF = 0.5


def verify_object(
    s3: Any,
    settings: Settings,
    dataset: DatasetConfig,
    s3path: str,
    users: Container[str],
    proof: ObjectOutcome | None = None,
    versioned: bool = True,
) -> list[Remaining]:
    """Every version of the object still present, current and noncurrent, and the sidecar's: those holding a user.

    Without a proof each version is read. With the purge's outcome as proof, a version is not read again when the
    purge already established it holds none of the users: the version it wrote, if S3 still answers for it the
    checksum of the bytes verified before the write, and the noncurrent versions it read clean. Any other version
    (a concurrent writer's, one the purge never read, a checksum that differs) is read in full. versioned=False (the
    bucket never had versioning: lakepurge.core.s3io.ever_versioned) skips listing the versions it cannot have.

    An object that still cannot be read after VERIFY_ATTEMPTS (or meets an error that is not transient) is one
    Remaining whose reason names the error: the request is not certified, and the run still ends in its
    certificate of what was erased."""
    attempt = 1
    while True:
        try:
            return _verify_versions(s3, settings, dataset, s3path, users, proof, versioned)
        except Exception as exc:  # any error leaves the object unverified, never the run unfinished
            error = (error_code(exc) or "ClientError") if isinstance(exc, ClientError) else type(exc).__name__
            problem = {"object": object_ref(s3path, dataset), "error": error}
            if not transient(exc) or attempt == VERIFY_ATTEMPTS:
                log.warning("verification could not read an object", extra=problem)
                return [
                    Remaining(s3path, None, 0, f"it could not be read ({error}, {attempt} attempt(s)): not verified")
                ]
            log.warning("verification could not read an object; reading it again", extra=problem)
            time.sleep(VERIFY_BACKOFF * 2 ** (attempt - 1))
            attempt += 1


def _verify_versions(
    s3: Any,
    settings: Settings,
    dataset: DatasetConfig,
    s3path: str,
    users: Container[str],
    proof: ObjectOutcome | None,
    versioned: bool,
) -> list[Remaining]:
    uri = S3Uri.parse(s3path)
    proven = proof is not None and bool(proof.after_checksum)
    # Every noncurrent version too, whether or not the purge deletes them: a version left to a lifecycle rule still
    # holds the data, and "verified" means nothing of the users is left. A bucket that never had versioning has none.
    listed = [v for v in object_versions(s3, uri.bucket, uri.key) if v["Key"] == uri.key] if versioned else []
    latest = next((v for v in listed if v["IsLatest"]), None)
    heads = [listed_head(uri, v) for v in listed if not v["IsLatest"]]
    if latest is None or proof is None or not _the_stated_write(latest, proof):
        # The current version asked on its own (its checksum with it), and the one listed as current, if another.
        current = head_object(s3, uri.bucket, uri.key, checksum=proven)
        asked = [current] if current is not None else []
        if latest is not None and latest["VersionId"] not in [h.version_id for h in asked]:
            asked.append(listed_head(uri, latest))  # replaced between the listing and the HEAD: both are checked
        heads = asked + heads
    remaining = []
    for head in heads:
        if proof is not None and _proven_clean(s3, dataset, head, proof):
            continue
        try:
            _, lines = find_user_lines(s3, settings, dataset, head, users)
        except ObjectChanged:
            continue  # replaced or deleted between listing and reading: the new state is read on its own
        except FlexibleChecksumError:
            # The bytes S3 returns do not match the checksum it states: nothing can be said of this version.
            remaining.append(Remaining(s3path, head.version_id, 0, UNREADABLE))
            continue
        if lines:
            remaining.append(Remaining(s3path, head.version_id, len(lines)))
    for sidecar in sidecar_versions_naming(s3, dataset, uri, users):
        remaining.append(Remaining(sidecar.s3path, sidecar.version_id, 1))
    return remaining


def _the_stated_write(version: Any, proof: ObjectOutcome) -> bool:
    """Whether a listed version is the purge's own write whose checksum S3 stated back: a version id names one
    immutable write, whose bytes were read for the users before it and whose CRC64NVME S3 validated on receipt, so it
    is proven without a HEAD (a concurrent writer's version has another id)."""
    return (
        bool(proof.after_checksum)
        and proof.after_checksum_stated
        and proof.after_version is not None
        and version["VersionId"] == proof.after_version
        and version["ETag"] == proof.after_etag
    )


def _proven_clean(s3: Any, dataset: DatasetConfig, head: ObjectHead, proof: ObjectOutcome) -> bool:
    if head.version_id is not None and head.version_id in proof.clean_versions:
        return True
    if not proof.after_checksum or head.etag != proof.after_etag or head.version_id != proof.after_version:
        return False
    stored = head.headers.get("ChecksumCRC64NVME")
    if stored is None and head.version_id is not None:  # a noncurrent version: its HEAD, checksum included
        pinned = head_version(s3, head.bucket, head.key, head.version_id, checksum=True)
        stored = pinned.headers.get("ChecksumCRC64NVME") if pinned is not None else None
    if stored != proof.after_checksum:
        log.warning(
            "the object's stored checksum is not that of the bytes verified; reading it again",
            extra={"object": object_ref(head.s3path, dataset)},
        )
        return False
    return True


def sidecar_versions_naming(s3: Any, dataset: DatasetConfig, uri: S3Uri, users: Container[str]) -> list[ObjectHead]:
    """Every version (current and noncurrent) of the object's sidecar whose id field names one of the users."""
    if dataset.id_sidecar is None:
        return []
    key = uri.key + dataset.id_sidecar.suffix
    paths = parse_paths([dataset.id_sidecar.field])
    keys = IdKeys.of(paths)
    naming = []
    for version in object_versions(s3, uri.bucket, key):
        if version["Key"] != key:
            continue
        head = ObjectHead(uri.bucket, key, version["ETag"], version["VersionId"], version["LastModified"], 0)
        try:
            document = parse_record(s3.get_object(Bucket=uri.bucket, Key=key, **head.pinned())["Body"].read(), keys)
            ids = extract_ids(document, paths) if isinstance(document, dict) else ()
        except (orjson.JSONDecodeError, ValueError):
            ids = ()
        except ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "NoSuchVersion", "404"):
                continue  # deleted since listed
            raise
        if any(u in users for u in ids):
            naming.append(head)
    return naming
