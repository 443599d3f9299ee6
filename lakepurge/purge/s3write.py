"""Writing a rewritten object back in place: conditional on the version read, with its attributes preserved.

The AWS sample this design follows re-PUT objects plainly, dropping metadata, tags and encryption. Here the new
version keeps Content-Type/Encoding/Disposition/Language, Cache-Control, user metadata, tags, storage class and
server-side encryption (SSE-S3 or the same SSE-KMS key), and the write only succeeds if the object is still the
version that was read (`If-Match`): a concurrent writer's data is never overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError

from lakepurge.s3io import ObjectHead, error_code

PART_BYTES = 16 * 1024 * 1024

_COPIED_HEADERS = ("ContentType", "ContentEncoding", "ContentDisposition", "ContentLanguage", "CacheControl")


class WriteConflict(Exception):
    """The object changed after it was read; nothing was written."""


@dataclass(frozen=True, slots=True)
class Written:
    etag: str
    version_id: str | None


def preserved_attributes(s3: Any, head: ObjectHead) -> dict[str, Any]:
    """PutObject/CreateMultipartUpload arguments that recreate the object's attributes."""
    raw = head.headers or s3.head_object(Bucket=head.bucket, Key=head.key, **head.pinned_version())
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


def _conflict(exc: ClientError) -> bool:
    return error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey")


def write_in_place(s3: Any, head: ObjectHead, chunks: Iterable[bytes], attributes: dict[str, Any]) -> Written:
    """Replace the object with the given bytes if it is still the version head describes.

    Small objects go in one PutObject; larger ones in a multipart upload completed with If-Match, so memory
    stays bounded by one part whatever the object's size.
    """
    buffer = bytearray()
    upload_id: str | None = None
    parts: list[dict[str, Any]] = []
    try:
        for chunk in chunks:
            buffer += chunk
            if len(buffer) >= PART_BYTES:
                if upload_id is None:
                    upload_id = s3.create_multipart_upload(Bucket=head.bucket, Key=head.key, **attributes)["UploadId"]
                number = len(parts) + 1
                etag = s3.upload_part(
                    Bucket=head.bucket, Key=head.key, UploadId=upload_id, PartNumber=number, Body=bytes(buffer)
                )["ETag"]
                parts.append({"PartNumber": number, "ETag": etag})
                buffer.clear()
        if upload_id is None:
            response = s3.put_object(
                Bucket=head.bucket, Key=head.key, Body=bytes(buffer), IfMatch=head.etag, **attributes
            )
        else:
            if buffer or not parts:
                number = len(parts) + 1
                etag = s3.upload_part(
                    Bucket=head.bucket, Key=head.key, UploadId=upload_id, PartNumber=number, Body=bytes(buffer)
                )["ETag"]
                parts.append({"PartNumber": number, "ETag": etag})
            response = s3.complete_multipart_upload(
                Bucket=head.bucket,
                Key=head.key,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                IfMatch=head.etag,
            )
            upload_id = None
    except ClientError as exc:
        if upload_id is not None:
            s3.abort_multipart_upload(Bucket=head.bucket, Key=head.key, UploadId=upload_id)
        if _conflict(exc):
            raise WriteConflict(head.s3path) from None
        raise
    except BaseException:
        if upload_id is not None:
            s3.abort_multipart_upload(Bucket=head.bucket, Key=head.key, UploadId=upload_id)
        raise
    version = response.get("VersionId")
    return Written(response["ETag"], None if version in (None, "null") else version)


def delete_in_place(s3: Any, head: ObjectHead) -> None:
    """Delete the current object if it is still the version read (If-Match)."""
    try:
        s3.delete_object(Bucket=head.bucket, Key=head.key, IfMatch=head.etag)
    except ClientError as exc:
        if _conflict(exc):
            raise WriteConflict(head.s3path) from None
        raise
