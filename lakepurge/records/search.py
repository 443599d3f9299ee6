"""Which lines of an object hold one of the wanted users: what the purge asks of the bytes it produced before it writes
them (verification by checksum relies on that answer), given as the indexer's reader would give it, but in bulk
where it can be: an object (or a chunk) whose id field provably holds none of the wanted users is cleared by a few C
calls instead of a parse per line.
"""

from __future__ import annotations

import functools
import operator
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import IO, Any

import orjson

from lakepurge.records.candidates import CSV_VALUES, IdCandidates, WantedIds
from lakepurge.records.csv_records import one_width_column, read_csv
from lakepurge.records.formats import read_records
from lakepurge.records.gc_pause import collector_paused
from lakepurge.records.ids import (
    EXACT,
    IdFieldError,
    IdKeys,
    IdRules,
    Record,
    Unindexable,
    decoded_ids,
    parse_paths,
    plain_ids,
    resolve_top,
)
from lakepurge.records.jsonl_records import jsonl_items, single_field, spelling
from lakepurge.records.limits import IN_MEMORY_BYTES
from lakepurge.records.lines import (
    ByteSource,
    Inflation,
    TruncatedObject,
    broken_at,
    iter_line_batches,
    open_decompressed,
    read_up_to,
)


def lines_holding(
    raw: IO[bytes],
    key: str,
    fmt: str,
    id_fields: Sequence[str],
    max_bytes: int,
    inflation: Inflation,
    wanted: Callable[[list[str]], list[bool]],
    none_of: Callable[[Any], bool] | None = None,
    rules: IdRules = EXACT,
    known: Collection[str] | None = None,
) -> list[int]:
    """The lines (records, rows) of an object whose ids include one of the wanted users, as read_records reads
    them. wanted answers for a list of ids at once; none_of, if given, whether none of a list of ids (UTF-8 bytes,
    a list or an Arrow array) is wanted (HashedUsers.none_of: by set operations). For JSON Lines whose id fields
    have plain names, an object (or, past IN_MEMORY_BYTES, a chunk) is first answered in bulk from every id it could
    hold (records.candidates): when none is wanted, no line is parsed. What verifying a freshly rewritten object
    needs; anything the bulk answer cannot clear is parsed line by line. rules: as the indexer reads the ids. A
    typed dataset (typed fields in rules) is read record by record, its ids read in their index forms: the bulk
    answers compare ids as read. known: the wanted users' raw ids, when the caller holds them (an inline purge):
    the bulk answer is then first asked by the ids themselves (IdCandidates.holds_none_of: no split, no lookup; a CSV
    object, by the ids anywhere in its bytes: _csv_values_hold_none_of); a WantedIds (HashedUsers.ids_held) keeps its
    automata for the next objects, other ids are compiled for this one."""
    if none_of is None:
        none_of = functools.partial(_none_of, wanted)
    paths = parse_paths(id_fields)
    found: list[int] = []

    def from_items(items: Iterable[Record | Unindexable]) -> None:
        records = [item for item in items if type(item) is Record]
        ids = [user for record in records for user in record.user_ids]
        owned = iter(wanted(ids)) if ids else iter(())
        for record in records:
            if any([next(owned) for _ in record.user_ids]):
                found.append(record.line)

    by_ids = known if isinstance(known, WantedIds) or known is None else WantedIds(known)
    if fmt == "csv" and len(id_fields) == 1 and rules.typing is None:  # (typed fields: read_records makes forms)
        try:
            whole, rows = _in_memory(open_decompressed(raw, key, inflation))
            # (by the ids themselves first, when held: one automaton, where the split reads every row's id)
            if whole is not None and (
                _csv_values_hold_none_of(whole, by_ids) or _csv_none_wanted(whole, id_fields[0], none_of, rules.folded)
            ):
                return found
            from_items(read_csv(rows, id_fields, max_bytes, rules=rules))  # type: ignore[arg-type]
        except TruncatedObject as exc:
            raise ValueError(f"the object could not be read to its end: {exc.reason}") from None
        return found
    one_column = len(paths) == 1 and len(paths[0]) == 1 and rules.typing is None and not rules.folded
    if fmt == "parquet" and one_column and _parquet_none_wanted(raw, paths[0][0], none_of):
        return found
    if fmt != "jsonl":
        from_items(read_records(raw, key, fmt, id_fields, max_bytes, inflation, rules=rules))
        return found
    # (names in any case: the bulk answer's tokens are the exact names, so every line is read)
    # (typed: the records hold values, not the index forms wanted, so every line is read)
    typed = rules.typing is not None
    # (numbers by value: a float is an id too, which the bulk answer does not read)
    candidates = None if rules.folded or typed or rules.numbers else IdCandidates.of(paths)

    def none_wanted(data: bytes) -> bool:
        if candidates is None:
            return False
        if by_ids is not None and candidates.holds_none_of(data, by_ids):
            return True
        started = time.thread_time_ns()
        held = candidates.found(data)
        answer = held is not None and none_of(held.plain) and True not in wanted(held.decoded)
        if by_ids is not None:
            candidates.split_paid(by_ids, time.thread_time_ns() - started)
        return answer  # (False when it cannot be told in bulk)

    field = single_field(paths) if not typed else None
    get = operator.methodcaller("get", field)
    is_a_value = functools.partial(operator.is_not, None)
    keys = IdKeys.of(paths, rules.folded)
    with collector_paused():
        try:
            source: ByteSource = open_decompressed(raw, key, inflation)
            if candidates is not None:
                # The whole object at once, when it fits: no line split, and one pass over its ids.
                whole, source = _in_memory(source)
                if whole is not None and none_wanted(whole):
                    return found
            for first, lines in iter_line_batches(source, max_bytes):
                if None not in lines and none_wanted(b"\n".join(lines)):  # type: ignore[arg-type]
                    continue
                if field is None:
                    from_items(jsonl_items(first, lines, paths, max_bytes, rules))
                    continue
                try:
                    if None in lines:
                        raise TypeError
                    # (names in any case: the chunk's spelling, every other one counted by keys below)
                    spelled = spelling(lines, field) if rules.folded else field  # type: ignore[arg-type]
                    chunk_get = operator.methodcaller("get", spelled) if rules.folded else get
                    values = list(map(chunk_get, map(orjson.loads, lines)))  # type: ignore[arg-type]
                except (orjson.JSONDecodeError, AttributeError, TypeError):
                    from_items(jsonl_items(first, lines, paths, max_bytes, rules))
                    continue
                present = list(filter(is_a_value, values))
                if not present and not keys.repeated_among(lines, 0):  # type: ignore[arg-type]
                    continue  # no line writes the field (placeholders, records without it): no user
                if not plain_ids(present) or keys.repeated_among(lines, len(present)):  # type: ignore[arg-type]
                    from_items(jsonl_items(first, lines, paths, max_bytes, rules))
                    continue
                owned = wanted(present)
                if True in owned:  # rare: only then walk the lines to number them
                    answers = iter(owned)
                    found.extend(n for n, v in enumerate(values, first) if v is not None and next(answers))
        except TruncatedObject as exc:
            raise ValueError(f"the object could not be read to its end: {exc.reason}") from None
    return found


