"""Rewriting a table's data files on Spark executors, for the erasure from a table (lakepurge.purge.tables): each file
by the Parquet rewriter (schema, types, codecs and row groups kept; rows a deletion vector hid dropped too), the result
read for the users before it is written, under a new name (If-None-Match), with its CRC64NVME stated. The driver
commits the new files (lakepurge.purge.table_commit); nothing here changes the table.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote

from lakepurge.core import aws, executor_ids
from lakepurge.core.config import Settings
from lakepurge.core.executor_ids import SealedIdsRef
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import HashedUsers
from lakepurge.core.s3io import (
    ObjectChanged,
    ObjectHead,
    get_current,
    head_object,
    open_seekable,
)
from lakepurge.core.s3uri import S3Uri
from lakepurge.core.sparkutil import apply_job_environment
from lakepurge.purge.rewrite import rewrite_parquet
from lakepurge.purge.streams import Staged
from lakepurge.reports import layout
from lakepurge.tables.base import TableFile
from lakepurge.tables.scan import contained, data_file_names, data_file_users

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()


@dataclass(frozen=True)
class RewriteItem:
    dataset: str
    file: TableFile
    etag: str  # "" when not known (a file found after the plan)
    rows: tuple[int, ...]
    physical_fields: tuple[str, ...]
    hidden: tuple[int, ...]  # rows its deletion vector hides
    new_key: str
    # The index holds this version's rows and named every row of the users: when the rewrite drops exactly those,
    # the new file's rows follow from them in the index (IndexStore.copy_rewritten), not from the file.
    indexed: bool = False


class RewriteFailed(Exception):
    """A file of the table could not be rewritten: nothing was committed."""


def rewrite_partition(
    settings: Settings,
    env: dict[str, str],
    key: bytes,
    hashes: tuple[str, ...],
    items: Iterable[RewriteItem],
    known: tuple[str, ...] = (),
    sealed: SealedIdsRef | None = None,
) -> Iterator[dict[str, Any]]:
    """known: the users' raw ids, given only when this runs in the process that holds them (an inline purge);
    sealed: where the request's ids are sealed for executors, when its starter wrote them (opened here)."""
    apply_job_environment(env)
    s3: S3Client = aws.client("s3")
    users = executor_ids.task_users(s3, sealed, key, hashes, known)  # its memory of ids seen is per thread

    def rewrite(item: RewriteItem) -> dict[str, Any]:
        try:
            return _rewrite_one(s3, settings, users, item)
        except Exception as exc:
            log.exception("rewrite of a table file failed", extra={"error": type(exc).__name__})
            return {"before": item.file.path, "error": type(exc).__name__}

    # Several files at once per task, as the purge does objects: the work is S3 round trips and Arrow (no GIL).
    with ThreadPoolExecutor(settings.purge.threads_per_task) as pool:
        yield from pool.map(rewrite, list(items))


def _rewrite_one(s3: S3Client, settings: Settings, users: HashedUsers, item: RewriteItem) -> dict[str, Any]:
    uri = S3Uri.parse(item.file.path)
    head, body = _source(s3, uri, item.file.size)
    if head is None or (item.etag and head.etag != item.etag):
        raise ObjectChanged(f"{item.file.path} is not the version the table's log names")
    dataset = settings.dataset_named(item.dataset).model_copy(update={"id_fields": item.physical_fields})
    hidden = set(item.hidden)
    max_bytes = settings.indexing.max_record_bytes
    rows = item.rows
    left: dict[str, list[int]] | None = None
    for attempt in range(2):
        with _opened(s3, head, body) as raw:
            staged, erased = rewrite_parquet(raw, rows, users, dataset, hidden)
        if item.indexed and not attempt and set(erased) == set(rows):
            if not data_file_names(staged.reader(), uri.key, item.physical_fields, users, max_bytes):
                break
        else:
            left = data_file_users(staged.reader(), uri.key, item.physical_fields, max_bytes)
            if not contained(users, left):
                break
        staged.close()
        if attempt:
            raise OutputNotClean(f"the rewritten file still holds some of the users ({item.file.path})")
        # The index named some of the users' rows but not all: find every one in the file and start again.
        with _opened(s3, head, body) as raw:
            found = data_file_users(raw, uri.key, item.physical_fields, max_bytes)
        rows = tuple(sorted(r for user, lines in found.items() if user in users for r in lines))
    result: dict[str, Any] = {
        "before": item.file.path,
        "before_etag": head.etag,
        "rows_before": (item.file.records if item.file.records is not None else -1),
        "rows_erased": len(erased),
        "rows_hidden_dropped": len(hidden),
    }
    rows_after = _row_count(staged)
    try:
        if rows_after == 0:
            return {**result, "after": None, "rows_after": 0}
        new_key = settings.dataset_named(item.dataset).uri.key + unquote(item.new_key)
        written = _write_new(s3, uri.bucket, new_key, staged)
    finally:
        staged.close()
    return {
        **result,
        "after": f"s3://{uri.bucket}/{written[0]}",
        "after_native": item.new_key,
        "after_version": written[1],
        "after_checksum": written[2],
        "after_etag": written[4],
        "rows_after": rows_after,
        "size_after": written[3],
        # The new file's index rows: as verification read them before the write, or (the index held the file and
        # named every row erased) the rows it dropped, for the index to move its own rows.
        **({"rows_by_user": left} if left is not None else {"rows_dropped": sorted({*erased, *hidden})}),
    }


# A file up to this size is read whole by one GET, whose answer is its head too; a bigger one by a HEAD and ranged GETs.
WHOLE_READ_BYTES = 32 << 20


def _source(s3: S3Client, uri: S3Uri, size: int) -> tuple[ObjectHead | None, bytes | None]:
    """The file's current version (None: gone), and its bytes when it is small."""
    if size > WHOLE_READ_BYTES:
        return head_object(s3, uri.bucket, uri.key), None
    current = get_current(s3, uri.bucket, uri.key)
    if current is None:
        return None, None
    head, stream = current
    with stream:
        return head, stream.read()


def _opened(s3: S3Client, head: ObjectHead, body: bytes | None) -> IO[bytes]:
    return io.BytesIO(body) if body is not None else open_seekable(s3, head)


class OutputNotClean(Exception):
    """The rewritten bytes still hold some of the users: nothing is written."""


def _row_count(staged: Staged) -> int:
    import pyarrow.parquet as pq

    rows: int = pq.ParquetFile(staged.reader()).metadata.num_rows
    return rows


def _write_new(s3: S3Client, bucket: str, key: str, staged: Staged) -> tuple[str, str | None, str, int, str]:
    # A new name: never over another file (S3's own content type, as the table's writers leave it).
    response = layout.write_once(
        s3,
        S3Uri(bucket, key),
        staged.reader(),
        content_type="binary/octet-stream",
        ChecksumAlgorithm="CRC64NVME",
        ChecksumCRC64NVME=staged.checksum,
    )
    version = response.get("VersionId")
    return key, None if version in (None, "null") else version, staged.checksum, staged.size, response["ETag"]
