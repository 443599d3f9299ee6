"""What every table format gives lakepurge: one interface (LakeTable) that the index, the plan, the erasure and
the verification are written against. Delta Lake implements it (lakepurge.tables.delta); Iceberg is to follow.

A table has versions (Delta: the commit number; Iceberg: the snapshot's sequence number). A version has live data
files (TableFile), each possibly with rows hidden by a deletion vector or position deletes: those rows are not in
the table but their bytes are in the file. Everything else under the table's location that is not a live file is
either the table's metadata (its log, checkpoints, manifests: may name a user in statistics or predicates) or
history (files that left the table, change data, orphans of failed writes): both are read for the users before an
erasure is certified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lakepurge.core.config import DatasetConfig


class TableError(Exception):
    """A table lakepurge cannot read or erase from safely (an unsupported feature, a log it cannot follow). The
    message names the table and what to do, never a record."""


@dataclass(frozen=True, slots=True)
class TableFile:
    """A data file of one version of a table."""

    path: str  # the file's s3://bucket/key
    size: int
    records: int | None  # as the log states it (None: not stated)
    partition: Mapping[str, str | None] = field(default_factory=dict)
    # The rows of the file the table no longer shows (a deletion vector), as the log describes them (format
    # specific); None when every row of the file is in the table.
    deletes: Mapping[str, Any] | None = None
    native_path: str = ""  # the path as the table's own metadata writes it (Delta: URL-encoded, relative)

    @property
    def key(self) -> str:
        return self.path.split("/", 3)[3]


@dataclass(frozen=True)
class TableChanges:
    """What the commits after one version up to another changed: read from those commits alone (the work is bounded
    by them, not by the table's size)."""

    since: int
    version: int
    added: dict[str, TableFile]  # live at `version`, added after `since` (a new deletion vector re-adds a file)
    removed: set[str]  # live at `since`, no longer at `version` (or re-added with new deletes)
    passed: set[str]  # added and removed again after `since`: never live at either end, maybe still on storage
    history: set[str]  # other files the commits wrote that hold rows (change data)


@dataclass(frozen=True)
class TableState:
    """One version of a table: its live files, by path."""

    version: int
    timestamp_ms: int
    files: dict[str, TableFile]


class LakeTable(Protocol):
    """A table as the index, the plan and the erasure read it."""

    dataset: DatasetConfig

    def latest_version(self) -> int | None:
        """The table's newest version (None: no table at the location)."""

    def state(self, version: int | None = None) -> TableState:
        """The live files of a version (the newest by default)."""

    def changes(self, since: int, version: int) -> TableChanges | None:
        """What happened between two versions, from the commits in between; None when those commits are no longer
        all there (the log was cleaned up): then compare two states instead."""

    def deleted_rows(self, file: TableFile) -> set[int]:
        """The row positions of a live file that the table hides (deletion vector): their bytes are still there."""

    def is_metadata(self, key: str) -> bool:
        """Whether a key under the table's location is the table's metadata (log, checkpoint, manifest)."""

    def is_data(self, key: str) -> bool:
        """Whether a key under the table's location is a data file (live or not): Parquet outside the metadata."""

    def physical_id_fields(self) -> tuple[str, ...]:
        """The dataset's id fields as the data files name them (column mapping renames columns in the files)."""

    def storage_options(self) -> dict[str, str]:
        """What the format's own library needs to reach the table (endpoint, region, credentials)."""


def relative_key(dataset: DatasetConfig, key: str) -> str:
    root = dataset.uri.key
    return key[len(root) :] if key.startswith(root) else key
