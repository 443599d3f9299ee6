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
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from lakepurge.records import re2_bytes
from lakepurge.records.arrow_scan import count_matches

if TYPE_CHECKING:
    from lakepurge.records.id_typing import IdTyping

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


class IdRules(NamedTuple):
    """How a dataset's id fields are read, besides their paths (docs/design/PERSON.md)."""

    # column_names = "case-insensitive": a field names the key or column of any case (compared lower-cased, as Glue
    # and Hive store names); two of them in one record or file make it unindexable
    folded: bool = False
    # a kind normalised as `number`: floats and decimals are ids too (as their decimal strings)
    numbers: bool = False
    # per-field kinds, transforms and composite kinds (records.id_typing): the ids are read as index forms
    typing: IdTyping | None = None


EXACT = IdRules()


def ambiguous(field: str, names: Sequence[str]) -> str:
    """Why a record or an object whose id field matches several keys or columns (case-insensitive names) is
    unindexable: which is the id is not for lakepurge to guess."""
    spelled = ", ".join(map(repr, names))
    return f"id field {field!r} matches {spelled} (column_names = case-insensitive): which holds the id is ambiguous"


def matching_names(names: Sequence[str], name: str) -> list[str]:
    """The names (a record's keys, a file's columns) that a case-insensitive field `name` matches."""
    folded = name.lower()
    return [each for each in names if each.lower() == folded]


def resolve_top(paths: tuple[tuple[str, ...], ...], names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The paths with their first names spelled as the file's columns spell them (case-insensitive names: resolved
    once per object against its schema). A field matching no column is kept as it is (missing); one matching
    several raises IdFieldError naming them."""
    resolved = []
    for path in paths:
        found = matching_names(names, path[0])
        if len(found) > 1:
            raise IdFieldError(ambiguous(".".join(path), found))
        resolved.append((found[0], *path[1:]) if found else path)
    return tuple(resolved)


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


def _add_id(value: Any, field: str, out: list[str], numbers: bool) -> None:
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
    elif numbers and isinstance(value, (float, Decimal)):
        if not (value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)):
            raise IdFieldError(f"id field '{field}' holds a number that is not finite")
        out.append(repr(value) if isinstance(value, float) else str(value))  # float: its shortest exact spelling
    else:
        raise IdFieldError(f"id field '{field}' holds a {type(value).__name__}, not a string or integer")


def _collect(value: Any, path: tuple[str, ...], depth: int, field: str, out: list[str], rules: IdRules) -> None:
    if type(value) is _Repeated:  # a key the object writes more than once: each of its values, at this same place
        for each in value:
            _collect(each, path, depth, field, out, rules)
        return
    if depth == len(path):
        if isinstance(value, list):
            for item in value:
                _add_id(item, field, out, rules.numbers)
        else:
            _add_id(value, field, out, rules.numbers)
        return
    if isinstance(value, dict):
        child = _folded_child(value, path[depth], field) if rules.folded else value.get(path[depth])
        if child is not None:
            _collect(child, path, depth + 1, field, out, rules)
    elif isinstance(value, list):
        # ids inside arrays of objects: "orders.buyer" finds the buyer of every order.
        for item in value:
            _collect(item, path, depth, field, out, rules)


def collect(value: Any, path: tuple[str, ...], field: str, out: list[str], rules: IdRules) -> None:
    """The values at one id field's path of a record, appended to `out` (as extract_ids reads them)."""
    _collect(value, path, 0, field, out, rules)


