"""Whose record is it: the check every line, CSV record or Parquet row passes before the purge erases it or the
access export takes it. The ids are read as the indexer reads them (the same parser, the same id rules), so a stale
index never erases, or exports, someone else's record; a record whose ids cannot be read is nobody's.

:class:`Ownership` decides JSON Lines lines and CSV records and remembers what it decided (the lines taken, how
many the index named in vain); :func:`owned_rows` decides the rows of a Parquet row group. A typed dataset's ids
are read in their index forms (the id rules' typing, as the indexer keys them), and only through the general path:
the bulk paths compare ids as read, which only an untyped dataset's are.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Container
from typing import Any

import orjson

from lakepurge.core.config import DatasetConfig
from lakepurge.records.csv_records import csv_id_columns, csv_ids
from lakepurge.records.ids import (
    EXACT,
    IdFieldError,
    IdKeys,
    IdRules,
    extract_ids,
    parse_paths,
    parse_record,
    plain_ids,
    resolve_top,
)
from lakepurge.records.jsonl_records import spelling


class Ownership:
    """Decides whether a record belongs to one of the users, and remembers what it decided."""

    def __init__(self, dataset: DatasetConfig, users: Container[str], rules: IdRules = EXACT) -> None:
        """rules: the dataset's (core.config_identity.id_rules), as the indexer read its ids."""
        assert dataset.id_fields is not None
        self._paths = parse_paths(dataset.id_fields)
        self._rules = rules
        # (names in any case: a line spelling the field otherwise, or twice, is read line by line, as the indexer's)
        self._keys = IdKeys.of(self._paths, self._rules.folded)
        self._columns: list[tuple[str, int | None]] | None = None
        self._fields = dataset.id_fields
        self.users = users
        self.erased: list[int] = []
        self.not_matching = 0
        self.lines_of: dict[int, int] = {}  # physical lines of each erased record that spans more than one

    def json_lines(self, lines: list[int], contents: list[bytes]) -> list[bool]:
        """json_line for several lines at once. When each is an object whose single top-level id field holds a
        plain id (the bulk of any lake), they are parsed, hashed and looked up without a Python step per line;
        otherwise each goes through json_line."""
        one = len(self._paths) == 1 and len(self._paths[0]) == 1 and self._rules.typing is None  # (typed: forms)
        field = self._paths[0][0] if one else None
        each_contained = getattr(self.users, "each_contained", None)
        if field is not None and each_contained is not None:
            try:
                # (names in any case: the lines' spelling; keys below counts every other one)
                field = spelling(contents, field) if self._rules.folded else field
                ids = list(map(dict.get, map(orjson.loads, contents), itertools.repeat(field)))
            except (orjson.JSONDecodeError, TypeError):  # not JSON, or not an object: line by line
                ids = []
            # (a line that may write the field twice is read line by line, every value of it)
            if plain_ids(ids) and not self._keys.repeated_among(contents, len(ids)):
                return self._note_many(lines, each_contained(ids))
        return [self.json_line(line, content) for line, content in zip(lines, contents, strict=True)]

    def json_line(self, line: int, content: bytes) -> bool:
        try:
            record = parse_record(content, self._keys)
            ids = extract_ids(record, self._paths, self._rules) if isinstance(record, dict) else ()
            owned = any(u in self.users for u in ids)
        except (orjson.JSONDecodeError, ValueError):
            owned = False
        return self._note(line, owned)

    def csv_header(self, header: list[str]) -> None:
        try:
            self._columns = csv_id_columns(header, self._fields, self._rules.folded)
        except IdFieldError:  # an id column the header names twice: the indexer indexed none of its rows
            self._columns = []

    def csv_rows(self, lines: list[int], rows: list[list[str]]) -> list[bool]:
        """csv_record for several rows at once: hashed and looked up together when the dataset has one id column
        and every row holds a plain ASCII id in it (the bulk of any lake); otherwise row by row."""
        assert self._columns is not None
        column = self.csv_column()
        if column is not None:
            if rows and min(map(len, rows)) > column:  # every row holds the column: taken in C
                ids = list(map(operator.itemgetter(column), rows))
            else:
                ids = [row[column] if column < len(row) else "" for row in rows]
            if plain_ids(ids) and "".join(ids).isascii():
                return self._note_many(lines, self.users.each_contained(ids))  # type: ignore[attr-defined]
        return [self.csv_record(line, row) for line, row in zip(lines, rows, strict=True)]

    def csv_column(self) -> int | None:
        """The id column's index when rows can be decided by it alone (csv_plain_ids): the dataset has one id
        column, the header names it, and the users are looked up in batches. None otherwise."""
        assert self._columns is not None
        if self._rules.typing is not None:  # typed: each row's index forms, row by row
            return None
        if len(self._columns) == 1 and getattr(self.users, "each_contained", None) is not None:
            return self._columns[0][1]
        return None

    def csv_plain_ids(self, lines: list[int], ids: list[bytes]) -> list[bool] | None:
        """csv_rows for rows given by their bytes in the csv_column, when every one is a plain ASCII id (decoded,
        as csv_ids reads it, to the same string); None otherwise, and nothing is noted (the rows are then decided
        row by row)."""
        joined = b"".join(ids)
        if self._rules.typing is not None or not joined.isascii():
            return None
        values = list(map(bytes.decode, ids))  # ASCII: the same as the surrogateescape decoding of the row
        if not plain_ids(values):
            return None
        return self._note_many(lines, self.users.each_contained(values))  # type: ignore[attr-defined]

    def csv_record(self, line: int, row: list[str]) -> bool:
        """As the indexer reads the row: a row with an id it would not index (too long, NUL, invalid UTF-8) is
        nobody's."""
        assert self._columns is not None
        ids, problem = csv_ids(row, self._columns, self._rules)
        return self._note(line, problem is None and any(u in self.users for u in ids))

    def _note_many(self, lines: list[int], owned: list[bool]) -> list[bool]:
        self.erased.extend(itertools.compress(lines, owned))
        self.not_matching += owned.count(False)
        return owned

    def _note(self, line: int, owned: bool) -> bool:
        if owned:
            self.erased.append(line)
        else:
            self.not_matching += 1
        return owned


def owned_rows(
    table: Any,
    paths: tuple[tuple[str, ...], ...],
    users: Container[str],
    rules: IdRules = EXACT,
) -> list[bool]:
    """For each row of a Parquet table (a row group), whether its ids (in their index forms where the rules type
    them) name one of the users. A row whose ids cannot be read (the indexer reports it unindexable) is
    nobody's. The purge drops these rows; the export takes them."""
    if rules.folded:  # each field resolved against the columns, as the indexer's read_parquet resolves it
        try:
            paths = resolve_top(paths, table.column_names)
        except IdFieldError:
            return [False] * table.num_rows
    top = sorted({p[0] for p in paths if not rules.folded or p[0] in table.column_names})
    owned = []
    for record in table.select(top).to_pylist():
        try:
            ids: tuple[str, ...] = extract_ids(record, paths, rules)
        except ValueError:
            ids = ()
        owned.append(any(u in users for u in ids))
    return owned
