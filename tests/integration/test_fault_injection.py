"""Purges under S3 faults (503 SlowDown, 500, resets before and after S3 applied a request, interrupted bodies,
slow answers) and a PostgreSQL restart mid-purge, in-process and on Spark, on both index backends: after each run
no other user's byte changed, nothing is certified while data remains, the certificate counts what was erased, and
a rerun without faults ends verified (tests/support/faultsuite.py says exactly what is checked).

The short form: a handful of chosen schedules. bench/fault_stress.py runs many random ones (the long form)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakepurge.core import aws as clients
from lakepurge.core.s3io import head_object
from lakepurge.purge import engine, s3write
from lakepurge.purge.streams import Staged
from tests.support.faults import FaultProxy, Rule, endpoint
from tests.support.faultsuite import DATA, FaultCase, Schedule

pytestmark = pytest.mark.integration

LOST_PUTS = Schedule(
    "S3 applied the rewrites but their responses were lost",
    [Rule("reset_after", "PUT", r"^/{lake}" + DATA, (1, 3, 4, 6))],
    verified=True,
)
THROTTLED = Schedule(
    "throttling, errors, resets before forwarding and slow answers",
    [
        Rule("slowdown", "GET", r"^/{lake}" + DATA, (4,)),
        Rule("error500", "PUT", r"^/{lake}" + DATA, (2,)),
        Rule("reset_before", "HEAD", r"^/{lake}" + DATA, (2,)),
        Rule("error500", "PUT", r"^/{reports}/results/", (1,)),
        Rule("slow", "GET", r"^/{lake}\?versions", (1,), delay=0.3),
        Rule("reset_after", "DELETE", r"^/{lake}/(clicks|attachments|avatars)/[^?]*$", (1,)),  # a one-user object
    ],
    verified=True,
)
# One purge thread: the restart happens while the purge waits for its write, and is over when it calls the index
# next (with four, calls made while the server is down fail, once each: those objects fail and the rerun ends them).
POSTGRES_RESTART = Schedule(
    "PostgreSQL restarted while the purge writes",
    postgres=[("PUT", r"^/{lake}" + DATA, 2, "restart")],
    verified=True,
    threads=1,
)
# Down from the second rewrite to the fifth: three objects are rewritten, then fail to update the index. They are
# failed objects (nothing certified), and the certificate still counts what their rewrites erased.
POSTGRES_DOWN = Schedule(
    "PostgreSQL down while the purge writes",
    postgres=[("PUT", r"^/{lake}" + DATA, 2, "shut_down"), ("PUT", r"^/{lake}" + DATA, 5, "restart")],
    verified=False,
    threads=1,
)


@pytest.fixture(scope="module")
def proxy(moto_server: object) -> Iterator[FaultProxy]:
    running = FaultProxy(moto_server.endpoint)  # type: ignore[attr-defined]
    yield running
    running.stop()


def a_case(backend: str, request: pytest.FixtureRequest) -> FaultCase:
    request.getfixturevalue("aws")
    if backend == "postgres":
        server = request.getfixturevalue("postgres_server")
        return FaultCase(backend, request.getfixturevalue("pg_dsn"), server)
    return FaultCase(backend, None)


def unreadable_after_purge(case: FaultCase, reads: tuple[int, ...]) -> Schedule:
    """verify = "full" (every version read again); verification's GETs of one rewritten object are cut midway
    (`reads`: which of them). The purge's own GET of the current version comes first (the original, noncurrent after
    the rewrite, is deleted without a second read: the purge erased the users' records from it)."""
    key = next(o.s3path for o in case.report.objects if o.dataset == "reviews").split("/", 3)[3]
    rules = [Rule("cut_body", "GET", rf"^/{{lake}}/{key}(\?|$)", tuple(n + 1 for n in reads))]
    return Schedule(f"verification reads of one object cut {len(reads)} time(s)", rules, verify="full")


