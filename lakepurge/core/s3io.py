"""Reading S3 objects one exact version at a time, streaming; listing the objects and versions to read."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, IncompleteReadError
from urllib3.exceptions import ProtocolError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectVersionTypeDef

    from lakepurge.core.config import DatasetConfig
    from lakepurge.core.s3uri import S3Uri


class ObjectChanged(Exception):
    """The object changed between reading its head and its body; index it again from the new head."""


@dataclass(frozen=True, slots=True)
class ObjectHead:
    bucket: str
    key: str
    etag: str
    version_id: str | None
    last_modified: datetime
    size: int
    # The HEAD response's attributes (content type, metadata, encryption, storage class), when read by HEAD.
    headers: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def s3path(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def pinned(self) -> dict[str, Any]:
        """GetObject arguments that read exactly this version (or fail with 412 if it was replaced)."""
        if self.version_id:
            return {"VersionId": self.version_id}
        return {"IfMatch": self.etag}

    def pinned_version(self) -> dict[str, Any]:
        """The VersionId argument on versioned buckets (for calls that take no If-Match, such as tagging)."""
        return {"VersionId": self.version_id} if self.version_id else {}


def ever_versioned(s3: S3Client, bucket: str) -> bool:
    """Whether the bucket has ever had versioning on: only then can noncurrent versions exist."""
    return "Status" in s3.get_bucket_versioning(Bucket=bucket)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


# What S3 answers a conditional write whose condition does not hold: If-None-Match on a key that exists, If-Match on
# another ETag (412 PreconditionFailed), or a conditional write racing another one on the same key (409).
_CONDITION_FAILED = ("PreconditionFailed", "412", "ConditionalRequestConflict")


def condition_failed(exc: ClientError) -> bool:
    """Whether a conditional write was refused because its condition does not hold (not for any other error)."""
    return error_code(exc) in _CONDITION_FAILED


_MISSING = ("404", "NoSuchKey", "NotFound", "405", "MethodNotAllowed")

_TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError", "ServiceUnavailable"}
)


def transient(exc: BaseException) -> bool:
    """Whether the same request may well succeed if made again: throttling, a server error, a connection refused,
    dropped or timed out, a body cut short (botocore retries the calls, not the reading of a body; a response that
    is not streamed and is cut short even escapes it as urllib3's ProtocolError, boto/boto3#2902)."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return int(status or 0) >= 500 or error_code(exc) in _TRANSIENT_CODES
    return isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError | ProtocolError | OSError)


def _head_from(bucket: str, key: str, response: Mapping[str, Any]) -> ObjectHead:
    version = response.get("VersionId")
    return ObjectHead(
        bucket=bucket,
        key=key,
        etag=response["ETag"],
        version_id=None if version in (None, "null") else version,
        last_modified=response["LastModified"],
        size=response["ContentLength"],
        headers={name: value for name, value in response.items() if name not in ("ResponseMetadata", "Body")},
    )


def head_object(s3: S3Client, bucket: str, key: str, checksum: bool = False) -> ObjectHead | None:
    """The current version's head, or None when the object does not exist (deleted, or a delete marker). With
    checksum, the headers also hold the checksum S3 stores for it (ChecksumCRC64NVME, ...)."""
    try:
        extra: dict[str, Any] = {"ChecksumMode": "ENABLED"} if checksum else {}
        return _head_from(bucket, key, s3.head_object(Bucket=bucket, Key=key, **extra))
    except ClientError as exc:
        if error_code(exc) in _MISSING:
            return None
        raise


def head_version(s3: S3Client, bucket: str, key: str, version_id: str, checksum: bool = False) -> ObjectHead | None:
    """The head of one version, or None when that version (or the key) no longer exists or is a delete marker."""
    try:
        extra: dict[str, Any] = {"ChecksumMode": "ENABLED"} if checksum else {}
        response = s3.head_object(Bucket=bucket, Key=key, VersionId=version_id, **extra)
    except ClientError as exc:
        if error_code(exc) in (*_MISSING, "NoSuchVersion", "400", "InvalidArgument"):
            return None
        raise
    head = _head_from(bucket, key, response)
    return head if head.version_id == version_id else None


def get_current(s3: S3Client, bucket: str, key: str) -> tuple[ObjectHead, IO[bytes]] | None:
    """The current version's head and streaming body from one GET (its response carries everything a HEAD
    does, plus the tag count), or None when the object does not exist."""
    try:
        response = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if error_code(exc) in _MISSING:
            return None
        raise
    body = cast("IO[bytes]", response["Body"])
    head = _head_from(bucket, key, response)
    head.headers.setdefault("TagCount", 0)  # a GET names its tag count only when there are tags
    return head, body


