"""The intents of a purge task's objects, each durable before its object's write, written together (group commit).

Each object's intent is recorded under the request's results prefix before its write, so a job killed between the
write and its finished outcome can tell, when started again, that the erasure it finds done was its own
(job._settle).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lakepurge.purge.engine import ObjectOutcome

# The longest the first of a task's threads to reach a write waits for the other objects in progress to reach theirs,
# to write their intents in one request: about the time the threads, sharing one interpreter lock, take to bring
# their objects there (4 threads, 1.3 MB objects: with 20 ms two intents shared a request, with 100 ms nearly four).
INTENTS_LINGER_SECONDS = 0.1
# How long the intents' writer thread waits for a next intent before it ends: a task's objects reach their writes far
# more often, so it is started once, not on the first intent after each batch (starting a thread makes the announcing
# object's thread wait until the new one holds the interpreter lock).
WRITER_IDLE_SECONDS = 1.0


class _IntentBatch:
    """The intents one request writes; its threads wait on `written` (set after the request, failed or not)."""

    def __init__(self) -> None:
        self.intents: list[ObjectOutcome] = []
        self.written = threading.Event()
        self.failure: Exception | None = None


class IntentJournal:
    """Intents, each durable before its object's write, written together (group commit) by a writer thread of their
    own. announce queues an intent and returns at once with what waits for it to be written: the object's thread
    checks its produced bytes meanwhile, so the intent's request overlaps that work instead of following it. While
    a batch is being written, the intents announced queue for the next one; before taking a batch the writer waits,
    up to `linger` seconds, for the objects in progress (working) that have not announced yet. Each batch wakes only
    its own threads."""

    def __init__(self, write: Callable[[list[ObjectOutcome]], None], linger: float = 0.0) -> None:
        self._write = write
        self._linger = linger
        self._turn = threading.Condition()  # only the writer waits on it
        self._next = _IntentBatch()  # the batch the intents announced now go with
        self._unannounced = 0  # objects in progress that have not announced an intent yet
        self._object = threading.local()  # whether this thread's object has announced
        self._writing = False  # the writer thread is running (it ends WRITER_IDLE_SECONDS after its last batch)

    @contextmanager
    def working(self) -> Iterator[None]:
        """Around the work on one object (its intents, if any, are announced inside, on this thread)."""
        with self._turn:
            self._unannounced += 1
        self._object.announced = False
        try:
            yield
        finally:
            with self._turn:
                if not self._object.announced:
                    self._unannounced -= 1
                    self._wake_writer()

    def announce(self, intent: ObjectOutcome) -> Callable[[], None]:
        """Queue the intent; the returned call returns once it is written (or raises why it was not). Nothing may be
        written for the object before that call returns."""
        with self._turn:
            batch = self._next
            batch.intents.append(intent)
            if getattr(self._object, "announced", True) is False:
                self._object.announced = True
                self._unannounced -= 1
            if not self._writing:
                self._writing = True
                threading.Thread(target=self._write_batches, name="intents", daemon=True).start()
            self._wake_writer()

        def durable() -> None:
            batch.written.wait()
            if batch.failure is not None:  # every object of the batch fails: none of them may be written
                raise batch.failure

        return durable

    def record(self, intent: ObjectOutcome) -> None:
        """Announce the intent and wait until it is written."""
        self.announce(intent)()

    def _wake_writer(self) -> None:
        """Wake the writer only when what it waits for may have come: the first intent of a batch, or the last object
        in progress announcing (or ending without an intent). Each wake makes it take the interpreter lock from the
        purge threads, to find, most of the time, that it must go on waiting."""
        if len(self._next.intents) == 1 or self._unannounced == 0:
            self._turn.notify()

    def _queued(self) -> bool:
        return bool(self._next.intents)

    def _write_batches(self) -> None:
        with self._turn:
            while self._queued() or self._turn.wait_for(self._queued, WRITER_IDLE_SECONDS):
                deadline = time.monotonic() + self._linger
                while self._unannounced > 0 and (left := deadline - time.monotonic()) > 0:
                    self._turn.wait(left)
                batch, self._next = self._next, _IntentBatch()
                self._turn.release()
                try:
                    self._write(batch.intents)
                except Exception as exc:  # every thread of the batch raises it
                    batch.failure = exc
                finally:
                    batch.written.set()
                    self._turn.acquire()
            self._writing = False
