"""Purge rules without S3: settling a killed run's outcome, rewriting CSV records, vacuuming placeholders."""

from __future__ import annotations

import gzip
import io
import operator
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakepurge.core.config import DatasetConfig
from lakepurge.purge.engine import ObjectOutcome
from lakepurge.purge.intents import IntentJournal
from lakepurge.purge.job import _settle
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl, rewrite_parquet
from lakepurge.purge.streams import LastByte
from lakepurge.purge.vacuum import PlaceholderMismatch, _is_placeholder, _placeholder_lines, _without
from lakepurge.records.formats import read_records
from lakepurge.records.ids import Record
from lakepurge.records.lines import CHUNK_BYTES

pytestmark = pytest.mark.unit

PATH = "s3://lake/reviews/a.jsonl"
MAX = 1 << 20


# -- a rerun settling what a killed run did -------------------------------------------------------------------------


def intent(**changes: object) -> ObjectOutcome:
    """What a run records just before writing: the erasure it is about to make, not yet committed."""
    fields: dict[str, object] = {
        "s3path": PATH,
        "status": "erased",
        "before_etag": '"e1"',
        "before_version": "v1",
        "lines_erased": 2,
        "erased_lines": [3, 8],
        "committed": False,
    }
    return ObjectOutcome(**(fields | changes))  # type: ignore[arg-type]


def test_given_no_earlier_run_when_settling_then_the_reruns_outcome_stands() -> None:
    outcome = ObjectOutcome(PATH, "erased", '"e1"', "v1", '"e2"', "v2", lines_erased=2)
    assert _settle(outcome, None) is outcome


def test_given_a_run_killed_after_its_write_when_the_rerun_finds_nothing_then_the_earlier_erasure_is_the_outcome():
    rerun = ObjectOutcome(PATH, "nothing-to-erase", before_etag='"e2"', before_version="v2")
    settled = _settle(rerun, intent())
    assert (settled.status, settled.committed, settled.lines_erased, settled.erased_lines) == (
        "erased",
        True,
        2,
        [3, 8],
    )
    assert (settled.before_etag, settled.after_etag, settled.after_version) == ('"e1"', '"e2"', "v2")


def test_given_a_rerun_that_finds_another_version_than_the_intents_write_when_settling_then_it_claims_no_erasure():
    # The killed run recorded its intent, but the version found now is not its write (S3 states another checksum
    # for it: a producer overwrote the object before that write could happen).
    rerun = ObjectOutcome(PATH, "nothing-to-erase", before_etag='"p2"', before_version="p2")
    settled = _settle(rerun, intent(after_checksum="crc-staged"), written=lambda _outcome, _intent: False)
    assert (settled.status, settled.lines_erased, settled.after_etag) == ("nothing-to-erase", 0, None)


def test_given_a_run_killed_after_its_write_when_the_object_is_gone_now_then_the_erasure_is_still_counted() -> None:
    settled = _settle(ObjectOutcome(PATH, "gone", before_etag=None), intent())
    assert (settled.status, settled.lines_erased, settled.after_etag) == ("erased", 2, None)


def test_given_a_run_killed_before_its_write_when_settling_then_the_reruns_own_erasure_is_the_outcome() -> None:
    rerun = ObjectOutcome(PATH, "erased", '"e1"', "v1", '"e3"', "v3", lines_erased=2, erased_lines=[3, 8])
    settled = _settle(rerun, intent())
    assert settled == rerun
    assert settled is not rerun


def test_given_a_rerun_that_failed_on_a_changed_object_when_settling_then_the_failure_is_not_hidden() -> None:
    rerun = ObjectOutcome(PATH, "failed", before_etag='"e9"', error="AccessDenied")
    settled = _settle(rerun, intent())
    assert (settled.status, settled.error, settled.lines_erased) == ("failed", "AccessDenied", 0)


def test_given_versions_deleted_by_both_runs_when_settling_then_each_is_counted_once() -> None:
    earlier = intent(deleted_versions=["v0", "va"], sidecar_versions_deleted=["s0"])
    rerun = ObjectOutcome(
        PATH, "erased", '"e1"', "v1", '"e2"', "v2", deleted_versions=["va", "vb"], sidecar_versions_deleted=["s0"]
    )
    settled = _settle(rerun, earlier)
    assert settled.deleted_versions == ["v0", "va", "vb"]
    assert settled.noncurrent_versions_deleted == 3
    assert settled.sidecar_versions_deleted == ["s0"]


def test_given_only_versions_deleted_by_the_killed_run_when_settling_then_the_status_says_versions_deleted() -> None:
    rerun = ObjectOutcome(PATH, "nothing-to-erase", before_etag='"e1"', before_version="v1")
    settled = _settle(rerun, intent(status="nothing-to-erase", lines_erased=0, deleted_versions=["v0"]))
    assert (settled.status, settled.deleted_versions, settled.noncurrent_versions_deleted) == (
        "versions-deleted",
        ["v0"],
        1,
    )


