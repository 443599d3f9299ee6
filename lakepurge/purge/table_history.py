"""A table's history, for the erasure from a table: deleting object versions for good (those that name the users,
the files of an attempt that was not committed). Which log objects the current version is read through (never
deleted) is lakepurge.tables.delta.needed_log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig
from lakepurge.core.s3io import (
    ever_versioned,
)
from lakepurge.core.s3uri import S3Uri

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef


def delete_versions(s3: S3Client, bucket: str, versions: list[tuple[str, str]]) -> None:
    """Delete object versions for good, 1,000 a request (by version id where the bucket has had versioning)."""
    by_id = ever_versioned(s3, bucket)
    for start in range(0, len(versions), 1000):
        batch = versions[start : start + 1000]
        objects: list[ObjectIdentifierTypeDef] = [
            {"Key": key, "VersionId": v} if by_id else {"Key": key} for key, v in batch
        ]
        response = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
        errors = response.get("Errors") or []
        if errors:
            raise DeleteFailed(f"{len(errors)} object version(s) could not be deleted: {errors[0].get('Code')}")


class DeleteFailed(Exception):
    """S3 refused to delete some of the object versions that name the users (Object Lock, permissions)."""


def _delete_version(s3: S3Client, bucket: str, key: str, version_id: str) -> None:
    """Delete one version for good: by its id in a bucket that has (had) versioning (a "null" version is one written
    before versioning was turned on), the object itself in a bucket that never had it."""
    if version_id == "null" and not ever_versioned(s3, bucket):
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        s3.delete_object(Bucket=bucket, Key=key, VersionId=version_id)


def delete_written(s3: S3Client, dataset: DatasetConfig, results: Iterable[dict[str, Any]]) -> None:
    """Files written for an attempt that was not committed: no commit names them, they hold other people's rows."""
    for result in results:
        if result.get("after"):
            uri = S3Uri.parse(result["after"])
            _delete_version(s3, uri.bucket, uri.key, result.get("after_version") or "null")
