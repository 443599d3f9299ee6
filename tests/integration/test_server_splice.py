"""Server-side splice of large objects: only the windows around the erased records pass through the purge, the rest
is copied inside S3 from the version read. Every result is held to what today's whole-object rewrite gives for the
same bytes (byte for byte; Parquet row for row, with the same schema, types and codecs), written only over the
version read, with the object's attributes, and verified in both modes."""

from __future__ import annotations

import base64
import functools
import gzip
import io
import itertools
import random
import threading
import tomllib
import uuid
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.core import aws
from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.core.s3io import head_object
from lakepurge.index import open_store
from lakepurge.index.base import NewVersion
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object, scan_object
from lakepurge.purge import engine, job
from lakepurge.purge.certificate import READ_AGAIN, PurgeResult
from lakepurge.purge.engine import PurgeTarget, purge_object
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl, rewrite_parquet
from lakepurge.records.formats import group_records
from lakepurge.records.record_map import RecordMap, RecordMapBuilder
from lakepurge.reports.report import build_report
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

MiB = 1 << 20
KEY = HASH_KEY.encode()
ALICE, BOB = "alice-01", "bob-0002"  # as wide as every other id: a target chosen by offset stays where it was
MIN_BYTES = 16 * MiB


def settings_for(
    bucket: str, pg_dsn: str, verify: str = "changed-ranges", fmt: str = "jsonl", erase: str | None = None
) -> Settings:
    toml = (
        f'[index]\n{index_toml("postgres", pg_dsn)}\n\n[reports]\nlocation = "s3://{bucket}-reports/"\n\n'
        "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n"
        f'[purge.splice]\nmin_bytes = {MIN_BYTES}\nverify = "{verify}"\n\n'
        f'[[datasets]]\nname = "events"\nlocation = "s3://{bucket}/events/"\nformat = "{fmt}"\n'
        'id_fields = ["user_id"]\n' + (f'erase = "{erase}"\n' if erase else "")
    )
    return parse_settings(tomllib.loads(toml))


@pytest.fixture
def lake(aws, pg_dsn, monkeypatch):
    """A bucket and its reports bucket; make(verify, versioned, fmt) gives the settings and an open index."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    bucket = f"sp-{uuid.uuid4().hex[:10]}"
    s3 = aws_s3()
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=f"{bucket}-reports")
    stores = []

    def make(verify: str = "changed-ranges", versioned: bool = False, fmt: str = "jsonl", erase: str | None = None):
        if versioned:
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        cfg = settings_for(bucket, pg_dsn, verify, fmt, erase)
        store = open_store(cfg.index)
        stores.append(store)
        return s3, bucket, cfg, store

    yield make
    for store in stores:
        store.close()


def aws_s3() -> Any:
    return aws.client("s3")


def record(user: str, n: int, rnd: random.Random) -> bytes:
    # long records (~1.5 KB): the index holds a row per record, and what is tested here is bytes, not rows
    note = base64.b64encode(rnd.randbytes(rnd.randrange(800, 1600))).decode()  # gzip takes off only a quarter
    return orjson.dumps({"user_id": user, "n": n, "note": note}) + b"\n"


@functools.cache
def jsonl_source(size: int) -> tuple[bytes, RecordMap]:
    """JSON Lines of about `size` bytes, every id 8 characters wide, and the record map the indexer would make."""
    rnd = random.Random(size)
    lines, total, n = [], 0, 0
    while total < size:
        line = record(f"u{rnd.randrange(10**7):07d}", n, rnd)
        lines.append(line)
        total += len(line)
        n += 1
    data = b"".join(lines)
    builder = RecordMapBuilder(len(data))
    group_records(io.BytesIO(data), "a.jsonl", "jsonl", ["user_id"], 16 * MiB, record_map=builder)
    return data, builder.build("", None)


def with_user(data: bytes, lines: list[int], user: str) -> bytes:
    """The bytes with the id of each given line replaced by `user` (same width: every offset stays)."""
    parts = data.split(b"\n")
    for line in lines:
        record_ = orjson.loads(parts[line])
        record_["user_id"] = user
        parts[line] = orjson.dumps(record_)
    return b"\n".join(parts)


def line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset)


def whole_rewrite_jsonl(cfg: Settings, data: bytes, lines: list[int], users: set[str]) -> bytes:
    """Today's whole-object rewrite of the same bytes (the reference a splice must equal)."""
    dataset = cfg.dataset_named("events")
    owner = Ownership(dataset, users)
    return rewrite_jsonl(io.BytesIO(data), False, lines, owner, drop=dataset.erase == "drop").reader().read()


