"""The second reader: DuckDB reading a table with readers of its own (its delta or iceberg extension, its Parquet
reader), for the verification of an erasure from a table (lakepurge.purge.tables) and of `lakepurge verify`.

- scan_table: the current version as the extension reads it, with its own log replay (Iceberg: the metadata file's
  snapshot and manifests): each live file's rows, and whether any of them is one of the users'.
- live_files: the current version's live data files as the extension lists them (the same replay, no data read).
- read_files: given data files read with DuckDB's Parquet reader: each file's rows, and whether any of them is one of
  the users'.

The users are known by keyed hash only: DuckDB hashes each distinct id of the files it reads (HMAC-SHA256 with the
pseudonymizer's key, given to it in memory) and answers how many of them are the users'. An id field inside a struct
or an array, or a column neither text nor integer, is read out to Python and hashed there instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lakepurge.core.config import DatasetConfig
from lakepurge.core.privacy import HashedUsers, Pseudonymizer, hmac_pads
from lakepurge.records.ids import extract_ids, parse_paths
from lakepurge.tables.scan import contained
from lakepurge.tables.storage import duckdb_with

_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
_HASHED_IN_DUCKDB = {"VARCHAR", *_INTEGERS, "UHUGEINT"}
_GLOB = set("*?[{")  # a file name with these is a pattern to read_parquet: such files are read by the table's scan


def normal_path(path: str) -> str:
    return unquote(path)


@dataclass(frozen=True)
class SecondReading:
    counts: dict[str, int]  # rows per file read (decoded s3:// paths)
    users_found: bool


@dataclass(frozen=True)
class KeyedUsers:
    """The users as the second reader looks for them: their keyed hashes and the key."""

    key: bytes
    hashes: tuple[str, ...]


def scan_table(dataset: DatasetConfig, pointer: str | None, users: KeyedUsers) -> SecondReading:
    """The current version as DuckDB's delta extension reads it (Iceberg: its iceberg extension, of the metadata file
    `pointer`): every live file's rows, and whether the users are in them."""
    if pointer is not None:  # its filename column is there without asking (asked, 1.5.5 fails)
        source = f"iceberg_scan({_literal(pointer)})"
    else:
        source = f"delta_scan({_literal(_table_uri(dataset))}, filename=true)"
    return _read(dataset, source, {}, users, "iceberg" if pointer is not None else "delta")


def read_files(
    dataset: DatasetConfig, files: Iterable[str], id_fields: tuple[str, ...], users: KeyedUsers
) -> SecondReading | None:
    """These data files (s3:// paths, decoded) read with DuckDB's Parquet reader, their id columns by the names the
    files use (id_fields: physical, as column mapping names them): each one's rows and whether the users are in
    them. None when the files cannot be read so (a name read as a pattern, a column named otherwise in an older
    file): the caller then scans the table."""
    import duckdb

    paths = sorted({normal_path(f) for f in files})
    if not paths:
        return SecondReading({}, False)
    if any(_GLOB & set(path) for path in paths):
        return None
    source = "read_parquet($files, filename=true, union_by_name=true)"
    try:
        return _read(dataset, source, {"files": paths}, users, dataset.format, id_fields)
    except duckdb.BinderException:
        return None


def live_files(dataset: DatasetConfig, pointer: str | None) -> set[str]:
    """The current version's live data files as DuckDB's extension lists them: the delta extension's own log replay
    (delta_list_files), or the iceberg extension's reading of the metadata file's current snapshot (its manifests'
    live data entries). No data file is read."""
    if pointer is not None:
        query = (
            f"SELECT file_path FROM iceberg_metadata({_literal(pointer)})"
            " WHERE manifest_content = 'DATA' AND status <> 'DELETED'"
        )
    else:
        query = f"SELECT data_file FROM delta_list_files({_literal(_table_uri(dataset))})"
    connection = duckdb_with("iceberg" if pointer is not None else "delta")
    try:
        return {normal_path(row[0]) for row in connection.execute(query).fetchall()}
    finally:
        connection.close()


def _read(
    dataset: DatasetConfig,
    source: str,
    parameters: dict[str, Any],
    users: KeyedUsers,
    table_format: str,
    id_fields: tuple[str, ...] | None = None,
) -> SecondReading:
    assert dataset.id_fields is not None
    paths = parse_paths(id_fields or dataset.id_fields)
    top = sorted({p[0] for p in paths})
    columns = [_identifier(c) for c in top]
    sets = ", ".join(["(filename)", *(f"({c})" for c in columns)])
    connection = duckdb_with(table_format)
    try:
        if all(len(p) == 1 for p in paths):
            inner, outer = hmac_pads(users.key)
            hashed = " OR ".join(
                f"({c} IS NOT NULL AND sha256($outer || unhex(sha256($inner || encode(CAST({c} AS VARCHAR)))))"
                " IN (SELECT unnest($hashes)))"
                for c in columns
            )
            types = ", ".join(f"any_value(typeof({c}))" for c in columns)
            query = (
                f"WITH g AS (SELECT filename, {', '.join(columns)}, count(*) AS n,"
                f" list_value({types}) AS types FROM {source} GROUP BY GROUPING SETS ({sets}))"
                " SELECT filename, n, types FROM g WHERE filename IS NOT NULL"
                f" UNION ALL SELECT NULL, count(*), NULL FROM g WHERE filename IS NULL AND ({hashed})"
            )
            rows = connection.execute(
                query, {**parameters, "inner": inner, "outer": outer, "hashes": list(users.hashes)}
            ).fetchall()
            kinds = {kind for _, _, listed in rows if listed for kind in listed}
            if kinds <= _HASHED_IN_DUCKDB:
                found = sum(int(n) for name, n, _ in rows if name is None)
                return SecondReading({normal_path(name): int(n) for name, n, _ in rows if name is not None}, found > 0)
        # Ids inside structs or arrays: every distinct value of the id columns to Python, hashed there.
        query = f"SELECT filename, {', '.join(columns)}, count(*) AS n FROM {source} GROUP BY GROUPING SETS ({sets})"
        counts: dict[str, int] = {}
        ids: list[str] = []
        for batch in connection.execute(query, parameters).to_arrow_reader():
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
    return SecondReading(counts, contained(HashedUsers(users.hashes, Pseudonymizer(users.key)), ids))


def _table_uri(dataset: DatasetConfig) -> str:
    return f"s3://{dataset.uri.bucket}/{dataset.uri.key.rstrip('/')}"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