@pytest.mark.parametrize(
    ("backend", "schedule"),
    [
        pytest.param("postgres", LOST_PUTS, id="postgres-lost-answers"),
        pytest.param("dynamodb", LOST_PUTS, id="dynamodb-lost-answers"),
        pytest.param("postgres", POSTGRES_RESTART, id="postgres-restarted"),
        pytest.param("postgres", POSTGRES_DOWN, id="postgres-down"),
        pytest.param("dynamodb", THROTTLED, id="dynamodb-throttled-errors-resets-slow"),
    ],
)
def test_given_faults_during_an_inline_purge_when_it_ends_then_what_it_certifies_is_true_and_a_rerun_verifies(
    backend, schedule, proxy, request
):
    case = a_case(backend, request)

    outcome = case.run(schedule, proxy)

    assert outcome.fired, "no fault fired: the schedule tested nothing"
    assert not outcome.findings, outcome.describe()


@pytest.mark.parametrize(("reads", "verified"), [((1,), True), (tuple(range(1, 40)), False)], ids=["once", "always"])
def test_given_verification_reads_cut_when_the_purge_ends_then_it_retries_or_ends_not_verified_with_a_certificate(
    reads, verified, proxy, request, monkeypatch
):
    monkeypatch.setattr(engine, "VERIFY_BACKOFF", 0.05)  # the same attempts, shorter waits
    case = a_case("postgres", request)
    schedule = unreadable_after_purge(case, reads)
    schedule.verified = verified

    outcome = case.run(schedule, proxy)

    assert "cut_body" in outcome.fired
    assert not outcome.findings, outcome.describe()


@pytest.mark.parametrize(
    ("backend", "faults"),
    [("postgres", "lost answers, reads cut"), ("dynamodb", "lost answers, reads cut"), ("postgres", "index gone")],
)
def test_given_faults_during_a_spark_purge_when_it_ends_then_what_it_certifies_is_true_and_a_rerun_verifies(
    backend, faults, proxy, spark, request
):
    case = a_case(backend, request)
    if faults == "index gone":
        # PostgreSQL shut down after the second rewrite, until the run ends: the tasks that start later cannot open
        # their index connection (their objects fail, untouched), those running cannot update it.
        schedule = Schedule(faults, postgres=[("PUT", r"^/{lake}" + DATA, 2, "shut_down")], verified=False)
    else:
        schedule = Schedule(
            faults,
            [*LOST_PUTS.rules, *unreadable_after_purge(case, tuple(range(1, 40))).rules],
            verified=False,
            verify="full",
        )

    outcome = case.run(schedule, proxy, spark)

    assert outcome.fired, "no fault fired: the schedule tested nothing"
    assert not outcome.findings, outcome.describe()


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_given_a_rewrite_applied_whose_answer_was_lost_when_botocore_retries_it_then_the_writer_knows_its_own_version(
    versioned, proxy, aws
):
    s3 = clients.client("s3")
    s3.create_bucket(Bucket="lost-answers")
    if versioned:
        s3.put_bucket_versioning(Bucket="lost-answers", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="lost-answers", Key="a.jsonl", Body=b'{"user_id":"alice"}\n{"user_id":"bob"}\n')
    # S3 applies the PUT, the connection is reset before its answer; botocore's retry then meets the object changed
    # (412), by this very write. (A multipart completion retried is answered 200 by moto, which ignores If-Match
    # there: only S3's 412 would show that path.)
    proxy.set_rules([Rule("reset_after", "PUT", r"^/lost-answers/a\.jsonl$", (1,))])
    with endpoint(proxy.endpoint):
        through_proxy = clients.client("s3")
        head = head_object(through_proxy, "lost-answers", "a.jsonl")
        written = s3write.write_in_place(through_proxy, head, Staged.of([b'{}\n{"user_id":"bob"}\n']), {})

    assert proxy.fired_kinds() == ["reset_after"]
    current = s3.head_object(Bucket="lost-answers", Key="a.jsonl", ChecksumMode="ENABLED")
    assert (written.etag, written.checksum) == (current["ETag"], current["ChecksumCRC64NVME"])
    assert written.version_id == (current["VersionId"] if versioned else None)