def purge(cfg: Settings, store, users: list[str], covered: bool = True) -> tuple[PurgeResult, list[str], dict]:
    """The purge of a request (run_purge inline: report, purge, verification, certificate), with the objects
    verification read again, and the certificate."""
    if covered:
        run_reconcile(None, cfg)  # the coverage a certified request needs
    report = build_report(store, cfg, users, f"req-{uuid.uuid4().hex[:8]}", Pseudonymizer(KEY), force=True)
    reads: list[str] = []
    scan, verify = engine.find_user_lines, job.verify_object
    in_verification = threading.local()

    def counting(s3, settings, dataset, head, wanted):
        if getattr(in_verification, "now", False):
            reads.append(head.key)
        return scan(s3, settings, dataset, head, wanted)

    def verifying(*args, **kwargs):
        in_verification.now = True
        try:
            return verify(*args, **kwargs)
        finally:
            in_verification.now = False

    job.verify_object, engine.find_user_lines = verifying, counting
    try:
        result = job.run_purge(None, cfg, report, KEY)
    finally:
        job.verify_object, engine.find_user_lines = verify, scan
    s3 = aws_s3()
    bucket, key = result.certificate.removeprefix("s3://").split("/", 1)
    certificate = orjson.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return result, reads, certificate


def index_matches_a_fresh_read(s3, cfg: Settings, store, bucket: str, key: str) -> None:
    """The index the splice moved without reading the object is what reading it gives."""
    head = head_object(s3, bucket, key)
    assert head is not None
    held = store.get_object(f"s3://{bucket}/{key}")
    fresh = scan_object(s3, cfg, cfg.dataset_named("events"), head)
    assert (held.etag, held.version_id) == (head.etag, head.version_id)
    assert held.lines_by_user == fresh.lines_by_user
    assert held.records == fresh.records


def map_fits(store, s3path: str, body: bytes, etag: str) -> None:
    """The record map kept for the new version names that version and points at line starts of its bytes."""
    found = RecordMap.decode(store.record_map(s3path))
    assert found is not None and found.etag == etag and found.size == len(body) and len(found.offsets) > 1
    for line, offset in zip(found.lines, found.offsets, strict=True):
        assert offset == 0 or body[offset - 1 : offset] == b"\n"
        assert body.count(b"\n", 0, offset) == line


