"""Typed configuration, read from TOML and validated once at start.

Errors name the offending key (``datasets[1].format``) so a user can fix the file without reading code.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from lakepurge.core import config_identity as identity
from lakepurge.core.config_messages import plain_error
from lakepurge.core.config_strict import Strict
from lakepurge.core.s3uri import S3Uri
from lakepurge.records.identifiers import IdentifierKind
from lakepurge.records.lines import Inflation


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or invalid; the message names the key."""


class IndexConfig(Strict):
    backend: Literal["postgres", "dynamodb"]
    dsn: str | None = None
    # Instead of dsn: the ARN or name of a Secrets Manager secret holding it, read at run time (cached for a few
    # minutes, so a rotated password is picked up without a redeploy). Its SecretString is the DSN itself
    # (postgresql://...), a JSON object with a "dsn" key, or the JSON of an RDS-managed secret (username,
    # password, host, port, dbname); see lakepurge.index.postgres_dsn.
    dsn_secret: str | None = None
    table: str | None = None

    @model_validator(mode="after")
    def _backend_needs_its_setting(self) -> IndexConfig:
        if self.dsn and self.dsn_secret:
            raise ValueError("set 'dsn' or 'dsn_secret', not both")
        if self.backend == "postgres" and not (self.dsn or self.dsn_secret):
            raise ValueError("backend 'postgres' needs 'dsn' or 'dsn_secret'")
        if self.backend == "dynamodb" and not self.table:
            raise ValueError("backend 'dynamodb' needs 'table'")
        return self


class VaultConfig(IndexConfig):
    """The key vault of pseudonymised datasets (lakepurge.protection.vault), configured like [index]: PostgreSQL
    (``dsn``/``dsn_secret``; ``table`` is the prefix of its two tables) or DynamoDB (``table``, a table of its own).
    It holds per person a random key, wrapped by ``kms_key_id`` (envelope encryption), and the person's pseudonyms."""

    # The KMS key (id, ARN or alias) that wraps each person's key; its use needs the person's encryption context.
    kms_key_id: Annotated[str, Field(min_length=1)]
    # Unwrapped keys are kept this long in the memory of the process that asked for them (writers, readers, the
    # access export): after a key is destroyed, a process that had it cached drops it within this time.
    cache_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    # How many days the vault's own copies keep a destroyed key: PostgreSQL, the database's backups, point-in-time
    # recovery and WAL archive (RDS: BackupRetentionPeriod; required, 0 when there are none); DynamoDB, the retention
    # of AWS Backup recovery points of the table, if any (its point-in-time recovery window is read from the table).
    backup_retention_days: Annotated[int, Field(ge=0, le=3650)] | None = None
    # The retention rule: a shred is verified only when every copy of the vault is gone within this many days.
    max_copy_days: Annotated[int, Field(ge=0, le=3650)] = 35

    @model_validator(mode="after")
    def _postgres_declares_backups(self) -> VaultConfig:
        if self.backend == "postgres" and self.backup_retention_days is None:
            raise ValueError(
                "a postgres vault needs 'backup_retention_days': how long the database's backups and point-in-time"
                " recovery keep a destroyed key (RDS: BackupRetentionPeriod; 0 when there are none)"
            )
        return self


class ReportsConfig(Strict):
    location: str
    # Where erasure certificates go: an Object Lock bucket (compliance mode), so evidence cannot be rewritten;
    # unset: certificates/ under location.
    evidence_location: str | None = None

    @field_validator("location", "evidence_location")
    @classmethod
    def _is_s3_prefix(cls, value: str | None) -> str | None:
        if value is not None:
            S3Uri.parse(value)
        return value


class SidecarConfig(Strict):
    """One user per object, named in a small JSON object stored beside it (``<key><suffix>``)."""

    suffix: str = ".meta.json"
    field: str = "user_id"


Format = Literal["jsonl", "csv", "parquet", "delta", "iceberg"]
# Formats whose location is a table's root: the table's log says which files hold its rows (lakepurge.tables).
TABLE_FORMATS = ("delta", "iceberg")