def open_body(s3: S3Client, head: ObjectHead) -> IO[bytes]:
    """A streaming body of exactly the version described by head."""
    try:
        response = s3.get_object(Bucket=head.bucket, Key=head.key, **head.pinned())
    except ClientError as exc:
        if error_code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "NoSuchVersion"):
            raise ObjectChanged(head.s3path) from None
        raise
    body = cast("IO[bytes]", response["Body"])
    return body


def open_range(s3: S3Client, head: ObjectHead, start: int, end: int) -> IO[bytes]:
    """A streaming body of bytes [start, end) of exactly the version described by head."""
    try:
        response = s3.get_object(Bucket=head.bucket, Key=head.key, Range=f"bytes={start}-{end - 1}", **head.pinned())
    except ClientError as exc:
        if error_code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "NoSuchVersion"):
            raise ObjectChanged(head.s3path) from None
        raise
    return cast("IO[bytes]", response["Body"])


class RangeReader(io.RawIOBase):
    """A seekable view of one object version through ranged GETs (Parquet readers need the footer first)."""

    def __init__(self, s3: S3Client, head: ObjectHead) -> None:
        self._s3 = s3
        self._head = head
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._head.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self._head.size - self._pos)
        if size <= 0:
            return 0
        try:
            response = self._s3.get_object(
                Bucket=self._head.bucket,
                Key=self._head.key,
                Range=f"bytes={self._pos}-{self._pos + size - 1}",
                **self._head.pinned(),
            )
        except ClientError as exc:
            if error_code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "NoSuchVersion"):
                raise ObjectChanged(self._head.s3path) from None
            raise
        data = response["Body"].read()
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def open_seekable(s3: S3Client, head: ObjectHead) -> IO[bytes]:
    return io.BufferedReader(RangeReader(s3, head), buffer_size=1 << 20)


def list_objects(s3: S3Client, dataset: DatasetConfig) -> Iterator[tuple[str, str, int]]:
    """(bucket, key, size) of every data object of a dataset (sidecars excluded)."""
    uri = dataset.uri
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for item in page.get("Contents", []):
            key = item["Key"]
            if not dataset.is_sidecar(key) and dataset.skip_reason(key) is None:
                yield uri.bucket, key, item["Size"]


def list_noncurrent(s3: S3Client, dataset: DatasetConfig) -> Iterator[ObjectHead]:
    """Every noncurrent version of the dataset's data objects (a versioned bucket keeps them after an overwrite or
    a delete; delete markers hold no data)."""
    uri = dataset.uri
    for version in object_versions(s3, uri.bucket, uri.key):
        key = version["Key"]
        if version["IsLatest"] or dataset.is_sidecar(key) or dataset.skip_reason(key) is not None:
            continue
        # A version written before versioning was enabled is "null": GetObject takes it as it is.
        yield ObjectHead(
            uri.bucket, key, version["ETag"], version["VersionId"], version["LastModified"], version["Size"]
        )


def sidecar_subjects(s3: S3Client, dataset: DatasetConfig) -> Iterator[str]:
    """The data key each sidecar version of the dataset (current or noncurrent) describes, whether or not that
    object still exists: a sidecar outlives its object when a purge is killed between deleting the one and the
    other, and it still names the owner."""
    if dataset.id_sidecar is None:
        return
    uri = dataset.uri
    # ListObjectVersions answers an unversioned bucket too (every object once, version "null").
    for version in object_versions(s3, uri.bucket, uri.key):
        if dataset.is_sidecar(version["Key"]):
            yield dataset.data_key(version["Key"])


def noncurrent_versions(s3: S3Client, uri: S3Uri) -> Iterator[ObjectHead]:
    """Every noncurrent version of exactly this key (delete markers hold no data)."""
    for version in object_versions(s3, uri.bucket, uri.key):
        if version["Key"] == uri.key and not version["IsLatest"]:
            yield listed_head(uri, version)


def listed_head(uri: S3Uri, version: Mapping[str, Any]) -> ObjectHead:
    """One version of the key as ListObjectVersions describes it."""
    return ObjectHead(
        bucket=uri.bucket,
        key=uri.key,
        etag=version["ETag"],
        version_id=version["VersionId"],
        last_modified=version["LastModified"],
        size=version["Size"],
    )


def delete_key_versions(s3: Any, uri: S3Uri, keep: Callable[[Mapping[str, Any]], bool] = lambda _version: False) -> int:
    """Delete every version and delete marker of exactly this key (not of the keys it is a prefix of) but those
    ``keep`` names; returns how many were deleted. Idempotent."""
    deleted = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=uri.bucket, Prefix=uri.key):
        for version in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            if version["Key"] == uri.key and not keep(version):
                s3.delete_object(Bucket=uri.bucket, Key=uri.key, VersionId=version["VersionId"])
                deleted += 1
    return deleted


def object_versions(s3: S3Client, bucket: str, prefix: str) -> Iterator[ObjectVersionTypeDef]:
    """Every version (not delete marker) of every key under the prefix, as ListObjectVersions describes it."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Versions", [])
