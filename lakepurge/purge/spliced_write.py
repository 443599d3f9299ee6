"""Writing an object back as the source version's unchanged byte ranges, copied inside S3, around new bytes.

A splice (lakepurge.purge.server_splice, lakepurge.purge.parquet_groups) describes the new object as segments: Kept
(a byte range of the version read, unchanged) and Fresh (new bytes: a rewritten window, a Parquet footer). Here they
become one multipart upload: a Kept range of at least 5 MiB is an UploadPartCopy from the pinned source version (its
bytes never pass through the purge); Fresh bytes are uploaded parts, each with its CRC64NVME stated. S3 wants every
part but the last to hold at least 5 MiB: a Fresh run shorter than that takes bytes from a neighbouring Kept range
(fetched with a ranged GET and uploaded as they are), and a Kept range too short to stand as a part is fetched whole.

The upload is completed only if the object is still the version read (If-Match, as every rewrite; a copy also states
CopySourceIfMatch), with the object's attributes (lakepurge.purge.s3write.preserved_attributes). Its full-object
CRC64NVME is combined from the parts' (lakepurge.purge.crc_combine) when S3 answers every copied part's checksum, as S3
does for an upload created with CRC64NVME, and stated at completion; a store that does not answer it (moto 5.2.5)
computes the full-object checksum itself, and the one it then states for the version is what the outcome records.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from awscrt import checksums
from botocore.exceptions import BotoCoreError, ClientError

from lakepurge.core.s3io import ObjectHead, head_object, head_version, open_range
from lakepurge.purge.crc_combine import crc64nvme_of_parts
from lakepurge.purge.s3write import (
    PART_BYTES,
    PART_CONCURRENCY,
    ChecksumMismatch,
    Written,
    abort_upload,
    failed_write,
    refuse_if_changed,
)
from lakepurge.purge.streams import Staged, crc64nvme_base64

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MIN_PART_BYTES = 5 * 1024 * 1024  # S3's smallest part (but the last)
MAX_PART_BYTES = 5 * 1024**3  # S3's largest part
MAX_PARTS = 10_000


@dataclass(frozen=True, slots=True)
class Kept:
    """Bytes [start, end) of the version read, unchanged."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class Fresh:
    """New bytes (the purge holds them)."""

    staged: Staged

    @property
    def size(self) -> int:
        return self.staged.size


Segment = Kept | Fresh


@dataclass(frozen=True, slots=True)
class CopyPart:
    start: int
    end: int


@dataclass(slots=True)
class UploadPart:
    pieces: list[Segment]

    @property
    def size(self) -> int:
        return sum(piece.size for piece in self.pieces)


Part = CopyPart | UploadPart


class NotWorthSplicing(Exception):
    """Nothing of the object would be copied inside S3 (or S3's limits cannot be met): rewrite it whole."""


