"""Does an object under a table's location name one of the users? Answered with the users' keyed hashes only (the
purge's executors and the verification never hold raw ids): every value that could be an id is hashed and looked
up, never searched for as a substring, so another person's id that contains a requested one is no match.

- Data files (Parquet, live or not, change data): the id columns, row by row (as the indexer reads them).
- The log (JSON commits, checkpoints, sidecars, ``_last_checkpoint``, ``.crc``) and any other JSON: every string
  and number in it; strings that are JSON themselves (``add.stats``: min/max values) are read as JSON too, and SQL
  string literals in them (``commitInfo.operationParameters.predicate``: ``user_id = 'alice'``) are taken out.
- Parquet that is not a data file (a checkpoint): every string and number of every column, read the same way.
- Avro (Iceberg's manifests and manifest lists): every value, bytes (a column's lower and upper bounds) read as
  UTF-8 text and, 4 or 8 bytes long, as a little-endian integer; Iceberg's metadata files as JSON (gzip'd too).
- An Iceberg position delete file is read through its ``row`` column (the deleted rows, when it carries them).
- Deletion-vector files hold row positions only; any other object is read as text, each run of characters between
  quotes, blanks and separators taken as a candidate.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from typing import Any

import orjson

from lakepurge.core.privacy import HashedUsers
from lakepurge.records.formats import group_records
from lakepurge.records.ids import id_problem

_SQL_LITERAL = re.compile(r"'((?:[^']|'')*)'")
_NUMBER = re.compile(r"-?\d+")
_TOKEN = re.compile(rb"[^\s\"',;:=(){}\[\]<>|]+")


def contained(users: Container[str], candidates: Iterable[str]) -> bool:
    """Whether any candidate is one of the users (each hashed once, in bulk, when users are hashes)."""
    distinct = list(dict.fromkeys(candidates))
    if not distinct:
        return False
    each_contained: Callable[[list[str]], list[bool]] | None = getattr(users, "each_contained", None)
    if each_contained is not None:
        return True in each_contained(distinct)
    return any(c in users for c in distinct)


def strings(value: Any) -> Iterator[str]:
    """Every string and integer in a decoded JSON or Arrow value, with the JSON and SQL literals strings hold."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
            stripped = item.strip()
            if stripped[:1] in ("{", "[") and len(stripped) > 1:
                with contextlib.suppress(orjson.JSONDecodeError):
                    stack.append(orjson.loads(stripped))
            if "'" in item:
                yield from (literal.replace("''", "'") for literal in _SQL_LITERAL.findall(item))
            if any(c.isdigit() for c in item) and len(item) < 4096:
                yield from _NUMBER.findall(item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            yield str(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def json_names(body: bytes, users: Container[str]) -> bool:
    """A JSON document, or JSON Lines (a commit), naming one of the users."""
    values: list[Any] = []
    for line in body.splitlines():
        if line.strip():
            try:
                values.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                return text_names(line, users)
    return contained(users, strings(values))


def parquet_values_name(body: bytes, users: Container[str]) -> bool:
    """Parquet that is not a table's data file (a checkpoint, a sidecar): every value of every column."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(body))
    return contained(users, strings(table.to_pylist()))


def data_file_users(body_or_stream: Any, key: str, id_fields: Sequence[str], max_bytes: int) -> dict[str, list[int]]:
    """A table's data file's rows by user id (physical row positions), read as the indexer reads Parquet. One
    top-level id column of strings or integers (the usual table) is grouped by Arrow, without a Python step per
    row; any other shape goes through the indexer's reader."""
    stream = io.BytesIO(body_or_stream) if isinstance(body_or_stream, bytes) else body_or_stream
    grouped = _grouped_by_arrow(stream, id_fields)
    if grouped is not None:
        return grouped
    stream.seek(0)
    id_fields = _deleted_rows_fields(stream, id_fields)
    stream.seek(0)
    return group_records(stream, key, "parquet", id_fields, max_bytes).lines_by_user


def data_file_names(
    body_or_stream: Any, key: str, id_fields: Sequence[str], users: HashedUsers, max_bytes: int
) -> bool:
    """Whether a table's data file names one of the users (a HashedUsers). One top-level id column of strings or
    integers is checked as one Arrow array (HashedUsers.none_of: the users' raw ids looked up in C when known,
    else each distinct id hashed once), without grouping its rows by user; any other shape as data_file_users
    reads it."""
    import pyarrow as pa

    stream = io.BytesIO(body_or_stream) if isinstance(body_or_stream, bytes) else body_or_stream
    column = _id_column(stream, id_fields)
    if column is None:
        stream.seek(0)
        return contained(users, data_file_users(stream, key, id_fields, max_bytes))
    return not users.none_of(column.drop_null().cast(pa.large_string()).cast(pa.large_binary()))


def _deleted_rows_fields(stream: Any, id_fields: Sequence[str]) -> Sequence[str]:
    """The id fields inside an Iceberg position delete file's ``row`` struct (the deleted rows it carries), when the
    file has no id column of its own; else the id fields as they are."""
    import pyarrow.parquet as pq

    names = pq.ParquetFile(stream).schema_arrow.names
    if "row" in names and not {f.split(".")[0] for f in id_fields} <= set(names):
        return tuple(f"row.{f}" for f in id_fields)
    return id_fields


def _grouped_by_arrow(stream: Any, id_fields: Sequence[str]) -> dict[str, list[int]] | None:
    """extract_ids' answer for one top-level column of strings or integers, grouped in Arrow: an empty or null
    id names nobody, an id the index cannot store (NUL, too long) is left out as the indexer leaves it out."""
    import pyarrow as pa

    column = _id_column(stream, id_fields)
    if column is None:
        return None
    column = column.cast(pa.large_string())
    rows = pa.table({"id": column, "row": pa.array(range(len(column)), pa.int64())})
    grouped = rows.group_by("id", use_threads=False).aggregate([("row", "list")])
    found: dict[str, list[int]] = {}
    for user, lines in zip(grouped.column("id").to_pylist(), grouped.column("row_list").to_pylist(), strict=True):
        if user and id_problem(user, "id") is None:
            found[user] = sorted(lines)
    return found


def _id_column(stream: Any, id_fields: Sequence[str]) -> Any:
    """The one top-level id column of strings or integers of a Parquet file (an Arrow ChunkedArray), or None when
    the ids are elsewhere (several fields, a nested one, another type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(id_fields) != 1 or "." in id_fields[0]:
        return None
    name = id_fields[0]
    parquet = pq.ParquetFile(stream)
    schema = parquet.schema_arrow
    if name not in schema.names:
        return None
    kind = schema.field(name).type
    textual = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    if not textual and not pa.types.is_integer(kind):
        return None
    return parquet.read(columns=[name], use_threads=False).column(name)


def avro_names(body: bytes, users: Container[str]) -> bool:
    """An Avro file (an Iceberg manifest or manifest list) naming one of the users in any of its values."""
    from lakepurge.tables.avro import read_container

    _, records = read_container(body)
    return contained(users, strings(_decoded(records)))


def _decoded(value: Any) -> Any:
    """Avro values with bytes as the text and integers they may hold (a bound of a string or an integer column)."""
    if isinstance(value, bytes):
        forms: list[Any] = []
        with contextlib.suppress(UnicodeDecodeError):
            forms.append(value.decode("utf-8"))
        if len(value) in (4, 8):
            forms.append(int.from_bytes(value, "little", signed=True))
        return forms
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def text_names(body: bytes, users: Container[str]) -> bool:
    tokens = (token.decode("utf-8", "replace") for token in _TOKEN.findall(body))
    return contained(users, tokens)


def object_names(
    body: bytes, key: str, users: Container[str], id_fields: Sequence[str], data: bool, max_bytes: int
) -> bool:
    """Whether one version of an object under a table's location names one of the users (see the module doc)."""
    name = key.rsplit("/", 1)[-1]
    if data:
        return contained(users, data_file_users(body, key, id_fields, max_bytes))
    if name.endswith(".parquet"):
        return parquet_values_name(body, users)
    if name.startswith("deletion_vector_") and name.endswith(".bin"):
        return False  # row positions only
    if name.endswith(".avro"):
        return avro_names(body, users)
    if name.endswith((".json", ".crc", ".metadata.json.gz")) or name == "_last_checkpoint":
        return json_names(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body, users)
    return text_names(body, users)
