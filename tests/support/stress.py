"""Index stress: purges of overlapping user sets, the purge's own S3 events, duplicated, out-of-order and stale
events, and a foreign writer, all at once, in rounds; after every round the index must equal a fresh index of what
S3 holds.

Shared by tests/integration/test_index_stress.py (short form) and bench/index_stress.py (long form). The moto
server and the index backend are the caller's; this module only needs boto3 pointed at the server and the [index]
body of a configuration.

Interleavings are randomised: every thread draws its operations and the pauses it takes before each S3 call and
each index write from its own random.Random seeded from (seed, round, thread), so a seed names the schedule each
thread follows (the operating system still decides the rest: a failing seed is re-run, not replayed exactly).
"""

from __future__ import annotations

import csv
import gzip
import io
import random
import threading
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.s3io import ObjectChanged, head_object
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.indexing.indexer import index_object, scan_object
from lakepurge.local.samples import generate_lake, review_record, settings_toml
from lakepurge.purge.engine import PurgeTarget, purge_object

Row = tuple[str, str, int]

# The line-based datasets of the sample lake: JSON Lines (some gzip), JSON Lines with nested and array ids, CSV.
PREFIXES = ("reviews/", "orders/", "profiles/")
_S3_WRITES = frozenset({"put_object", "delete_object", "complete_multipart_upload", "copy_object"})
_S3_CALLS = _S3_WRITES | {"head_object", "get_object", "list_object_versions", "get_object_tagging"}


@dataclass
class StressOptions:
    rounds: int = 3
    objects: int = 30  # generate_lake's size; the line-based part is ~70% of it
    users: int = 30
    requests: int = 3  # concurrent purge requests a round (one thread each)
    users_per_request: tuple[int, int] = (1, 3)
    deliverers: int = 2  # threads delivering S3 events to the indexer during the round
    writer: bool = True  # a foreign producer overwriting (and sometimes deleting) objects during the round
    writes: int = 6  # the writer's operations a round
    hot: float = 0.7  # share of them on an object written a moment ago (most likely by a purge)
    deletes: float = 0.15  # share of the writer's operations that delete the object
    duplicate: float = 0.3  # chance that a delivered event is delivered again later
    replay: float = 0.2  # chance that a deliverer replays an old event (any key seen before) instead
    jitter: float = 0.004  # pauses before S3 calls and index writes: up to this many seconds (purgers, writer)
    slow_jitter: float = 0.04  # the same for the slow deliverer (a Lambda that HEADs, then stalls)
    stop_on_finding: bool = True


@dataclass
class Finding:
    round: int
    missing: set[Row]  # a fresh index holds them, the index does not: records that would never be erased
    extra: set[Row]  # the index names lines that no longer hold that user
    wrong_version: dict[str, tuple[str | None, str | None]]  # s3path -> (indexed ETag, S3's ETag)
    trace: list[str]

    def summary(self) -> str:
        paths = sorted({p for _, p, _ in self.missing | self.extra} | set(self.wrong_version))
        lines = [
            f"round {self.round}: {len(self.missing)} missing rows, {len(self.extra)} extra rows, "
            f"{len(self.wrong_version)} objects indexed at the wrong version ({len(paths)} objects)"
        ]
        for path in paths:
            missing = sum(1 for _, p, _ in self.missing if p == path)
            extra = sum(1 for _, p, _ in self.extra if p == path)
            versions = self.wrong_version.get(path)
            where = f" indexed {versions[0]} but S3 holds {versions[1]}" if versions else ""
            lines.append(f"  {path}: {missing} missing, {extra} extra{where}")
        return "\n".join(lines)


@dataclass
class StressResult:
    seed: int
    backend: str
    versioned: bool
    rounds: int = 0
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    def describe(self) -> str:
        kind = "versioned" if self.versioned else "unversioned"
        head = (
            f"{self.backend}, {kind} bucket, seed {self.seed}: {self.rounds} rounds in {self.seconds:.0f} s, "
            f"{len(self.findings)} findings"
        )
        counts = ", ".join(f"{name} {value}" for name, value in sorted(self.counts.items()))
        return f"{head}\n  interleavings: {counts}"


