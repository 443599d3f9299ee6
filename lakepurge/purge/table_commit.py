"""The erasure's commit to a Delta table, from the driver, with deltalake: one transaction removing the rewritten files
and adding their replacements (statistics: the row count only, so no id is in the log; commit metadata naming only
the request id), then a checkpoint of the new version. A concurrent commit that changed the same files raises
CommitConflict (the erasure then starts again).
"""

from __future__ import annotations

import json
import time
from typing import Any

from lakepurge.core import aws
from lakepurge.core.config import DatasetConfig
from lakepurge.tables.base import TableState
from lakepurge.tables.delta import DeltaLog
from lakepurge.tables.storage import MISSING_LIBRARY, S3Access

REQUEST_KEY = "lakepurge.request"  # the only thing the erasure's commit records about it


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


def _committed_version(dataset: DatasetConfig, after: int, request_id: str) -> int:
    """The version of the commit that names this request (concurrent commits may have come before it)."""
    log_reader = DeltaLog(aws.client("s3"), dataset)
    latest = log_reader.latest_version() or after
    for version in range(latest, after, -1):
        for action in log_reader.commit_actions(version):
            if action.get("commitInfo", {}).get(REQUEST_KEY) == request_id:
                return version
    raise CommitConflict("the erasure's commit is not in the log")
