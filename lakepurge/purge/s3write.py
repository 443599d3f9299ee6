"""Writing a rewritten object back in place: conditional on the version read, with its attributes preserved.

The AWS sample this design follows re-PUT objects plainly, dropping metadata, tags and encryption. Here the new
version keeps Content-Type/Encoding/Disposition/Language, Cache-Control, user metadata, tags, storage class and
server-side encryption (SSE-S3 or the same SSE-KMS key), and the write only succeeds if the object is still the
version that was read (`If-Match`): a concurrent writer's data is never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from awscrt import checksums
from botocore.exceptions import BotoCoreError, ClientError

from lakepurge.core.s3io import ObjectHead, error_code, head_object, noncurrent_versions
from lakepurge.core.s3uri import S3Uri
from lakepurge.purge.streams import Staged, crc64nvme_base64

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

PART_BYTES = 16 * 1024 * 1024
PART_CONCURRENCY = 4  # parts in flight per object: 4 x 16 MiB of memory at most

_COPIED_HEADERS = ("ContentType", "ContentEncoding", "ContentDisposition", "ContentLanguage", "CacheControl")


class WriteConflict(Exception):
    """The object changed after it was read; nothing was written."""


@dataclass(frozen=True, slots=True)
class Written:
    etag: str
    version_id: str | None
    checksum: str  # CRC64NVME (base64) of the bytes written, as S3 stated it back
    # The ETag is the MD5 of the bytes S3 received: one PutObject, unencrypted or SSE-S3 (S3's documented ETag; not a
    # multipart upload's, nor SSE-KMS's or SSE-C's). A listing's ETag equal to it names these bytes
    # (lakepurge.purge.listed_proof).
    etag_is_md5: bool = False
    # S3 stated the checksum back for this version (the write's answer, or the HEAD that found a lost answer's write):
    # the version id alone then names bytes whose CRC64NVME S3 validated (engine.verify_object needs no HEAD).
    checksum_stated: bool = False


def preserved_attributes(s3: S3Client, head: ObjectHead) -> dict[str, Any]:
    """PutObject/CreateMultipartUpload arguments that recreate the object's attributes."""
    raw: Mapping[str, Any] = head.headers or s3.head_object(Bucket=head.bucket, Key=head.key, **head.pinned_version())
    args: dict[str, Any] = {name: raw[name] for name in _COPIED_HEADERS if raw.get(name)}
    if raw.get("Metadata"):
        args["Metadata"] = raw["Metadata"]
    if raw.get("StorageClass") and raw["StorageClass"] != "STANDARD":
        args["StorageClass"] = raw["StorageClass"]
    encryption = raw.get("ServerSideEncryption")
    if encryption:
        args["ServerSideEncryption"] = encryption
        if encryption.startswith("aws:kms") and raw.get("SSEKMSKeyId"):
            args["SSEKMSKeyId"] = raw["SSEKMSKeyId"]
        if raw.get("BucketKeyEnabled"):
            args["BucketKeyEnabled"] = True
    # A GET's response says how many tags there are (a HEAD's does not): no tags, no tagging call.
    tags = []
    if raw.get("TagCount", 1):
        tags = s3.get_object_tagging(Bucket=head.bucket, Key=head.key, **head.pinned_version())["TagSet"]
    if tags:
        args["Tagging"] = "&".join(f"{quote(t['Key'], safe='')}={quote(t['Value'], safe='')}" for t in tags)
    return args


def is_conflict(exc: ClientError) -> bool:
    return error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey")


class ChecksumMismatch(Exception):
    """S3 states a different checksum for the object just written than the bytes that were verified."""


def write_in_place(
    s3: S3Client, head: ObjectHead, staged: Staged, attributes: dict[str, Any], concurrency: int = PART_CONCURRENCY
) -> Written:
    """Replace the object with the staged bytes if it is still the version head describes, stating their CRC64NVME.

    Up to PART_BYTES go in one PutObject; larger objects in a multipart upload of parts sent `concurrency` at a
    time (memory stays within that many parts) and completed with If-Match, whatever the number of parts. S3
    refuses bytes that do not match a stated checksum, and the checksum it answers must be the one stated.
    """
    upload_id: str | None = None
    response: Mapping[str, Any]  # PutObject's answer, or CompleteMultipartUpload's
    try:
        if staged.size <= PART_BYTES:
            response = s3.put_object(
                Bucket=head.bucket,
                Key=head.key,
                Body=staged.body(),
                IfMatch=head.etag,
                ChecksumAlgorithm="CRC64NVME",
                ChecksumCRC64NVME=staged.checksum,
                **attributes,
            )
        else:
            upload_id = s3.create_multipart_upload(
                Bucket=head.bucket,
                Key=head.key,
                ChecksumAlgorithm="CRC64NVME",
                ChecksumType="FULL_OBJECT",
                **attributes,
            )["UploadId"]
            parts = _upload_parts(s3, head, upload_id, staged, concurrency)
            refuse_if_changed(s3, head)
            response = s3.complete_multipart_upload(
                Bucket=head.bucket,
                Key=head.key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                ChecksumCRC64NVME=staged.checksum,
                ChecksumType="FULL_OBJECT",
                IfMatch=head.etag,
            )
            upload_id = None
    except (ClientError, BotoCoreError) as exc:
        return failed_write(s3, head, upload_id, exc, staged.checksum)
    except BaseException:
        if upload_id is not None:
            abort_upload(s3, head, upload_id)
        raise
    version = response.get("VersionId")
    etag = response["ETag"]
    md5 = (
        staged.size <= PART_BYTES
        and "-" not in etag
        and response.get("ServerSideEncryption", "AES256") == "AES256"
        and not response.get("SSECustomerAlgorithm")
    )
    # S3 answers the checksum it validated (a multipart completion may not: verification's HEAD confirms it then).
    stated = response.get("ChecksumCRC64NVME")
    if stated is not None and stated != staged.checksum:
        raise ChecksumMismatch(f"{head.s3path}: S3 states checksum {stated} for the bytes written, not theirs")
    return Written(etag, None if version in (None, "null") else version, staged.checksum, md5, stated is not None)


