"""Verification without a second read: the purge verifies the bytes it produces, writes them with their CRC64NVME,
and verification accepts a version without reading it only when S3 states that checksum for that version.

A concurrent writer between the write and the check must never pass for the purge's own bytes."""

from __future__ import annotations

import base64
import logging
import threading
import tomllib
import uuid

import orjson
import pytest

from lakepurge.core import aws as clients
from lakepurge.core.config import parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.purge import engine, job, listed_proof
from lakepurge.reports.report import build_report
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

KEY = HASH_KEY.encode()
USER = "alice-7f3e"


def jsonl(*users: str) -> bytes:
    return b"".join(orjson.dumps({"user_id": u, "n": i, "note": "synthetic"}) + b"\n" for i, u in enumerate(users))


ORIGINAL = jsonl("bob", USER, "carol", USER, "dave")
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/7d2c5d9e-synthetic"


@pytest.fixture(params=[False, True], ids=["unversioned", "versioned"])
def lake(request, aws, pg_dsn, monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    bucket = f"ck-{uuid.uuid4().hex[:10]}"
    s3 = clients.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=f"{bucket}-reports")
    if request.param:
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://{bucket}-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n"
        f'[[datasets]]\nname = "events"\nlocation = "s3://{bucket}/events/"\nformat = "jsonl"\n'
        'id_fields = ["user_id"]\n'
    )
    cfg = parse_settings(tomllib.loads(toml))
    store = open_store(cfg.index)
    for key in ("events/a.jsonl", "events/b.jsonl"):
        s3.put_object(Bucket=bucket, Key=key, Body=ORIGINAL)
        index_object(s3, store, cfg, bucket, key)
    run_reconcile(None, cfg)  # the coverage a certified purge needs
    yield s3, cfg, store, bucket
    store.close()


def purge_with(cfg, store, between_write_and_check=None):
    """run_purge (no Spark: the inline path), with something done to each object (given its key) after its purge
    wrote it and before its verification (its own, or the listing of the task's objects: listed_proof); returns the
    result and the keys verification read again."""
    report = build_report(store, cfg, [USER], f"req-{uuid.uuid4().hex[:8]}", Pseudonymizer(KEY), force=True)
    reads: list[str] = []
    verify, scan = job.verify_object, engine.find_user_lines
    verifying = threading.local()

    def counting_scan(s3, settings, dataset, head, users):
        if getattr(verifying, "now", False):
            reads.append(head.key)
        return scan(s3, settings, dataset, head, users)

    def verify_after(s3, settings, dataset, s3path, *args, **kwargs):
        if between_write_and_check is not None:
            between_write_and_check(s3path.split("/", 3)[3])
        verifying.now = True
        try:
            return verify(s3, settings, dataset, s3path, *args, **kwargs)
        finally:
            verifying.now = False

    def list_after(s3, bucket, keys):
        keys = list(keys)
        for key in keys if between_write_and_check is not None else ():
            between_write_and_check(key)
        return listed(s3, bucket, keys)

    listed = job.listed_etags
    job.verify_object, engine.find_user_lines, job.listed_etags = verify_after, counting_scan, list_after
    try:
        return job.run_purge(None, cfg, report, KEY), reads
    finally:
        job.verify_object, engine.find_user_lines, job.listed_etags = verify, scan, listed


def test_given_a_purge_when_verified_by_checksum_then_no_rewritten_object_is_read_again_and_it_is_certified(lake):
    s3, cfg, store, bucket = lake

    result, reads = purge_with(cfg, store)

    assert result.verified, result.remaining
    assert [o.status for o in result.outcomes] == ["erased", "erased"]
    assert reads == []  # each version was proven by its checksum and version id, none read again
    for key in ("events/a.jsonl", "events/b.jsonl"):
        head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert USER.encode() not in body
        assert body.count(b"\n") == ORIGINAL.count(b"\n")  # blanked in place: every other line kept
        outcome = next(o for o in result.outcomes if o.s3path.endswith(key))
        assert head["ChecksumCRC64NVME"] == outcome.after_checksum
    certificate = orjson.loads(
        s3.get_object(Bucket=f"{bucket}-reports", Key=result.certificate.split("/", 3)[3])["Body"].read()
    )
    assert certificate["verification"]["passed"] is True
    assert "CRC64NVME" in certificate["verification"]["versions_checked"]