def test_given_a_64_mib_json_lines_object_when_lines_near_its_start_middle_end_and_edges_are_erased_then_only_the_windows_move_and_the_result_is_todays_rewrite(  # noqa: E501
    lake,
):
    s3, bucket, cfg, store = lake(versioned=True)
    data, record_map = jsonl_source(64 * MiB)
    last = data.count(b"\n") - 1
    edge = record_map.lines[len(record_map.lines) // 3]  # the first line of a window
    targets = sorted(
        {
            2,  # near the start
            last // 2,  # the middle
            last - 1,  # near the end
            line_at(data, 32 * MiB),  # the line across a 16 MiB part boundary of today's multipart write
            edge,
            edge - 1,  # the last line of the window before: two windows side by side
        }
    )
    data = with_user(data, targets, ALICE)
    key = "events/big.jsonl"
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=data,
        ContentType="application/x-ndjson",
        Metadata={"pipeline": "ingest-7"},
        Tagging="team=data&tier=raw",
        StorageClass="STANDARD_IA",
        ServerSideEncryption="AES256",
    )
    before = head_object(s3, bucket, key)
    index_object(s3, store, cfg, bucket, key)

    result, reads, certificate = purge(cfg, store, [ALICE])

    (outcome,) = result.outcomes
    assert outcome.status == "erased" and outcome.erased_lines == targets
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == whole_rewrite_jsonl(cfg, data, targets, {ALICE})
    splice = outcome.splice
    assert splice is not None and splice["basis"] == "index" and splice["copy_parts"] >= 3
    moved = splice["read_bytes"] + splice["uploaded_bytes"]
    assert moved < len(data) // 2 and splice["copied_bytes"] > len(data) // 2  # most of it never left S3
    # only the version written is left (the one read held the users and was deleted), with every attribute kept
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]
    assert [v["VersionId"] for v in versions] == [outcome.after_version] != [before.version_id]
    after = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert after["ContentType"] == "application/x-ndjson" and after["Metadata"] == {"pipeline": "ingest-7"}
    assert after["StorageClass"] == "STANDARD_IA" and after["ServerSideEncryption"] == "AES256"
    assert s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"] == [
        {"Key": "team", "Value": "data"},
        {"Key": "tier", "Value": "raw"},
    ]
    assert after["ChecksumCRC64NVME"] == outcome.after_checksum  # what S3 states for the version written
    # verified without reading the object again: the windows were read before the write, the index covers the rest
    assert result.verified and reads == []
    (entry,) = certificate["objects"]
    assert entry["splice"]["copied_ranges_proven_by"].startswith("changed-ranges: the index read the version whole")
    assert certificate["coverage"][0]["complete"] is True
    index_matches_a_fresh_read(s3, cfg, store, bucket, key)
    map_fits(store, f"s3://{bucket}/{key}", body, after["ETag"])

    # a second request on the same object: spliced again, with the map the first one moved
    second = [last // 4, last // 4 + 1]
    s3.put_object(Bucket=bucket, Key="events/other.jsonl", Body=b"")  # something else changes in the dataset
    expected = whole_rewrite_jsonl(cfg, with_user(body, second, BOB), second, {BOB})
    s3.put_object(Bucket=bucket, Key=key, Body=with_user(body, second, BOB))
    index_object(s3, store, cfg, bucket, key)
    result, reads, _ = purge(cfg, store, [BOB])
    (outcome,) = result.outcomes
    assert outcome.splice is not None and outcome.erased_lines == second
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == expected
    assert result.verified and reads == []


@pytest.mark.parametrize(
    ("verify", "covered", "read_again"),
    [("changed-ranges", True, False), ("changed-ranges", False, True), ("full", True, True)],
    ids=["changed-ranges", "changed-ranges-without-coverage", "full"],
)
def test_given_a_spliced_object_when_verified_then_it_is_read_again_unless_its_copied_ranges_are_proven(
    lake, verify, covered, read_again
):
    s3, bucket, cfg, store = lake(verify=verify)
    data, _ = jsonl_source(24 * MiB)
    last = data.count(b"\n") - 1
    data = with_user(data, [last // 3], ALICE)
    s3.put_object(Bucket=bucket, Key="events/big.jsonl", Body=data)
    index_object(s3, store, cfg, bucket, "events/big.jsonl")

    result, reads, certificate = purge(cfg, store, [ALICE], covered=covered)

    (outcome,) = result.outcomes
    assert outcome.status == "erased" and outcome.splice is not None
    assert reads == (["events/big.jsonl"] if read_again else [])
    assert not result.remaining  # read or proven, nothing of the user is left
    statement = certificate["objects"][0]["splice"]
    assert statement["verify"] == verify
    if read_again:
        assert statement["copied_ranges_proven_by"] == READ_AGAIN
    assert result.verified is covered  # no request is certified on incomplete coverage, however it was read


def test_given_the_index_missed_a_record_in_a_window_when_spliced_then_the_object_is_read_whole_and_it_goes_too(lake):
    s3, bucket, cfg, store = lake()
    data, record_map = jsonl_source(24 * MiB)
    named = record_map.lines[5] + 10
    missed = [named + 1, record_map.lines[-1] + 3]  # one in the named line's window, one far off in a copied range
    data = with_user(data, [named, *missed], ALICE)
    key = "events/big.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    index_object(s3, store, cfg, bucket, key)
    held = store.get_object(f"s3://{bucket}/{key}")
    # an index that missed two of her records in this very version: their rows dropped, the version kept
    same = NewVersion(held.etag, held.version_id, held.last_modified)
    assert store.apply_erasure(held.s3path, held.etag, same, missed)
    assert store.get_object(held.s3path).lines_by_user[ALICE] == [named]

    outcome = purge_object(s3, store, cfg, PurgeTarget(held.s3path, "events", held.etag, (named,)), {ALICE})

    assert outcome.status == "erased" and outcome.splice is not None and outcome.splice["basis"] == "read"
    assert outcome.erased_lines == sorted([named, *missed])
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == whole_rewrite_jsonl(cfg, data, sorted([named, *missed]), {ALICE})
    index_matches_a_fresh_read(s3, cfg, store, bucket, key)


def test_given_a_dataset_that_drops_records_when_spliced_then_later_lines_move_up_in_the_object_and_the_index(lake):
    s3, bucket, cfg, store = lake(erase="drop")
    data, record_map = jsonl_source(24 * MiB)
    targets = [record_map.lines[2] + 5, record_map.lines[2] + 6, record_map.lines[-3] + 1]
    data = with_user(data, targets, ALICE)
    key = "events/big.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    index_object(s3, store, cfg, bucket, key)
    held = store.get_object(f"s3://{bucket}/{key}")

    outcome = purge_object(s3, store, cfg, PurgeTarget(held.s3path, "events", held.etag, tuple(targets)), {ALICE})

    assert outcome.status == "erased" and outcome.splice is not None and outcome.erased_lines == targets
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == whole_rewrite_jsonl(cfg, data, targets, {ALICE})
    assert body.count(b"\n") == data.count(b"\n") - 3
    index_matches_a_fresh_read(s3, cfg, store, bucket, key)
    map_fits(store, held.s3path, body, s3.head_object(Bucket=bucket, Key=key)["ETag"])


class _WriterDuringCopy:
    """The S3 client, with someone else's write landing while the splice copies its first part."""

    def __init__(self, s3, write) -> None:
        self._s3 = s3
        self._write = write
        self.copies = 0

    def upload_part_copy(self, **kwargs):
        self.copies += 1
        if self.copies == 1:
            self._write()
        return self._s3.upload_part_copy(**kwargs)

    def __getattr__(self, name):
        return getattr(self._s3, name)


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_given_a_write_by_someone_else_during_the_splice_when_completing_then_theirs_is_not_overwritten(
    lake, versioned
):
    s3, bucket, cfg, store = lake(versioned=versioned)
    data, _ = jsonl_source(24 * MiB)
    last = data.count(b"\n") - 1
    data = with_user(data, [last // 2], ALICE)
    key = "events/big.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    index_object(s3, store, cfg, bucket, key)
    held = store.get_object(f"s3://{bucket}/{key}")
    theirs = with_user(data, [last // 2 + 7], ALICE)  # a writer adds a record of hers elsewhere
    watched = _WriterDuringCopy(s3, lambda: s3.put_object(Bucket=bucket, Key=key, Body=theirs))

    target = PurgeTarget(f"s3://{bucket}/{key}", "events", held.etag, tuple(held.lines_by_user[ALICE]))
    outcome = purge_object(watched, store, cfg, target, {ALICE})

    # the first splice was refused (its version was replaced); the purge read the new version and erased it
    assert outcome.status == "erased" and outcome.stale_index
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == whole_rewrite_jsonl(cfg, theirs, [last // 2, last // 2 + 7], {ALICE})
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []  # the refused upload was aborted


def csv_source() -> tuple[bytes, list[int], int]:
    """CSV of ~20 MiB with quoted records spanning lines; one of alice's spans the first MiB boundary, where a
    checkpoint would fall if lines were records. Returns the bytes, alice's record lines and that record's line."""
    rnd = random.Random(5)
    out = [b"user_id,n,note\n"]
    size, n, line = len(out[0]), 0, 1
    alice, crossing = [], -1
    while size < 20 * MiB:
        user = f"u{rnd.randrange(10**7):07d}"
        note = base64.b64encode(rnd.randbytes(rnd.randrange(500, 1000)))
        if crossing < 0 and size > MiB - 300:
            user, note, crossing = ALICE, b'"spans\n""quoted""\n\n,,lines ' + note + b'"', line
        elif n % 12_000 == 17:
            user = ALICE
        elif n % 51 == 0:
            note = b'"a note\nof two lines"'
        row = b"%s,%d,%s\n" % (user.encode(), n, note)
        if user == ALICE:
            alice.append(line)
        out.append(row)
        size += len(row)
        line += row.count(b"\n")
        n += 1
    return b"".join(out), alice, crossing


def test_given_csv_with_a_quoted_record_across_a_window_edge_when_spliced_then_it_is_todays_rewrite(lake):
    s3, bucket, cfg, store = lake(fmt="csv")
    data, alice, crossing = csv_source()
    key = "events/big.csv"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    index_object(s3, store, cfg, bucket, key)
    record_map = RecordMap.decode(store.record_map(f"s3://{bucket}/{key}"))
    assert not [line for line in record_map.lines if crossing < line < crossing + 4]  # no checkpoint inside it
    held = store.get_object(f"s3://{bucket}/{key}")
    assert sorted(held.lines_by_user[ALICE]) == alice

    target = PurgeTarget(f"s3://{bucket}/{key}", "events", held.etag, tuple(alice))
    outcome = purge_object(s3, store, cfg, target, {ALICE})

    assert outcome.status == "erased" and outcome.splice is not None and outcome.erased_lines == alice
    owner = Ownership(cfg.dataset_named("events"), {ALICE})
    expected = rewrite_csv(io.BytesIO(data), False, alice, owner, False, 16 * MiB).reader().read()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == expected and body.count(b"\n") == data.count(b"\n")
    assert dict(outcome.placeholder_spans)[crossing] == 4  # the record's four lines, all blanked
    index_matches_a_fresh_read(s3, cfg, store, bucket, key)


def gzip_members(data: bytes, every: int) -> bytes:
    """Gzip of one member per `every` bytes of lines (as writers that append a member per flush make it)."""
    cuts = [0]
    while cuts[-1] + every < len(data):
        cuts.append(data.index(b"\n", cuts[-1] + every) + 1)
    cuts.append(len(data))
    return b"".join(gzip.compress(data[a:b], 6) for a, b in itertools.pairwise(cuts))


@pytest.mark.parametrize("members", ["several", "one"])
def test_given_gzip_json_lines_when_purged_then_several_members_are_spliced_and_one_member_is_rewritten_whole(
    lake, members
):
    s3, bucket, cfg, store = lake()
    data, _ = jsonl_source(24 * MiB)  # ~18 MiB compressed
    last = data.count(b"\n") - 1
    targets = [3, last // 2]
    data = with_user(data, targets, ALICE)
    stored = gzip_members(data, 512 * 1024) if members == "several" else gzip.compress(data, 6)
    key = "events/big.jsonl.gz"
    s3.put_object(Bucket=bucket, Key=key, Body=stored, ContentEncoding="identity")
    index_object(s3, store, cfg, bucket, key)
    held = store.get_object(f"s3://{bucket}/{key}")

    target = PurgeTarget(f"s3://{bucket}/{key}", "events", held.etag, tuple(held.lines_by_user[ALICE]))
    outcome = purge_object(s3, store, cfg, target, {ALICE})

    assert outcome.status == "erased" and outcome.erased_lines == targets
    new = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert gzip.decompress(new) == whole_rewrite_jsonl(cfg, data, targets, {ALICE})
    if members == "several":
        assert outcome.splice is not None and outcome.splice["copied_bytes"] > len(stored) // 3
        assert new[: 512 * 1024 // 4] == stored[: 512 * 1024 // 4] or outcome.erased_lines[0] < 50
        index_matches_a_fresh_read(s3, cfg, store, bucket, key)
    else:  # one member cannot be cut: rewritten whole, as before
        assert outcome.splice is None


def parquet_source() -> bytes:
    """~48 MiB of Parquet in 8 row groups (pyarrow), each column with its own codec, one of them stored plain."""
    rnd = random.Random(3)
    rows = 40_000
    users = [f"u{rnd.randrange(10**7):07d}" for _ in range(rows)]
    for row in (100, 200, 31_000, 32_000):  # in row groups 0 and 6
        users[row] = ALICE
    table = pa.table(
        {
            "user_id": users,
            "n": pa.array(range(rows), pa.int64()),
            "blob": [rnd.randbytes(1100) for _ in range(rows)],
            "at": pa.array([1_700_000_000_000_000 + 1000 * i for i in range(rows)], pa.timestamp("us", tz="UTC")),
            "score": [rnd.random() for _ in range(rows)],
        }
    )
    sink = io.BytesIO()
    codecs = {"user_id": "zstd", "n": "snappy", "blob": "none", "at": "gzip", "score": "snappy"}
    pq.write_table(table, sink, row_group_size=rows // 8, compression=codecs)
    return sink.getvalue()


def spark_source(spark, tmp_path) -> bytes:
    """Parquet written by Spark (parquet-mr: INT96 timestamps, its own footer), in row groups of ~6 MiB."""
    frame = spark.range(0, 48_000).selectExpr(
        "CASE WHEN id IN (5, 30000, 30001) THEN 'alice-01' ELSE concat('u', lpad(cast(id % 9999991 AS string), 7,"
        " '0')) END AS user_id",
        "id AS n",
        "concat_ws('', transform(sequence(1, 7), k -> sha2(cast(id * 10 + k AS string), 512))) AS note",
        "cast(id AS timestamp) AS at",
    )
    path = str(tmp_path / "spark")
    frame.coalesce(1).write.option("parquet.block.size", 6 * MiB).parquet(path)
    (written,) = [p for p in (tmp_path / "spark").iterdir() if p.suffix == ".parquet"]
    return written.read_bytes()


def read_by_spark(spark, tmp_path, body: bytes) -> tuple[int, int, int]:
    """Spark reads the file whole (every column decoded): its rows, the sum of n, and alice's rows."""
    path = tmp_path / f"read-{uuid.uuid4().hex[:6]}.parquet"
    path.write_bytes(body)
    from pyspark.sql import functions as F

    frame = spark.read.parquet(str(path))
    (row,) = frame.select(
        F.count("*").alias("rows"),
        F.sum("n").alias("total"),
        F.count_if(F.col("user_id") == ALICE).alias("alice"),
        F.sum(F.xxhash64(*frame.columns) % 1000).alias("every_column"),  # every value decoded
    ).collect()
    return row["rows"], row["total"], row["alice"]


@pytest.mark.parametrize("writer", ["pyarrow", "spark"])
def test_given_parquet_with_targets_in_two_row_groups_when_spliced_then_the_rows_schema_and_codecs_are_todays_rewrite(
    lake, spark, tmp_path, writer
):
    s3, bucket, cfg, store = lake(fmt="parquet")
    data = parquet_source() if writer == "pyarrow" else spark_source(spark, tmp_path)
    source = pq.ParquetFile(io.BytesIO(data))
    assert source.metadata.num_row_groups >= 6
    key = "events/big.parquet"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    index_object(s3, store, cfg, bucket, key)
    held = store.get_object(f"s3://{bucket}/{key}")
    rows = sorted(held.lines_by_user[ALICE])

    target = PurgeTarget(f"s3://{bucket}/{key}", "events", held.etag, tuple(rows))
    outcome = purge_object(s3, store, cfg, target, {ALICE})

    assert outcome.status == "erased" and outcome.erased_lines == rows
    assert outcome.splice is not None and outcome.splice["windows"] == 2
    assert outcome.splice["copied_bytes"] > len(data) // 2
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    expected, _ = rewrite_parquet(io.BytesIO(data), rows, {ALICE}, cfg.dataset_named("events"))
    want = pq.ParquetFile(expected.reader())
    got = pq.ParquetFile(io.BytesIO(body))
    assert got.read().equals(want.read())  # row for row
    assert got.schema_arrow == want.schema_arrow and got.schema == source.schema  # types, physical ones too
    for group in range(got.metadata.num_row_groups):
        for column in range(got.metadata.num_columns):
            assert (
                got.metadata.row_group(group).column(column).compression
                == source.metadata.row_group(0).column(column).compression
            )
    assert got.metadata.num_row_groups == source.metadata.num_row_groups
    copied = [g for g in range(got.metadata.num_row_groups) if g not in (0, 6)] if writer == "pyarrow" else []
    for group in copied:  # copied row groups keep their statistics
        for column in range(got.metadata.num_columns):
            assert (
                got.metadata.row_group(group).column(column).statistics
                == source.metadata.row_group(group).column(column).statistics
            )
    kept = got.read()
    assert read_by_spark(spark, tmp_path, body) == (kept.num_rows, sum(kept.column("n").to_pylist()), 0)
    index_matches_a_fresh_read(s3, cfg, store, bucket, key)