class Trace:
    """What every thread did to which key, in order: printed for the objects of a finding."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self.entries: list[tuple[float, str, str, str]] = []

    def add(self, key: str, what: str) -> None:
        with self._lock:
            self.entries.append((time.monotonic() - self._start, threading.current_thread().name, key, what))

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()

    def of(self, keys: set[str], limit: int = 120) -> list[str]:
        with self._lock:
            chosen = [e for e in self.entries if e[2] in keys]
        return [f"{t:8.3f} {thread:<12} {key} {what}" for t, thread, key, what in chosen[-limit:]]


class Events:
    """The S3 event stream: every write to the bucket becomes an event for its key, delivered in any order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending: list[str] = []
        self.seen: list[str] = []

    def push(self, key: str) -> None:
        with self._lock:
            self.pending.append(key)
            self.seen.append(key)

    def take(self, rng: random.Random) -> str | None:
        with self._lock:
            if not self.pending:
                return None
            return self.pending.pop(rng.randrange(len(self.pending)))

    def old(self, rng: random.Random) -> str | None:
        with self._lock:
            return rng.choice(self.seen) if self.seen else None

    def latest(self) -> str | None:
        with self._lock:
            return self.seen[-1] if self.seen else None

    def drain(self) -> list[str]:
        with self._lock:
            pending, self.pending = self.pending, []
            return pending


def _short(etag: Any) -> str:
    return str(etag).strip('"')[:8]


class JitterS3:
    """An S3 client that pauses a random while before each call, traces it, and turns each write into an event."""

    def __init__(self, inner: Any, rng: random.Random, jitter: float, events: Events, trace: Trace, counts: Counter):
        self._inner, self._rng, self._jitter = inner, rng, jitter
        self._events, self._trace, self._counts = events, trace, counts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in _S3_CALLS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._jitter and self._rng.random() < 0.5:
                time.sleep(self._rng.uniform(0, self._jitter))
            key = kwargs.get("Key", "")
            try:
                response = attr(*args, **kwargs)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                self._counts[f"s3 {name} {code}"] += 1
                self._trace.add(key, f"{name} -> {code}")
                raise
            if name in ("head_object", "get_object", "put_object", "delete_object", "complete_multipart_upload"):
                pinned = kwargs.get("VersionId") or (kwargs.get("IfMatch") and "if-match")
                self._trace.add(
                    key,
                    f"{name}{' ' + _short(pinned) if pinned else ''} -> {_short(response.get('ETag', '-'))}"
                    f" v={_short(response.get('VersionId', '-'))} lm={response.get('LastModified', '-')}",
                )
            if name in _S3_WRITES:
                self._events.push(key)
            return response

        return call


class JitterStore:
    """An index store that pauses a random while before each write and traces it."""

    def __init__(self, inner: IndexStore, rng: random.Random, jitter: float, trace: Trace):
        self._inner, self._rng, self._jitter, self._trace = inner, rng, jitter, trace

    def _pause(self) -> None:
        if self._jitter and self._rng.random() < 0.5:
            time.sleep(self._rng.uniform(0, self._jitter))

    def replace_objects(self, objects: Any, force: bool = False) -> int:
        self._pause()
        written = self._inner.replace_objects(objects, force=force)
        for obj in objects:
            self._trace.add(
                _key_of(obj.s3path),
                f"index.replace {_short(obj.etag)} lm={obj.last_modified} rows={obj.row_count}"
                f"{' force' if force else ''} -> {written}",
            )
        return written

    def apply_erasure(
        self, s3path: str, before_etag: str, after: Any, erased_lines: Any, dropped: bool = False
    ) -> bool:
        self._pause()
        done = self._inner.apply_erasure(s3path, before_etag, after, erased_lines, dropped)
        self._trace.add(
            _key_of(s3path),
            f"index.apply_erasure {_short(before_etag)}->{_short(after.etag)} lm={after.last_modified}"
            f" lines={sorted(erased_lines)} -> {done}",
        )
        return done

    def remove_object(self, s3path: str) -> bool:
        self._pause()
        removed = self._inner.remove_object(s3path)
        self._trace.add(_key_of(s3path), f"index.remove -> {removed}")
        return removed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _key_of(s3path: str) -> str:
    return s3path.split("/", 3)[3]


def _content(rng: random.Random, key: str, pool: list[str]) -> bytes:
    """New content for a key of one of the line-based datasets (what a foreign producer would write)."""
    count = rng.randint(1, 25)
    if key.startswith("profiles/"):
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["customer_id", "name", "city", "note"])
        for n in range(count):
            writer.writerow([rng.choice(pool), f"Name {n}", rng.choice(["Paris", "Oslo, NO"]), "rewritten"])
        body = out.getvalue().encode()
    elif key.startswith("orders/"):
        records = []
        for n in range(count):
            record: dict[str, Any] = {"order_id": f"w{n}", "buyer": {"id": rng.choice(pool)}, "total": n}
            if rng.random() < 0.4:
                record["gift"] = {"recipients": rng.sample(pool, rng.randint(1, 2))}
            records.append(orjson.dumps(record))
        body = b"\n".join(records) + b"\n"
    else:
        lines = [
            b"{}" if rng.random() < 0.1 else orjson.dumps(review_record(rng, rng.choice(pool), n)) for n in range(count)
        ]
        body = b"\n".join(lines) + b"\n"
    return gzip.compress(body, mtime=0) if key.endswith(".gz") else body


