"""Datasets from the AWS Glue Data Catalog or a Hive metastore: ``[[datasets]]`` entries written from their
tables, and the drift between a configuration and the catalog.

Both catalogs are read in the shape of Glue's answers (a Hive metastore's through lakepurge.core.hive_metastore), so
one mapping serves both. A table says where its objects are (``StorageDescriptor.Location``), how they are stored
(the SerDe and the InputFormat), how they are partitioned and, through the table parameter ``lakepurge.id_fields``,
which fields hold user ids. A table that cannot become a dataset (an unknown or unsupported SerDe, no S3 location,
no id column, a CSV without a header row, partitions stored outside the table's location, a view, a Hudi table, an
Iceberg table in a Hive metastore) is reported with the reason, never skipped in silence.

Only table names, locations and SerDe names are ever reported: nothing here reads the lake's objects.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from pydantic import ValidationError

from lakepurge.core.config import DatasetConfig, Format, Settings
from lakepurge.core.s3uri import S3Uri
from lakepurge.indexing.catalog_sources import TableSource

# The table parameter naming the fields that hold user ids (comma-separated, dotted paths allowed).
ID_FIELDS_PARAMETER = "lakepurge.id_fields"

_PARQUET_SERDES = frozenset({"org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"})
_PARQUET_INPUTS = frozenset({"org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"})
_JSON_SERDES = frozenset(
    {
        "org.openx.data.jsonserde.JsonSerDe",
        "org.apache.hive.hcatalog.data.JsonSerDe",
        "org.apache.hadoop.hive.serde2.JsonSerDe",  # Hive 3's built-in
    }
)
_LAZY_SIMPLE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
_OPEN_CSV = "org.apache.hadoop.hive.serde2.OpenCSVSerde"
_TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
# SerDes met in real catalogs that lakepurge cannot read: named in the reason instead of "unknown".
_UNSUPPORTED_SERDES = {
    "org.apache.hadoop.hive.ql.io.orc.OrcSerde": "ORC",
    "org.apache.hadoop.hive.serde2.avro.AvroSerDe": "Avro",
    "org.apache.hadoop.hive.serde2.RegexSerDe": "regular-expression text (RegexSerDe)",
    "com.amazonaws.glue.serde.GrokSerDe": "Grok log lines",
    "com.amazon.ionhiveserde.IonHiveSerDe": "Amazon Ion",
    "org.apache.hadoop.hive.serde2.columnar.ColumnarSerDe": "RCFile",
    "org.apache.hadoop.hive.serde2.columnar.LazyBinaryColumnarSerDe": "RCFile",
}
_READS = "lakepurge reads Parquet, JSON Lines and CSV (with a header row)"


class Unmappable(ValueError):
    """A table that cannot become a [[datasets]] entry; the message is the reason, in words."""


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1] if name else "(none)"


def _lookup(mapping: Mapping[str, Any] | None, key: str) -> str | None:
    value = (mapping or {}).get(key)
    return None if value is None else str(value)


def _serde_of(storage: Mapping[str, Any]) -> str:
    return str((storage.get("SerdeInfo") or {}).get("SerializationLibrary") or "")


def is_delta(table: Mapping[str, Any]) -> bool:
    """A Delta Lake table as Glue records one: Athena's ``table_type = DELTA``, Spark's provider, or a crawler's
    classification."""
    params = table.get("Parameters") or {}
    if str(params.get("table_type", "")).upper() == "DELTA":
        return True
    provider = str(params.get("spark.sql.sources.provider", "")).lower()
    return "delta" in (provider, str(params.get("classification", "")).lower())


def is_iceberg(table: Mapping[str, Any]) -> bool:
    """An Iceberg table as Glue records one (Athena, Spark, pyiceberg): ``table_type = ICEBERG``."""
    return str((table.get("Parameters") or {}).get("table_type", "")).upper() == "ICEBERG"


def _table_format_refusal(table: Mapping[str, Any]) -> str | None:
    """Why a table is a view or a table format (Hudi) whose files lakepurge must not rewrite. A Delta table is not
    refused: it becomes a format = "delta" dataset; nor an Iceberg table: a format = "iceberg" dataset read through
    the Glue catalog."""
    storage = table.get("StorageDescriptor") or {}
    if table.get("TableType") == "VIRTUAL_VIEW":
        return "a view: it holds no objects of its own (configure the tables it reads)"
    if "hudi" in f"{storage.get('InputFormat', '')} {_serde_of(storage)}".lower():
        kind = "a Hudi table"
    else:
        return None
    return f"{kind}: rewriting its files would corrupt it; delete through the table format instead (docs/DATASETS.md)"


def _delimiter(serde_params: Mapping[str, Any] | None, *keys: str, default: str, numeric: bool = False) -> str:
    for key in keys:
        value = _lookup(serde_params, key)
        if value is not None:
            # LazySimpleSerDe reads a number as the byte of that value: Hive's DDL stores serialization.format = "1"
            # (Ctrl-A), and "44" is ','
            return chr(int(value)) if numeric and value.isdigit() and int(value) < 128 else value
    return default


def table_format(table: Mapping[str, Any]) -> Format:
    """The lakepurge format of a Glue table (a ``GetTable`` ``Table`` dict), from its SerDe and InputFormat.

    Parquet: ParquetHiveSerDe (or MapredParquetInputFormat); JSON Lines: the OpenX, HCatalog or Hive JSON SerDe;
    CSV: OpenCSVSerde or LazySimpleSerDe with field delimiter ',', and a header row (the table parameter
    ``skip.header.line.count`` = 1, since lakepurge finds the id column by the header's names). Anything else
    raises Unmappable naming the SerDe."""
    refusal = _table_format_refusal(table)
    if refusal is not None:
        raise Unmappable(refusal)
    if is_delta(table):
        return "delta"
    if is_iceberg(table):
        return "iceberg"
    storage = table.get("StorageDescriptor") or {}
    serde_info = storage.get("SerdeInfo") or {}
    serde = str(serde_info.get("SerializationLibrary") or "")
    serde_params = serde_info.get("Parameters") or {}
    input_format = str(storage.get("InputFormat") or "")
    if serde in _PARQUET_SERDES or (not serde and input_format in _PARQUET_INPUTS):
        return "parquet"
    if serde in _UNSUPPORTED_SERDES:
        raise Unmappable(f"SerDe {serde} stores {_UNSUPPORTED_SERDES[serde]}: {_READS}")
    text = not input_format or input_format == _TEXT_INPUT
    stored_as = f"stored as {_short(input_format)}, not text: {_READS}"
    if serde in _JSON_SERDES:
        if not text:
            raise Unmappable(f"JSON SerDe {_short(serde)} {stored_as}")
        return "jsonl"
    if serde in (_LAZY_SIMPLE, _OPEN_CSV):
        if not text:
            raise Unmappable(f"{_short(serde)} {stored_as}")
        if serde == _OPEN_CSV:
            delimiter = _delimiter(serde_params, "separatorChar", default=",")
        else:  # LazySimpleSerDe's default delimiter is Ctrl-A
            delimiter = _delimiter(serde_params, "field.delim", "serialization.format", default="\x01", numeric=True)
        if delimiter != ",":
            raise Unmappable(f"{_short(serde)} with field delimiter {delimiter!r}: CSV needs ','. {_READS}")
        header = _lookup(table.get("Parameters"), "skip.header.line.count")
        if header != "1":
            raise Unmappable(
                f"CSV ({_short(serde)}) without a header row (table parameter skip.header.line.count is"
                f" {header or 'not set'}, not 1): lakepurge finds the id column by the header's names"
            )
        return "csv"
    if not serde:
        raise Unmappable(f"no SerDe and InputFormat {input_format or '(none)'}: {_READS}")
    raise Unmappable(f"unknown SerDe {serde} (InputFormat {input_format or '(none)'}): {_READS}")


def normalise_location(location: str | None) -> str:
    """A table's Location as a dataset's: ``s3://bucket/prefix/`` (s3a:// and s3n:// become s3://, a trailing
    '/' is added). Anything that is not on S3 raises Unmappable."""
    if not location:
        raise Unmappable("no location (StorageDescriptor.Location is empty)")
    scheme, sep, rest = location.partition("://")
    if not sep or scheme.lower() not in ("s3", "s3a", "s3n"):
        raise Unmappable(f"location {location} is not on S3 (s3://bucket/prefix/)")
    try:
        uri = S3Uri.parse(f"s3://{rest}")
    except ValueError:
        raise Unmappable(f"location {location} names no bucket") from None
    key = uri.key if not uri.key or uri.key.endswith("/") else uri.key + "/"
    return f"s3://{uri.bucket}/{key}"


def _delta_root(table: Mapping[str, Any]) -> str | None:
    """A Delta table's root: Spark registers tables with a placeholder Location and the real one in the SerDe's
    ``path`` parameter."""
    storage = table.get("StorageDescriptor") or {}
    location = storage.get("Location")
    path = ((storage.get("SerdeInfo") or {}).get("Parameters") or {}).get("path")
    if path and (not location or "__PLACEHOLDER__" in str(location)):
        return str(path)
    return str(location) if location else None


def _inside(location: str, prefix: str) -> bool:
    return location.startswith(prefix)


@dataclass(frozen=True)
class CatalogTable:
    """What a catalog's table says about a dataset. ``problems`` lists why it cannot be one (empty: it can)."""

    database: str
    name: str
    location: str | None
    format: Format | None
    serde: str
    partition_keys: tuple[str, ...]
    id_fields: tuple[str, ...] | None
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    partitions_outside: tuple[str, ...] = field(default=(), repr=False)
    catalog: str = "Glue"  # where the table was read (TableSource.catalog)

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


