"""Which user ids a record names, and which ids the index can hold.

A dataset's id fields are dotted paths (``orders.buyer`` finds the buyer of every order); every value of an id field
counts, a key written twice included (parse_record), and an id an index backend cannot store (too long, NUL, invalid
UTF-8) makes its record unindexable. Every reader of ids (the indexer and its bulk path, the purge's ownership check,
verification, the access export) reads them through this module, so they agree. What a reader yields per record is
here too: :class:`Record` (its line and ids) or :class:`Unindexable` (its line and why, never its content).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

# The longest user id, in UTF-8 bytes, that is indexed. DynamoDB keys allow 2048 bytes and a PostgreSQL btree entry
# about 2700, and every row key also holds the object path: a longer id (or one holding NUL, which PostgreSQL text
# cannot store, or a lone surrogate, which is no UTF-8 at all) makes its record unindexable instead of failing the
# whole object's index write. docs/LIMITS.md.
MAX_ID_BYTES = 1024
# Ids of at most this many characters cannot exceed MAX_ID_BYTES (UTF-8 takes at most 4 bytes a character): only
# longer ones are encoded to be measured.
SHORT_ID_CHARS = MAX_ID_BYTES // 4


# Named tuples, not dataclasses: one is made per record, and a tuple is the cheapest object to make.
class Unindexable(NamedTuple):
    line: int
    reason: str


class Record(NamedTuple):
    line: int
    user_ids: tuple[str, ...]


class IdFieldError(ValueError):
    pass


def id_problem(value: str, what: str) -> str | None:
    """Why an id cannot be stored by every index backend, or None. `what` names where the id came from
    ("id field 'user_id'"); the reason never quotes the id."""
    if "\x00" in value:
        return f"{what} contains a NUL character"
    if len(value) <= SHORT_ID_CHARS and value.isascii():
        return None
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} holds invalid UTF-8 (a lone surrogate)"
    return f"{what} is longer than {MAX_ID_BYTES} bytes" if size > MAX_ID_BYTES else None


def parse_paths(id_fields: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(field.split(".")) for field in id_fields)


def _add_id(value: Any, field: str, out: list[str]) -> None:
    if isinstance(value, str):
        if not value:
            raise IdFieldError(f"id field '{field}' is empty")
        problem = id_problem(value, f"id field '{field}'")
        if problem is not None:
            raise IdFieldError(problem)
        out.append(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        out.append(str(value))
    elif value is None:
        return
    else:
        raise IdFieldError(f"id field '{field}' holds a {type(value).__name__}, not a string or integer")


def _collect(value: Any, path: tuple[str, ...], depth: int, field: str, out: list[str]) -> None:
    if type(value) is _Repeated:  # a key the object writes more than once: each of its values, at this same place
        for each in value:
            _collect(each, path, depth, field, out)
        return
    if depth == len(path):
        if isinstance(value, list):
            for item in value:
                _add_id(item, field, out)
        else:
            _add_id(value, field, out)
        return
    if isinstance(value, dict):
        child = value.get(path[depth])
        if child is not None:
            _collect(child, path, depth + 1, field, out)
    elif isinstance(value, list):
        # ids inside arrays of objects: "orders.buyer" finds the buyer of every order.
        for item in value:
            _collect(item, path, depth, field, out)


# -- objects that write a key more than once -------------------------------------------------------------------------
#
# JSON leaves a repeated key's meaning open: orjson (like Python's json) keeps the last value, other readers the
# first, so `{"user_id":"alice",...,"user_id":"bob"}` is alice's record to some of the lake's readers and bob's to
# others. Every value of an id field counts: the record is indexed under both, the purge of either blanks it, and
# verification finds it for either. Every reader that must agree (the indexer's reader and its bulk path, the
# purge's ownership check, verification's exact read) parses such a record with parse_record. Finding them is cheap:
# only a line in which an id field's key occurs more than once, or a key is written with an escape (which could
# spell that key another way), is parsed a second time, by Python's json keeping every value.


class _Repeated(list):
    """The values of a key an object writes more than once, in order."""


def _keeping_every_value(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key not in record:
            record[key] = value
        elif type(held := record[key]) is _Repeated:
            held.append(value)
        else:
            record[key] = _Repeated((held, value))
    return record


# A \u escape inside a key: from the escape to the string's end, then the `:` that makes it a key (a value's closing
# quote is never followed by one, and a plain field name can be spelled otherwise only with such an escape).
_ESCAPED_KEY = re.compile(rb'\\u[0-9A-Fa-f]{4}[^"]*"[ \t\r\n]*:')
PLAIN_FIELD = re.compile(r"[A-Za-z0-9_.-]+")


class IdKeys:
    """The keys of a dataset's id fields as a JSON text writes them, to tell which texts may repeat one."""

    def __init__(self, paths: tuple[tuple[str, ...], ...]) -> None:
        names = sorted({name for path in paths for name in path})
        self.tokens = tuple(orjson.dumps(name) for name in names)
        self._plain = all(PLAIN_FIELD.fullmatch(name) for name in names)

    @classmethod
    @functools.cache
    def of(cls, paths: tuple[tuple[str, ...], ...]) -> IdKeys:
        return cls(paths)

    def _escaped_key(self, text: bytes) -> bool:
        if b"\\" not in text:  # memchr: most texts hold no backslash at all
            return False
        # Another name could be spelled with any escape: such a text is read exactly.
        return not self._plain or (b"\\u" in text and _ESCAPED_KEY.search(text) is not None)

    def may_repeat(self, text: bytes) -> bool:
        """Whether the JSON text may write one of the id fields' keys more than once (at any depth)."""
        return self._escaped_key(text) or any(text.count(token) > 1 for token in self.tokens)

    def repeated_among(self, lines: list[bytes], holding: int) -> bool:
        """For the one key of a single top-level id field: whether any of the lines may write it more than once,
        ``holding`` of them being objects that hold it. Without escaped keys each of those writes it at least once,
        so more occurrences in all than ``holding`` is the only way one could write it twice: one count, no step
        per line."""
        joined = b"\n".join(lines)
        return self._escaped_key(joined) or joined.count(self.tokens[0]) != holding