def _folded_child(value: dict[str, Any], name: str, field: str) -> Any:
    found = matching_names(list(value), name)
    if len(found) > 1:
        raise IdFieldError(ambiguous(field, found))
    return value[found[0]] if found else None


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
# quote is never followed by one, and a plain field name can be spelled otherwise only with such an escape). Only an
# escape of a character a plain name can hold (`-`, `.`, a digit, a letter, `_`: \u002d to \u007a) or, names in any
# case, of one lower-cased into ASCII (_LOWERED_TO_ASCII: \u212a, \u0130) can spell one; the escapes a writer makes of
# other text (`\u00e9`: every non-ASCII character in json.dumps's output) are passed over, each of which cost a walk
# to its string's end (9 ms over 3 MB of such text).
ESCAPED_KEY = rb'\\u(?:00(?:2[dDeE]|3[0-9]|[4-7][0-9A-Fa-f])|212[aA]|0130)[^"]*"[ \t\r\n]*:'
# Compiled once for the process (it holds no id); the search leaves the interpreter lock: over 476 KB of json.dumps
# lines dense with escapes of non-ASCII characters 0.33 ms against re's 0.8 ms, over one 1 KB line 1.2 against 1.7 us.
_ESCAPED_KEY = re2_bytes.compiled(ESCAPED_KEY)
assert _ESCAPED_KEY is not None, "RE2 takes the escaped-key pattern"
PLAIN_FIELD = re.compile(r"[A-Za-z0-9_.-]+")


def key_spellings(names: Sequence[str]) -> str:
    """A pattern (RE2's or re's) of every spelling of these plain names' tokens as a JSON text writes a key: `"name"`,
    each character as itself or as its `\\u00XX` escape, hex digits in either case (no other JSON escape gives a
    letter, digit, `_`, `.` or `-`)."""
    spellings = ["".join(f"(?:{re.escape(char)}|{_escape_of(char)})" for char in name) for name in names]
    return '"(?:' + "|".join(spellings) + ')"'


def _escape_of(char: str) -> str:
    """The pattern of a character's \\u00XX escape, its hex digits in either case."""
    hex_digits = f"{ord(char):02x}"
    return r"\\u00" + "".join(f"[{digit}{digit.upper()}]" if digit.isalpha() else digit for digit in hex_digits)


# repeated_among counts a text this long by one RE2 pass of every spelling (Arrow's, which compiles the pattern on
# every call, ~20 us) rather than by the escaped-key search and a count of the plain token: 0.13 against 0.20 ms
# over the ~300 KB of a hard lake object's 511 target lines (json.dumps's escapes in every text), but 0.035 against
# 0.017 over 50 of them; the two cost the same at ~70 KB.
COUNTED_FROM = 64 * 1024


# The two characters outside ASCII that str.lower() turns into ASCII letters (K, the Kelvin sign, and İ): a key
# holding one may match a field's name case-insensitively without a token's lower-cased bytes showing it.
_LOWERED_TO_ASCII = (b"\xe2\x84\xaa", b"\xc4\xb0")


class IdKeys:
    """The keys of a dataset's id fields as a JSON text writes them, to tell which texts may repeat one (names
    matched case-insensitively, `folded`: which may write one in two spellings, or one spelling twice)."""

    def __init__(self, paths: tuple[tuple[str, ...], ...], folded: bool = False) -> None:
        names = sorted({name for path in paths for name in path})
        self.folded = folded
        self.tokens = tuple(orjson.dumps(name.lower() if folded else name) for name in names)
        self._plain = all(PLAIN_FIELD.fullmatch(name) for name in names)
        # One plain name, exactly as written: every spelling of its key, counted in one pass (repeated_among)
        self._spellings = key_spellings(names) if self._plain and not folded and len(names) == 1 else None

    @classmethod
    @functools.cache
    def of(cls, paths: tuple[tuple[str, ...], ...], folded: bool = False) -> IdKeys:
        return cls(paths, folded)

    def _seen(self, text: bytes) -> bytes:
        # Plain names are ASCII: bytes.lower() spells every ASCII case of one as its token does.
        return text.lower() if self.folded else text

    def _escaped_key(self, text: bytes) -> bool:
        if self.folded and (not self._plain or any(char in text for char in _LOWERED_TO_ASCII)):
            return True  # a spelling the tokens cannot count: such a text is read exactly
        if b"\\" not in text:  # memchr: most texts hold no backslash at all
            return False
        # Another name could be spelled with any escape: such a text is read exactly.
        return not self._plain or (b"\\u" in text and re2_bytes.found_in(_ESCAPED_KEY, text))

    def may_repeat(self, text: bytes) -> bool:
        """Whether the JSON text may write one of the id fields' keys more than once (at any depth)."""
        seen = self._seen(text)
        return self._escaped_key(text) or any(seen.count(token) > 1 for token in self.tokens)

    def repeated_among(self, lines: list[bytes], holding: int) -> bool:
        """For the one key of a single top-level id field: whether any of the lines may write it more than once,
        ``holding`` of them being objects that hold it. Each of those writes it at least once (in some spelling), so
        more occurrences in all than ``holding`` is the only way one could write it twice: one count, no step per
        line. (A name in any case, or one that is not plain: any escaped key makes the answer yes.)"""
        joined = b"\n".join(lines)
        if self._spellings is not None and len(joined) >= COUNTED_FROM and b"\\" in joined:
            # Escapes about: every spelling of the key counted by one RE2 pass (outside the interpreter lock), so a
            # key spelled with an escape is one occurrence like any other, and escapes of other text cost nothing.
            return count_matches(joined, self._spellings) != holding
        return self._escaped_key(joined) or self._seen(joined).count(self.tokens[0]) != holding