def requests_made(s3):
    """The keys of the HEADs and the prefixes of the listings made through the purge's client (aws.client's, shared)
    while the block runs."""
    made: list[tuple[str, str]] = []

    def note(params, model, **_):
        made.append((model.name, params.get("Key", params.get("Prefix", ""))))

    class Requests:
        def __enter__(self):
            s3.meta.events.register("provide-client-params.s3.*", note, unique_id="verification-requests")
            return made

        def __exit__(self, *_):
            s3.meta.events.unregister("provide-client-params.s3.*", unique_id="verification-requests")

    return Requests()


def purge_counting_requests(s3, cfg, store):
    """purge_with, and the HEADs (their keys) and listings (their prefixes) of the lake's objects it made."""
    with requests_made(s3) as made:
        result, reads = purge_with(cfg, store)
    heads = [key for name, key in made if name == "HeadObject" and key.startswith("events/")]
    listings = [prefix for name, prefix in made if name == "ListObjectsV2" and prefix.startswith("events/")]
    return result, reads, heads, listings


@pytest.mark.parametrize("lake", [False], ids=["unversioned"], indirect=True)
def test_given_a_bucket_without_versioning_when_verified_by_checksum_then_one_listing_proves_the_writes_not_a_head_each(
    lake,
):
    s3, cfg, store, _ = lake

    result, reads, heads, listings = purge_counting_requests(s3, cfg, store)

    assert result.verified, result.remaining
    assert [o.status for o in result.outcomes] == ["erased", "erased"]
    assert all(o.after_etag_md5 for o in result.outcomes)
    assert reads == []
    assert heads == []  # neither object's version was asked for on its own
    assert listings == ["events/"]  # one listing named both ETags


@pytest.mark.parametrize("lake", [False], ids=["unversioned"], indirect=True)
def test_given_objects_the_listing_does_not_reach_when_verified_then_each_is_proven_by_its_own_head(lake, monkeypatch):
    # Pages of one key and a key between the two objects: the one page the two objects are worth names a.jsonl only;
    # b.jsonl, not reached, is asked for on its own, as it was before the listing.
    s3, cfg, store, bucket = lake
    s3.put_object(Bucket=bucket, Key="events/a2.txt", Body=b"not a dataset object")
    monkeypatch.setattr(listed_proof, "PAGE_KEYS", 1)

    result, reads, heads, _ = purge_counting_requests(s3, cfg, store)

    assert result.verified, result.remaining
    assert reads == []
    assert heads == ["events/b.jsonl"]


@pytest.mark.parametrize("lake", [True], ids=["versioned"], indirect=True)
def test_given_a_versioned_bucket_when_verified_by_checksum_then_the_versions_listing_proves_the_write_without_a_head(
    lake,
):
    # The listing of the key's versions (which verification makes anyway, for the noncurrent ones) names the purge's
    # own write as the current version: its version id and the checksum S3 stated back for it are the proof.
    s3, cfg, store, _ = lake

    result, reads, heads, _ = purge_counting_requests(s3, cfg, store)

    assert result.verified, result.remaining
    assert all(o.after_checksum_stated and o.after_version for o in result.outcomes)
    assert reads == []
    assert heads == []


# Versioned only: in a bucket without versioning the objects are verified by one listing after the purges.
@pytest.mark.parametrize("lake", [True], ids=["versioned"], indirect=True)
def test_given_a_purge_of_several_objects_when_an_objects_verification_is_slow_then_the_next_purge_does_not_wait_for_it(
    lake,
):
    # One purge thread: each object is verified after its own write, by the task's verifier thread, while the purge
    # thread goes on to the next object (its HEAD overlaps the other objects' reads and writes instead of holding a
    # purge thread). a.jsonl's verification waits until b.jsonl's purge has started: it would never start if the
    # purge thread verified a.jsonl itself.
    _, cfg, store, _ = lake
    one_thread = cfg.model_copy(update={"purge": cfg.purge.model_copy(update={"threads_per_task": 1})})
    steps: list[str] = []
    purge_object = job.purge_object
    next_purge_started = threading.Event()

    def purging(s3_, store_, settings, target, *args, **kwargs):
        name = target.s3path.rsplit("/", 1)[1]
        steps.append(f"purge {name}")
        if name == "b.jsonl":
            next_purge_started.set()
        return purge_object(s3_, store_, settings, target, *args, **kwargs)

    def slow_verification(key: str) -> None:
        name = key.rsplit("/", 1)[1]
        if name == "a.jsonl":
            steps.append(f"verify a.jsonl, b.jsonl's purge started: {next_purge_started.wait(5)}")
        else:
            steps.append(f"verify {name}")

    job.purge_object = purging
    try:
        result, reads = purge_with(one_thread, store, slow_verification)
    finally:
        job.purge_object = purge_object

    assert result.verified, result.remaining
    assert "verify a.jsonl, b.jsonl's purge started: True" in steps
    assert steps.index("purge a.jsonl") < steps.index("verify a.jsonl, b.jsonl's purge started: True")
    assert steps.index("purge b.jsonl") < steps.index("verify b.jsonl")
    assert reads == []