def refuse_if_changed(s3: S3Client, head: ObjectHead) -> None:
    """WriteConflict unless the object is still the version read. S3 checks If-Match on a multipart completion
    atomically; stores that ignore it (moto, some S3-compatible ones) are still refused a write over an object changed
    while the parts went up."""
    current = head_object(s3, head.bucket, head.key)
    if current is None or current.etag != head.etag:
        raise WriteConflict(head.s3path)


def failed_write(
    s3: S3Client, head: ObjectHead, upload_id: str | None, exc: ClientError | BotoCoreError, checksum: str | None
) -> Written:
    """After a write's request failed: its upload aborted, and the write itself if S3 applied it and the answer was
    lost (the retry, botocore's, then meets its own write: 412, or NoSuchUpload for a completion; or every retry
    failed), found by its checksum (None: it cannot be told). WriteConflict when the condition refused it; else the
    error again. Must be called while `exc` is being handled."""
    if upload_id is not None:
        abort_upload(s3, head, upload_id)
    mine = own_write(s3, head, checksum) if checksum is not None else None
    if mine is not None:
        return mine
    if isinstance(exc, ClientError) and is_conflict(exc):
        raise WriteConflict(head.s3path) from None
    raise exc


def abort_upload(s3: S3Client, head: ObjectHead, upload_id: str) -> None:
    """Abort an upload that failed; one already completed (its answer lost) or aborted is gone already."""
    try:
        s3.abort_multipart_upload(Bucket=head.bucket, Key=head.key, UploadId=upload_id)
    except ClientError as exc:
        if error_code(exc) not in ("NoSuchUpload", "404"):
            raise


def own_write(s3: S3Client, head: ObjectHead, checksum: str) -> Written | None:
    """The current version, if it is this write's: S3 states for it the CRC64NVME of the bytes staged and, in a
    versioned bucket, the version just before it is the one read (so it replaced exactly that version, as the
    conditional write would). None when it is not, or when that cannot be asked now."""
    try:
        current = head_object(s3, head.bucket, head.key, checksum=True)
        if current is None or current.headers.get("ChecksumCRC64NVME") != checksum:
            return None
        if head.version_id is not None:
            previous = next(noncurrent_versions(s3, S3Uri(head.bucket, head.key)), None)
            if previous is None or previous.version_id != head.version_id:
                return None
    except (ClientError, BotoCoreError):
        return None
    return Written(current.etag, current.version_id, checksum, checksum_stated=True)


def _upload_parts(
    s3: S3Client, head: ObjectHead, upload_id: str, staged: Staged, concurrency: int
) -> list[CompletedPartTypeDef]:
    """Send the parts, at most `concurrency` in flight (each holds one part in memory)."""

    def send(number: int, body: bytes) -> CompletedPartTypeDef:
        checksum = crc64nvme_base64(checksums.crc64nvme(body))
        response = s3.upload_part(
            Bucket=head.bucket,
            Key=head.key,
            UploadId=upload_id,
            PartNumber=number,
            Body=body,
            ChecksumAlgorithm="CRC64NVME",
            ChecksumCRC64NVME=checksum,
        )
        return {"PartNumber": number, "ETag": response["ETag"], "ChecksumCRC64NVME": checksum}

    parts: list[CompletedPartTypeDef] = []
    with ThreadPoolExecutor(max(concurrency, 1)) as pool:
        in_flight: set[Future[CompletedPartTypeDef]] = set()
        for number, body in enumerate(staged.parts(PART_BYTES), 1):
            if len(in_flight) >= concurrency:
                done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                parts.extend(f.result() for f in done)
            in_flight.add(pool.submit(send, number, body))
        parts.extend(f.result() for f in in_flight)
    return sorted(parts, key=lambda p: int(p["PartNumber"]))


def delete_in_place(s3: S3Client, head: ObjectHead) -> None:
    """Delete the current object if it is still the version read (If-Match). A delete applied whose answer was lost
    (the retry finds the object gone) is this delete."""
    try:
        s3.delete_object(Bucket=head.bucket, Key=head.key, IfMatch=head.etag)
    except (ClientError, BotoCoreError) as exc:
        if _own_delete(s3, head):
            return
        if isinstance(exc, ClientError) and is_conflict(exc):
            raise WriteConflict(head.s3path) from None
        raise


def _own_delete(s3: S3Client, head: ObjectHead) -> bool:
    """Whether the object is gone as this delete leaves it: no current version and, in a versioned bucket, the
    version read is the newest one left (behind the delete marker)."""
    try:
        if head_object(s3, head.bucket, head.key) is not None:
            return False
        if head.version_id is None:
            return True
        newest = next(noncurrent_versions(s3, S3Uri(head.bucket, head.key)), None)
    except (ClientError, BotoCoreError):
        return False
    return newest is not None and newest.version_id == head.version_id
