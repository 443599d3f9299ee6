"""The second reader: DuckDB's delta extension (Iceberg: its iceberg extension) reading a table's current version
with its own log replay, for the
verification of an erasure from a table (lakepurge.purge.tables) and of `lakepurge verify`: each live file's rows
and every distinct id in them, from one grouped scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from lakepurge.core.config import DatasetConfig
from lakepurge.records.ids import extract_ids, parse_paths
from lakepurge.tables.storage import duckdb_with, duckdb_with_delta


def normal_path(path: str) -> str:
    return unquote(path)


def second_reader(dataset: DatasetConfig, files: set[str] | None, pointer: str | None = None) -> SecondReading:
    """The current version as DuckDB's delta extension reads it (Iceberg: its iceberg extension, of the metadata file
    `pointer`): the rows of each live file among `files` (every live file: None; a filter DuckDB pushes into its
    scan) and every distinct value of their id columns. One scan answers both (DuckDB's grouping, in C): a million
    rows cost a hash per distinct id, not a Python step per row."""
    if files is not None and not files:
        return SecondReading({}, [])
    assert dataset.id_fields is not None
    paths = parse_paths(dataset.id_fields)
    top = sorted({p[0] for p in paths})
    uri = f"s3://{dataset.uri.bucket}/{dataset.uri.key.rstrip('/')}".replace("'", "''")
    scan = f"delta_scan('{uri}', filename=true)"
    if pointer is not None:  # its filename column is there without asking (asked, 1.5.5 fails)
        scan = f"iceberg_scan('{pointer.replace(chr(39), chr(39) * 2)}')"
    sets = ", ".join(["(filename)", *(f"({_identifier(c)})" for c in top)])
    where = "" if files is None else f" WHERE {_among(files)}"
    query = (
        f"SELECT filename, {', '.join(_identifier(c) for c in top)}, count(*) AS n FROM {scan}{where}"
        f" GROUP BY GROUPING SETS ({sets})"
    )
    counts: dict[str, int] = {}
    ids: list[str] = []
    connection = duckdb_with("iceberg") if pointer is not None else duckdb_with_delta()
    try:
        for batch in connection.execute(query).to_arrow_reader():
            for record in batch.to_pylist():
                n = record.pop("n")
                name = record.pop("filename")
                if name is not None:
                    counts[normal_path(name)] = int(n)
                    continue
                try:
                    ids.extend(extract_ids(record, paths))
                except ValueError:
                    continue  # an id the indexer reports unindexable is nobody's
    finally:
        connection.close()
    return SecondReading(counts, ids)


def _among(paths: set[str]) -> str:
    """A filter on DuckDB's filename column: each path as the log names it and as it is decoded."""
    names = sorted({*paths, *map(normal_path, paths)})
    return f"filename IN ({', '.join(map(_literal, names))})"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class SecondReading:
    counts: dict[str, int]
    ids: list[str]
