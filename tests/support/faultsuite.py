"""Purges under injected faults, and what must hold after each one (issue 25, Build 6).

A case is a small sample lake (every dataset kind, versioned or not), indexed in PostgreSQL or DynamoDB, a report
for a few of its users, and a fault schedule: rules for the S3 fault proxy (tests/support/faults.py) between boto3
and the moto server, and PostgreSQL restarted or shut down at chosen requests. The purge runs through the proxy
(in-process: the operator's and the inline workflow's ``run_purge(None, ...)``; or on the Spark session's
executors), then again without faults. After the faulty run:

- no other user's byte changed, and an object that changed is exactly erased (invariant.assert_invariant, partial);
- nothing is certified while data remains: a certificate that says verified has no version of any object holding
  the users (invariant.versions_holding, from the generator's truth);
- the certificate's counts equal what was erased (records, objects rewritten, from the lake itself);
- a run may raise only before erasing anything (after that, it must end in a certificate, verified or not).

After the rerun without faults: verified, the whole invariant, no version holding the users, the certificate counting
every record the report named, and a placeholder record for every placeholder in a current version.

Shared by tests/integration/test_fault_injection.py (short form) and bench/fault_stress.py (long form).
"""

from __future__ import annotations

import random
import tomllib
import traceback
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.local.postgres import LocalPostgres
from lakepurge.local.samples import SampleLake, generate_lake, settings_toml
from lakepurge.purge.certificate import PurgeResult, purge_targets
from lakepurge.purge.job import run_purge
from lakepurge.purge.placeholders import file_batches, placeholder_spans
from lakepurge.reports import layout
from lakepurge.reports.report import Report, build_report, resolve_references
from tests.support.faults import FAULT_KINDS, FaultProxy, Rule, endpoint, swapped
from tests.support.invariant import assert_invariant, erased_lines, snapshot, versions_holding
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_lake

KEY = HASH_KEY.encode()
DATA = r"/(reviews|orders|profiles|events|clicks|attachments|avatars)/"
PostgresAction = Literal["restart", "shut_down"]


@dataclass
class Schedule:
    """A fault schedule: proxy rules (their paths use {lake} and {reports} for the case's buckets), PostgreSQL
    restarted or shut down (until a later restart) at the nth request matching (method, path), and what the faulty
    run must end as (True: verified, False: not verified, None: either, as long as what it says is true)."""

    name: str
    rules: Sequence[Rule] = ()
    postgres: Sequence[tuple[str, str, int, PostgresAction]] = ()
    verified: bool | None = None
    verify: str = "checksum"
    threads: int = 4  # purge threads per task ([purge] threads_per_task)


@dataclass
class Outcome:
    schedule: str
    fired: list[str]
    verified: bool | None  # None: the faulty run raised (no certificate)
    error: str = ""
    findings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        state = {True: "verified", False: "not verified", None: f"raised {self.error}"}[self.verified]
        head = f"{self.schedule}: {state}; faults fired: {len(self.fired)} ({', '.join(sorted(set(self.fired)))})"
        return "\n  ".join([head, *self.findings])


@contextmanager
def spark_endpoint(spark: Any, url: str) -> Iterator[None]:
    """Executors' boto3 clients talk to ``url`` while the block runs: PySpark starts Python workers per distinct
    environment (SparkContext.environment is part of the worker key), so these workers are new ones, started with
    the endpoint, and the session's usual workers are left as they are."""
    with swapped(spark.sparkContext.environment, "AWS_ENDPOINT_URL", url):
        yield