class CatalogConfig(Strict):
    """An Iceberg catalog (``[catalogs.NAME]``): where a table's current metadata file is recorded. NAME is the
    catalog's own name (a SQL catalog's ``catalog_name`` column). ``sql``: ``uri`` is a SQLAlchemy URL
    (``postgresql+psycopg2://``, ``postgresql+psycopg://``, ``sqlite:///``); ``glue``: the AWS Glue Data Catalog,
    reached as boto3 reaches it (endpoint, region, credentials); ``rest``: an Iceberg REST catalog at ``uri`` (S3
    Tables: untested). ``properties`` are handed to pyiceberg as they are (e.g. a REST catalog's signing)."""

    type: Literal["sql", "glue", "rest"]
    uri: Annotated[str, Field(min_length=1)] | None = None
    warehouse: Annotated[str, Field(min_length=1)] | None = None
    properties: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _type_needs_its_keys(self) -> CatalogConfig:
        if self.type in ("sql", "rest") and self.uri is None:
            raise ValueError(f"a {self.type} catalog needs 'uri'")
        if self.type == "glue" and self.uri is not None:
            raise ValueError("a glue catalog has no 'uri' (boto3's endpoint settings reach it)")
        return self


EraseMode = Literal["blank", "drop", "delete-object"]


class DatasetConfig(identity.DatasetIdentity):
    name: Annotated[str, Field(min_length=1)]
    format: Format = "jsonl"
    # The TOML key `location` (required but for Iceberg, whose catalog knows it): read it as `location`.
    configured_location: str | None = Field(default=None, alias="location", validate_default=True)
    id_fields: tuple[str, ...] | None = None
    id_from_key: str | None = None
    id_sidecar: SidecarConfig | None = None
    id_tag: str | None = None
    # The identifier kind ([identifiers.NAME]) every id of this dataset is: its ids are indexed in that kind's index
    # form (normalised as it says). Unset: untyped, the ids are indexed exactly as read.
    id_kind: identity.KindName | None = None
    # "case-insensitive": id_fields name keys and columns in any case (Glue and Hive lower-case names); "exact": as is
    column_names: Literal["exact", "case-insensitive"] = "exact"
    id_kinds: dict[str, str] = Field(default_factory=dict)
    id_composites: dict[identity.KindName, dict[identity.KindName, str]] = Field(default_factory=dict)
    # Default by format: "drop" for parquet and tables (a row cannot be blanked), "blank" for the line formats.
    erase: EraseMode = "blank"
    # Skip what Spark/Hive/Glue skip: path components below the location starting with '_' or '.' (a partition
    # directory, holding '=', is not hidden) and '*.crc' checksums. Directory markers are always skipped.
    skip_hidden: bool = True
    # More keys that are not data: fnmatch globs matched against the key relative to the location.
    skip: tuple[str, ...] = ()
    # Informational: the Hive partition columns of the objects' paths (``dt=2026-01-01/``), as the catalog names
    # them. `lakepurge datasets import` writes them and `datasets check` compares them with the catalog.
    partition_keys: tuple[str, ...] = ()
    # The Glue table ("database.table") this dataset was imported from: `lakepurge datasets check` reports the
    # table's removal, move or change of format against this dataset. Unset: a dataset configured by hand.
    catalog_table: Annotated[str, Field(pattern=r"^[^.\s]+\.[^.\s]+$")] | None = None
    # An Iceberg table (format = "iceberg"): its name in its catalog ("namespace.table") and the catalog, a
    # [catalogs.NAME] table. Not to be confused with catalog_table above (where a dataset was imported from).
    table: Annotated[str, Field(pattern=r"^[^.\s]+(\.[^.\s]+)+$")] | None = None
    catalog: Annotated[str, Field(min_length=1)] | None = None
    # "crypto-shred": the dataset was written pseudonymised (lakepurge.protection): its id field holds each person's
    # pseudonym and its personal_fields ciphertext under the person's key in the [vault]. A request erases it by
    # destroying the person's key and vault entries; no object is rewritten (lakepurge.protection.shred).
    protection: Literal["none", "crypto-shred"] = "none"
    personal_fields: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    # Set by Settings: the dataset's catalog and its location once the catalog was asked (core.table_catalogs).
    _catalog_config: CatalogConfig | None = PrivateAttr(default=None)
    _resolved_location: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _erase_default_by_format(cls, data: object) -> object:
        if isinstance(data, dict) and "erase" not in data:
            dropped = data.get("format") == "parquet" or data.get("format") in TABLE_FORMATS
            data = {**data, "erase": "drop" if dropped else "blank"}
        if isinstance(data, dict) and data.get("format") in TABLE_FORMATS and isinstance(data.get("location"), str):
            # A table is named by its root: s3://bucket/path/table and s3://bucket/path/table/ are the same table.
            location = data["location"]
            data = {**data, "location": location if location.endswith("/") else location + "/"}
        return data

    @field_validator("erase")
    @classmethod
    def _erase_fits_format(cls, value: str, info: ValidationInfo) -> str:
        if value == "blank" and info.data.get("format") == "parquet":
            raise ValueError(
                "'blank' cannot erase Parquet rows (the rewrite drops them, so row numbers shift):"
                " use 'drop', the default for parquet"
            )
        if value != "drop" and info.data.get("format") in TABLE_FORMATS:
            raise ValueError(f"a {info.data.get('format')} table's rows are dropped through its own commit: use 'drop'")
        return value

    @field_validator("configured_location")
    @classmethod
    def _location_is_prefix(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            if info.data.get("format", "iceberg") != "iceberg":
                raise PydanticCustomError("missing", "Field required")
            return value
        uri = S3Uri.parse(value)
        if uri.key and not uri.key.endswith("/"):
            raise ValueError("must be a prefix ending in '/' (s3://bucket/prefix/)")
        return value

    @field_validator("id_fields")
    @classmethod
    def _fields_not_empty(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or any(not f or f.strip() != f for f in value)):
            raise ValueError("needs at least one non-empty field name without surrounding spaces")
        return value

    @field_validator("partition_keys")
    @classmethod
    def _partition_keys_are_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not key or key.strip() != key or "/" in key or "=" in key for key in value):
            raise ValueError("partition key names must be non-empty, without spaces around them, '/' or '='")
        return value

    @field_validator("id_from_key")
    @classmethod
    def _regex_has_id_group(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression: {exc}") from exc
        if "id" not in pattern.groupindex:
            raise ValueError("needs a named group (?P<id>...)")
        return value

    @model_validator(mode="after")
    def _exactly_one_id_source(self) -> DatasetConfig:
        sources = [
            name
            for name, value in (
                ("id_fields", self.id_fields),
                ("id_from_key", self.id_from_key),
                ("id_sidecar", self.id_sidecar),
                ("id_tag", self.id_tag),
            )
            if value is not None
        ]
        if len(sources) != 1:
            raise ValueError(
                "needs exactly one id source of id_fields, id_from_key, id_sidecar, id_tag"
                f" (found {', '.join(sources) or 'none'})"
            )
        if self.per_object and self.erase != "delete-object":
            raise ValueError(f"'{sources[0]}' means one user per object, so erase must be 'delete-object'")
        if self.erase == "delete-object" and not self.per_object:
            raise ValueError("erase 'delete-object' needs a one-user-per-object id source, not id_fields")
        if self.is_table and self.per_object:
            raise ValueError(f"a {self.format} table's ids come from its columns: set id_fields")
        if self.format == "iceberg":
            if self.table is None or self.catalog is None:
                raise ValueError(
                    'an iceberg dataset names its table and catalog: table = "namespace.table" and'
                    ' catalog = "NAME" (a [catalogs.NAME] table); its location comes from the catalog'
                )
        elif self.table is not None or self.catalog is not None:
            raise ValueError("'table' and 'catalog' name an Iceberg table: only for format = \"iceberg\"")
        if self.protection == "crypto-shred":
            if self.is_table or self.id_fields is None or len(self.id_fields) != 1 or "." in self.id_fields[0]:
                raise ValueError(
                    'protection = "crypto-shred" is for a jsonl, csv or parquet dataset with one top-level id field'
                    " (the pseudonym), as lakepurge pseudonymise writes it"
                )
            if self.id_fields[0] in self.personal_fields:
                raise ValueError("the id field holds the pseudonym: it cannot be one of personal_fields")
        elif self.personal_fields:
            raise ValueError('personal_fields are the encrypted fields of a dataset with protection = "crypto-shred"')
        return self

    @property
    def location(self) -> str:
        """The dataset's s3://bucket/prefix/: as configured, or an Iceberg table's location as its catalog states
        it (asked once per process: lakepurge.core.table_catalogs)."""
        if self.configured_location is not None:
            return self.configured_location
        if self._resolved_location is None:
            from lakepurge.core.table_catalogs import table_location

            self._resolved_location = table_location(self)
        return self._resolved_location

    @property
    def catalog_config(self) -> CatalogConfig:
        """An Iceberg dataset's catalog (Settings checks that it is configured)."""
        if self._catalog_config is None:
            raise ConfigError(f"dataset '{self.name}': catalog '{self.catalog}' is not configured ([catalogs.NAME])")
        return self._catalog_config

    @property
    def is_table(self) -> bool:
        """True when the location is a table format's root (Delta Lake, Iceberg): lakepurge.tables reads and erases
        it."""
        return self.format in TABLE_FORMATS

    @property
    def per_object(self) -> bool:
        """True when each object belongs to exactly one user (the id comes from outside the records)."""
        return self.id_fields is None

    @property
    def uri(self) -> S3Uri:
        return S3Uri.parse(self.location)

    def contains(self, bucket: str, key: str) -> bool:
        """Whether a key (data, sidecar or clutter: see skip_reason) lies under this dataset's location."""
        uri = self.uri
        return bucket == uri.bucket and key.startswith(uri.key) and key != uri.key

    def is_sidecar(self, key: str) -> bool:
        return self.id_sidecar is not None and key.endswith(self.id_sidecar.suffix)

    def skip_reason(self, key: str) -> str | None:
        """Why a key under this dataset's location is not data (a commit marker, a checksum, a temporary or hidden
        file, a directory marker, a configured skip glob), or None for a data object or a sidecar. Names no part
        of the key: keys of one-user-per-object datasets hold user ids."""
        if key.endswith("/"):
            return "directory marker (0-byte key ending in '/')"
        if key.endswith("_$folder$"):
            return "directory marker ('_$folder$')"
        relative = self.data_key(key)
        prefix = self.uri.key
        if relative.startswith(prefix):
            relative = relative[len(prefix) :]
        for pattern in self.skip:
            if fnmatch.fnmatchcase(relative, pattern):
                return f"matches skip pattern {pattern!r}"
        return _hidden_reason(relative) if self.skip_hidden else None

    def data_key(self, key: str) -> str:
        """The data object a key stands for: a sidecar's event re-indexes the object it describes."""
        if self.id_sidecar is not None and key.endswith(self.id_sidecar.suffix):
            return key[: -len(self.id_sidecar.suffix)]
        return key


def _hidden(part: str) -> bool:
    """Spark's and Hive's rule: a name starting with '_' or '.' is hidden, unless it is a partition ('k=v')."""
    return part.startswith(("_", ".")) and "=" not in part


def _hidden_reason(relative: str) -> str | None:
    """Why Spark, Hive and Glue would not read a key (relative to the dataset's location), or None."""
    *directories, name = relative.split("/")
    for part in directories:
        if part == "_temporary" or part.startswith(".spark-staging"):
            return "under a _temporary or .spark-staging directory (uncommitted job output)"
        if _hidden(part):
            return "under a hidden directory (name starting with '_' or '.', skipped by Spark and Hive)"
    rules = (
        (name == "_SUCCESS", "_SUCCESS marker (job commit flag)"),
        (name.startswith(("_committed_", "_started_")), "commit marker (_committed_/_started_ of a commit protocol)"),
        (name.endswith(".crc"), "checksum file (.crc)"),
        (_hidden(name), "hidden file (name starting with '_' or '.', skipped by Spark and Hive)"),
    )
    return next((reason for matched, reason in rules if matched), None)


class IndexingConfig(Strict):
    # A line longer than this is reported as unindexable instead of being held in memory.
    max_record_bytes: Annotated[int, Field(gt=0)] = 16 * 1024 * 1024
    # A compressed object inflating past this size, or past this ratio to its compressed size (judged after its
    # first 64 MiB), is refused as a decompression bomb: reported unindexable, refused by the purge, never an
    # out-of-memory error or a timeout. Well-compressed JSON Lines run at 5-20x; logs of repeated lines up to ~100x.
    max_decompressed_bytes: Annotated[int, Field(gt=0)] = 64 * 1024**3
    max_compression_ratio: Annotated[float, Field(gt=1)] = 200.0
    # The indexer's dead-letter queue: events in it were never indexed, so no request is certified while it holds
    # any (lakepurge.indexing.coverage). Unset: no queue is checked.
    dead_letter_queue_url: str | None = None

    @property
    def inflation(self) -> Inflation:
        return Inflation(self.max_decompressed_bytes, self.max_compression_ratio)


Fraction = Annotated[float, Field(gt=0, le=1)]


# Ids that stand for "nobody" in real lakes (defaults, unknown-user placeholders): a request naming one would erase
# everyone who has it. Compared case-insensitively; the empty id is always refused.
SENTINEL_IDS = ("0", "null", "none", "nil", "unknown", "n/a", "na", "-", "undefined", "anonymous")


class SpliceConfig(Strict):
    """Rewriting a large object at the cost of the bytes that change (docs/ARCHITECTURE.md, "Server-side splice"):
    only the windows around the erased records go through the purge, the rest is copied inside S3."""

    # Objects of at least this many stored bytes are spliced (JSON Lines and CSV, plain or gzip of several members;
    # Parquet by row group); smaller ones are rewritten whole. S3's parts are at least 5 MiB, so an object under
    # about 16 MiB has little to copy; bench/README.md ("Server-side splice") measures where it pays.
    min_bytes: Annotated[int, Field(ge=16 * 1024 * 1024)] = 64 * 1024 * 1024
    # What proves that a spliced object's copied ranges hold none of the users. "changed-ranges": the rewritten
    # windows are read for the users before the write, and the copied ranges are byte ranges of the version the
    # index had fully read (the dataset's coverage complete in the report), which named no record of the users there;
    # without that coverage the object is read again in full. "full": verification reads every spliced object again.
    verify: Literal["changed-ranges", "full"] = "changed-ranges"


class PurgeConfig(Strict):
    # A request that would erase more than these fractions of an object's or a dataset's records, or of a relational
    # table's rows, is refused unless forced: a wrong id (an empty string, a test account shared by everyone, a
    # placeholder such as '0') must not wipe a dataset. The object limit applies to objects of at least
    # min_records_for_object_fraction records (in smaller ones a single person's records are a large share).
    max_object_fraction: Fraction = 0.5
    min_records_for_object_fraction: Annotated[int, Field(ge=1)] = 20
    max_dataset_fraction: Fraction = 0.05
    # The dataset limit applies to datasets of at least this many records: in a smaller one an ordinary user's few
    # records are more than 5% (there the object limit and the sentinel ids still guard).
    min_records_for_dataset_fraction: Annotated[int, Field(ge=1)] = 100
    max_table_fraction: Fraction = 0.05
    # Requests naming any of these ids (case-insensitive), or an empty id, are refused unless forced.
    sentinel_ids: tuple[str, ...] = SENTINEL_IDS
    # Noncurrent S3 versions still hold erased data. Leaving them to a lifecycle rule keeps the data readable
    # until the rule runs: a compliance risk, so this is on unless deliberately turned off.
    delete_noncurrent_versions: bool = True
    # Objects purged at once by each Spark task (S3 round trips dominate an object's purge).
    threads_per_task: Annotated[int, Field(ge=1, le=64)] = 4
    # How the purge verifies what it wrote. "checksum": the rewritten bytes are read for the users before the write
    # and written with their CRC64NVME, and verification confirms that S3 stores that checksum for that version
    # (no second read of the object). "full": verification reads every version again (`purge --verify full`).
    # Versions the purge did not produce or read are read in full either way (docs/ARCHITECTURE.md).
    verify: Literal["checksum", "full"] = "checksum"
    # Unindexable lines (invalid JSON, an unterminated quote, an id too long...) of the covered datasets are read
    # when a report is made, for the requested ids' bytes (lakepurge.indexing.unindexable): a request is certified
    # only when none may hold them. At most this many lines are read per report; beyond, the request is not certifiable.
    max_unindexable_lines_checked: Annotated[int, Field(ge=0)] = 10_000
    # Large objects rewritten at the cost of the bytes that change ([purge.splice]).
    splice: SpliceConfig = SpliceConfig()
    # A reviewed report (`purge --report ID --yes`) older than this many minutes, or naming an object that changed
    # since it was made, is refused unless --force: the lake it planned for is no longer the lake it would erase.
    max_report_age_minutes: Annotated[int, Field(ge=1)] = 60


class VacuumConfig(Strict):
    # Noncurrent versions of a vacuumed object that hold a user on the suppression list (an erased user's old
    # version left by a purge with delete_noncurrent_versions = false) are deleted; "none" keeps every version.
    # A version holding only other people's data is never deleted.
    delete_versions: Literal["erased-users", "none"] = "erased-users"


class JobsConfig(Strict):
    # `verify`, `vacuum` and `index backfill` run in this process, without a JVM, when their work is at most this many
    # objects (and noncurrent versions) and bytes; above either, on local Spark (`--engine` chooses; `--on
    # emr-serverless` sends the job to the cluster whatever its size). Starting Spark costs 10-20 s; this process
    # reads a few hundred small objects in that time. The vacuum counts objects only (it rewrites those purges
    # rewrote).
    in_process_max_objects: Annotated[int, Field(ge=0)] = 500
    in_process_max_bytes: Annotated[int, Field(ge=0)] = 1024**3


class PrivacyConfig(Strict):
    """Where the secret key of the keyed hashes (HMAC-SHA256) that stand in for user ids in reports, certificates
    and the suppression list comes from: exactly one of hash_key_env and hash_key_secret. Keep the key stable:
    changing it forgets past erasures (docs/DEPLOY.md)."""

    # An environment variable holding the key (the CLI, the local stack, tests). The default when
    # hash_key_secret is not set; None when it is.
    hash_key_env: str | None = "LAKEPURGE_HASH_KEY"
    # The ARN or name of a Secrets Manager secret whose SecretString is the key, read at run time by the processes
    # that hash ids (cached for a few minutes; a Spark driver hands it to its executors in memory).
    hash_key_secret: Annotated[str, Field(min_length=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_source(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("hash_key_secret") is not None:
            if data.get("hash_key_env") is not None:
                raise ValueError("set hash_key_env or hash_key_secret, not both")
            return {**data, "hash_key_env": None}
        return data


class RelationalConfig(Strict):
    """A PostgreSQL table holding user data: erasing deletes the rows whose column equals the user id.

    Its DSN may DELETE from the table: give it as ``dsn`` (plaintext; local use) or, deployed, as ``dsn_secret``,
    the ARN or name of a Secrets Manager secret holding it (read at run time like [index] dsn_secret; the stack
    lets only the roles that delete rows read it). The report's row count and the access export only SELECT:
    ``read_dsn_secret`` names a secret with a read-only DSN for them (unset: the DSN above)."""

    name: Annotated[str, Field(min_length=1)]
    dsn: Annotated[str, Field(min_length=1)] | None = None
    dsn_secret: Annotated[str, Field(min_length=1)] | None = None
    read_dsn_secret: Annotated[str, Field(min_length=1)] | None = None
    table: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")]
    column: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

    @model_validator(mode="after")
    def _one_dsn(self) -> RelationalConfig:
        if (self.dsn is None) == (self.dsn_secret is None):
            raise ValueError("needs exactly one of 'dsn' and 'dsn_secret' (the DSN that may delete the rows)")
        return self


class LocalLauncherConfig(Strict):
    """spark-submit in local mode on this machine (tests, the demo, a single host)."""

    kind: Literal["local"] = "local"
    master: str = "local[2]"
    # Where each job keeps its pid, exit code and log; a temporary directory when unset.
    work_dir: str | None = None


class EmrServerlessLauncherConfig(Strict):
    """StartJobRun on an EMR Serverless application."""

    kind: Literal["emr-serverless"]
    application_id: Annotated[str, Field(min_length=1)]
    execution_role_arn: Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+")]
    entry_point: str  # s3:// URI of lakepurge_jobs/purge.py
    archive: str  # s3:// URI of the packaged Python environment (venv-pack tar.gz) holding lakepurge
    config_uri: str  # s3:// URI of this configuration as the job reads it
    log_uri: str | None = None  # s3:// prefix for the driver and executor logs
    spark_submit_parameters: str = ""

    @field_validator("entry_point", "archive", "config_uri", "log_uri")
    @classmethod
    def _is_s3_uri(cls, value: str | None) -> str | None:
        if value is not None:
            S3Uri.parse(value)
        return value


LauncherConfig = Annotated[LocalLauncherConfig | EmrServerlessLauncherConfig, Field(discriminator="kind")]


class WorkflowConfig(Strict):
    """The request -> report -> approval -> purge -> notification workflow (Step Functions)."""

    state_machine_arn: str | None = None  # where `lakepurge request` and the intake Lambda start executions
    # Access requests (AccessRequested, GDPR Art. 15) run statemachine/export.asl.json: started here.
    export_state_machine_arn: str | None = None
    # Where the ExportArchive Task writes the encrypted archives (s3://bucket/prefix/); never inside a dataset.
    exports_location: str | None = None
    # How long the presigned link of an exported archive works (SigV4: 7 days at most; a link signed with temporary
    # credentials dies with them: lakepurge.access.export.presigned_link states the real end).
    export_link_seconds: Annotated[int, Field(ge=1, le=7 * 86400)] = 7 * 86400
    # Days an exported archive is kept: the stack's lifecycle rule expires it, and each export deletes the archives
    # of its location older than this (lakepurge.access.export.expire_archives). Its link never outlives it.
    export_retention_days: Annotated[int, Field(ge=1, le=3650)] = 30
    # The KMS key whose data keys seal the archives (the stack's ExportKey: the privacy team may decrypt with it,
    # and nothing else); unset: kms_key_id. Either way under the context key export_request_id, which the
    # sealed requests' context never has, so a grant to open archives opens no request.
    export_kms_key_id: Annotated[str, Field(min_length=1)] | None = None
    # Raw user ids of a stored request are encrypted with a data key of this KMS key; only hashes stay readable.
    kms_key_id: Annotated[str, Field(min_length=1)]
    deadline_days: Annotated[int, Field(ge=1, le=90)] = 30  # GDPR Art. 12(3): one month
    sender: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]
    approvers: Annotated[tuple[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")], ...], Field(min_length=1)]
    approval_url: str  # the approval page (API Gateway stage URL, or the local server's)
    # An unanswered approval ends the execution (and its link expires) after this long.
    approval_timeout_seconds: Annotated[int, Field(ge=1, le=30 * 86400)] = 7 * 86400
    topic_arn: str  # SNS topic told the outcome of every request
    # A report with at most this many objects is purged inline by the Task instead of on Spark...
    inline_max_objects: Annotated[int, Field(ge=0)] = 20
    # ... and at most this many bytes to read (every version of each key it names; delete-object datasets' aside).
    # 256 MiB: half of a Lambda's default 512 MB of /tmp, where rewrites past 64 MiB are staged (all of them at once
    # fit, with room to spare), and a few minutes at worst of a 900 s run (docs/LIMITS.md).
    inline_max_bytes: Annotated[int, Field(ge=0)] = 256 * 1024 * 1024
    poll_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    launcher: LauncherConfig = LocalLauncherConfig()
    # The approval emails are sent with this SES configuration set (the stack's requires TLS); unset: none.
    ses_configuration_set: str | None = None
    # The key (16+ characters) that signs approval.json and decision.json (HMAC-SHA256). Only the functions that
    # open approvals and decide them (RequestApproval, the approval page) hold it: a document another writer
    # replaced does not verify, and the page refuses it. From this environment variable (the CLI, the local stack,
    # tests), or, when approval_signing_key_secret is set, from that Secrets Manager secret (ARN or name; read at
    # run time, cached for a few minutes; what the SAM template sets).
    approval_signing_key_env: Annotated[str, Field(min_length=1)] = "LAKEPURGE_APPROVAL_KEY"
    approval_signing_key_secret: Annotated[str, Field(min_length=1)] | None = None
    # The password (16+ characters) of the operations page (GET /ops, HTTP Basic, any user name), unless the
    # optional JWT authorizer of the API checked a token: from this environment variable (the local stack, tests), or
    # from the Secrets Manager secret operations_password_secret names (what the SAM template sets). Neither: nobody.
    # (S105: the variable's name, not a password)
    operations_password_env: Annotated[str, Field(min_length=1)] = "LAKEPURGE_OPS_PASSWORD"  # noqa: S105
    operations_password_secret: Annotated[str, Field(min_length=1)] | None = None
    # The intake refuses a request naming more user ids than this (a person's ids, or a day's batch of requests:
    # the report, the approval page and the inline purge are sized for thousands, not millions)...
    max_request_users: Annotated[int, Field(ge=1)] = 10_000
    # ... or an id longer than this many UTF-8 bytes: the index stores ids of at most 1,024 bytes (a longer one in
    # the lake is an unindexable line), so a longer requested id could never be found.
    max_user_id_bytes: Annotated[int, Field(ge=1, le=1024)] = 1024

    @field_validator("exports_location")
    @classmethod
    def _exports_is_s3_prefix(cls, value: str | None) -> str | None:
        if value is not None:
            S3Uri.parse(value)
        return value


class Settings(Strict):
    index: IndexConfig
    reports: ReportsConfig
    datasets: tuple[DatasetConfig, ...] = ()
    relational: tuple[RelationalConfig, ...] = ()
    indexing: IndexingConfig = IndexingConfig()
    purge: PurgeConfig = PurgeConfig()
    vacuum: VacuumConfig = VacuumConfig()
    jobs: JobsConfig = JobsConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    workflow: WorkflowConfig | None = None
    # The key vault of the crypto-shred datasets (lakepurge.protection); needed once a dataset is protected.
    vault: VaultConfig | None = None
    # Iceberg catalogs by name ([catalogs.NAME]), which iceberg datasets name.
    catalogs: dict[Annotated[str, Field(min_length=1)], CatalogConfig] = Field(default_factory=dict)
    # Identifier kinds by name ([identifiers.NAME]), which datasets name as their id_kind.
    identifiers: dict[identity.KindName, identity.IdentifierConfig] = Field(default_factory=dict)
    identifier_links: tuple[identity.IdentifierLinkConfig, ...] = ()
    resolution: identity.ResolutionConfig = identity.ResolutionConfig()
    exemptions: tuple[
        identity.ExemptionConfig, ...
    ] = ()  # [[exemptions]]: datasets kept under a legal obligation or hold
    _lookup_order: tuple[DatasetConfig, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _unique_names_and_prefixes(self) -> Settings:
        names = [d.name for d in self.datasets]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"dataset names must be unique: {', '.join(duplicated)}")
        for dataset in self.datasets:
            if dataset.catalog is not None:
                if dataset.catalog not in self.catalogs:
                    known = ", ".join(sorted(self.catalogs)) or "none"
                    raise ValueError(
                        f"dataset '{dataset.name}' names catalog '{dataset.catalog}', which has no"
                        f" [catalogs.{dataset.catalog}] table (configured: {known})"
                    )
                dataset._catalog_config = self.catalogs[dataset.catalog]
        identity.check_identities(self.datasets, self.identifiers, self.identifier_links, self.exemptions)
        protected = [d.name for d in self.datasets if d.protection == "crypto-shred"]
        if protected and self.vault is None:
            raise ValueError(f"dataset(s) {', '.join(protected)} are crypto-shred: configure their [vault]")
        # Only configured locations are compared: an Iceberg table's is asked of its catalog when first needed.
        placed = [d for d in self.datasets if d.configured_location is not None]
        self._lookup_order = (*placed, *(d for d in self.datasets if d.configured_location is None))
        for i, a in enumerate(placed):
            for b in placed[i + 1 :]:
                ua, ub = a.uri, b.uri
                if ua.bucket == ub.bucket and (ua.key.startswith(ub.key) or ub.key.startswith(ua.key)):
                    raise ValueError(f"datasets '{a.name}' and '{b.name}' overlap ({a.location}, {b.location})")
        exports = self.workflow.exports_location if self.workflow is not None else None
        if exports is not None:
            where = S3Uri.parse(exports)
            for dataset in placed:
                if dataset.uri.bucket == where.bucket and where.key.startswith(dataset.uri.key):
                    raise ValueError(f"workflow.exports_location {exports} lies inside dataset '{dataset.name}'")
        return self

    @property
    def identifier_kinds(self) -> dict[str, IdentifierKind]:
        """The configured kinds of one value, as the readers and the request side apply them (not composite ones)."""
        return identity.value_kinds(self.identifiers)

    def dataset_for(self, bucket: str, key: str) -> DatasetConfig | None:
        """The dataset an object belongs to, or None for objects outside every dataset. Datasets with a configured
        location are tried first: an object of theirs never waits for an Iceberg catalog."""
        for dataset in self._lookup_order:
            if dataset.contains(bucket, key):
                return dataset
        return None

    def dataset_named(self, name: str) -> DatasetConfig:
        for dataset in self.datasets:
            if dataset.name == name:
                return dataset
        raise ConfigError(f"no dataset named '{name}'")


def parse_settings(data: dict[str, object], source: str = "config") -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(plain_error(Settings, err) for err in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


def load_settings(path: str | Path) -> Settings:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_settings(data, str(path))