def _id_fields(
    table: Mapping[str, Any], default: Sequence[str], partition_keys: Sequence[str], check_columns: bool = True
) -> tuple[tuple[str, ...] | None, str | None]:
    """The id fields (the table parameter first, then the --id-column default) and a problem, if any."""
    raw = _lookup(table.get("Parameters"), ID_FIELDS_PARAMETER)
    if raw is not None:
        fields = tuple(part.strip() for part in raw.split(",") if part.strip())
        if not fields:
            return None, f"table parameter {ID_FIELDS_PARAMETER} is empty"
    elif default:
        fields = tuple(default)
    else:
        return (
            None,
            f"no id column: set the table parameter {ID_FIELDS_PARAMETER} (comma-separated) or pass --id-column",
        )
    columns = {str(c.get("Name", "")).lower() for c in (table.get("StorageDescriptor") or {}).get("Columns") or []}
    columns = columns if check_columns else set()
    partitions = {key.lower() for key in partition_keys}
    for name in fields:
        top = name.split(".", 1)[0].lower()
        if top in partitions:
            return fields, (
                f"id column {name!r} is a partition key: its value is in the objects' keys, not in the records"
                " (configure this dataset by hand, with id_from_key)"
            )
        if columns and top not in columns:
            return fields, f"id column {name!r} is not a column of the table (columns: {', '.join(sorted(columns))})"
    return fields, None