class FaultCase:
    """One lake, its index and its report; ``run`` purges it under a schedule, checks, reruns, checks."""

    def __init__(
        self,
        backend: str,
        pg_dsn: str | None,
        postgres: LocalPostgres | None = None,
        versioned: bool = True,
        seed: int = 11,
        objects: int = 14,
    ) -> None:
        self.backend = backend
        self.postgres = postgres
        name = f"fl{uuid.uuid4().hex[:10]}"
        self.bucket, self.reports = name, f"{name}-reports"
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=self.bucket)
        s3.create_bucket(Bucket=self.reports)
        if versioned:
            s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        self.lake: SampleLake = generate_lake(
            bucket=self.bucket, objects=objects, users=8, records_per_object=12, seed=seed
        )
        self.lake.upload(s3)
        self.index = index_toml(backend, pg_dsn, table=f"faults-{name}")
        self.settings = self._settings()
        store = open_store(self.settings.index)
        try:
            index_lake(store, self.settings, self.lake)
            self.users = set(self.lake.users[:3])
            self.report: Report = build_report(
                store, self.settings, sorted(self.users), f"req-{name}", Pseudonymizer(KEY), force=True
            )
        finally:
            store.close()
        self.report_uri, self.digest = layout.write_report(s3, self.settings, self.report)
        # The certificate lists the objects in this order (one-user objects under a reference, resolved here).
        resolved = resolve_references(s3, self.settings, self.report, Pseudonymizer(KEY))
        self.paths = [target.s3path for target in purge_targets(resolved)]
        self.before = snapshot(s3, self.bucket)

    def toml(self, verify: str = "checksum", threads: int = 4) -> str:
        """The case's configuration ([purge] verify and threads_per_task as given)."""
        toml = settings_toml(self.bucket, self.index, f"s3://{self.reports}/")
        purge = f'[purge]\nverify = "{verify}"\nthreads_per_task = {threads}\n\n'
        return toml.replace("[[datasets]]", purge + "[[datasets]]", 1)

    def _settings(self, verify: str = "checksum", threads: int = 4) -> Settings:
        return parse_settings(tomllib.loads(self.toml(verify, threads)))

    def rules(self, schedule: Schedule) -> list[Rule]:
        """The schedule's rules for this case's buckets (fresh counters), and its PostgreSQL actions."""
        rules = [
            Rule(r.kind, r.method, r.path.format(lake=self.bucket, reports=self.reports), r.nth, r.delay, r.action)
            for r in schedule.rules
        ]
        if self.postgres is not None:
            for method, path, nth, action in schedule.postgres:
                pattern = path.format(lake=self.bucket, reports=self.reports)
                rules.insert(0, Rule("call", method, pattern, (nth,), action=getattr(self.postgres, action)))
        return rules

    def purge(self, spark: Any, settings: Settings) -> PurgeResult:
        return run_purge(spark, settings, self.report, KEY, (), "fault-suite", self.digest)

    def run(self, schedule: Schedule, proxy: FaultProxy, spark: Any = None) -> Outcome:
        settings = self._settings(schedule.verify, schedule.threads)
        proxy.set_rules(self.rules(schedule))
        result: PurgeResult | None = None
        error = ""
        with endpoint(proxy.endpoint), spark_endpoint(spark, proxy.endpoint) if spark else nullcontext():
            try:
                result = self.purge(spark, settings)
            except Exception as exc:  # recorded as a finding: the run must end in a certificate
                error = f"{type(exc).__name__}: {str(exc)[:200]} (raised in {_where(exc)})"
        fired = proxy.fired_kinds()
        proxy.set_rules([])
        if self.postgres is not None and any(action == "shut_down" for *_, action in schedule.postgres):
            self.postgres.restart()  # up again for the checks and the rerun, had the run ended before its restart
        outcome = Outcome(schedule.name, fired, None if result is None else result.verified, error)
        outcome.findings += self.check_faulty(schedule.verified, ended=result is not None)
        self.purge(spark, settings)
        outcome.findings += self.check_rerun()
        return outcome

    def check_faulty(self, verified: bool | None, ended: bool = True) -> list[str]:
        """What must hold after the run under faults (whose verification must say ``verified``, None: either). A run
        that raised (ended=False) may do so only before erasing anything: then there is nothing to certify, and
        the workflow's FAILED message says nothing was erased."""
        s3 = aws.client("s3")
        try:
            after = snapshot(s3, self.bucket)
            erased = assert_invariant(self.lake, self.settings, self.users, self.before, after, partial=True)
        except AssertionError as exc:
            return [f"a byte outside the users' records changed, or an object was half erased: {exc}"]
        if not ended:
            done = sum(erased.values())
            return [f"the run raised after erasing {done} records, without a certificate"] if done else []
        certificate = self.certificate()
        if certificate is None:
            return ["no certificate was written"]
        findings = []
        passed = certificate["verification"]["passed"]
        if verified is not None and passed != verified:
            findings.append(f"expected the faulty run {'' if verified else 'NOT '}verified")
        holding = versions_holding(s3, self.lake, self.settings, self.users)
        if passed and holding:
            findings.append(f"certified verified while versions still hold the users: {holding[:5]}")
        totals = certificate["totals"]
        expected = (sum(erased.values()), sum(1 for n in erased.values() if n))
        stated = (totals["lines_erased"], totals["objects_rewritten"])
        if stated != expected:
            wrong = {
                path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1]: (o["status"], o["lines_erased"], n)
                for path, o in zip(self.paths, certificate["objects"], strict=True)
                if o["lines_erased"] != (n := erased.get(path, 0))
            }
            findings.append(
                f"the certificate states {stated[0]} records in {stated[1]} objects erased; the lake shows"
                f" {expected[0]} in {expected[1]} (object: status, stated, erased): {wrong}"
            )
        return findings

    def check_rerun(self) -> list[str]:
        """What must hold after the rerun without faults."""
        s3 = aws.client("s3")
        findings = []
        certificate = self.certificate()
        if certificate is None:
            return ["the rerun wrote no certificate"]
        if not certificate["verification"]["passed"]:
            failed = [(o["object"], o["error"]) for o in certificate["objects"] if o["status"] == "failed"]
            remaining = certificate["verification"]["remaining"][:3]
            findings.append(f"the rerun without faults is not verified: failed {failed}, remaining {remaining}")
        after = snapshot(s3, self.bucket)
        try:
            assert_invariant(self.lake, self.settings, self.users, self.before, after)
        except AssertionError as exc:
            findings.append(f"after the rerun the lake breaks the invariant: {exc}")
        holding = versions_holding(s3, self.lake, self.settings, self.users)
        if holding:
            findings.append(f"after the rerun versions still hold the users: {holding[:5]}")
        expected = sum(len(lines) for lines in erased_lines(self.lake, self.users).values())
        if certificate["totals"]["lines_erased"] != expected:
            stated = certificate["totals"]["lines_erased"]
            findings.append(f"the rerun's certificate states {stated} records erased, the report named {expected}")
        findings += self._unrecorded_placeholders(after)
        return findings

    def _unrecorded_placeholders(self, after: dict[str, bytes]) -> list[str]:
        """Every blanked line of a current version must be covered by a placeholder record (else the vacuum keeps
        it forever)."""
        s3 = aws.client("s3")
        pending = file_batches(s3, self.settings, apply=False)
        missing = []
        for path, lines in erased_lines(self.lake, self.users).items():
            key = path.removeprefix(f"s3://{self.bucket}/")
            dataset = self.settings.dataset_for(self.bucket, key)
            if dataset is None or dataset.erase != "blank" or key not in after:
                continue
            etag = s3.head_object(Bucket=self.bucket, Key=key)["ETag"]
            spans = placeholder_spans(s3, self.settings, path, etag, pending.get(path, ()))
            covered = {first for first, _ in spans}
            if not set(lines) <= covered:
                missing.append(f"{key}: lines {sorted(set(lines) - covered)}")
        return [f"placeholders without a record (the vacuum would keep them): {missing}"] if missing else []

    def certificate(self) -> dict[str, Any] | None:
        stored = layout.read_or_none(aws.client("s3"), layout.certificate(self.settings, self.report.request_id))
        if stored is None:
            return None
        document: dict[str, Any] = orjson.loads(stored.body)
        return document