def parse_record(text: bytes, keys: IdKeys) -> Any:
    """A JSON value as orjson reads it, except that an object writing an id field's key more than once holds every
    value of it (the reader every reader of ids must agree with). Raises orjson.JSONDecodeError as orjson does."""
    record = orjson.loads(text)
    if type(record) is dict and keys.may_repeat(text):
        # orjson read it, so json does too, to the same values
        return json.loads(text, object_pairs_hook=_keeping_every_value)
    return record


def decoded_ids(user_ids: Sequence[bytes]) -> list[str]:
    """Ids given as UTF-8 bytes, decoded (invalid UTF-8 as U+FFFD, which no id of a valid record holds): together,
    split back on the newlines that joined them, unless an id holds one itself (a decoded JSON "\\n", a Parquet
    string), when each is decoded on its own."""
    joined = b"\n".join(user_ids)
    if joined.count(b"\n") == len(user_ids) - 1:
        return joined.decode("utf-8", "replace").split("\n")
    return [user.decode("utf-8", "replace") for user in user_ids]


def plain_ids(values: Sequence[Any]) -> bool:
    """Whether every value is an id extract_ids takes as it is from a single top-level field (a non-empty string,
    short enough, without NUL), checked without a Python step per value."""
    if not values or set(map(type, values)) != {str} or "" in values:
        return False
    return max(map(len, values)) <= SHORT_ID_CHARS and "\x00" not in "".join(values)


def no_id_field(paths: Sequence[tuple[str, ...]]) -> str:
    """Why a record holding none of its id fields is unindexable (typed by kinds or not, the same words)."""
    names = ", ".join(repr(".".join(p)) for p in paths)
    return f"id field {names} missing" if len(paths) == 1 else f"id fields {names} all missing"


def extract_ids(record: dict[str, Any], paths: tuple[tuple[str, ...], ...], rules: IdRules = EXACT) -> tuple[str, ...]:
    """All user ids a record names through the dataset's id fields, without duplicates.

    Raises IdFieldError when no id field is present or a field holds something that is not an id (or, names
    matched case-insensitively, one field names several keys). A dataset with typed fields (`rules.typing`) names
    its ids in their index forms.
    """
    if rules.typing is not None:
        return rules.typing.record_ids(record, rules)
    if len(paths) == 1 and len(paths[0]) == 1 and not rules.folded:  # the common case: one top-level string, no walk
        value = record.get(paths[0][0])
        if type(value) is str and value and len(value) <= SHORT_ID_CHARS and "\x00" not in value:
            return (value,)
    found: list[str] = []
    for path in paths:
        _collect(record, path, 0, ".".join(path), found, rules)
    if not found:
        raise IdFieldError(no_id_field(paths))
    return tuple(dict.fromkeys(found)) if len(found) > 1 else (found[0],)
