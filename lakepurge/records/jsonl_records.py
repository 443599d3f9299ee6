"""JSON Lines: each line's record (its ids) or the reason it cannot be indexed; blank lines and ``{}`` give nothing.
For one top-level id field, a chunk of well-formed lines is answered without a Python step per line (bulk_ids).
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import IO

import orjson

from lakepurge.records.ids import (
    EXACT,
    MAX_ID_BYTES,
    SHORT_ID_CHARS,
    IdFieldError,
    IdKeys,
    IdRules,
    Record,
    Unindexable,
    extract_ids,
    matching_names,
    parse_record,
)
from lakepurge.records.lines import iter_line_batches, too_long

_BYTE_ORDER_MARK = b"\xef\xbb\xbf"


def _json_reason(exc: orjson.JSONDecodeError, line: bytes) -> str:
    # orjson's messages give positions, never the record's content.
    if line.startswith(_BYTE_ORDER_MARK):  # valid UTF-8, which orjson's message would call invalid
        return "starts with a UTF-8 byte order mark, which JSON does not allow"
    return "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"


def read_jsonl(
    stream: IO[bytes], paths: tuple[tuple[str, ...], ...], max_bytes: int, rules: IdRules = EXACT
) -> Iterator[Record | Unindexable]:
    for first, lines in iter_line_batches(stream, max_bytes):
        yield from jsonl_items(first, lines, paths, max_bytes, rules)


def jsonl_items(
    first: int, lines: list[bytes | None], paths: tuple[tuple[str, ...], ...], max_bytes: int, rules: IdRules = EXACT
) -> Iterator[Record | Unindexable]:
    """Each line's record or the reason it cannot be indexed; blank lines and `{}` give nothing."""
    keys = IdKeys.of(paths, rules.folded)
    for number, line in enumerate(lines, first):
        if line is None:
            yield Unindexable(number, too_long(max_bytes))
            continue
        if len(line) <= 3 and line.strip() in (b"", b"{}"):
            continue
        try:
            record = parse_record(line, keys)
        except orjson.JSONDecodeError as exc:
            if not line.strip():
                continue
            yield Unindexable(number, _json_reason(exc, line))
            continue
        if type(record) is not dict:
            yield Unindexable(number, f"not a JSON object (a {type(record).__name__})")
            continue
        if not record:
            continue
        try:
            yield Record(number, extract_ids(record, paths, rules))
        except IdFieldError as exc:
            yield Unindexable(number, str(exc))


def single_field(paths: tuple[tuple[str, ...], ...]) -> str | None:
    """The id field when it is one top-level field (the case group_records reads a chunk at a time)."""
    return paths[0][0] if len(paths) == 1 and len(paths[0]) == 1 else None


def bulk_ids(lines: list[bytes | None], field: str, folded: bool = False) -> list[str] | None:
    """The ids of a chunk of lines when every line is a JSON object whose `field` holds a non-empty string (the
    bulk of any lake), found without a Python step per line; None as soon as any line is anything else (blank,
    `{}`, too long, malformed, another shape), and then the chunk goes through jsonl_items line by line. Names
    matched case-insensitively (`folded`), the chunk is answered here when every line spells the field one way
    (spelling), once, and no other way."""
    if None in lines or not lines:
        return None
    try:
        spelled = spelling(lines, field) if folded else field  # type: ignore[arg-type]
        # itemgetter fails on anything but an object holding the field (KeyError; TypeError for arrays, strings,
        # numbers); each record is freed as soon as its id is out.
        ids = list(map(itemgetter(spelled), map(orjson.loads, lines)))  # type: ignore[arg-type]
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
            max(map(len, ids), default=0) > SHORT_ID_CHARS
            and any(len(i) > SHORT_ID_CHARS and len(i.encode("utf-8")) > MAX_ID_BYTES for i in ids)
        )
        # (folded: each line holds `spelled`, so as many lower-cased occurrences as lines is each spelling it once
        # and no other; anything else is read line by line)
        or IdKeys.of(((field,),), folded).repeated_among(lines, len(ids))  # type: ignore[arg-type]
    ):
        return None
    return ids


def spelling(lines: list[bytes], field: str) -> str:
    """How the first of the lines whose record holds a case-insensitive field spells it (a lake's files spell it
    one way, often not as the catalog does): the bulk paths then look for that spelling, and count every spelling
    to be sure no line holds another. The field itself when no line tells."""
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        found = matching_names(list(record), field) if type(record) is dict else []
        if found:
            return found[0] if len(found) == 1 else field
    return field