def test_given_an_outcome_with_every_field_when_turned_into_data_then_it_equals_asdict_and_owns_its_lists() -> None:
    from dataclasses import asdict

    full = ObjectOutcome(
        PATH, "erased", '"e1"', "v1", '"e2"', "v2", 3, True, 1, 2, "", [4, 5, 9], ["v0"], ["s1"], "crc", ["v9"], False,
        [(4, 1), (5, 3)],
    )  # fmt: skip
    data = full.as_dict()
    assert data == asdict(full)
    data["erased_lines"].append(99)
    assert full.erased_lines == [4, 5, 9], "the data shares a list with the outcome"


# -- intents written together (group commit) ----------------------------------------------------------------------


class SlowStore:
    """Where the journal writes its batches: each write takes a while, so threads pile up behind it."""

    def __init__(self, fail_on: int = 0) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on  # the number of the write that fails (0: none)
        self.lock = threading.Lock()

    def write(self, intents: list[ObjectOutcome]) -> None:
        time.sleep(0.02)
        with self.lock:
            self.batches.append([i.s3path for i in intents])
            if len(self.batches) == self.fail_on:
                raise ConnectionError("the store is down")


def record_from_threads(journal: IntentJournal, store: SlowStore, count: int) -> dict[str, str]:
    """Each thread records one intent; what it saw when record returned (written, or the error)."""
    seen: dict[str, str] = {}

    def one(n: int) -> None:
        path = f"s3://lake/{n}"
        try:
            journal.record(ObjectOutcome(path, "erased", committed=False))
        except ConnectionError:
            seen[path] = "failed"
            return
        with store.lock:
            seen[path] = "written" if any(path in batch for batch in store.batches) else "returned before its write"

    threads = [threading.Thread(target=one, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen


def test_given_many_threads_recording_intents_when_each_returns_then_its_intent_is_written_in_fewer_requests():
    store = SlowStore()
    seen = record_from_threads(IntentJournal(store.write), store, 24)
    assert set(seen.values()) == {"written"}
    assert sorted(p for batch in store.batches for p in batch) == sorted(seen), "an intent written twice or never"
    assert len(store.batches) < 24, "threads that arrived during a write did not share the next one"


def test_given_a_lone_thread_when_recording_then_its_intent_is_written_at_once_on_its_own():
    store = SlowStore()
    journal = IntentJournal(store.write)
    for n in range(3):
        journal.record(ObjectOutcome(f"s3://lake/{n}", "erased", committed=False))
    assert store.batches == [["s3://lake/0"], ["s3://lake/1"], ["s3://lake/2"]]


def test_given_intents_recorded_one_after_another_when_written_then_one_writer_thread_writes_them_all():
    # Starting a thread makes the announcing object's thread wait for the new one to run: the writer stays for the
    # next intent instead of being started again after each batch.
    writers: list[threading.Thread] = []
    store = SlowStore()

    def write(intents: list[ObjectOutcome]) -> None:
        writers.append(threading.current_thread())
        store.write(intents)

    journal = IntentJournal(write)
    for n in range(3):
        journal.record(ObjectOutcome(f"s3://lake/{n}", "erased", committed=False))
    assert store.batches == [["s3://lake/0"], ["s3://lake/1"], ["s3://lake/2"]]
    assert len(set(writers)) == 1, f"{len(set(writers))} writer threads started for 3 batches"


def test_given_objects_in_progress_when_the_first_reaches_its_write_then_it_waits_for_the_others_intents():
    # Four objects in progress reach their writes 10 ms apart; one more ends with nothing to write. The first waits
    # for the others (never for the whole linger): one request holds the four intents.
    store = SlowStore()
    journal = IntentJournal(store.write, linger=60)
    all_in_progress = threading.Barrier(5)

    def one(n: int) -> None:
        with journal.working():
            all_in_progress.wait()
            time.sleep(0.01 * n)
            if n < 4:
                journal.record(ObjectOutcome(f"s3://lake/{n}", "erased", committed=False))

    threads = [threading.Thread(target=one, args=(n,)) for n in range(5)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(sorted, store.batches)) == [[f"s3://lake/{n}" for n in range(4)]]
    assert time.monotonic() - started < 30, "the first waited out the linger for an object that wrote nothing"


def test_given_a_failed_write_when_recording_then_its_threads_raise_and_the_others_are_written():
    store = SlowStore(fail_on=1)
    seen = record_from_threads(IntentJournal(store.write), store, 12)
    failed = {p for p, what in seen.items() if what == "failed"}
    assert failed == set(store.batches[0]), "a thread whose intent was not written went on to write its object"
    assert {p for p, what in seen.items() if what == "written"} == set(seen) - failed


def test_given_an_announced_intent_when_its_write_is_slow_then_announce_returns_at_once_and_the_wait_after_it():
    # The object's thread checks its produced bytes while its intent is being written; it writes the object only once
    # the wait returns, and by then the intent is stored.
    store = SlowStore()
    journal = IntentJournal(store.write)
    started = time.monotonic()
    durable = journal.announce(ObjectOutcome("s3://lake/0", "erased", committed=False))
    assert time.monotonic() - started < 0.015, "announce waited for the write"
    durable()
    assert store.batches == [["s3://lake/0"]], "the wait returned before the intent was written"


def test_given_an_object_whose_intent_is_written_when_another_records_then_the_writer_does_not_linger_for_it():
    # The first object recorded its intent and is still in progress (sending its bytes): it has no intent left to
    # announce, so the second object's intent goes at once, not after the linger.
    store = SlowStore()
    journal = IntentJournal(store.write, linger=3)
    first_recorded, second_done = threading.Event(), threading.Event()

    def first() -> None:
        with journal.working():
            journal.record(ObjectOutcome("s3://lake/0", "erased", committed=False))
            first_recorded.set()
            second_done.wait(10)  # still writing its object

    thread = threading.Thread(target=first)
    thread.start()
    first_recorded.wait(10)
    started = time.monotonic()
    with journal.working():
        journal.record(ObjectOutcome("s3://lake/1", "erased", committed=False))
    waited = time.monotonic() - started
    second_done.set()
    thread.join()
    assert waited < 1, f"waited {waited:.1f} s for an object whose intent was already written"
    assert store.batches == [["s3://lake/0"], ["s3://lake/1"]]


# -- CSV rewrite ----------------------------------------------------------------------------------------------------

PROFILES = DatasetConfig(name="profiles", location="s3://lake/profiles/", format="csv", id_fields=("customer_id",))
CSV = (
    b"customer_id,name,note\n"  # 0: header
    b'alice,Alice,"two\nlines"\n'  # 1-2: one record over two lines
    b"bob,Bob,plain\n"  # 3
    b"alice,A. Martin,crlf\r\n"  # 4
    b'carol,Carol,"said ""hi"""\n'  # 5
    b"alice,again,not planned"  # 6: no final newline
)


def rewrite(raw: bytes, lines: list[int], users: set[str], gz: bool = False, drop: bool = False):
    owner = Ownership(PROFILES, users)
    out = rewrite_csv(io.BytesIO(raw), gz, lines, owner, drop, MAX).body()
    return out, owner


def test_given_planned_csv_records_when_rewriting_then_exactly_they_are_blanked_keeping_every_line_number() -> None:
    out, owner = rewrite(CSV, [1, 4], {"alice"})
    assert out == (
        b"customer_id,name,note\n"
        b",,\n"
        b"\n"
        b"bob,Bob,plain\n"
        b",,\r\n"
        b'carol,Carol,"said ""hi"""\n'
        b"alice,again,not planned"  # not in the plan: untouched (verification would find it)
    )
    assert out.count(b"\n") == CSV.count(b"\n")
    assert owner.erased == [1, 4]
    assert owner.lines_of == {1: 2}
    assert owner.not_matching == 0


def test_given_a_plan_naming_other_peoples_records_when_rewriting_then_they_are_left_byte_for_byte() -> None:
    out, owner = rewrite(CSV, [0, 2, 3, 5, 99], {"alice"})  # header, a continuation line, bob, carol, past the end
    assert out == CSV
    assert owner.erased == []
    assert owner.not_matching == 2  # bob's and carol's records were read and were not alice's


def test_given_a_gzipped_csv_when_rewriting_then_the_output_is_gzip_of_the_same_rewrite() -> None:
    plain, _ = rewrite(CSV, [1, 4], {"alice"})
    zipped, owner = rewrite(gzip.compress(CSV), [1, 4], {"alice"}, gz=True)
    assert gzip.decompress(zipped) == plain
    assert owner.erased == [1, 4]


@pytest.mark.parametrize("quoted", [False, True])
def test_given_a_gzipped_csv_of_many_mebibytes_when_rewriting_then_every_other_byte_is_kept(quoted) -> None:
    # The gzip reader returns what it has inflated at each read: reading the object takes more than one read.
    note = b'"a, note"' if quoted else b"note"
    body = b"customer_id,name,note\n" + b"".join(b"c%d,Name %d,%s\n" % (i % 97, i, note) for i in range(200_000))
    assert len(body) > 3 * CHUNK_BYTES
    zipped, owner = rewrite(gzip.compress(body), [8, 194_008], {"c7"}, gz=True)
    out = gzip.decompress(zipped)
    lines, kept = out.split(b"\n"), body.split(b"\n")
    assert len(lines) == len(kept)
    assert [n for n, (a, b) in enumerate(zip(lines, kept, strict=True)) if a != b] == [8, 194_008]
    assert owner.erased == [8, 194_008]


def test_given_drop_mode_when_rewriting_then_the_records_lines_are_removed() -> None:
    out, _ = rewrite(CSV, [1, 6], {"alice"}, drop=True)
    # The object had no final newline: neither has the rewritten one, whose last line is now carol's.
    assert out == b'customer_id,name,note\nbob,Bob,plain\nalice,A. Martin,crlf\r\ncarol,Carol,"said ""hi"""'


def test_given_an_id_column_missing_from_the_header_when_rewriting_then_nothing_is_erased() -> None:
    other = b"id,name\nalice,Alice\n"
    out, owner = rewrite(other, [1], {"alice"})
    assert out == other
    assert owner.erased == []


# -- vacuum ---------------------------------------------------------------------------------------------------------


def test_given_recorded_spans_when_listing_placeholder_lines_then_first_lines_are_marked_apart() -> None:
    assert _placeholder_lines([]) == {}
    assert _placeholder_lines([(1, 1), (4, 3)]) == {1: True, 4: True, 5: False, 6: False}


@pytest.mark.parametrize(
    ("content", "first", "csv", "expected"),
    [
        (b"{}", True, False, True),
        (b"{}\r", True, False, True),
        (b"{ }", True, False, False),
        (b'{"user_id":"bob"}', True, False, False),
        (b",,,", True, True, True),
        (b",,\r", True, True, True),
        (b"", True, True, True),  # a one-column record blanked
        (b",a,", True, True, False),
        (b"", False, True, True),
        (b"\r", False, False, True),
        (b" ", False, True, False),
        (b",", False, True, False),  # a continuation line is empty, never commas
    ],
)
def test_given_a_line_when_checking_it_against_a_recorded_placeholder_then_only_the_exact_placeholder_matches(
    content: bytes, first: bool, csv: bool, expected: bool
) -> None:
    assert _is_placeholder(content, first, csv) is expected


def vacuum(body: bytes, spans: list[tuple[int, int]], csv: bool = False) -> bytes:
    return b"".join(_without(LastByte(io.BytesIO(body)), _placeholder_lines(spans), csv, MAX))


def test_given_recorded_placeholders_when_vacuuming_then_only_they_go_and_a_real_empty_record_stays() -> None:
    body = b'{"user_id":"bob"}\n{}\n{"user_id":"carol"}\n{}\n{}\n'
    # Lines 1 and 3 are placeholders a purge wrote; line 4 is someone's real (empty) record.
    assert vacuum(body, [(1, 1), (3, 1)]) == b'{"user_id":"bob"}\n{"user_id":"carol"}\n{}\n'


def test_given_a_csv_placeholder_over_two_lines_when_vacuuming_then_both_lines_go() -> None:
    blanked, _ = rewrite(CSV, [1, 4], {"alice"})
    assert vacuum(blanked, [(1, 2), (4, 1)], csv=True) == (
        b'customer_id,name,note\nbob,Bob,plain\ncarol,Carol,"said ""hi"""\nalice,again,not planned'
    )


def test_given_a_recorded_placeholder_that_changed_when_vacuuming_then_the_object_is_refused() -> None:
    with pytest.raises(PlaceholderMismatch, match="line 1 is no longer the placeholder"):
        vacuum(b'{"a":1}\n{"user_id":"new"}\n', [(1, 1)])
    with pytest.raises(PlaceholderMismatch, match="line 2 is no longer"):
        vacuum(b"id,note\n,,\nnot empty\n", [(1, 2)], csv=True)  # the span's continuation line holds data


def test_given_a_recorded_placeholder_past_the_end_when_vacuuming_then_the_object_is_refused() -> None:
    with pytest.raises(PlaceholderMismatch, match="1 recorded placeholder line"):
        vacuum(b"{}\n", [(0, 1), (5, 1)])


# -- the keyed hash of the ownership check ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(key=st.binary(min_size=16, max_size=130), ids=st.lists(st.text(max_size=40), max_size=20))
def test_given_any_key_and_ids_when_hashed_in_a_batch_then_each_hash_is_the_standard_hmac_sha256(key, ids) -> None:
    import hashlib
    import hmac

    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    pseudonymizer = Pseudonymizer(key)
    expected = [hmac.new(key, i.encode(), hashlib.sha256).hexdigest() for i in ids]
    assert [pseudonymizer(i) for i in ids] == expected
    users = HashedUsers(expected[::2], pseudonymizer)
    assert users.each_contained(ids) == [i in set(ids[::2]) for i in ids]
    assert users.each_contained(ids) == [i in users for i in ids]  # again, from memory


@settings(max_examples=200, deadline=None)
@given(
    wanted=st.lists(st.text(max_size=8), max_size=5),
    batches=st.lists(st.lists(st.binary(max_size=8) | st.text(max_size=8).map(str.encode), max_size=8), max_size=6),
)
def test_given_batches_of_id_bytes_when_asked_in_bulk_then_the_answer_is_that_of_each_id(wanted, batches) -> None:
    # Verification asks in bulk whether any id of an object is wanted; the answer, from set operations on ids seen
    # before or from hashing new ones, must be that of decoding and checking each id, whatever was asked before.
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    pseudonymizer = Pseudonymizer(b"0123456789abcdef")
    users = HashedUsers(pseudonymizer.many(wanted), pseudonymizer)
    for batch in batches:
        expected = not any(i.decode("utf-8", "replace") in wanted for i in batch)
        assert users.none_of(batch) is expected
        assert users.none_of(batch) is expected  # again, from memory


def test_given_four_purge_threads_sharing_the_memo_past_its_limit_when_checking_new_ids_then_each_answer_is_right() -> (
    None
):
    # A task's purge threads share one HashedUsers. Past 100,000 remembered ids one thread clears the memo; another
    # must still answer its own batch (it once read its answers back from the memo: KeyError, a failed object, about
    # 20 in these 240 calls).
    from concurrent.futures import ThreadPoolExecutor

    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    pseudonymizer = Pseudonymizer(b"0123456789abcdef")
    wanted = [f"t{thread}-b{batch}-0" for thread in range(4) for batch in range(0, 60, 7)]
    users = HashedUsers(pseudonymizer.many(wanted), pseudonymizer)

    def check(thread: int) -> list[str]:
        found = []
        for batch in range(60):
            ids = [f"t{thread}-b{batch}-{i}" for i in range(5_000)]
            found += [user for user, owned in zip(ids, users.each_contained(ids), strict=True) if owned]
        return found

    with ThreadPoolExecutor(4) as threads:
        found = [user for answers in threads.map(check, range(4)) for user in answers]

    assert found == wanted


@pytest.mark.parametrize("known", ["none", "some"], ids=["hashes only", "some ids in memory"])
def test_given_four_threads_asking_in_bulk_past_the_memo_limit_when_checking_objects_then_each_answer_is_right(
    known, monkeypatch
) -> None:
    # The check before a write asks, for a whole object's ids (UTF-8 bytes), whether none is wanted, on the task's
    # threads at once; each thread's memory of ids is its own, so whatever the others ask, each answer is right.
    from concurrent.futures import ThreadPoolExecutor

    from lakepurge.core import privacy
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    monkeypatch.setattr(privacy, "MEMO_IDS", 10_000)  # the memory fills up part-way, at a twentieth of the cost
    pseudonymizer = Pseudonymizer(b"0123456789abcdef")
    wanted = [f"t{thread}-b{batch}-0" for thread in range(4) for batch in range(0, 30, 7)]
    users = HashedUsers(pseudonymizer.many(wanted), pseudonymizer, wanted[::2] if known == "some" else ())
    per_batch = 1_000

    def check(thread: int) -> list[bool]:
        answers = []
        for batch in range(30):
            ids = [f"t{thread}-b{batch}-{i}".encode() for i in range(per_batch)]
            answers.append(users.none_of(ids))
            answers.append(users.none_of(ids[1:]))  # the same ids again, from memory, without the wanted one
        return answers

    with ThreadPoolExecutor(4) as threads:
        answers = list(threads.map(check, range(4)))

    expected = [answer for batch in range(30) for answer in (batch % 7 != 0, True)]
    assert answers == [expected] * 4


class CountingPseudonymizer:
    """The keyed hash, counting the ids it hashes."""

    def __init__(self, key: bytes) -> None:
        from lakepurge.core.privacy import Pseudonymizer

        self.hashed = 0
        self._hash = Pseudonymizer(key)

    def __call__(self, user_id: str) -> str:
        self.hashed += 1
        return self._hash(user_id)

    def each(self, user_ids):
        return map(self, user_ids)

    def many(self, user_ids):
        return sorted({self(u) for u in user_ids})


def test_given_a_lake_with_more_users_than_the_memo_when_ids_come_again_then_those_remembered_are_not_hashed_again(
    monkeypatch,
) -> None:
    # The memory of ids fills up and stays: a lake with more users than it holds makes new ids hashed each time, never
    # the ones remembered forgotten and hashed over and over (it was cleared past 100,000 ids: every object of a
    # 200,000-user lake then hashed most of its ids again).
    from lakepurge.core import privacy
    from lakepurge.core.privacy import HashedUsers

    monkeypatch.setattr(privacy, "MEMO_IDS", 20_000)
    MEMO_IDS = privacy.MEMO_IDS
    counting = CountingPseudonymizer(b"0123456789abcdef")
    users = HashedUsers(counting.many(["alice"]), counting)  # type: ignore[arg-type]
    first = [f"u{n}" for n in range(MEMO_IDS * 3 // 4)]
    then = [f"v{n}" for n in range(MEMO_IDS // 2)]
    more = [f"w{n}" for n in range(MEMO_IDS // 2)]
    assert True not in users.each_contained(first)
    assert True not in users.each_contained(then)  # past the limit now
    assert True not in users.each_contained(more)  # more users than the memo holds: not remembered
    counting.hashed = 0

    assert True not in users.each_contained(first)
    assert users.each_contained(["alice", "x"]) == [True, False]

    assert counting.hashed == 2  # only the ids never seen


@settings(max_examples=100, deadline=None)
@given(
    wanted=st.lists(st.text(max_size=6), min_size=1, max_size=5),
    known=st.lists(st.text(max_size=6), max_size=6),
    batch=st.lists(st.binary(max_size=6) | st.text(max_size=6).map(str.encode), max_size=10),
)
@example(wanted=["a\nb"], known=[], batch=[b"a\nb"])  # an id holding a newline (a decoded JSON "\n") is one id
@example(wanted=[""], known=[], batch=[b"\n"])  # ... not two
def test_given_users_with_their_ids_in_memory_when_asked_then_the_answers_are_those_of_their_hashes(
    wanted, known, batch
) -> None:
    # An inline purge gives the users' raw ids with their hashes; an id given that is not one of the hashes counts for
    # nothing, a hash no id stands for is still hashed for: the answers never change, only how they are found.
    import pyarrow as pa

    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    pseudonymizer = Pseudonymizer(b"0123456789abcdef")
    hashes = pseudonymizer.many(wanted)
    by_hash = HashedUsers(hashes, pseudonymizer)
    by_id = HashedUsers(hashes, pseudonymizer, known=[*known, *wanted][: len(known) + len(wanted) // 2 + 1])
    everyone = HashedUsers(hashes, pseudonymizer, known=[*wanted, *known])
    texts = [b.decode("utf-8", "replace") for b in batch]
    for users in (by_id, everyone):
        assert users.each_contained(texts) == by_hash.each_contained(texts)
        assert [t in users for t in texts] == [t in by_hash for t in texts]
        assert users.none_of(batch) is by_hash.none_of(batch)
        assert users.none_of(pa.array(batch, pa.large_binary())) is by_hash.none_of(batch)


def test_given_users_with_their_ids_in_memory_when_shown_then_no_id_is_in_the_text() -> None:
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    pseudonymizer = Pseudonymizer(b"0123456789abcdef")
    users = HashedUsers(pseudonymizer.many(["alice.secret@example.com"]), pseudonymizer, ["alice.secret@example.com"])
    assert "alice" not in repr(users) and "alice" not in str(users)


@pytest.mark.parametrize("quoted", [True, False], ids=["with quotes", "without quotes"])
def test_given_a_csv_without_final_newline_when_its_last_record_is_dropped_then_it_still_has_none(quoted) -> None:
    note = b'"a, b"' if quoted else b"plain"
    raw = b"customer_id,note\nbob," + note + b"\nalice,x\ncarol,y\nalice,z"
    out, owner = rewrite(raw, [2, 4], {"alice"}, drop=True)
    assert out == b"customer_id,note\nbob," + note + b"\ncarol,y"
    assert owner.erased == [2, 4]


# -- CSV rows decided in a batch ------------------------------------------------------------------------------------

CSV_FIELDS = st.sampled_from([b"", b"note", b"caf\xc3\xa9", b"a b", b"\xff\xfe"])
CSV_IDS = st.sampled_from(
    [b"alice", b"bob", b"", b"caf\xc3\xa9", b"\xff", b"a\x00", b"x" * 300, b"carol", b"a\rb", b'"alice"', b"alice\r"]
)
HASH_KEY = b"k" * 32
BATCH_USERS = ["alice", "café", "a\x00", "x" * 300, "a\rb", "alice\r"]


@st.composite
def csv_lines(draw: st.DrawFn) -> list[bytes]:
    """Rows of one width mostly (the batch path's case), with short, long and odd rows among them."""
    width = draw(st.integers(0, 4))  # fields after the id (the id is the second field)

    def row(fields: int) -> bytes:
        if fields == 0:
            return b""
        values = [draw(CSV_FIELDS), draw(CSV_IDS)][:fields] + [draw(CSV_FIELDS) for _ in range(fields - 2)]
        return b",".join(values)

    sizes = st.one_of(st.just(width + 2), st.integers(0, 6))
    return [row(draw(sizes)) for _ in range(draw(st.integers(1, 30)))]


@settings(max_examples=300, deadline=None)
@given(lines=csv_lines(), copies=st.integers(1, 40), final=st.booleans(), drop=st.booleans())
def test_given_any_csv_rows_when_decided_in_a_batch_then_each_is_decided_as_row_by_row(lines, copies, final, drop):
    # The batch path (one id column, keyed hashes: rows without quotes or '\r' of one width, their ids taken and
    # looked up together) must blank or drop exactly the rows, and note exactly the lines, that the row-by-row
    # check does (a plain set of users takes that path): short rows, empty, non-ASCII, NUL, '\r' and quoted ids.
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer

    rows = lines * copies  # many copies: chunks over the dense splice's threshold too
    raw = b"\n".join([b"note,customer_id,a,b,c", *rows]) + (b"\n" if final else b"")
    targets = list(range(1, len(rows) + 2))  # every row, and one past the end
    pseudonymizer = Pseudonymizer(HASH_KEY)
    batched = Ownership(PROFILES, HashedUsers(pseudonymizer.many(BATCH_USERS), pseudonymizer))
    one_by_one = Ownership(PROFILES, set(BATCH_USERS))
    out = rewrite_csv(io.BytesIO(raw), False, targets, batched, drop, MAX).body()
    expected = rewrite_csv(io.BytesIO(raw), False, targets, one_by_one, drop, MAX).body()
    assert out == expected
    assert (batched.erased, batched.not_matching, batched.lines_of) == (
        one_by_one.erased,
        one_by_one.not_matching,
        one_by_one.lines_of,
    )


def test_given_rows_of_one_width_with_plain_ids_when_decided_then_the_batch_path_takes_them() -> None:
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer
    from lakepurge.purge.rewrite import _plain_rows_decided

    pseudonymizer = Pseudonymizer(HASH_KEY)
    owner = Ownership(PROFILES, HashedUsers(pseudonymizer.many(["alice"]), pseudonymizer))
    owner.csv_header(["note", "customer_id", "a"])
    assert owner.csv_column() == 1
    rows = [b"n,alice,1", b",bob,", b"caf\xc3\xa9,alice,x"]
    assert _plain_rows_decided([1, 2, 3], rows, 1, owner, False) == [b",,", None, b",,"]
    assert (owner.erased, owner.not_matching) == ([1, 3], 1)
    # Another width, a short row, a non-ASCII or empty id: not the batch path's (None, nothing noted).
    for other in ([b"n,alice,1", b"n,alice"], [b"n,alice,1", b"n"], [b"n,caf\xc3\xa9,1"], [b"n,,1"]):
        assert _plain_rows_decided(list(range(len(other))), other, 1, owner, False) is None
    assert (owner.erased, owner.not_matching) == ([1, 3], 1)


JSON_LINES = st.sampled_from(
    [
        b'{"customer_id":"alice","n":1}',
        b'{"customer_id":"bob"}',
        b'{"customer_id":"alice"}\r',
        b'{"customer_id":"caf\xc3\xa9"}',
        b'{"customer_id":""}',
        b'{"customer_id":7}',
        b'{"customer_id":["alice"]}',
        b'{"other":1}',
        b"[1,2]",
        b'"alice"',
        b"7",
        b"null",
        b"not json",
        b"",
        b"{}",
        # the id field's key written twice: each value counts, as the indexer reads it
        b'{"customer_id":"alice","n":1,"customer_id":"bob"}',
        b'{"customer_id":"bob","customer_id":"alice"}',
        b'{"customer_id":"alice","customer_id":null}',
        b'{"customer_id":"bob","customer\\u005fid":"alice"}',
        b'{"customer_id":"bob","x":{"customer_id":"alice"}}',
        b'{"customer_id":"caf\xc3\xa9","customer_id":""}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(JSON_LINES, min_size=1, max_size=30), copies=st.integers(1, 60), final=st.booleans())
def test_given_any_json_lines_when_decided_in_a_batch_then_each_is_decided_as_line_by_line(lines, copies, final):
    # The batch path (keyed hashes: the target lines parsed and their ids looked up together) must blank exactly the
    # lines, and note exactly what, the line-by-line check does (a plain set of users takes that path): lines that
    # are not objects, not JSON, end in '\r', or hold an id that is not a plain string.
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer
    from lakepurge.purge.rewrite import rewrite_jsonl

    dataset = DatasetConfig(name="p", location="s3://lake/p/", format="jsonl", id_fields=("customer_id",))
    body = b"\n".join(lines * copies) + (b"\n" if final else b"")
    targets = list(range(len(lines) * copies + 1))
    pseudonymizer = Pseudonymizer(HASH_KEY)
    users = ["alice", "café"]
    batched = Ownership(dataset, HashedUsers(pseudonymizer.many(users), pseudonymizer))
    one_by_one = Ownership(dataset, set(users))
    out = rewrite_jsonl(io.BytesIO(body), False, targets, batched, False).body()
    assert out == rewrite_jsonl(io.BytesIO(body), False, targets, one_by_one, False).body()
    assert (batched.erased, batched.not_matching) == (one_by_one.erased, one_by_one.not_matching)
    # ... and both blank exactly the records the indexer's reader gives the users
    read = read_records(io.BytesIO(body), "p.jsonl", "jsonl", ("customer_id",), MAX)
    assert batched.erased == [r.line for r in read if isinstance(r, Record) and set(users) & set(r.user_ids)]


def test_given_a_line_writing_the_id_field_twice_when_the_purge_checks_it_then_it_is_each_values_record() -> None:
    # Indexed under alice and bob (every value counts): erasing either blanks it; a stale plan naming it for carol
    # leaves it.
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer
    from lakepurge.purge.rewrite import rewrite_jsonl

    body = b'{"user_id":"alice","n":1,"user_id":"bob"}\n{"user_id":"carol"}\n'
    pseudonymizer = Pseudonymizer(HASH_KEY)
    for users, blanked in (({"alice"}, True), ({"bob"}, True), ({"carol"}, False)):
        for owner in (
            Ownership(REVIEWS, users),
            Ownership(REVIEWS, HashedUsers(pseudonymizer.many(users), pseudonymizer)),
        ):
            out = rewrite_jsonl(io.BytesIO(body), False, [0], owner, False).body()
            assert out.startswith(b"{}\n") is blanked, (users, type(owner.users))


# -- a rewrite gives back every line but those it dropped -----------------------------------------------------------

REVIEWS = DatasetConfig(name="reviews", location="s3://lake/reviews/", format="jsonl", id_fields=("user_id",))


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _counted_lines_hold(staged, raw: bytes, gz: bool, drop: bool, dropped: int) -> None:
    source = gzip.decompress(raw) if gz else raw
    out = gzip.decompress(staged.body()) if gz else staged.body()
    # Blanking keeps every terminator (a blanked last record may leave an empty last line); dropping removes lines.
    count = _lines if drop else operator.methodcaller("count", b"\n")
    assert count(out) == count(source) - dropped


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from(
            [b'{"user_id":"alice"}', b'{"user_id":"bob"}', b"{}", b"", b"not json", b'{"user_id":"alice"}\r']
        ),
        max_size=30,
    ),
    targets=st.sets(st.integers(0, 32)),
    final=st.booleans(),
    drop=st.booleans(),
    gz=st.booleans(),
)
def test_given_any_json_lines_rewrite_when_its_lines_are_counted_then_only_the_dropped_are_missing(
    lines, targets, final, drop, gz
):
    body = b"\n".join(lines) + (b"\n" if final else b"")
    raw = gzip.compress(body) if gz else body
    owner = Ownership(REVIEWS, {"alice"})
    staged = rewrite_jsonl(io.BytesIO(raw), gz, targets, owner, drop)
    _counted_lines_hold(staged, raw, gz, drop, len(owner.erased) if drop else 0)


@settings(max_examples=200, deadline=None)
@given(
    targets=st.sets(st.integers(0, 10)),
    drop=st.booleans(),
    gz=st.booleans(),
    tail=st.sampled_from([b"", b"\n", b'\nalice,"two\nlines",x', b'\nalice,"two\nlines",x\n']),
)
def test_given_any_csv_rewrite_when_its_lines_are_counted_then_only_the_dropped_records_lines_are_missing(
    targets, drop, gz, tail
):
    # Quoted records over two lines, a '\r\n' line; the last record over two lines or not, terminated or not.
    body = CSV + tail
    raw = gzip.compress(body) if gz else body
    owner = Ownership(PROFILES, {"alice", "carol"})
    staged = rewrite_csv(io.BytesIO(raw), gz, targets, owner, drop, MAX)
    dropped = sum(owner.lines_of.get(line, 1) for line in owner.erased) if drop else 0
    _counted_lines_hold(staged, raw, gz, drop, dropped)


def test_given_a_parquet_column_stored_uncompressed_when_rewritten_then_it_stays_uncompressed():
    # the footer says UNCOMPRESSED where pyarrow's writer takes "none": the rewrite used to refuse such a file
    table = pa.table({"user_id": ["a", "b", "c"], "blob": [b"1", b"2", b"3"]})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression={"user_id": "snappy", "blob": "none"})
    dataset = DatasetConfig(name="d", location="s3://b/p/", format="parquet", id_fields=["user_id"])

    staged, erased = rewrite_parquet(io.BytesIO(sink.getvalue()), [1], {"b"}, dataset)

    out = pq.ParquetFile(staged.reader())
    assert erased == [1]
    assert out.read().column("user_id").to_pylist() == ["a", "c"]
    assert out.metadata.row_group(0).column(1).compression == "UNCOMPRESSED"
