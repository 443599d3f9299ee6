"""The erasure's commit to a Delta table, from the driver: one transaction removing the rewritten files and adding
their replacements (statistics: the row count only, so no id is in the log; commit metadata naming only the request
id), then a checkpoint of the new version (deltalake). A concurrent commit that changed the same files raises
CommitConflict (the erasure then starts again).

deltalake writes the commit, except when a file replaced has a deletion vector: the protocol identifies such a file
by its path and its vector, and deltalake's remove action cannot name the vector (a remove without it leaves the
file live for every reader). That commit is written here as the protocol describes it, with the conditional write
deltalake uses too (If-None-Match: the first writer of a version wins), and the same rule on a concurrent commit:
one that removed a file replaced here, or changed the table's schema or protocol, is a conflict; any other is
stepped over.
"""

from __future__ import annotations

import json
import time
from typing import Any

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig
from lakepurge.tables.base import TableError, TableFile, TableState
from lakepurge.tables.delta import DeltaLog
from lakepurge.tables.storage import MISSING_LIBRARY, S3Access

REQUEST_KEY = "lakepurge.request"  # the only thing the erasure's commit records about it

# Writer features that a commit which only removes files and adds rewritten copies of them (fewer rows, the same
# columns) honours by writing nothing more. Others (row tracking, in-commit timestamps, Iceberg compatibility, ...)
# ask more of every commit: a table with one of them is refused rather than committed to without it.
HAND_COMMIT_WRITER_FEATURES = {
    "appendOnly",  # the feature only enables the table property, which is checked: an append-only table is refused
    "invariants",
    "checkConstraints",
    "generatedColumns",
    "identityColumns",
    "changeDataFeed",  # as with deltalake's commit, no change data is written for the erasure (docs/LIMITS.md)
    "columnMapping",
    "deletionVectors",
    "timestampNtz",
    "typeWidening",
    "typeWidening-preview",
    "v2Checkpoint",
    "vacuumProtocolCheck",
    "domainMetadata",
    "clustering",
}
MAX_COMMIT_ATTEMPTS = 20  # versions stepped over (concurrent commits that do not conflict) before giving up


class CommitConflict(Exception):
    """A concurrent commit changed the files this erasure replaces."""


_LOADED: dict[str, Any] = {}  # dataset -> the DeltaTable the erasure's commit loaded (the driver's only)


def checkpoint(dataset: DatasetConfig) -> int:
    """Checkpoint the table's newest version (the table as the commit loaded it, brought up to date)."""
    table = _LOADED.pop(dataset.name, None)
    if table is not None:
        table.update_incremental()
    else:
        table = _delta_table(dataset)
    table.create_checkpoint()
    version: int = table.version()
    return version


def _delta_table(dataset: DatasetConfig, version: int | None = None) -> Any:
    try:
        from deltalake import DeltaTable
    except ImportError as exc:
        raise ImportError(MISSING_LIBRARY) from exc
    uri = f"s3://{dataset.uri.bucket}/{dataset.uri.key.rstrip('/')}"
    return DeltaTable(uri, version=version, storage_options=S3Access.resolved().object_store_options())