def _where(exc: BaseException) -> str:
    """The innermost lakepurge frames an exception passed through: where a run that raised gave up."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/lakepurge/" in f.filename]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-3:])) or "?"


def random_schedule(rng: random.Random, backend: str) -> Schedule:
    """A few faults on random requests: any kind, any method, on the lake's data keys, anything of the case's (the
    reports bucket too), or the DynamoDB API (the index, when it is the backend); PostgreSQL restarted or down."""
    paths = [r"^/{lake}" + DATA, r"^/{lake}" + DATA, r"^/{reports}/", r"^/{lake}"]
    rules = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(FAULT_KINDS)
        method = rng.choice(["GET", "GET", "PUT", "PUT", "HEAD", "DELETE", None])
        nth = tuple(sorted(rng.sample(range(1, 20), rng.randint(1, 4))))
        rules.append(Rule(kind, method, rng.choice(paths), nth, delay=rng.uniform(0.05, 1.5)))
    if backend == "dynamodb" and rng.random() < 0.5:  # its API is POST / (S3's POSTs name a bucket)
        nth = tuple(sorted(rng.sample(range(1, 40), rng.randint(1, 4))))
        rules.append(Rule(rng.choice(FAULT_KINDS), "POST", r"^/$", nth, delay=rng.uniform(0.05, 1.5)))
    postgres: list[tuple[str, str, int, PostgresAction]] = []
    if backend == "postgres" and rng.random() < 0.3:
        first = rng.randint(1, 8)
        if rng.random() < 0.5:
            postgres.append((rng.choice(["GET", "PUT"]), r"^/{lake}" + DATA, first, "restart"))
        else:  # down for a few requests
            postgres.append(("PUT", r"^/{lake}" + DATA, first, "shut_down"))
            postgres.append(("PUT", r"^/{lake}" + DATA, first + rng.randint(1, 4), "restart"))
    verify = rng.choice(["checksum", "checksum", "full"])
    threads = rng.choice([1, 4])
    described = "; ".join([*(r.describe() for r in rules), *(f"PostgreSQL {a[3]} at {a[:3]}" for a in postgres)])
    return Schedule(f"random [{described}] verify={verify} threads={threads}", rules, postgres, None, verify, threads)