def test_given_a_concurrent_overwrite_between_the_write_and_the_check_when_verified_then_it_fails(lake, caplog):
    # A writer that read the object before the purge (a compaction, a late backfill) puts the old bytes back after
    # the purge wrote its own: S3 now stores another checksum than that of the verified bytes.
    s3, cfg, store, bucket = lake

    def stale_writer_puts_the_old_bytes_back(key):
        if key == "events/a.jsonl":
            s3.put_object(Bucket=bucket, Key=key, Body=ORIGINAL)

    with caplog.at_level(logging.WARNING):
        result, reads = purge_with(cfg, store, stale_writer_puts_the_old_bytes_back)

    assert not result.verified
    assert [(r["object"], r["lines"]) for r in result.remaining] == [(f"s3://{bucket}/events/a.jsonl", 2)]
    assert "events/a.jsonl" in reads  # not proven: read again, and the user was found
    assert "events/b.jsonl" not in reads
    certificate = orjson.loads(
        s3.get_object(Bucket=f"{bucket}-reports", Key=result.certificate.split("/", 3)[3])["Body"].read()
    )
    assert certificate["verification"]["passed"] is False
    assert USER not in caplog.text


# Unversioned only: in a versioned bucket any overwrite is a new version, which the previous test covers.
@pytest.mark.parametrize("lake", [False], ids=["unversioned"], indirect=True)
def test_given_a_stored_checksum_that_differs_from_the_verified_bytes_when_verified_then_it_fails(lake, caplog):
    # Same bytes, same ETag, but S3 states a checksum other than the purge's: the version is not taken as proven.
    # SSE-KMS objects, whose ETag S3 does not make the MD5 of their bytes: a listing's ETag proves nothing of them, and
    # each is verified by its own HEAD (the stored checksum), which this test is about.
    s3, cfg, store, bucket = lake
    for key in ("events/a.jsonl", "events/b.jsonl"):
        s3.put_object(Bucket=bucket, Key=key, Body=ORIGINAL, ServerSideEncryption="aws:kms", SSEKMSKeyId=KMS_KEY)
        index_object(s3, store, cfg, bucket, key)

    def rewrite_same_bytes_with_another_checksum(key):
        if key != "events/a.jsonl":
            return
        body = s3.get_object(Bucket=bucket, Key="events/a.jsonl")["Body"].read()
        other = base64.b64encode((12345).to_bytes(8, "big")).decode()
        # moto stores a stated checksum without checking it (S3 would refuse it): the closest this test can get to
        # "the stored checksum differs from that of the bytes verified"
        s3.put_object(
            Bucket=bucket, Key="events/a.jsonl", Body=body, ChecksumAlgorithm="CRC64NVME", ChecksumCRC64NVME=other
        )

    with caplog.at_level(logging.WARNING):
        result, reads = purge_with(cfg, store, rewrite_same_bytes_with_another_checksum)

    assert not any(o.after_etag_md5 for o in result.outcomes)  # written SSE-KMS, as they were
    # Not taken as proven: read again, and the read itself refuses bytes that do not match the stated checksum.
    assert reads == ["events/a.jsonl"]
    assert not result.verified
    assert [(r["object"], r["reason"]) for r in result.remaining] == [
        (f"s3://{bucket}/events/a.jsonl", engine.UNREADABLE)
    ]
    assert "stored checksum is not that of the bytes verified" in caplog.text
