"""A large rewritten object goes up in parts sent several at a time, still only if nobody wrote it meanwhile."""

from __future__ import annotations

import threading
import uuid

import pytest
from awscrt import checksums

from lakepurge.core import aws as clients
from lakepurge.core.s3io import head_object
from lakepurge.purge import s3write
from lakepurge.purge.streams import Staged, crc64nvme_base64

pytestmark = pytest.mark.integration

PART = 5 * 1024 * 1024  # S3's smallest part


@pytest.fixture
def bucket(aws, monkeypatch):
    monkeypatch.setattr(s3write, "PART_BYTES", PART)
    name = f"mp-{uuid.uuid4().hex[:10]}"
    s3 = clients.client("s3")
    s3.create_bucket(Bucket=name)
    return s3, name


class Watched:
    """The S3 client, counting the parts in flight at once; `during_part` runs inside one part's upload."""

    def __init__(self, s3, during_part=None):
        self._s3 = s3
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.parts = 0
        self.during_part = during_part

    def upload_part(self, **kwargs):
        with self._lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.parts += 1
        try:
            if self.during_part is not None and kwargs["PartNumber"] == 2:
                self.during_part()
            return self._s3.upload_part(**kwargs)
        finally:
            with self._lock:
                self.in_flight -= 1

    def __getattr__(self, name):
        return getattr(self._s3, name)


def test_given_a_large_rewrite_when_written_then_parts_go_in_parallel_and_s3_stores_its_checksum(bucket):
    s3, name = bucket
    s3.put_object(Bucket=name, Key="big.jsonl", Body=b"old\n")
    head = head_object(s3, name, "big.jsonl")
    body = b"".join(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 200) for i in range(110_000))  # ~24 MB: 5 parts
    watched = Watched(s3)

    written = s3write.write_in_place(watched, head, Staged.of([body]), {})

    assert watched.parts == 5
    assert 1 < watched.most <= s3write.PART_CONCURRENCY
    assert s3.get_object(Bucket=name, Key="big.jsonl")["Body"].read() == body
    stored = s3.head_object(Bucket=name, Key="big.jsonl", ChecksumMode="ENABLED")
    assert stored["ChecksumCRC64NVME"] == written.checksum == crc64nvme_base64(checksums.crc64nvme(body))
    assert stored["ETag"] == written.etag


def test_given_a_write_by_someone_else_during_the_upload_when_completing_then_theirs_stays_and_ours_is_aborted(
    bucket,
):
    s3, name = bucket
    s3.put_object(Bucket=name, Key="big.jsonl", Body=b"old\n")
    head = head_object(s3, name, "big.jsonl")
    body = b"x" * (3 * PART + 10)
    watched = Watched(s3, during_part=lambda: s3.put_object(Bucket=name, Key="big.jsonl", Body=b"theirs\n"))

    with pytest.raises(s3write.WriteConflict):
        s3write.write_in_place(watched, head, Staged.of([body]), {})

    assert s3.get_object(Bucket=name, Key="big.jsonl")["Body"].read() == b"theirs\n"
    assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