def fresh_index(s3: Any, settings: Settings, bucket: str) -> tuple[set[Row], dict[str, str]]:
    """What a backfill from scratch would index now: every row, and every object's ETag."""
    rows: set[Row] = set()
    etags: dict[str, str] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            dataset = settings.dataset_for(bucket, item["Key"])
            if dataset is None:
                continue
            head = head_object(s3, bucket, item["Key"])
            assert head is not None
            scanned = scan_object(s3, settings, dataset, head)
            etags[head.s3path] = head.etag
            rows.update((user, head.s3path, line) for user, line in scanned.rows())
    return rows, etags


class Stress:
    """One lake and one index, put through rounds (see the module docstring)."""

    def __init__(
        self,
        index_toml: str,
        seed: int,
        versioned: bool,
        options: StressOptions,
        log: Callable[[str], None] = print,
    ) -> None:
        self.options, self.seed, self.versioned, self.log = options, seed, versioned, log
        self.bucket = f"stress-{uuid.uuid4().hex[:10]}"
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=self.bucket)
        s3.create_bucket(Bucket=f"{self.bucket}-reports")  # the purge records its placeholders there
        if versioned:
            s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        lake = generate_lake(bucket=self.bucket, objects=options.objects, users=options.users, seed=seed)
        lake.objects = [o for o in lake.objects if o.key.startswith(PREFIXES)]
        lake.upload(s3)
        self.keys = [o.key for o in lake.objects]
        self.pool = lake.users
        toml = settings_toml(self.bucket, index_toml, f"s3://{self.bucket}-reports/")
        self.settings = parse_settings(tomllib.loads(toml))
        self.backend = self.settings.index.backend
        self.store = open_store(self.settings.index)
        self.store.truncate()
        for key in self.keys:
            index_object(s3, self.store, self.settings, self.bucket, key)
        self.trace = Trace()
        self.result = StressResult(seed, self.backend, versioned)

    def close(self) -> None:
        self.store.close()

    def _thread_store(self) -> IndexStore:
        return open_store(self.settings.index, create=False) if self.backend == "postgres" else self.store

    def run(self, deadline: float | None = None) -> StressResult:
        """Play the rounds (or those that start before deadline, a time.monotonic() value)."""
        started = time.monotonic()
        try:
            while self.result.rounds < self.options.rounds and (deadline is None or time.monotonic() < deadline):
                number = self.result.rounds + 1
                finding = self.round(number)
                self.result.rounds = number
                if finding is not None:
                    self.result.findings.append(finding)
                    self.log(f"FINDING (seed {self.seed}) {finding.summary()}")
                    for line in finding.trace:
                        self.log("    " + line)
                    if self.options.stop_on_finding:
                        break
                    self.rebuild()
                elif number % 10 == 0:
                    self.log(f"  {number} rounds, {time.monotonic() - started:.0f} s, no finding")
        finally:
            self.result.seconds += time.monotonic() - started
        return self.result

    def rebuild(self) -> None:
        """Start the next round from a correct index (a finding must not leak into the next rounds' findings)."""
        s3 = aws.client("s3")
        self.store.truncate()
        for key in self.keys:
            index_object(s3, self.store, self.settings, self.bucket, key)

    def round(self, number: int) -> Finding | None:
        options, counts = self.options, self.result.counts
        self.trace.clear()
        events = Events()
        stop = threading.Event()
        errors: list[BaseException] = []

        def rng_for(role: str) -> random.Random:
            return random.Random(f"{self.seed}/{number}/{role}")

        def guarded(role: str, work: Callable[[random.Random], None]) -> threading.Thread:
            def body() -> None:
                try:
                    work(rng_for(role))
                except BaseException as exc:  # reported by the round
                    errors.append(exc)

            return threading.Thread(target=body, name=role)

        def purger(rng: random.Random) -> None:
            store = self._thread_store()
            try:
                s3 = JitterS3(aws.client("s3"), rng, options.jitter, events, self.trace, counts)
                jittered = JitterStore(store, rng, options.jitter, self.trace)
                users = frozenset(rng.sample(self.pool, rng.randint(*options.users_per_request)))
                hits = store.lookup_objects(sorted(users))
                targets = list(hits.objects.values())
                rng.shuffle(targets)
                for hit in targets:
                    dataset = self.settings.dataset_for(self.bucket, _key_of(hit.s3path))
                    assert dataset is not None
                    target = PurgeTarget(hit.s3path, dataset.name, hit.etag, hit.lines)
                    self.trace.add(_key_of(hit.s3path), f"purge {_short(hit.etag)} lines={list(hit.lines)}")
                    outcome = purge_object(s3, jittered, self.settings, target, users, versioned=self.versioned)
                    counts[f"purge {outcome.status}"] += 1
                    counts["purge on a stale index"] += outcome.stale_index
                    self.trace.add(_key_of(hit.s3path), f"purged {outcome.status} -> {_short(outcome.after_etag)}")
                    if outcome.status == "failed" and outcome.error != "kept changing under concurrent writes":
                        raise AssertionError(f"purge of {hit.s3path} failed: {outcome.error}")
            finally:
                if store is not self.store:
                    store.close()

        def writer(rng: random.Random) -> None:
            s3 = JitterS3(aws.client("s3"), rng, options.jitter, events, self.trace, counts)
            for _ in range(options.writes):
                time.sleep(rng.uniform(0, 0.1))
                # Mostly an object just written (by a purge, most likely): the writes that race a purge's index update.
                recent = events.latest() if rng.random() < options.hot else None
                key = recent or rng.choice(self.keys)
                if rng.random() < options.deletes:
                    s3.delete_object(Bucket=self.bucket, Key=key)
                    counts["writer delete"] += 1
                    if rng.random() < 0.5:  # and back soon (a re-run of the producer)
                        time.sleep(rng.uniform(0, 0.05))
                        s3.put_object(Bucket=self.bucket, Key=key, Body=_content(rng, key, self.pool))
                        counts["writer delete and re-create"] += 1
                else:
                    s3.put_object(Bucket=self.bucket, Key=key, Body=_content(rng, key, self.pool))
                    counts["writer overwrite"] += 1

        def deliverer(slow: bool) -> Callable[[random.Random], None]:
            def work(rng: random.Random) -> None:
                store = self._thread_store()
                try:
                    jitter = options.slow_jitter if slow else options.jitter
                    # The indexer's own S3 calls are reads: its events are not re-emitted.
                    s3 = JitterS3(aws.client("s3"), rng, jitter, Events(), self.trace, counts)
                    jittered = JitterStore(store, rng, jitter, self.trace)
                    while True:
                        replay = rng.random() < options.replay
                        key = events.old(rng) if replay else events.take(rng)
                        if key is None:
                            if stop.is_set():
                                return
                            time.sleep(0.002)
                            continue
                        self.trace.add(key, "event" + (" (replay)" if replay else ""))
                        try:
                            outcome = index_object(s3, jittered, self.settings, self.bucket, key)
                        except ObjectChanged:  # the Lambda fails; SQS delivers the message again
                            counts["event failed (object kept changing), redelivered"] += 1
                            events.push(key)
                            continue
                        counts[f"event {'replayed' if replay else 'delivered'} -> {outcome.action}"] += 1
                        if not replay and rng.random() < options.duplicate:
                            events.push(key)
                            counts["event duplicated"] += 1
                        if stop.is_set() and not events.pending:
                            return
                finally:
                    if store is not self.store:
                        store.close()

            return work

        workers = [guarded(f"purge-{n}", purger) for n in range(options.requests)]
        if options.writer:
            workers.append(guarded("writer", writer))
        deliverers = [guarded(f"deliver-{n}", deliverer(slow=n % 2 == 1)) for n in range(options.deliverers)]
        for thread in workers + deliverers:
            thread.start()
        for thread in workers:
            thread.join()
        stop.set()
        for thread in deliverers:
            thread.join()
        if errors:
            raise errors[0]
        # Every event is delivered in the end (SQS retries until the indexer succeeds): the rest, in any order.
        s3 = aws.client("s3")
        rng = rng_for("drain")
        rest = events.drain()
        rng.shuffle(rest)
        for key in rest:
            self.trace.add(key, "event (drain)")
            outcome = index_object(
                JitterS3(s3, rng, 0, Events(), self.trace, counts), self.store, self.settings, self.bucket, key
            )
            counts[f"event drained -> {outcome.action}"] += 1
        return self.check(number)

    def check(self, number: int) -> Finding | None:
        rows, etags = fresh_index(aws.client("s3"), self.settings, self.bucket)
        indexed = self.store.dump()
        versions = self.store.indexed_objects()
        wrong = {
            path: (versions.get(path), etags.get(path))
            for path in set(versions) | set(etags)
            if versions.get(path) != etags.get(path)
        }
        missing, extra = rows - indexed, indexed - rows
        if not (missing or extra or wrong):
            return None
        keys = {_key_of(p) for _, p, _ in missing | extra} | {_key_of(p) for p in wrong}
        return Finding(number, missing, extra, wrong, self.trace.of(keys))
