"""Table formats a plain dataset must not touch: Delta Lake, Apache Iceberg and Apache Hudi.

Their data files are referenced by a transaction log or by metadata (with file names, sizes, row counts and
statistics): rewriting one in place corrupts the table, and the log's older snapshots would still reach the erased
rows anyway. A plain dataset (jsonl, csv, parquet) holding such a table is refused, never purged file by file. A
Delta table is erased through its own log when configured as one (``format = "delta"``: lakepurge.tables), an
Iceberg table through its catalog (``format = "iceberg"``); Hudi is refused with its own way to delete.

Detection costs at most three small LIST calls (MaxKeys=1) per dataset; the indexer caches it per dataset for
the life of the process (a warm Lambda container lists once).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from lakepurge.core.config import ConfigError, DatasetConfig

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

TableFormat = Literal["delta", "iceberg", "hudi"]

_NAMES: dict[TableFormat, str] = {"delta": "Delta Lake", "iceberg": "Apache Iceberg", "hudi": "Apache Hudi"}
_HOW: dict[TableFormat, str] = {
    "delta": "DELETE FROM the table with Delta Lake, then VACUUM it so the data files that held the rows are removed",
    "iceberg": (
        "DELETE FROM the table with Iceberg, then run the expire_snapshots and remove_orphan_files procedures so no"
        " snapshot or file still holds the rows"
    ),
    "hudi": (
        "write a delete to the table with Hudi (operation 'delete' or DELETE FROM), then run the cleaner so no older"
        " file slice still holds the records"
    ),
}
# Files Iceberg keeps under metadata/: table metadata, manifest lists and manifests (Avro), the Hadoop catalog's
# version hint, statistics (Puffin).
_ICEBERG_METADATA = (".metadata.json", ".metadata.json.gz", ".gz.metadata.json", ".avro", ".stats", "version-hint.text")

_detected: dict[tuple[str, str], TableFormat | None] = {}


class TableFormatError(ConfigError):
    """A dataset is (or a key belongs to) a Delta, Iceberg or Hudi table: lakepurge would corrupt it."""

    def __init__(self, dataset: DatasetConfig, table_format: TableFormat | None) -> None:
        self.dataset = dataset.name
        self.table_format = table_format
        if table_format is None:  # configured as a table, and there is none
            configured: TableFormat = "iceberg" if dataset.format == "iceberg" else "delta"
            folder = "metadata/" if configured == "iceberg" else "_delta_log/"
            message = (
                f"dataset '{dataset.name}' is configured as a {_NAMES[configured]} table"
                f' (format = "{dataset.format}") but {dataset.location} holds none (no {folder} there):'
                " set location to the table's root"
                if configured == "delta"
                else f"dataset '{dataset.name}' is configured as an Apache Iceberg table (format = \"iceberg\") but"
                f" {dataset.location}, its location as its catalog states it, holds no metadata/ folder"
            )
        elif table_format == "delta":
            message = (
                f"dataset '{dataset.name}' ({dataset.location}) holds a Delta Lake table but is configured as"
                f' format = "{dataset.format}": rewriting the table\'s files in place would corrupt it. Set'
                " format = \"delta\" (location = the table's root) and lakepurge erases through the table's own log"
            )
        elif table_format == "iceberg":
            message = (
                f"dataset '{dataset.name}' ({dataset.location}) holds an Apache Iceberg table but is configured as"
                f' format = "{dataset.format}": rewriting the table\'s files in place would corrupt it. Set'
                ' format = "iceberg" with table = "namespace.table" and catalog = "NAME" (a [catalogs.NAME] table),'
                " and lakepurge erases through the table's catalog"
            )
        else:
            message = (
                f"dataset '{dataset.name}' ({dataset.location}) holds a {_NAMES[table_format]} table: lakepurge"
                f" refuses it, because rewriting the table's files in place corrupts it. Erase through the table"
                f" format instead: {_HOW[table_format]}; and remove the dataset from the configuration (lakepurge"
                ' erases Delta Lake and Iceberg tables itself: format = "delta" or "iceberg")'
            )
        super().__init__(message)


def key_table_format(dataset: DatasetConfig, key: str) -> TableFormat | None:
    """The table format a key's own path shows (a Delta log entry, Hudi's timeline or partition metadata, an
    Iceberg metadata file), wherever it lies below the dataset's location; None otherwise."""
    relative = key[len(dataset.uri.key) :] if key.startswith(dataset.uri.key) else key
    *directories, name = relative.split("/")
    if "_delta_log" in directories:
        return "delta"
    if ".hoodie" in directories or name == ".hoodie_partition_metadata":
        return "hudi"
    if directories and directories[-1] == "metadata" and name.endswith(_ICEBERG_METADATA):
        return "iceberg"
    return None


def detect(s3: S3Client, dataset: DatasetConfig) -> TableFormat | None:
    """Whether the dataset's location is the root of a Delta, Iceberg or Hudi table (three LIST calls at most)."""
    uri = dataset.uri

    def first_key(folder: str) -> str | None:
        contents = s3.list_objects_v2(Bucket=uri.bucket, Prefix=uri.key + folder, MaxKeys=1).get("Contents", [])
        return contents[0]["Key"] if contents else None

    if first_key("_delta_log/") is not None:
        return "delta"
    if first_key(".hoodie/") is not None:
        return "hudi"
    metadata = first_key("metadata/")
    if metadata is not None and metadata.rsplit("/", 1)[-1].endswith(_ICEBERG_METADATA):
        return "iceberg"
    return None


def detect_cached(s3: S3Client, dataset: DatasetConfig) -> TableFormat | None:
    """detect, once per dataset per process."""
    cache_key = (dataset.name, dataset.location)
    if cache_key not in _detected:
        _detected[cache_key] = detect(s3, dataset)
    return _detected[cache_key]


def clear_cache() -> None:
    _detected.clear()


def refuse_table_formats(s3: S3Client, datasets: Iterable[DatasetConfig]) -> None:
    """Raise TableFormatError for the first dataset that holds a table format's table it is not configured as
    (a plain dataset over a table's root, a Hudi or Iceberg table), or that is configured as a table and holds
    none."""
    for dataset in datasets:
        found = detect(s3, dataset)
        if found != (dataset.format if dataset.is_table else None):
            raise TableFormatError(dataset, found)