def parse_record(text: bytes, keys: IdKeys) -> Any:
    """A JSON value as orjson reads it, except that an object writing an id field's key more than once holds every
    value of it (the reader every reader of ids must agree with). Raises orjson.JSONDecodeError as orjson does."""
    record = orjson.loads(text)
    if type(record) is dict and keys.may_repeat(text):
        # orjson read it, so json does too, to the same values
        return json.loads(text, object_pairs_hook=_keeping_every_value)
    return record


def plain_ids(values: Sequence[Any]) -> bool:
    """Whether every value is an id extract_ids takes as it is from a single top-level field (a non-empty string,
    short enough, without NUL), checked without a Python step per value."""
    if not values or set(map(type, values)) != {str} or "" in values:
        return False
    return max(map(len, values)) <= SHORT_ID_CHARS and "\x00" not in "".join(values)


def extract_ids(record: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """All user ids a record names through the dataset's id fields, without duplicates.

    Raises IdFieldError when no id field is present or a field holds something that is not an id.
    """
    if len(paths) == 1 and len(paths[0]) == 1:  # the common case, one top-level field holding a string: no walk
        value = record.get(paths[0][0])
        if type(value) is str and value and len(value) <= SHORT_ID_CHARS and "\x00" not in value:
            return (value,)
    found: list[str] = []
    for path in paths:
        _collect(record, path, 0, ".".join(path), found)
    if not found:
        names = ", ".join(repr(".".join(p)) for p in paths)
        raise IdFieldError(f"id field {names} missing" if len(paths) == 1 else f"id fields {names} all missing")
    return tuple(dict.fromkeys(found)) if len(found) > 1 else (found[0],)
