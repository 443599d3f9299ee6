"""A gzip bomb is refused quickly and in bounded memory, and the object next to it is indexed as usual."""

from __future__ import annotations

import io
import time
import tracemalloc
import zlib

import orjson
import pytest

from lakepurge.core import aws as clients
from lakepurge.index import open_store
from lakepurge.indexing.indexer import index_object
from lakepurge.records.lines import GzipReader, Inflation, InflationLimitExceeded
from tests.support.lakes import make_lake

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def bomb(inflated: int) -> bytes:
    """A gzip member that inflates to `inflated` bytes from about a thousandth of that (deflate's best ratio): one
    record, then lines of nothing but spaces."""
    chunk = b" " * (MiB - 1) + b"\n"
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = io.BytesIO(deflate.compress(orjson.dumps({"user_id": "bomb-user"}) + b"\n"))
    out.seek(0, io.SEEK_END)
    for _ in range(inflated // len(chunk)):
        out.write(deflate.compress(chunk))
    out.write(deflate.flush())
    return out.getvalue()


@pytest.fixture(scope="module")
def bomb_512() -> bytes:
    return bomb(512 * MiB)


def test_given_a_512_mib_gzip_bomb_when_read_then_refused_within_seconds_in_bounded_memory(bomb_512):
    assert len(bomb_512) < 1 * MiB
    reader = GzipReader(io.BytesIO(bomb_512))
    tracemalloc.start()
    started = time.monotonic()
    with pytest.raises(InflationLimitExceeded, match="max_compression_ratio"):
        while reader.read(MiB):
            pass
    seconds = time.monotonic() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 10
    assert peak < 20 * MiB, f"peak {peak / MiB:.1f} MiB"


def test_given_a_size_limit_when_an_object_inflates_past_it_then_refused_even_at_a_normal_ratio():
    data = bytes(range(256)) * (4 * MiB // 256)  # barely compressible: the ratio never trips, the size does
    compressed = zlib.compress(data, wbits=31)
    reader = GzipReader(io.BytesIO(compressed), Inflation(max_bytes=2 * MiB, max_ratio=200))
    with pytest.raises(InflationLimitExceeded, match="max_decompressed_bytes"):
        while reader.read(MiB):
            pass


def test_given_a_bomb_beside_a_normal_object_when_indexed_then_the_bomb_is_unindexable_and_the_other_indexed(
    aws, index_backend, bomb_512
):
    case = make_lake(index_backend, objects=4, users=4)
    s3 = clients.client("s3")
    s3.put_object(Bucket="lake", Key="reviews/bomb.jsonl.gz", Body=bomb_512)
    normal = "reviews/" + next(o.key.split("/", 1)[1] for o in case.lake.objects if o.key.startswith("reviews/"))
    store = open_store(case.settings.index)
    try:
        started = time.monotonic()
        outcome = index_object(s3, store, case.settings, "lake", "reviews/bomb.jsonl.gz")
        assert time.monotonic() - started < 30
        assert outcome.unindexable == 1
        problems = [u for path, u in store.unindexable() if path == "s3://lake/reviews/bomb.jsonl.gz"]
        assert len(problems) == 1 and "decompression bomb" in problems[0].reason
        assert index_object(s3, store, case.settings, "lake", normal).action in ("indexed", "unchanged")
        expected = {(u, p, n) for u, p, n in case.lake.truth if p == f"s3://lake/{normal}"}
        assert expected and expected <= store.dump()
    finally:
        store.close()