def commit_replacement(
    dataset: DatasetConfig, state: TableState, rewritten: list[dict[str, Any]], request_id: str
) -> int:
    """Remove the rewritten files' old versions and add the new ones in one commit on top of `state`; returns the
    version committed. A concurrent commit that removed one of these files raises CommitConflict."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    table = _delta_table(dataset, state.version)
    _LOADED[dataset.name] = table  # the checkpoint that follows brings it up to date instead of loading it again
    if any(state.files[result["before"]].deletes for result in rewritten):
        return _commit_with_vectors(dataset, table, state, rewritten, request_id)
    now = int(time.time() * 1000)
    actions: list[Any] = []
    for result in rewritten:
        file = state.files[result["before"]]
        partition = dict(file.partition)
        actions.append(RemoveAction(file.native_path, True, now, file.size, partition))
        if result.get("after"):
            stats = json.dumps({"numRecords": result["rows_after"]})
            actions.append(AddAction(result["after_native"], result["size_after"], partition, now, True, stats))
    metadata = table.metadata()
    try:
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            partition_by=list(metadata.partition_columns) or None,
            commit_properties=CommitProperties(custom_metadata={REQUEST_KEY: request_id}),
        )
    except CommitFailedError as exc:
        raise CommitConflict(str(exc)) from None
    return _committed_version(dataset, state.version, request_id)


def _commit_with_vectors(
    dataset: DatasetConfig, table: Any, state: TableState, rewritten: list[dict[str, Any]], request_id: str
) -> int:
    """The replacement commit written as JSON, each remove naming its file's deletion vector; returns its version."""
    _check_writable(dataset, table)
    now = int(time.time() * 1000)
    commit_info = {"timestamp": now, "operation": "WRITE", "operationParameters": {"mode": "Append"}}
    actions: list[dict[str, Any]] = [{"commitInfo": commit_info | {"engineInfo": "lakepurge", REQUEST_KEY: request_id}}]
    replaced: set[str] = set()
    for result in rewritten:
        file = state.files[result["before"]]
        replaced.add(file.native_path)
        actions.append({"remove": _remove(file, now)})
        if result.get("after"):
            add = {
                "path": result["after_native"],
                "partitionValues": dict(file.partition),
                "size": result["size_after"],
                "modificationTime": now,
                "dataChange": True,
                "stats": json.dumps({"numRecords": result["rows_after"]}),
            }
            actions.append({"add": add})
    body = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode()
    s3 = aws.client("s3")
    log_reader = DeltaLog(s3, dataset)
    version = state.version + 1
    for _ in range(MAX_COMMIT_ATTEMPTS):
        key = f"{dataset.uri.key}_delta_log/{version:020d}.json"
        try:
            s3.put_object(Bucket=dataset.uri.bucket, Key=key, Body=body, IfNoneMatch="*")
            return version
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise
        log_reader.listing(refresh=True)
        _check_concurrent(log_reader.commit_actions(version), replaced, version)
        version += 1
    raise CommitConflict(f"{MAX_COMMIT_ATTEMPTS} concurrent commits came first")


def _remove(file: TableFile, now: int) -> dict[str, Any]:
    remove: dict[str, Any] = {
        "path": file.native_path,
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": dict(file.partition),
        "size": file.size,
    }
    if file.deletes:
        remove["deletionVector"] = dict(file.deletes)
    return remove


def _check_writable(dataset: DatasetConfig, table: Any) -> None:
    protocol = table.protocol()
    unknown = set(protocol.writer_features or ()) - HAND_COMMIT_WRITER_FEATURES
    if protocol.min_writer_version > 7:
        what = f"writer version {protocol.min_writer_version}"
    elif unknown:
        what = f"the writer features {sorted(unknown)}"
    elif table.metadata().configuration.get("delta.appendOnly") == "true":
        what = "an append-only table"
    else:
        return
    raise TableError(
        f"dataset '{dataset.name}': files with deletion vectors are replaced by a commit lakepurge writes itself,"
        f" which does not support {what}: purge the table's deletion vectors first (REORG TABLE ... APPLY (PURGE)"
        " on Spark), then run the request again"
    )


def _check_concurrent(actions: list[dict[str, Any]], replaced: set[str], version: int) -> None:
    """A commit that won the version this erasure tried: a conflict if it touched what the erasure replaces."""
    for action in actions:
        if "metaData" in action or "protocol" in action:
            raise CommitConflict(f"version {version} changed the table's schema or protocol")
        if action.get("remove", {}).get("path") in replaced:
            raise CommitConflict(f"version {version} removed a file the erasure replaces")


def _committed_version(dataset: DatasetConfig, after: int, request_id: str) -> int:
    """The version of the commit that names this request (concurrent commits may have come before it)."""
    log_reader = DeltaLog(aws.client("s3"), dataset)
    latest = log_reader.list_from(after + 1).latest or after
    for version in range(latest, after, -1):
        for action in log_reader.commit_actions(version):
            if action.get("commitInfo", {}).get(REQUEST_KEY) == request_id:
                return version
    raise CommitConflict("the erasure's commit is not in the log")