def _compression_note(table: Mapping[str, Any], fmt: Format) -> tuple[str | None, str | None]:
    """(a note for the entry, a problem): text tables compressed with gzip are read by the objects' suffix."""
    if fmt == "parquet":
        return None, None  # Parquet compresses inside the file
    kind = (_lookup(table.get("Parameters"), "compressionType") or "").lower()
    compressed = bool((table.get("StorageDescriptor") or {}).get("Compressed"))
    if kind not in ("", "none", "gzip"):
        return None, f"compressionType {kind}: lakepurge reads text objects plain or gzip (.gz) only"
    if kind == "gzip" or compressed:
        said = "compressionType gzip" if kind == "gzip" else "Compressed = true"
        return f"{said}: lakepurge reads objects whose key ends in .gz as gzip, others as plain text", None
    return None, None


def _buckets(locations: Iterable[str]) -> str:
    names = sorted({S3Uri.parse(location).bucket for location in locations})
    return "in bucket" + ("s " if len(names) > 1 else " ") + ", ".join(names)


def _partition_problems(
    source: TableSource, table: Mapping[str, Any], location: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(partition locations outside the table's location, problems): lakepurge lists one prefix per dataset, so
    objects of a partition stored elsewhere would never be indexed; a partition with another SerDe would be read in
    the wrong format. Partition values and paths are not repeated (a table partitioned by user would name users):
    only counts, buckets and SerDe names."""
    serde = str(((table.get("StorageDescriptor") or {}).get("SerdeInfo") or {}).get("SerializationLibrary") or "")
    outside: list[str] = []
    other_serde: list[str] = []
    for partition in source.partitions(str(table.get("DatabaseName", "")), str(table["Name"])):
        storage = partition.get("StorageDescriptor") or {}
        try:
            place = normalise_location(storage.get("Location"))
        except Unmappable:
            place = None
        if place is not None and not _inside(place, location):
            outside.append(place)
        own = str((storage.get("SerdeInfo") or {}).get("SerializationLibrary") or "")
        if own and serde and own != serde:
            other_serde.append(_short(own))
    problems = []
    if outside:
        problems.append(
            f"{len(outside)} partition(s) stored outside the table's location {location} ({_buckets(outside)}):"
            " lakepurge lists one prefix per dataset and would miss their objects"
        )
    if other_serde:
        problems.append(
            f"{len(other_serde)} partition(s) with another SerDe than the table's {_short(serde)}"
            f" ({', '.join(sorted(set(other_serde)))})"
        )
    return tuple(outside), tuple(problems)


def describe_table(
    table: Mapping[str, Any], database: str, source: TableSource | None = None, id_fields: Sequence[str] = ()
) -> CatalogTable:
    """A catalog's table (a Glue ``GetTables`` entry) as a dataset would see it; with its source its partitions
    are read too (their locations must lie under the table's). Every problem is collected, not only the first."""
    name = str(table["Name"])
    storage = table.get("StorageDescriptor") or {}
    serde = str((storage.get("SerdeInfo") or {}).get("SerializationLibrary") or storage.get("InputFormat") or "")
    keys = tuple(str(k["Name"]) for k in table.get("PartitionKeys") or [])
    problems: list[str] = []
    notes: list[str] = []
    catalog = source.catalog if source is not None else "Glue"
    refusal = _table_format_refusal(table)
    if refusal is not None:  # a view or a table format: nothing else about it matters
        return CatalogTable(database, name, None, None, serde, keys, None, problems=(refusal,), catalog=catalog)
    location: str | None = None
    fmt: Format | None = None
    delta = is_delta(table)
    try:
        location = normalise_location(_delta_root(table) if delta else storage.get("Location"))
    except Unmappable as exc:
        if not is_iceberg(table):  # an Iceberg dataset has no location: its catalog's metadata states it
            problems.append(str(exc))
    try:
        fmt = table_format(table)
    except Unmappable as exc:
        problems.append(str(exc))
    if fmt == "iceberg" and source is not None and not source.iceberg_catalog:
        problems.append(
            f"an Iceberg table in a {source.catalog}: lakepurge reaches Iceberg tables through SQL, Glue and REST"
            " catalogs only (docs/LIMITS.md)"
        )
    if fmt is not None:
        note, problem = _compression_note(table, fmt)
        notes.extend([note] if note else [])
        problems.extend([problem] if problem else [])
    # A Delta table's schema and partitions are in its log (Spark registers a placeholder column): not checked here;
    # an Iceberg table's partitions are hidden (in its metadata, not Glue's partition keys).
    fields, problem = _id_fields(table, id_fields, () if delta else keys, check_columns=not delta)
    problems.extend([problem] if problem else [])
    outside: tuple[str, ...] = ()
    if source is not None and keys and location is not None and not delta and fmt != "iceberg":
        outside, partition_problems = _partition_problems(source, {**table, "DatabaseName": database}, location)
        problems.extend(partition_problems)
    return CatalogTable(
        database, name, location, fmt, serde, keys, fields, tuple(notes), tuple(problems), outside, catalog
    )


def read_tables(
    source: TableSource, database: str, names: Iterable[str] = ()
) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The database's tables (all of them, or those named) and the names asked for that it does not hold."""
    wanted = list(dict.fromkeys(names))
    tables = source.tables(database)
    if not wanted:
        return tables, []
    by_name = {str(t["Name"]): t for t in tables}
    # Glue and Hive keep table names in lower case
    missing = [n for n in wanted if n not in by_name and n.lower() not in by_name]
    chosen = [by_name.get(n) or by_name[n.lower()] for n in wanted if n not in missing]
    return chosen, missing


# --- import ---------------------------------------------------------------------------------------------------


def _toml_string(value: str) -> str:
    out = ['"']
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_toml_string(v) for v in values) + "]"


GLUE_CATALOG = "glue"  # the [catalogs.NAME] an import of Iceberg tables writes, unless one of type glue exists


def render_entry(table: CatalogTable, glue_catalog: str = GLUE_CATALOG) -> str:
    """The [[datasets]] entry of a mappable table, as TOML (with a comment naming its source). An Iceberg table is
    named in the Glue catalog (``glue_catalog``), which knows its location."""
    if table.problems or table.location is None or table.format is None or table.id_fields is None:
        raise Unmappable("; ".join(table.problems) or "incomplete table")
    comment = f"# from {table.catalog} table {table.qualified} ({_short(table.serde) if table.serde else table.format})"
    lines = [comment.replace("\n", " ")]
    lines += [f"# {note}" for note in table.notes]
    lines += ["[[datasets]]", f"name = {_toml_string(table.name)}"]
    if table.format == "iceberg":
        lines += [f"table = {_toml_string(table.qualified)}", f"catalog = {_toml_string(glue_catalog)}"]
    else:
        lines.append(f"location = {_toml_string(table.location)}")
    lines += [
        f"format = {_toml_string(table.format)}",
        f"id_fields = {_toml_list(table.id_fields)}",
        f"erase = {_toml_string('drop' if table.format in ('parquet', 'delta', 'iceberg') else 'blank')}",
    ]
    if table.format in ("parquet", "jsonl", "csv"):
        # The catalog lower-cases column names (a file's userId is its userid): the files' own spelling is found.
        lines.append('column_names = "case-insensitive"')
    if table.partition_keys:
        lines.append(f"partition_keys = {_toml_list(table.partition_keys)}")
    lines.append(f"catalog_table = {_toml_string(table.qualified)}")
    return "\n".join(lines) + "\n"


def _entry_config(entry: str) -> DatasetConfig:
    """The entry parsed back as lakepurge.core.config reads it: what is written is what load_settings accepts."""
    try:
        return DatasetConfig.model_validate(tomllib.loads(entry)["datasets"][0])
    except ValidationError as exc:
        reasons = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise Unmappable(f"the entry would not be a valid dataset: {reasons}") from None


def _overlap(a: str, b: str) -> bool:
    ua, ub = S3Uri.parse(a), S3Uri.parse(b)
    return ua.bucket == ub.bucket and (ua.key.startswith(ub.key) or ub.key.startswith(ua.key))


@dataclass(frozen=True)
class Imported:
    table: str
    dataset: str
    location: str
    format: str
    id_fields: tuple[str, ...]
    partition_keys: tuple[str, ...]
    notes: tuple[str, ...]
    entry: str


@dataclass(frozen=True)
class NotImported:
    table: str
    reason: str


@dataclass(frozen=True)
class ImportResult:
    database: str
    imported: tuple[Imported, ...]
    not_imported: tuple[NotImported, ...]  # tables that cannot become datasets, with the reason
    already_configured: tuple[NotImported, ...]  # tables the configuration holds already (the reason names it)
    glue_catalog: str | None = None  # the [catalogs.NAME] table the Iceberg entries need, when none is configured
    where: str = ""  # the database as TableSource.where names it

    @property
    def toml(self) -> str:
        header = f"# [[datasets]] imported from the {self.where} by `lakepurge datasets import`\n"
        if not self.imported:
            return ""
        catalog = ""
        if self.glue_catalog is not None and any(i.format == "iceberg" for i in self.imported):
            catalog = f"\n# the Glue Data Catalog, where the Iceberg tables above are\n[catalogs.{self.glue_catalog}]\n"
            catalog += 'type = "glue"\n'
        return header + "".join("\n" + i.entry for i in self.imported) + catalog

    def summary(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "imported": [{k: v for k, v in asdict(i).items() if k != "entry"} for i in self.imported],
            "not_imported": [asdict(n) for n in self.not_imported],
            "already_configured": [asdict(n) for n in self.already_configured],
            "toml": self.toml,
        }


def _configured_as(table: CatalogTable, settings: Settings | None) -> tuple[str | None, str | None]:
    """(the dataset the configuration holds this table as, a conflict with a configured dataset)."""
    if settings is None:
        return None, None
    for dataset in settings.datasets:
        if dataset.catalog_table == table.qualified or (
            dataset.format == "iceberg" and dataset.table == table.qualified and _glue(settings, dataset)
        ):
            return dataset.name, None
    # An Iceberg dataset's location is its catalog's: only configured locations are compared (no catalog is asked).
    placed = [d for d in settings.datasets if d.configured_location is not None]
    for dataset in placed:
        if table.location is not None and dataset.location == table.location:
            return dataset.name, None
    for dataset in settings.datasets:
        if dataset.name == table.name:
            return None, f"a dataset named {dataset.name!r} is configured already"
    for dataset in placed:
        if table.location is not None and _overlap(dataset.location, table.location):
            return None, f"its location {table.location} overlaps dataset {dataset.name!r} ({dataset.location})"
    return None, None


def _glue(settings: Settings, dataset: DatasetConfig) -> bool:
    return dataset.catalog is not None and settings.catalogs[dataset.catalog].type == "glue"


def import_datasets(
    source: TableSource,
    database: str,
    tables: Iterable[str] = (),
    id_fields: Sequence[str] = (),
    settings: Settings | None = None,
) -> ImportResult:
    """[[datasets]] entries for the database's tables (or those named). ``id_fields`` is the id column of tables
    without the ``lakepurge.id_fields`` parameter. With ``settings``, tables configured already are set aside and a
    table clashing with a configured dataset (same name, overlapping location) is not imported."""
    raw, missing = read_tables(source, database, tables)
    catalogs = settings.catalogs if settings is not None else {}
    glue_catalog = next((name for name, c in catalogs.items() if c.type == "glue"), None)
    imported: list[Imported] = []
    refused = [NotImported(name, f"no table {name!r} in the {source.where(database)}") for name in missing]
    already: list[NotImported] = []
    for item in raw:
        table = describe_table(item, database, source, id_fields)
        configured, conflict = _configured_as(table, settings)
        if configured is not None:
            already.append(NotImported(table.name, f"configured already as dataset {configured!r}"))
            continue
        clash = conflict or next(
            (
                f"its location {table.location} overlaps table {other.table!r} imported with it ({other.location})"
                for other in imported
                if table.location is not None and _overlap(other.location, table.location)
            ),
            None,
        )
        try:
            if clash is not None:
                raise Unmappable(clash)
            entry = render_entry(table, glue_catalog or GLUE_CATALOG)
            config = _entry_config(entry)
        except Unmappable as exc:
            refused.append(NotImported(table.name, str(exc)))
            continue
        imported.append(
            Imported(
                table.name,
                config.name,
                config.configured_location or table.location or "",
                config.format,
                config.id_fields or (),
                config.partition_keys,
                table.notes,
                entry,
            )
        )
    return ImportResult(
        database,
        tuple(imported),
        tuple(refused),
        tuple(already),
        None if glue_catalog else GLUE_CATALOG,
        source.where(database),
    )


# --- drift ----------------------------------------------------------------------------------------------------

DriftKind = Literal[
    "new_table",
    "moved",
    "format_changed",
    "removed",
    "partition_keys_changed",
    "id_fields_changed",
    "partitions_outside",
]


@dataclass(frozen=True)
class Drift:
    kind: DriftKind
    table: str
    dataset: str | None
    detail: str


@dataclass(frozen=True)
class CheckResult:
    database: str
    tables: int  # tables in the database (views included)
    checked: tuple[str, ...]  # datasets compared with a table
    not_from_catalog: tuple[str, ...]  # datasets of neither this database nor any of its tables (left alone)
    drift: tuple[Drift, ...]

    @property
    def in_sync(self) -> bool:
        return not self.drift

    def summary(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "in_sync": self.in_sync,
            "tables": self.tables,
            "checked": list(self.checked),
            "not_from_catalog": list(self.not_from_catalog),
            "drift": [asdict(d) for d in self.drift],
        }


def _compare(dataset: DatasetConfig, item: Mapping[str, Any], table: CatalogTable) -> Iterator[Drift]:
    def drift(kind: DriftKind, detail: str) -> Drift:
        return Drift(kind, table.name, dataset.name, detail)

    # An Iceberg dataset is its table (table = "namespace.table"): where its files are is its metadata's to say, and
    # a Glue entry may state no location at all.
    stated = table.location is not None or dataset.format != "iceberg"
    if stated and table.location != dataset.location:
        where = table.location or next((p for p in table.problems if "location" in p), "no S3 location")
        yield drift("moved", f"configured at {dataset.location}, the catalog says {where}")
    try:
        fmt: str = table_format(item)
    except Unmappable as exc:
        yield drift("format_changed", f"configured {dataset.format}, the catalog's table cannot be read: {exc}")
    else:
        if fmt != dataset.format:
            yield drift(
                "format_changed", f"configured {dataset.format}, the catalog says {fmt} ({_short(table.serde)})"
            )
    if (dataset.catalog_table is not None or dataset.partition_keys) and table.partition_keys != dataset.partition_keys:
        yield drift(
            "partition_keys_changed",
            f"configured {list(dataset.partition_keys)}, the catalog says {list(table.partition_keys)}",
        )
    parameter = _lookup(item.get("Parameters"), ID_FIELDS_PARAMETER)
    if parameter is not None and dataset.id_fields is not None:
        fields = tuple(part.strip() for part in parameter.split(",") if part.strip())
        if fields != dataset.id_fields:
            yield drift(
                "id_fields_changed",
                f"configured {list(dataset.id_fields)}, table parameter {ID_FIELDS_PARAMETER} says {list(fields)}",
            )
    if table.partitions_outside:
        yield drift(
            "partitions_outside",
            f"{len(table.partitions_outside)} partition(s) outside {dataset.location}"
            f" ({_buckets(table.partitions_outside)}): their objects are not indexed",
        )


def check_catalog(source: TableSource, database: str, settings: Settings) -> CheckResult:
    """The drift between the configuration and the database's tables. A dataset is compared with the table its
    ``catalog_table`` names (gone: ``removed``), else with the table of its name, else with the table at its
    location; tables no dataset stands for are ``new_table`` (views excepted: they hold no objects); datasets
    matching no table and naming none of this database are left alone (``not_from_catalog``)."""
    raw, _ = read_tables(source, database)
    by_name = {str(t["Name"]): t for t in raw}
    described = {name: describe_table(t, database, source) for name, t in by_name.items()}
    drift: list[Drift] = []
    matched: dict[str, DatasetConfig] = {}
    unmatched: list[DatasetConfig] = []
    for dataset in settings.datasets:
        if dataset.catalog_table is None:
            unmatched.append(dataset)
            continue
        db, _, name = dataset.catalog_table.partition(".")
        if db != database:
            continue
        if name in by_name:
            matched[name] = dataset
        else:
            drift.append(
                Drift("removed", name, dataset.name, f"table {dataset.catalog_table} is no longer in the catalog")
            )
    left_alone: list[str] = [
        d.name for d in settings.datasets if d.catalog_table and not d.catalog_table.startswith(f"{database}.")
    ]
    for dataset in unmatched:
        found = dataset.name if dataset.name in by_name and dataset.name not in matched else None
        found = found or next(
            (n for n, t in described.items() if n not in matched and t.location == dataset.location), None
        )
        if found is None:
            left_alone.append(dataset.name)
        else:
            matched[found] = dataset
    for name, dataset in matched.items():
        drift.extend(_compare(dataset, by_name[name], described[name]))
    for name, table in described.items():
        if name in matched or by_name[name].get("TableType") == "VIRTUAL_VIEW":
            continue
        importable = "; cannot be imported: " + "; ".join(table.problems) if table.problems else ""
        where = table.location or (
            "an Iceberg table: its catalog holds its location" if table.format == "iceberg" else "no S3 location"
        )
        drift.append(Drift("new_table", name, None, f"not configured ({where}){importable}"))
    order = {kind: i for i, kind in enumerate(get_args(DriftKind))}
    drift.sort(key=lambda d: (order[d.kind], d.table))
    return CheckResult(database, len(raw), tuple(d.name for d in matched.values()), tuple(left_alone), tuple(drift))