@dataclass(slots=True)
class SpliceStats:
    """What a splice moved: bytes read through the purge (windows and fillers), sent, and copied inside S3."""

    read_bytes: int = 0
    uploaded_bytes: int = 0
    copied_bytes: int = 0
    parts: int = 0
    copy_parts: int = 0
    requests: int = 0
    checksum_combined: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def plan_parts(segments: Sequence[Segment], min_part: int = MIN_PART_BYTES) -> list[Part]:
    """The parts of the new object: Kept ranges of at least min_part copied, everything else uploaded, every part but
    the last at least min_part (runs of uploaded bytes widened into their Kept neighbours), copies no larger than
    S3 allows. NotWorthSplicing when nothing would be copied or S3's part limits cannot be met."""
    items: list[Part] = []
    for number, segment in enumerate(segments):
        if not segment.size:
            continue
        last = number == len(segments) - 1
        if isinstance(segment, Kept) and (segment.size >= min_part or (last and items)):
            items.append(CopyPart(segment.start, segment.end))
        elif items and isinstance(items[-1], UploadPart):
            items[-1].pieces.append(segment)
        else:
            items.append(UploadPart([segment]))
    i = 0
    while i < len(items):
        item = items[i]
        if not isinstance(item, UploadPart) or i == len(items) - 1 or item.size >= min_part:
            i += 1
            continue
        need = min_part - item.size
        after = items[i + 1]
        before = items[i - 1] if i > 0 else None
        assert isinstance(after, CopyPart)  # runs of uploads are merged: an upload is followed by a copy
        after_last = i + 1 == len(items) - 1
        if after.end - after.start - need >= (1 if after_last else min_part):
            item.pieces.append(Kept(after.start, after.start + need))
            items[i + 1] = CopyPart(after.start + need, after.end)
            i += 1
        elif isinstance(before, CopyPart) and before.end - before.start - need >= min_part:
            item.pieces.insert(0, Kept(before.end - need, before.end))
            items[i - 1] = CopyPart(before.start, before.end - need)
            i += 1
        else:  # the neighbour is too short to give: fetched whole, and the next run joins
            item.pieces.append(Kept(after.start, after.end))
            del items[i + 1]
            if i + 1 < len(items) and isinstance(items[i + 1], UploadPart):
                following = items.pop(i + 1)
                assert isinstance(following, UploadPart)
                item.pieces.extend(following.pieces)
    if not any(isinstance(item, CopyPart) for item in items):
        raise NotWorthSplicing("nothing would be copied")
    parts: list[Part] = []
    for item in items:
        if isinstance(item, CopyPart) and item.end - item.start > MAX_PART_BYTES:
            pieces = -(-(item.end - item.start) // MAX_PART_BYTES)
            cuts = [item.start + (item.end - item.start) * k // pieces for k in range(pieces + 1)]
            parts.extend(CopyPart(a, b) for a, b in itertools.pairwise(cuts))
        else:
            parts.append(item)
    if sum(_upload_count(p) if isinstance(p, UploadPart) else 1 for p in parts) > MAX_PARTS:
        raise NotWorthSplicing(f"more than {MAX_PARTS} parts")
    return parts


def _upload_count(part: UploadPart) -> int:
    return max(1, -(-part.size // PART_BYTES))


def _part_sizes(total: int) -> list[int]:
    """An uploaded run cut into parts of at most PART_BYTES, of even size (each then well over 5 MiB)."""
    count = max(1, -(-total // PART_BYTES))
    cuts = [total * k // count for k in range(count + 1)]
    return [b - a for a, b in itertools.pairwise(cuts)]


@dataclass
class _Upload:
    s3: S3Client
    head: ObjectHead
    upload_id: str
    stats: SpliceStats
    futures: list[Future[dict[str, Any]]] = field(default_factory=list)

    def copy(self, pool: ThreadPoolExecutor, number: int, part: CopyPart) -> None:
        source: dict[str, Any] = {"Bucket": self.head.bucket, "Key": self.head.key}
        if self.head.version_id:
            source["VersionId"] = self.head.version_id

        def send() -> dict[str, Any]:
            response = self.s3.upload_part_copy(
                Bucket=self.head.bucket,
                Key=self.head.key,
                UploadId=self.upload_id,
                PartNumber=number,
                CopySource=source,  # type: ignore[arg-type]
                CopySourceRange=f"bytes={part.start}-{part.end - 1}",
                CopySourceIfMatch=self.head.etag,
            )
            result = response["CopyPartResult"]
            crc = result.get("ChecksumCRC64NVME")
            return {
                "PartNumber": number,
                "ETag": result["ETag"],
                **({"ChecksumCRC64NVME": crc} if crc else {}),
                "_length": part.end - part.start,
            }

        self.stats.copied_bytes += part.end - part.start
        self.stats.copy_parts += 1
        self.futures.append(pool.submit(send))

    def upload(self, pool: ThreadPoolExecutor, number: int, body: bytes) -> None:
        checksum = crc64nvme_base64(checksums.crc64nvme(body))

        def send() -> dict[str, Any]:
            response = self.s3.upload_part(
                Bucket=self.head.bucket,
                Key=self.head.key,
                UploadId=self.upload_id,
                PartNumber=number,
                Body=body,
                ChecksumAlgorithm="CRC64NVME",
                ChecksumCRC64NVME=checksum,
            )
            return {"PartNumber": number, "ETag": response["ETag"], "ChecksumCRC64NVME": checksum, "_length": len(body)}

        self.stats.uploaded_bytes += len(body)
        self.futures.append(pool.submit(send))


def write_spliced(
    s3: S3Client,
    head: ObjectHead,
    segments: Sequence[Segment],
    attributes: dict[str, Any],
    concurrency: int = PART_CONCURRENCY,
) -> tuple[Written, SpliceStats]:
    """Replace the object with the segments, if it is still the version head describes (see the module docstring).
    WriteConflict when it changed; NotWorthSplicing (before any request) when the plan copies nothing."""
    parts = plan_parts(segments)
    combined: str | None = None
    stats = SpliceStats(parts=sum(_upload_count(p) if isinstance(p, UploadPart) else 1 for p in parts))
    upload_id: str | None = None
    try:
        upload_id = s3.create_multipart_upload(
            Bucket=head.bucket, Key=head.key, ChecksumAlgorithm="CRC64NVME", ChecksumType="FULL_OBJECT", **attributes
        )["UploadId"]
        sent = _Upload(s3, head, upload_id, stats)
        number = 0
        with ThreadPoolExecutor(max(concurrency, 1)) as pool:
            for part in parts:
                if isinstance(part, CopyPart):
                    number += 1
                    sent.copy(pool, number, part)
                    continue
                for body in _rechunked(_run_bytes(s3, head, part.pieces, stats), _part_sizes(part.size)):
                    number += 1
                    _wait_below(sent.futures, concurrency)
                    sent.upload(pool, number, body)
            completed = [f.result() for f in sent.futures]
        lengths = [c.pop("_length") for c in completed]
        if all("ChecksumCRC64NVME" in c for c in completed):
            crcs = [int.from_bytes(base64.b64decode(c["ChecksumCRC64NVME"]), "big") for c in completed]
            combined = crc64nvme_base64(crc64nvme_of_parts(zip(crcs, lengths, strict=True)))
            stats.checksum_combined = True
        stated_checksum: dict[str, Any] = {"ChecksumCRC64NVME": combined} if combined else {}
        refuse_if_changed(s3, head)
        response = s3.complete_multipart_upload(
            Bucket=head.bucket,
            Key=head.key,
            UploadId=upload_id,
            MultipartUpload={"Parts": completed},  # type: ignore[typeddict-item]
            ChecksumType="FULL_OBJECT",
            IfMatch=head.etag,
            **stated_checksum,
        )
        upload_id = None
    except (ClientError, BotoCoreError) as exc:
        # A completion S3 applied whose answer was lost is recognised by its checksum when it was combined here; a
        # store that does not answer the copied parts' checksums leaves it to a conflict: the purge then reads the
        # object again and finds nothing left to erase.
        return failed_write(s3, head, upload_id, exc, combined), stats
    except BaseException:
        if upload_id is not None:
            abort_upload(s3, head, upload_id)
        raise
    stats.requests = stats.parts + 3  # create, the parts, the HEAD before completing, the completion
    version = response.get("VersionId")
    version_id = None if version in (None, "null") else version
    stated = response.get("ChecksumCRC64NVME")
    if stated is None:  # S3 answers it; a store that does not is asked (HEAD, ChecksumMode)
        stored = (
            head_version(s3, head.bucket, head.key, version_id, checksum=True)
            if version_id
            else head_object(s3, head.bucket, head.key, checksum=True)
        )
        stats.requests += 1
        stated = stored.headers.get("ChecksumCRC64NVME") if stored is not None else None
    if combined is not None and stated is not None and stated != combined:
        raise ChecksumMismatch(f"{head.s3path}: S3 states checksum {stated} for the spliced object, not {combined}")
    return Written(response["ETag"], version_id, stated or combined or ""), stats


def _wait_below(futures: list[Future[dict[str, Any]]], limit: int) -> None:
    """Wait until fewer than `limit` parts are in flight (each in-flight upload holds its part in memory)."""
    while sum(1 for f in futures if not f.done()) >= limit:
        next(f for f in futures if not f.done()).result()


def _run_bytes(s3: S3Client, head: ObjectHead, pieces: list[Segment], stats: SpliceStats) -> Iterator[bytes]:
    """The bytes of an uploaded run: Fresh bytes as held, Kept ranges fetched from the pinned version."""
    for piece in pieces:
        if isinstance(piece, Fresh):
            yield from piece.staged.parts(PART_BYTES)
            continue
        body = open_range(s3, head, piece.start, piece.end)
        try:
            while chunk := body.read(PART_BYTES):
                stats.read_bytes += len(chunk)
                yield chunk
        finally:
            body.close()


def _rechunked(chunks: Iterator[bytes], sizes: list[int]) -> Iterator[bytes]:
    """The chunks' bytes cut into pieces of the given sizes."""
    held: list[bytes] = []
    have = 0
    wanted = iter(sizes)
    size = next(wanted, None)
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            assert size is not None, "more bytes than planned"
            take = min(len(view), size - have)
            held.append(bytes(view[:take]))
            have += take
            view = view[take:]
            if have == size:
                yield b"".join(held)
                held, have = [], 0
                size = next(wanted, None)
    if size is not None or held:
        raise ValueError("fewer bytes than planned")
