"""Progress of long commands: a bar on stderr, redrawn in place on a terminal, one summary line elsewhere.

Library code says what it is doing (``with track("objects indexed", total) as bar: bar.advance()``); whether
anybody sees it is the caller's choice: the CLI calls :func:`show_on` once, Lambdas and Spark jobs on EMR never do,
so there the bars cost nothing and print nothing. One implementation for every command (and the demo).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_stream: TextIO | None = None  # where bars go; None: nowhere (the default for every process but the CLI)


def show_on(stream: TextIO | None) -> None:
    """Send progress to stream (None: stop showing it)."""
    global _stream  # noqa: PLW0603 - one switch per process, set by the CLI before it calls the library
    _stream = stream


class Progress:
    """One bar: items done of a total, bytes and rate when known, elapsed time and an estimate of what is left."""

    WIDTH = 24
    REDRAW_SECONDS = 0.1

    def __init__(self, label: str, total: int, unit: str = "", stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.unit = unit
        self.done = 0
        self.bytes = 0
        self.stream = stream
        self.tty = stream is not None and stream.isatty()
        self.started = time.monotonic()
        self._drawn = 0.0
        self._lock = threading.Lock()  # Spark's status poller and the caller may both advance it
        self._draw()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * self.WIDTH)
        parts = [f"{self.label:<30} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done:,}/{self.total:,}"]
        if self.unit:
            parts[0] += f" {self.unit}"
        if self.bytes:
            parts.append(f"{self.bytes / 1e6:,.1f} MB, {self.bytes / 1e6 / max(elapsed, 1e-6):,.1f} MB/s")
        parts.append(f"{elapsed:,.1f} s")
        if 0 < self.done < self.total:
            parts.append(f"ETA {elapsed / self.done * (self.total - self.done):,.0f} s")
        return "  ".join(parts)

    def _draw(self) -> None:
        if self.tty and self.stream is not None:
            self.stream.write("\r\x1b[2K" + self.line())
            self.stream.flush()
            self._drawn = time.monotonic()

    def update(self, done: int, nbytes: int | None = None) -> None:
        with self._lock:
            self.done = min(max(done, self.done), self.total) if self.total else max(done, self.done)
            if nbytes is not None:
                self.bytes = max(nbytes, self.bytes)
            if self.tty and time.monotonic() - self._drawn >= self.REDRAW_SECONDS:
                self._draw()

    def advance(self, count: int = 1, nbytes: int = 0) -> None:
        self.update(self.done + count, self.bytes + nbytes)

    def close(self) -> float:
        """The final line (on a terminal it replaces the bar; elsewhere it is the only line). Returns seconds."""
        seconds = time.monotonic() - self.started
        if self.stream is not None:
            self.stream.write(("\r\x1b[2K" if self.tty else "") + self.line() + "\n")
            self.stream.flush()
        return seconds


@contextmanager
def track(label: str, total: int, unit: str = "", stream: TextIO | None = None) -> Iterator[Progress]:
    """A bar for the block, shown where :func:`show_on` said (or on stream); closed when the block ends."""
    bar = Progress(label, total, unit, stream if stream is not None else _stream)
    try:
        yield bar
    finally:
        bar.close()


@contextmanager
def spark_tasks(spark: Any, bar: Progress, items: int) -> Iterator[None]:
    """Advance bar while a Spark job runs, from the driver's status tracker: items done ~ items x tasks completed /
    tasks of the running stages (executors cannot report to the driver's terminal themselves)."""
    if bar.stream is None:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            completed = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    completed += info.numCompletedTasks
                    total += info.numTasks
            if total:
                bar.update(items * completed // total)

    poller = threading.Thread(target=poll, name="spark-progress", daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(2)
    bar.update(items)
