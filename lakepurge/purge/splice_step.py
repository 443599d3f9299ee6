"""One object's erasure by server-side splice: the purge engine's step for an object of at least
`purge.splice.min_bytes` (docs/ARCHITECTURE.md, "Server-side splice").

1. Where the records start: the record map the index holds for this very version, or, without one (indexed before
   maps were kept, or changed since it was indexed), a full read of the version by the indexer's own reader, which
   also finds the users' lines in it (the proof then rests on this purge's read, not on the index).
2. The windows holding the target lines (Parquet: the row groups holding the target rows) are fetched, rewritten and
   read for the users; a user found in a window outside the lines the index named means the index missed records of
   this version: it is read whole and spliced again, as a whole rewrite does.
3. The new object is written as one multipart upload, conditional on the version read, the untouched ranges copied
   from that pinned version (lakepurge.purge.spliced_write).
4. The index moves to the new version without reading it: the erased lines' rows go (dropped rows shift the ones after
   them), and the new version's record map is the old one moved by what each window gained or lost.

NotWorthSplicing at any point before the write sends the object to the whole rewrite.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import replace
from typing import TYPE_CHECKING

from lakepurge.core.logs import get_logger, object_ref
from lakepurge.core.s3io import ObjectHead
from lakepurge.index.base import NewVersion, ObjectIndex, UnindexableLine
from lakepurge.indexing.indexer import index_object, keep_record_maps
from lakepurge.purge.engine import ObjectOutcome, OutputNotClean, find_user_lines, still_holding
from lakepurge.purge.parquet_groups import ParquetSpliced, splice_parquet
from lakepurge.purge.s3write import Written, preserved_attributes
from lakepurge.purge.server_splice import Spliced, splice_lines
from lakepurge.purge.spliced_write import NotWorthSplicing, plan_parts, write_spliced
from lakepurge.purge.streams import Staged
from lakepurge.records.record_map import RecordMap

if TYPE_CHECKING:
    from lakepurge.purge.engine import _PurgeStep

log = get_logger()

# DynamoDB keeps an object's first 100 unindexable lines (docs/ARCHITECTURE.md): an index entry read back with that
# many may be short of some, so a shifted copy of it would lose them; such an object is indexed by reading it.
_UNINDEXABLE_KEPT = 100


def spliceable(step: _PurgeStep, head: ObjectHead) -> bool:
    dataset = step.dataset
    return head.size >= step.settings.purge.splice.min_bytes and dataset.format in ("jsonl", "csv", "parquet")


class SpliceStep:
    """The splice of one object version (see the module docstring). run() returns what was written, or None when
    the version holds none of the users' records after all."""

    def __init__(
        self, step: _PurgeStep, head: ObjectHead, lines: list[int], outcome: ObjectOutcome, scanned: ObjectIndex | None
    ) -> None:
        self.step = step
        self.head = head
        self.lines = lines
        self.outcome = outcome
        self.scanned = scanned  # this purge's full read of the version, when it made one
        self.basis = "index" if scanned is None else "read"
        self.record_map: RecordMap | None = None

    def run(self) -> Written | None:
        spliced = self._spliced()
        try:
            if spliced.holding:
                raise OutputNotClean(f"the rewritten windows still hold {len(spliced.holding)} of the users' records")
            if not spliced.erased:
                return None
            plan_parts(spliced.segments)  # NotWorthSplicing now, before any intent is recorded
            return self._write(spliced)
        finally:
            spliced.close()

    def _spliced(self) -> Spliced | ParquetSpliced:
        spliced = self._splice()
        if spliced.holding and self.basis == "index":
            # The index named some of the users' records in this version but not all: read it whole, splice again.
            log.warning(
                "the index missed records in an object; re-reading it",
                extra={"object": object_ref(self.head.s3path, self.step.dataset)},
            )
            spliced.close()
            self._read_whole()
            spliced = self._splice()
        return spliced

    def _splice(self) -> Spliced | ParquetSpliced:
        step, head = self.step, self.head
        holding = self._holding
        if step.dataset.format == "parquet":
            return splice_parquet(step.s3, head, step.dataset, self.lines, step.users, holding)
        if self.record_map is None:
            self.record_map = self._stored_map()
        if self.record_map is None:
            self._read_whole()
        assert self.record_map is not None
        if len(self.record_map.offsets) < 2:
            raise NotWorthSplicing("one window holds the whole object (a gzip stream of one member)")
        return splice_lines(
            step.s3, head, step.dataset, step.settings, self.record_map, self.lines, step.users, holding
        )

    def _holding(self, staged: Staged, key: str) -> list[int]:
        step = self.step
        return still_holding(staged, key, step.dataset, step.settings.indexing, step.users)

    def _stored_map(self) -> RecordMap | None:
        if self.scanned is not None and self.scanned.record_map is not None:
            found = RecordMap.decode(self.scanned.record_map)
        else:
            blob = self.step.store.record_map(self.head.s3path)
            found = RecordMap.decode(blob) if blob is not None else None
        return found if found is not None and found.describes(self.head.etag, self.head.version_id) else None

    def _read_whole(self) -> None:
        """This purge's own read of the version: the users' lines in it and where its records start."""
        step = self.step
        self.scanned, self.lines = find_user_lines(step.s3, step.settings, step.dataset, self.head, step.users)
        self.basis = "read"
        if step.dataset.format != "parquet":
            self.record_map = self._stored_map()
            if self.record_map is None:
                raise NotWorthSplicing("no record map could be made")

    def _write(self, spliced: Spliced | ParquetSpliced) -> Written:
        step, head, outcome = self.step, self.head, self.outcome
        outcome.erased_lines = list(spliced.erased)
        outcome.lines_erased = len(spliced.erased)
        if isinstance(spliced, Spliced):
            outcome.index_lines_not_matching = spliced.not_matching
            if step.dataset.erase != "drop":
                outcome.placeholder_spans = [(line, spliced.lines_of.get(line, 1)) for line in spliced.erased]
        attributes = preserved_attributes(step.s3, head)
        # The checksum of a spliced object is known once its copied parts are (lakepurge.purge.spliced_write): the
        # intent records none, so a rerun takes the write as done by the version it finds, as for older intents.
        step.before_write(replace(outcome, status="erased", committed=False))
        written, stats = write_spliced(step.s3, head, spliced.segments, attributes)
        step.written = True
        outcome.after_checksum = written.checksum
        outcome.splice = {
            "verify": step.settings.purge.splice.verify,
            # What says the copied ranges hold none of the users: the index ("index", the report's coverage must be
            # complete) or this purge's own read of the version ("read").
            "basis": self.basis,
            "windows": spliced.windows,
            "read_bytes": spliced.read_bytes + stats.read_bytes,
            **{k: v for k, v in stats.as_dict().items() if k != "read_bytes"},
        }
        self._reindex(written, spliced)
        return written

    def _reindex(self, written: Written, spliced: Spliced | ParquetSpliced) -> None:
        """The index at the new version, without reading it (see the module docstring)."""
        step, head, outcome = self.step, self.head, self.outcome
        store, s3path = step.store, head.s3path
        new_map = None
        if self.record_map is not None and isinstance(spliced, Spliced):
            size = sum(segment.size for segment in spliced.segments)
            new_map = self.record_map.shifted(written.etag, written.version_id, size, spliced.moves).encode()
        version = NewVersion(written.etag, written.version_id, head.last_modified)
        drop = step.dataset.erase == "drop"
        # Blanked lines keep every number; dropped Parquet rows (one row each) move the later ones up, which the
        # index does in place (PostgreSQL: on the server) instead of reading the object's rows and writing them back.
        in_place = not drop or isinstance(spliced, ParquetSpliced)
        erased = outcome.erased_lines
        if in_place and self.scanned is None and store.apply_erasure(s3path, head.etag, version, erased, drop):
            self._keep_map(s3path, new_map)
            return
        base = self.scanned if self.scanned is not None else store.get_object(s3path)
        if base is None or base.etag != head.etag or len(base.unindexable) >= _UNINDEXABLE_KEPT:
            index_object(step.s3, store, step.settings, step.uri.bucket, step.uri.key, force=True)
            return
        removed = {line: 1 for line in outcome.erased_lines}
        if isinstance(spliced, Spliced):
            removed = {line: spliced.lines_of.get(line, 1) for line in outcome.erased_lines}
        new = _moved(base, version, removed if drop else {}, outcome.erased_lines)
        store.replace_objects([new], force=True)
        self._keep_map(s3path, new_map)

    def _keep_map(self, s3path: str, blob: bytes | None) -> None:
        keep_record_maps(self.step.store, [(s3path, blob)])


def _moved(base: ObjectIndex, version: NewVersion, removed: dict[int, int], erased: list[int]) -> ObjectIndex:
    """The index entry of the version written from `base`: the erased records' rows gone, and, where records were
    removed (removed: first line -> physical lines), every later line moved up by the lines removed before it."""
    gone = set(erased)
    firsts = sorted(removed)
    before = list(itertools.accumulate(removed[first] for first in firsts))  # lines removed up to each cut

    def moved(line: int) -> int:
        cut = bisect.bisect_left(firsts, line)
        return line - (before[cut - 1] if cut else 0)

    rows = {
        user: [moved(n) for n in lines if n not in gone]
        for user, lines in base.lines_by_user.items()
        if any(n not in gone for n in lines)
    }
    unindexable = [UnindexableLine(moved(u.line) if u.line >= 0 else u.line, u.reason) for u in base.unindexable]
    return ObjectIndex(
        s3path=base.s3path,
        dataset=base.dataset,
        etag=version.etag,
        version_id=version.version_id,
        last_modified=version.last_modified,
        lines_by_user=rows,
        records=max(base.records - len(gone), 0),
        unindexable=unindexable,
        returning_users=base.returning_users,
    )
