"""Record readers: JSON Lines (plain or gzip), CSV with a header row, Parquet.

Each reader streams an object and yields, per record, its position (0-based line number of the decompressed
object; row index for Parquet) and the user ids in it. Blank records (`{}`, empty lines) are skipped. A record
that cannot be indexed is yielded as :class:`Unindexable` with a reason that names the line and never quotes its
content: such a line may hold personal data we cannot locate, so it must be reported, not dropped.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import operator
import re
import zlib
from collections import defaultdict, deque
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import IO, Any, NamedTuple, Protocol, cast

import orjson

from lakepurge.records.arrow_scan import leading_matches, pieces_after
from lakepurge.records.gc_pause import collector_paused
from lakepurge.records.limits import IN_MEMORY_BYTES

CHUNK_BYTES = 1 << 20


class Inflation(NamedTuple):
    """How far a compressed object may inflate before it is refused as a decompression bomb."""

    max_bytes: int
    max_ratio: float


# A bomb is told from a well-compressible object by its ratio, but only once enough has come out to judge it.
RATIO_JUDGED_AFTER = 64 * 1024 * 1024
DEFAULT_INFLATION = Inflation(64 * 1024**3, 200.0)


class InflationLimitExceeded(EOFError):
    """The object inflates past the configured size or ratio: read no further (memory and time stay bounded)."""


# The longest user id, in UTF-8 bytes, that is indexed. DynamoDB keys allow 2048 bytes and a PostgreSQL btree entry
# about 2700, and every row key also holds the object path: a longer id (or one holding NUL, which PostgreSQL text
# cannot store, or a lone surrogate, which is no UTF-8 at all) makes its record unindexable instead of failing the
# whole object's index write. docs/LIMITS.md.
MAX_ID_BYTES = 1024
# Ids of at most this many characters cannot exceed MAX_ID_BYTES (UTF-8 takes at most 4 bytes a character): only
# longer ones are encoded to be measured.
_SHORT_ID_CHARS = MAX_ID_BYTES // 4


class ByteSource(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


# Named tuples, not dataclasses: one is made per record, and a tuple is the cheapest object to make.
class Unindexable(NamedTuple):
    line: int
    reason: str


class Record(NamedTuple):
    line: int
    user_ids: tuple[str, ...]


class IdFieldError(ValueError):
    pass


class TruncatedObject(Exception):
    """The object's stream broke at a line (truncated or corrupt gzip); the lines before it were read."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"{reason} at line {line}")
        self.line = line
        self.reason = reason


def id_problem(value: str, what: str) -> str | None:
    """Why an id cannot be stored by every index backend, or None. `what` names where the id came from
    ("id field 'user_id'"); the reason never quotes the id."""
    if "\x00" in value:
        return f"{what} contains a NUL character"
    if len(value) <= _SHORT_ID_CHARS and value.isascii():
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
_PLAIN_FIELD = re.compile(r"[A-Za-z0-9_.-]+")


class IdKeys:
    """The keys of a dataset's id fields as a JSON text writes them, to tell which texts may repeat one."""

    def __init__(self, paths: tuple[tuple[str, ...], ...]) -> None:
        names = sorted({name for path in paths for name in path})
        self.tokens = tuple(orjson.dumps(name) for name in names)
        self._plain = all(_PLAIN_FIELD.fullmatch(name) for name in names)

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
    return max(map(len, values)) <= _SHORT_ID_CHARS and "\x00" not in "".join(values)