def _none_of(wanted: Callable[[list[str]], list[bool]], user_ids: Any) -> bool:
    listed: list[bytes] = user_ids if isinstance(user_ids, list) else user_ids.to_pylist()
    return not listed or True not in wanted(decoded_ids(listed))


# A CSV object up to this size (decompressed) is rewritten and verified in memory; a JSON Lines one is verified so.


def _in_memory(stream: ByteSource) -> tuple[bytes | None, ByteSource]:
    """The stream's bytes in one piece when there are at most IN_MEMORY_BYTES of them (None otherwise), and a source
    that reads them again from the start: for the bulk answers, with the exact read to fall back on."""
    try:
        head = read_up_to(stream, IN_MEMORY_BYTES + 1)
    except (EOFError, zlib.error) as exc:
        raise broken_at(exc, 0) from None
    return (head if len(head) <= IN_MEMORY_BYTES else None), _Prefixed(head, stream)


def _csv_none_wanted(data: bytes, column_name: str, none_of: Callable[[list[bytes]], bool], folded: bool) -> bool:
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
    if folded:  # the header's one spelling of the column (two: the exact read says the object is unindexable)
        try:
            column_name = resolve_top(((column_name,),), header)[0][0]
        except IdFieldError:
            return False
    if column_name not in header:
        return False
    found = one_width_column(data, rows, header.index(column_name))
    if found is None:
        return False
    return none_of(found[1][1:])  # the header's own field is no id


def _csv_values_hold_none_of(data: bytes, by_ids: WantedIds | None) -> bool:
    """Whether a whole CSV object provably holds none of the wanted users (their raw ids, when the caller holds them)
    in any field, by one automaton of the ids over its bytes with every '"' taken out; False when it cannot be told
    so (the exact read follows).

    csv_records gives a field whose value holds no '"' from bytes that are the value's UTF-8 with only quotes added:
    around it (`"id"`), or closing a quoted part the reader continues (`"u1"23` is `u123` in Python's csv, not
    strict). Take the quotes out and the value is there as it is; ids holding a '"', '\r' or '\n' get no automaton
    (candidates.CSV_VALUES). A match anywhere, a header's name or a note's words as well, only means the exact read."""
    if by_ids is None:
        return False
    automaton = by_ids.automaton(CSV_VALUES, len(data))
    return automaton is not None and automaton.matches(data.replace(b'"', b"")) is False


def _parquet_none_wanted(raw: IO[bytes], name: str, none_of: Callable[[Any], bool]) -> bool:
    """Whether a Parquet object provably holds none of the wanted users in its one top-level id column, when that
    column holds strings or integers: its values (an integer as its decimal digits, as extract_ids writes it; no
    null) asked at once, where the exact read makes a Python record of every row. False when it cannot be told so
    (another type, a column the schema lacks or names twice: the exact read says what the indexer says), raw then
    back at its start for it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not raw.seekable():
        return False
    parquet = pq.ParquetFile(raw)
    at = parquet.schema_arrow.get_field_index(name)  # (-1: absent, or named twice)
    kind = parquet.schema_arrow.field(at).type if at >= 0 else pa.null()
    clean = False
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind):
        values = pc.drop_null(parquet.read(columns=[name]).column(name).combine_chunks())
        clean = none_of((values.cast(pa.string()) if pa.types.is_integer(kind) else values).cast(pa.large_binary()))
    if not clean:
        raw.seek(0)
    return clean


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