def extract_ids(record: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """All user ids a record names through the dataset's id fields, without duplicates.

    Raises IdFieldError when no id field is present or a field holds something that is not an id.
    """
    if len(paths) == 1 and len(paths[0]) == 1:  # the common case, one top-level field holding a string: no walk
        value = record.get(paths[0][0])
        if type(value) is str and value and len(value) <= _SHORT_ID_CHARS and "\x00" not in value:
            return (value,)
    found: list[str] = []
    for path in paths:
        _collect(record, path, 0, ".".join(path), found)
    if not found:
        names = ", ".join(repr(".".join(p)) for p in paths)
        raise IdFieldError(f"id field {names} missing" if len(paths) == 1 else f"id fields {names} all missing")
    return tuple(dict.fromkeys(found)) if len(found) > 1 else (found[0],)


def _broken(exc: EOFError | zlib.error, line: int) -> TruncatedObject:
    """What a stream's read error means, as the line where the object broke."""
    if isinstance(exc, InflationLimitExceeded):
        kind = str(exc)
    elif isinstance(exc, EOFError):
        kind = "truncated gzip stream"
    else:
        kind = f"corrupt gzip stream ({exc})"
    return TruncatedObject(line, kind)


def iter_line_batches(stream: ByteSource, max_bytes: int) -> Iterator[tuple[int, list[bytes | None]]]:
    """Yield (number of the first line, the lines) for each chunk read, in bounded memory; a line is given
    without its '\\n', and as None when it is longer than max_bytes.

    A final line without a trailing newline is still a line; a trailing '\\r' is kept (JSON treats it as
    whitespace, and the purge must give back every byte unchanged).
    """
    number = 0
    carry = b""
    skipping = False  # inside a line that already exceeded max_bytes: discard until its newline
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except (EOFError, zlib.error) as exc:
            raise _broken(exc, number) from None
        if not chunk:
            break
        parts = chunk.split(b"\n")
        if not skipping:
            parts[0] = carry + parts[0]
        elif len(parts) == 1:
            continue
        carry = parts.pop()
        lines = cast("list[bytes | None]", parts)
        if max(map(len, parts), default=0) > max_bytes:
            lines = [line if len(line) <= max_bytes else None for line in parts]
        if skipping:  # the first one is the end of a line already too long
            lines[0] = None
            skipping = False
        if lines:
            yield number, lines
            number += len(lines)
        if len(carry) > max_bytes:
            carry = b""
            skipping = True
    if skipping:
        yield number, [None]
    elif carry:
        yield number, [carry]


def iter_lines(stream: ByteSource, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """Yield (line number, line) one line at a time: iter_line_batches, flattened."""
    for first, lines in iter_line_batches(stream, max_bytes):
        yield from enumerate(lines, first)


def _too_long(max_bytes: int) -> str:
    return f"line longer than max_record_bytes ({max_bytes} bytes)"


def _json_reason(exc: orjson.JSONDecodeError) -> str:
    # orjson's messages give positions, never the record's content.
    return "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"


def read_jsonl(stream: IO[bytes], paths: tuple[tuple[str, ...], ...], max_bytes: int) -> Iterator[Record | Unindexable]:
    for first, lines in iter_line_batches(stream, max_bytes):
        yield from _jsonl_items(first, lines, paths, max_bytes)


def _jsonl_items(
    first: int, lines: list[bytes | None], paths: tuple[tuple[str, ...], ...], max_bytes: int
) -> Iterator[Record | Unindexable]:
    """Each line's record or the reason it cannot be indexed; blank lines and `{}` give nothing."""
    keys = IdKeys.of(paths)
    for number, line in enumerate(lines, first):
        if line is None:
            yield Unindexable(number, _too_long(max_bytes))
            continue
        if len(line) <= 3 and line.strip() in (b"", b"{}"):
            continue
        try:
            record = parse_record(line, keys)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue
            yield Unindexable(number, _json_reason(exc))
            continue
        if type(record) is not dict:
            yield Unindexable(number, f"not a JSON object (a {type(record).__name__})")
            continue
        if not record:
            continue
        try:
            yield Record(number, extract_ids(record, paths))
        except IdFieldError as exc:
            yield Unindexable(number, str(exc))


def _single_field(paths: tuple[tuple[str, ...], ...]) -> str | None:
    """The id field when it is one top-level field (the case group_records reads a chunk at a time)."""
    return paths[0][0] if len(paths) == 1 and len(paths[0]) == 1 else None


def _plain_ids(lines: list[bytes | None], field: str) -> list[str] | None:
    """The ids of a chunk of lines when every line is a JSON object whose `field` holds a non-empty string (the
    bulk of any lake), found without a Python step per line; None as soon as any line is anything else (blank,
    `{}`, too long, malformed, another shape), and then the chunk goes through _jsonl_items line by line."""
    if None in lines:
        return None
    try:
        # itemgetter fails on anything but an object holding the field (KeyError; TypeError for arrays, strings,
        # numbers); each record is freed as soon as its id is out.
        ids = list(map(itemgetter(field), map(orjson.loads, lines)))  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if set(map(type, ids)) != {str} or "" in ids:
        return None
    # Ids an index cannot store (NUL, too long) make their line unindexable: the line-by-line path says which.
    # orjson refuses lone surrogates, so a parsed id is valid UTF-8; only ids long enough to pass MAX_ID_BYTES
    # are measured. A line that may write the key twice is read there too, every value of it.
    if (
        "\x00" in "".join(ids)
        or (
            max(map(len, ids), default=0) > _SHORT_ID_CHARS
            and any(len(i) > _SHORT_ID_CHARS and len(i.encode("utf-8")) > MAX_ID_BYTES for i in ids)
        )
        or IdKeys.of(((field,),)).repeated_among(lines, len(ids))  # type: ignore[arg-type]
    ):
        return None
    return ids


class Grouped(NamedTuple):
    """An object's records grouped by user: what the index stores."""

    lines_by_user: dict[str, list[int]]
    records: int
    unindexable: list[Unindexable]


def group_records(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Grouped:
    """read_records, grouped by user id. The same answer as grouping read_records' items; for JSON Lines with one
    top-level id field, chunks of well-formed lines take a path without a Python step per line (the indexer's
    throughput is per line)."""
    lines_by_user: dict[str, list[int]] = defaultdict(list)
    unindexable: list[Unindexable] = []
    records = 0
    paths = parse_paths(id_fields)
    field = _single_field(paths) if fmt == "jsonl" else None

    def add(items: Iterable[Record | Unindexable]) -> None:
        nonlocal records
        for item in items:
            if type(item) is Record:
                records += 1
                for user in item.user_ids:
                    lines_by_user[user].append(item.line)
            else:
                unindexable.append(item)  # type: ignore[arg-type]

    if field is None:
        add(read_records(raw, key, fmt, id_fields, max_bytes, inflation))
        return Grouped(dict(lines_by_user), records, unindexable)
    # Thousands of new lists and, per line, a parsed record that is freed at once: none can form a cycle, and the
    # cyclic collector would otherwise run every few hundred lines (a fifth of the time).
    with collector_paused():
        try:
            for first, lines in iter_line_batches(open_decompressed(raw, key, inflation), max_bytes):
                ids = _plain_ids(lines, field)
                if ids is None:
                    add(_jsonl_items(first, lines, paths, max_bytes))
                    continue
                records += len(ids)
                for number, user in enumerate(ids, first):
                    lines_by_user[user].append(number)
        except TruncatedObject as exc:
            unindexable.append(_truncated(exc))
    return Grouped(dict(lines_by_user), records, unindexable)


def lines_holding(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation,
    wanted: Callable[[list[str]], list[bool]],
    none_of: Callable[[list[bytes]], bool] | None = None,
) -> list[int]:
    """The lines (records, rows) of an object whose ids include one of the wanted users, as read_records reads
    them. wanted answers for a list of ids at once; none_of, if given, whether none of a list of ids (UTF-8 bytes)
    is wanted (HashedUsers.none_of: by set operations). For JSON Lines with one top-level id field, an object (or,
    past IN_MEMORY_BYTES, a chunk) whose field holds a plain id or nothing (`{}` placeholders, records without it: no
    user) is answered without a Python step per line: what verifying a freshly rewritten object needs."""
    if none_of is None:
        none_of = functools.partial(_none_of, wanted)
    paths = parse_paths(id_fields)
    field = _single_field(paths) if fmt == "jsonl" else None
    found: list[int] = []

    def from_items(items: Iterable[Record | Unindexable]) -> None:
        records = [item for item in items if type(item) is Record]
        ids = [user for record in records for user in record.user_ids]
        owned = iter(wanted(ids)) if ids else iter(())
        for record in records:
            if any([next(owned) for _ in record.user_ids]):
                found.append(record.line)

    if fmt == "csv" and len(id_fields) == 1:
        try:
            whole, rows = _in_memory(open_decompressed(raw, key, inflation))
            if whole is not None and _csv_none_wanted(whole, id_fields[0], none_of):
                return found
            from_items(read_csv(rows, id_fields, max_bytes))  # type: ignore[arg-type]
        except TruncatedObject as exc:
            raise ValueError(f"the object could not be read to its end: {exc.reason}") from None
        return found
    if field is None:
        from_items(read_records(raw, key, fmt, id_fields, max_bytes, inflation))
        return found
    get = operator.methodcaller("get", field)
    is_a_value = functools.partial(operator.is_not, None)
    candidates = _IdCandidates.of(field)
    keys = IdKeys.of(paths)
    with collector_paused():
        try:
            source: ByteSource = open_decompressed(raw, key, inflation)
            if candidates is not None:
                # The whole object at once, when it fits: no line split, and one pass over its ids.
                whole, source = _in_memory(source)
                if whole is not None and candidates.none_wanted(whole, none_of):
                    return found
            for first, lines in iter_line_batches(source, max_bytes):
                if (
                    candidates is not None and None not in lines and candidates.none_wanted(b"\n".join(lines), none_of)  # type: ignore[arg-type]
                ):
                    continue
                try:
                    if None in lines:
                        raise TypeError
                    values = list(map(get, map(orjson.loads, lines)))  # type: ignore[arg-type]
                except (orjson.JSONDecodeError, AttributeError, TypeError):
                    from_items(_jsonl_items(first, lines, paths, max_bytes))
                    continue
                present = list(filter(is_a_value, values))
                if not present and not keys.repeated_among(lines, 0):  # type: ignore[arg-type]
                    continue  # no line writes the field (placeholders, records without it): no user
                if not plain_ids(present) or keys.repeated_among(lines, len(present)):  # type: ignore[arg-type]
                    from_items(_jsonl_items(first, lines, paths, max_bytes))
                    continue
                owned = wanted(present)
                if True in owned:  # rare: only then walk the lines to number them
                    answers = iter(owned)
                    found.extend(n for n, v in enumerate(values, first) if v is not None and next(answers))
        except TruncatedObject as exc:
            raise ValueError(f"the object could not be read to its end: {exc.reason}") from None
    return found


class _IdCandidates:
    """Every value a stretch of JSON Lines could hold in one top-level id field, found without parsing each line: what
    lets verification read a rewritten object at about the speed of a scan. The values found are a superset of the
    lines' ids, so "none of them is wanted" proves no line holds a wanted user (a line over max_record_bytes, which
    the exact read takes as unindexable, only adds candidates); anything else is left to the exact parse.

    Why a superset: the field's name is plain ASCII, so a line can write that key only as the token `"name"`, or
    with a \\u escape (a stretch with any `\\u` is not answered here). A JSON string cannot hold a bare `"`, so
    every occurrence of the token in a valid line is a key (at any depth). The stretch is answered only when each
    occurrence of the token is followed by `:` (blanks around it allowed) and a string without any escape, so the
    top-level key's value, if the line is a record, is among the strings found, exactly as a parser reads it (each
    value of a key the line writes twice too: parse_record's reading).
    Integers, lists, nulls and escaped strings are no such string, and their stretch is parsed.

    The stretch is split at every occurrence of the token and the start of each piece matched, by Arrow's kernels
    (lakepurge.records.arrow_scan), which release the interpreter lock: the purge's other threads go on meanwhile."""

    def __init__(self, token: str) -> None:
        self._token = token

    @classmethod
    def of(cls, field: str) -> _IdCandidates | None:
        return cls(f'"{field}"') if _PLAIN_FIELD.fullmatch(field) else None

    def none_wanted(self, data: bytes, none_of: Callable[[list[bytes]], bool]) -> bool:
        if b"\\" in data and b"\\u" in data:  # the first by memchr: most objects hold no backslash at all
            return False
        values = leading_matches(pieces_after(data, self._token), _PLAIN_STRING_VALUE)
        if values is None:  # an occurrence of the token not followed by a plain string
            return False
        return not values or none_of(values)


# `:` and a string without escape or newline after the key. Arrow reads binary as Latin-1: one byte a character.
_PLAIN_STRING_VALUE = r'^[ \t\r]*:[ \t\r]*"(?P<value>[^"\\\n]*)"'


def _none_of(wanted: Callable[[list[str]], list[bool]], user_ids: list[bytes]) -> bool:
    # Decoded together (no id read in bulk holds a newline): invalid UTF-8 becomes U+FFFD, which no id of a valid
    # record holds.
    return True not in wanted(b"\n".join(user_ids).decode("utf-8", "replace").split("\n"))


_ALL_BUT_COMMA_AND_NEWLINE = bytes(byte for byte in range(256) if byte not in b",\n")


def read_up_to(stream: ByteSource, limit: int) -> bytes:
    """The stream's first `limit` bytes, or all of it if shorter. A raw reader (GzipReader) returns what it has at
    each read, so one read is not enough: a single read once took a gzip CSV object for its first MiB."""
    pieces = []
    size = 0
    while size < limit:
        piece = stream.read(limit - size)
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _in_memory(stream: ByteSource) -> tuple[bytes | None, ByteSource]:
    """The stream's bytes in one piece when there are at most IN_MEMORY_BYTES of them (None otherwise), and a source
    that reads them again from the start: for the bulk answers, with the exact read to fall back on."""
    try:
        head = read_up_to(stream, IN_MEMORY_BYTES + 1)
    except (EOFError, zlib.error) as exc:
        raise _broken(exc, 0) from None
    return (head if len(head) <= IN_MEMORY_BYTES else None), _Prefixed(head, stream)


def _csv_none_wanted(data: bytes, column_name: str, none_of: Callable[[list[bytes]], bool]) -> bool:
    """Whether a whole CSV object provably holds none of the wanted users in its one id column, decided in a few
    C calls instead of a csv reader step per line; False when it cannot be told that way (the exact read follows).

    Without a '"' or a '\\r' anywhere, csv_records reads every line as a record of its own split at every comma
    (one_width_column then gives the id column's values). Lines of another shape (empty lines, placeholders of
    another width, short rows) make the widths differ, and the object is read exactly."""
    if b'"' in data or b"\r" in data:
        return False
    rows = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if rows < 2:
        return False
    header = data[: data.find(b"\n")].decode("utf-8", "surrogateescape").split(",")
    if column_name not in header:
        return False
    found = one_width_column(data, rows, header.index(column_name))
    if found is None:
        return False
    return none_of(found[1][1:])  # the header's own field is no id


def one_width_column(joined: bytes, rows: int, column: int) -> tuple[bytes, list[bytes]] | None:
    """For `rows` rows without '"' or '\\r', joined by '\\n' (a final '\\n' or not): the commas each row has and every
    row's field in `column`, when all rows have the same number of commas, at least `column`; None otherwise.

    A row's commas are also its blank (`,,,` for four fields); with one width, the rows' fields in order are every
    (width + 1)-th field of the rows joined with ',', from `column` on. A few C calls, no step per row."""
    commas = joined.translate(None, _ALL_BUT_COMMA_AND_NEWLINE).split(b"\n")[:rows]
    blank = commas[0]
    if len(blank) < column or commas.count(blank) != rows:
        return None
    return blank, joined.replace(b"\n", b",").split(b",")[column :: len(blank) + 1][:rows]


class _Prefixed:
    """The bytes already read, then the rest of the stream: a ByteSource for the exact read."""

    def __init__(self, head: bytes, rest: ByteSource) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._head:
            size = len(self._head) if size < 0 else size
            piece, self._head = self._head[:size], self._head[size:]
            return bytes(piece)
        return self._rest.read(size)


class CsvRecord(NamedTuple):
    """One CSV record as the object holds it: the line it starts on, its physical lines (without their '\\n', a
    trailing '\\r' kept, exactly the object's bytes; None for a line over max_record_bytes) and its fields. A record
    that cannot be parsed has row None and a problem; it is then one line long, and the next record starts on the
    line after it."""

    line: int
    lines: list[bytes | None]
    row: list[str] | None
    problem: str | None


class _BrokenRecord(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


UNTERMINATED_AT_END = "unterminated quoted field (not closed before the end of the object)"


def _unterminated_within(max_bytes: int) -> str:
    return f"unterminated quoted field (not closed within max_record_bytes, {max_bytes} bytes)"


def allow_csv_fields(max_bytes: int) -> None:
    """csv's field size limit is process-wide (128 KiB by default): raise it so a field may be as long as a record."""
    if csv.field_size_limit() < max_bytes + 1:
        csv.field_size_limit(max_bytes + 1)


def unquoted_line(line: bytes) -> bool:
    """A line without '"' and without a '\\r' before its end: a record of its own, split at every comma."""
    carriage = line.find(b"\r")
    return b'"' not in line and (carriage < 0 or carriage == len(line) - 1)


def unquoted_row(line: bytes) -> list[str]:
    """The fields of an unquoted_line, as csv.reader gives them."""
    text = line.decode("utf-8", "surrogateescape")
    if text.endswith("\r"):
        text = text[:-1]
    return text.split(",") if text else []


def csv_records(stream: ByteSource, max_bytes: int, rows_for: Container[int] | None = None) -> Iterator[CsvRecord]:
    """The CSV record grammar the indexer and the purge share (so they agree on every record boundary): Python's
    csv reader, default dialect, fed one physical line at a time. A quoted field may span lines (an empty line or a
    line of commas inside it belongs to it); a '"' inside an unquoted field is taken literally.

    A record that cannot be parsed (a quoted field still open at the end of the object or past max_record_bytes, a
    line over max_record_bytes, a bare '\\r' inside an unquoted field) is yielded as its first line alone with the
    problem, and parsing starts again on the next line: every later record is still read. Lines are read ahead only
    while a quoted field is open, so memory stays within about max_record_bytes.

    rows_for, when given, names the lines whose fields are wanted (the purge's targets and the header): a record
    of one line without quotes that is not among them is given with row [] unparsed.
    """
    allow_csv_fields(max_bytes)
    source = iter_lines(stream, max_bytes)
    replay: deque[tuple[int, bytes | None]] = deque()  # lines read past a broken record's first line, to parse again
    while True:
        if replay:
            number, line = replay.popleft()
        else:
            item = next(source, None)
            if item is None:
                return
            number, line = item
        if line is None:
            yield CsvRecord(number, [None], None, _too_long(max_bytes))
            continue
        if unquoted_line(line):
            # No quote and no bare '\r': the record is this line, and csv.reader would split it at every comma.
            if rows_for is not None and number not in rows_for:
                yield CsvRecord(number, [line], [], None)
                continue
            yield CsvRecord(number, [line], unquoted_row(line), None)
            continue
        text = line.decode("utf-8", "surrogateescape")
        try:
            # A record of one line (strict parsing fails on anything else, then the lines are read as csv.reader
            # reads them; where it succeeds it gives the same fields).
            row = next(csv.reader((text + "\n",), strict=True))
        except csv.Error:
            yield _quoted_record(source, replay, number, line, max_bytes)
        else:
            yield CsvRecord(number, [line], row, None)


def _quoted_record(
    source: Iterator[tuple[int, bytes | None]],
    replay: deque[tuple[int, bytes | None]],
    number: int,
    line: bytes,
    max_bytes: int,
) -> CsvRecord:
    """The record starting on a line with a quote (or a bare '\\r'): csv.reader reads as many lines as it takes. A
    broken record gives back the lines read past its first one (replay) to be parsed again."""
    feed = _CsvFeed(source, replay, max_bytes, (number, line))
    try:
        row = next(csv.reader(feed.lines()), [])
        if feed.ended:  # the reader gave back what it had when the lines ran out inside a quoted field
            raise _BrokenRecord(UNTERMINATED_AT_END)
        return CsvRecord(number, [physical for _, physical in feed.taken], row, None)
    except _BrokenRecord as exc:
        reason = exc.reason
    except csv.Error as exc:  # its messages name no content
        reason = f"malformed CSV record ({str(exc).split(' - ')[0]})"
    replay.extendleft(reversed(feed.taken[1:]))
    return CsvRecord(number, [line], None, reason)


class _CsvFeed:
    """The physical lines given to csv.reader for one record, decoded, remembering which they were."""

    def __init__(
        self,
        source: Iterator[tuple[int, bytes | None]],
        replay: deque[tuple[int, bytes | None]],
        max_bytes: int,
        first: tuple[int, bytes],
    ) -> None:
        self.source = source
        self.replay = replay
        self.max_bytes = max_bytes
        self.first = first
        self.taken: list[tuple[int, bytes | None]] = []
        self.ended = False

    def lines(self) -> Iterator[str]:
        replay, taken, max_bytes = self.replay, self.taken, self.max_bytes
        item: tuple[int, bytes | None] = self.first
        size = 0
        while True:
            taken.append(item)
            line = item[1]
            if line is None:
                raise _BrokenRecord(_unterminated_within(max_bytes))
            size += len(line) + 1
            if size > max_bytes + 1:
                raise _BrokenRecord(_unterminated_within(max_bytes))
            yield line.decode("utf-8", "surrogateescape") + "\n"
            if replay:
                item = replay.popleft()
            else:
                following = next(self.source, None)
                if following is None:
                    self.ended = True
                    return
                item = following


def csv_id_columns(header: Sequence[str], columns: Sequence[str]) -> list[tuple[str, int | None]]:
    """Each id column and its index in the header (None when the header lacks it)."""
    return [(c, header.index(c) if c in header else None) for c in columns]


def csv_ids(row: Sequence[str], positions: Sequence[tuple[str, int | None]]) -> tuple[tuple[str, ...], str | None]:
    """The ids of a CSV row and, when any cannot be indexed, why (the record is then unindexable: the purge never
    takes it for anyone's). Invalid UTF-8 in the id columns (decoded with surrogateescape) is such a problem."""
    ids: list[str] = []
    for column, index in positions:
        value = row[index] if index is not None and index < len(row) else ""
        if not value:
            continue
        if not value.isascii() and any("\udc80" <= ch <= "\udcff" for ch in value):
            return (), f"invalid UTF-8 in id field '{column}'"
        problem = id_problem(value, f"id field '{column}'")
        if problem is not None:
            return (), problem
        ids.append(value)
    if not ids:
        missing = [c for c, i in positions if i is None]
        if missing and len(missing) == len(positions):
            return (), f"id column {', '.join(repr(c) for c in missing)} not in header"
        return (), f"id field {', '.join(repr(c) for c, _ in positions)} missing"
    return tuple(dict.fromkeys(ids)), None


def read_csv(stream: IO[bytes], columns: Sequence[str], max_bytes: int) -> Iterator[Record | Unindexable]:
    """CSV with a header row (line 0). A record's position is the line it starts on (quoted fields may span
    lines); records are those of csv_records. Invalid UTF-8 outside the id columns does not stop a row from being
    indexed."""
    records = csv_records(stream, max_bytes)
    header = next(records, None)
    if header is None:
        return
    if header.row is None:
        yield Unindexable(0, f"{HEADER_PROBLEM}{header.problem}")
        return
    positions = csv_id_columns(header.row, columns)
    for record in records:
        if record.row is None:
            yield Unindexable(record.line, cast("str", record.problem))
            continue
        if not any(record.row):
            continue
        ids, problem = csv_ids(record.row, positions)
        if problem is not None:
            yield Unindexable(record.line, problem)
        else:
            yield Record(record.line, ids)


def read_parquet(
    source: IO[bytes], paths: tuple[tuple[str, ...], ...], batch_rows: int = 65536
) -> Iterator[Record | Unindexable]:
    """Parquet rows by index, reading only the columns that hold ids, one batch at a time."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
    names = set(parquet.schema_arrow.names)
    top = sorted({p[0] for p in paths if p[0] in names})
    if not top:
        for row in range(parquet.metadata.num_rows):
            yield Unindexable(row, f"id column {', '.join(repr('.'.join(p)) for p in paths)} not in schema")
        return
    row = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=top):
        for record in batch.to_pylist():
            try:
                yield Record(row, extract_ids(record, paths))
            except IdFieldError as exc:
                yield Unindexable(row, str(exc))
            row += 1


class GzipReader(io.RawIOBase):
    """Streaming gzip decompression that hands out every byte decoded before a truncation or corruption.

    (gzip.GzipFile discards the data of the read call that hits the break.) Concatenated members are read as
    one stream, as gunzip does. Each step inflates at most CHUNK_BYTES (``decompress(max_length)``; the rest of the
    input waits in ``unconsumed_tail``), so memory stays a few chunks whatever the object inflates to, and time
    stays linear: output is handed out from an offset, never re-sliced. Past the ``inflation`` limits the stream
    ends with InflationLimitExceeded.
    """

    def __init__(self, raw: IO[bytes], inflation: Inflation = DEFAULT_INFLATION) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(wbits=31)
        self._input = b""  # compressed bytes not yet inflated
        self._pending = b""
        self._offset = 0
        self._broken: str | None = None
        self._done = False
        self._inflation = inflation
        self._read_in = 0
        self._given_out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending) and not self._done:
            self._fill()
        available = len(self._pending) - self._offset
        if available <= 0:
            if self._broken is not None:
                raise EOFError(self._broken)
            return 0
        size = min(len(buffer), available)
        buffer[:size] = memoryview(self._pending)[self._offset : self._offset + size]
        self._offset += size
        return size

    def _read_raw(self) -> bytes:
        data = self._raw.read(CHUNK_BYTES)
        self._read_in += len(data)
        return data

    def _fill(self) -> None:
        if self._inflate.eof:
            following = self._inflate.unused_data or self._read_raw()
            if not following:
                self._done = True
                return
            self._inflate = zlib.decompressobj(wbits=31)  # the next member of a concatenated stream
            self._input = following
        if not self._input:
            self._input = self._read_raw()
            if not self._input:
                self._done = True
                self._broken = "compressed stream ended before its end marker"
                return
        try:
            self._pending = self._inflate.decompress(self._input, CHUNK_BYTES)
        except zlib.error as exc:
            self._done = True
            self._broken = str(exc)
            raise zlib.error(self._broken) from None
        self._input = self._inflate.unconsumed_tail
        self._offset = 0
        self._given_out += len(self._pending)
        self._check_inflation()

    def _check_inflation(self) -> None:
        limit = self._inflation
        problem = None
        if self._given_out > limit.max_bytes:
            problem = f"inflates past indexing.max_decompressed_bytes ({limit.max_bytes} bytes)"
        elif self._given_out > RATIO_JUDGED_AFTER and self._given_out > limit.max_ratio * max(self._read_in, 1):
            problem = (
                f"inflates more than indexing.max_compression_ratio ({limit.max_ratio:g}x) times its compressed"
                " size: refused as a decompression bomb"
            )
        if problem is not None:
            self._done = True
            self._broken = problem
            self._pending, self._offset = b"", 0
            raise InflationLimitExceeded(problem)


def open_decompressed(raw: IO[bytes], key: str, inflation: Inflation = DEFAULT_INFLATION) -> IO[bytes]:
    if key.endswith(".gz"):
        # A raw reader: short reads keep the data before a break.
        return GzipReader(raw, inflation)  # type: ignore[return-value]
    return raw


def read_records(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation = DEFAULT_INFLATION,
) -> Iterator[Record | Unindexable]:
    """Dispatch on format and compression. A truncated or corrupt gzip stream ends the iteration with an
    Unindexable at the line where the readable data stopped (the rest of the object cannot be located)."""
    paths = parse_paths(id_fields)
    if fmt == "parquet":
        yield from read_parquet(raw, paths)
        return
    stream = open_decompressed(raw, key, inflation)
    items: Iterable[Record | Unindexable] = (
        read_jsonl(stream, paths, max_bytes) if fmt == "jsonl" else read_csv(stream, id_fields, max_bytes)
    )
    try:
        yield from items
    except TruncatedObject as exc:
        yield _truncated(exc)


# The reasons of an unindexable line that stands for the rest of its object: a stream broken at that line, a CSV
# header that could not be read (no record after it was indexed).
UNREAD_FROM_HERE = "the object could not be read from this line on"
HEADER_PROBLEM = "header: "


def _truncated(exc: TruncatedObject) -> Unindexable:
    return Unindexable(exc.line, f"{exc.reason}: {UNREAD_FROM_HERE}")
