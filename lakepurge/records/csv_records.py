"""CSV with a header row: the record grammar the indexer and the purge share (csv_records: Python's csv reader fed a
physical line at a time, a quoted field may span lines), the ids of a row, and the reader that yields each record's
ids or why it cannot be indexed.
"""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Container, Iterator, Sequence
from typing import IO, TYPE_CHECKING, NamedTuple, cast

from lakepurge.records.ids import EXACT, IdFieldError, IdRules, Record, Unindexable, id_problem, resolve_top
from lakepurge.records.lines import ByteSource, iter_lines, too_long

if TYPE_CHECKING:
    from lakepurge.records.id_typing import IdTyping

_ALL_BUT_COMMA_AND_NEWLINE = bytes(byte for byte in range(256) if byte not in b",\n")


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


def csv_records(
    stream: ByteSource,
    max_bytes: int,
    rows_for: Container[int] | None = None,
    spans: list[tuple[int, int]] | None = None,
) -> Iterator[CsvRecord]:
    """The CSV record grammar the indexer and the purge share (so they agree on every record boundary): Python's
    csv reader, default dialect, fed one physical line at a time. A quoted field may span lines (an empty line or a
    line of commas inside it belongs to it); a '"' inside an unquoted field is taken literally.

    A record that cannot be parsed (a quoted field still open at the end of the object or past max_record_bytes, a
    line over max_record_bytes, a bare '\\r' inside an unquoted field) is yielded as its first line alone with the
    problem, and parsing starts again on the next line: every later record is still read. Lines are read ahead only
    while a quoted field is open, so memory stays within about max_record_bytes.

    rows_for, when given, names the lines whose fields are wanted (the purge's targets and the header): a record
    of one line without quotes that is not among them is given with row [] unparsed. spans, when given, receives
    (first line, lines) of each record of more than one line: where no record starts (lakepurge.records.record_map).
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
            yield CsvRecord(number, [None], None, too_long(max_bytes))
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
            record = _quoted_record(source, replay, number, line, max_bytes)
            if spans is not None and len(record.lines) > 1:
                spans.append((number, len(record.lines)))
            yield record
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


def csv_id_columns(header: Sequence[str], columns: Sequence[str], folded: bool = False) -> list[tuple[str, int | None]]:
    """Each id column and its index in the header (None when the header lacks it). Names matched case-insensitively
    (`folded`), each column is the header's one spelling of it; IdFieldError when the header has two."""
    if folded:
        columns = [path[0] for path in resolve_top(tuple((c,) for c in columns), header)]
    return [(c, header.index(c) if c in header else None) for c in columns]


def csv_ids(
    row: Sequence[str], positions: Sequence[tuple[str, int | None]], rules: IdRules = EXACT
) -> tuple[tuple[str, ...], str | None]:
    """The ids of a CSV row and, when any cannot be indexed, why (the record is then unindexable: the purge never
    takes it for anyone's). Invalid UTF-8 in the id columns (decoded with surrogateescape) is such a problem. With
    typed fields (`rules.typing`), the ids are the index forms of the row's non-empty id columns, read by the rules
    as extract_ids reads a record's (`positions` spell the columns as the header does)."""
    if rules.typing is not None:
        return _typed_csv_ids(row, positions, rules.typing, rules)
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
        return (), _no_id(positions)
    return tuple(dict.fromkeys(ids)), None


def _no_id(positions: Sequence[tuple[str, int | None]]) -> str:
    """Why a row with none of its id columns filled is unindexable (typed by kinds or not, the same words)."""
    missing = [c for c, i in positions if i is None]
    if missing and len(missing) == len(positions):
        return f"id column {', '.join(repr(c) for c in missing)} not in header"
    return f"id field {', '.join(repr(c) for c, _ in positions)} missing"


def _typed_csv_ids(
    row: Sequence[str], positions: Sequence[tuple[str, int | None]], typing: IdTyping, rules: IdRules
) -> tuple[tuple[str, ...], str | None]:
    values = {}
    for column, index in positions:
        value = row[index] if index is not None and index < len(row) else ""
        if value:  # an empty cell is no value, as for an untyped column
            if not value.isascii() and any("\udc80" <= ch <= "\udcff" for ch in value):
                return (), f"invalid UTF-8 in id field '{column}'"
            values[column] = value
    if not values:
        return (), _no_id(positions)
    try:
        return typing.record_ids(values, rules), None
    except IdFieldError as exc:
        return (), str(exc)


def read_csv(
    stream: IO[bytes],
    columns: Sequence[str],
    max_bytes: int,
    spans: list[tuple[int, int]] | None = None,
    rules: IdRules = EXACT,
) -> Iterator[Record | Unindexable]:
    """CSV with a header row (line 0). A record's position is the line it starts on (quoted fields may span
    lines); records are those of csv_records (spans: as there). Invalid UTF-8 outside the id columns does not stop
    a row from being indexed."""
    records = csv_records(stream, max_bytes, spans=spans)
    header = next(records, None)
    if header is None:
        return
    if header.row is None:
        yield Unindexable(0, f"{HEADER_PROBLEM}{header.problem}")
        return
    try:
        positions = csv_id_columns(header.row, columns, rules.folded)
    except IdFieldError as exc:  # a column named twice: which holds the id is not for lakepurge to guess
        yield Unindexable(0, f"{HEADER_PROBLEM}{exc}")
        return
    # A header written with a byte order mark (as Excel's "CSV UTF-8" is) spells its first name after the mark: an id
    # column it hides is said to be, not guessed at.
    marked = bool(header.row) and header.row[0].startswith("\ufeff") and None in dict(positions).values()
    hint = _MARKED_HEADER if marked else ""
    for record in records:
        if record.row is None:
            yield Unindexable(record.line, cast("str", record.problem))
            continue
        if not any(record.row):
            continue
        ids, problem = csv_ids(record.row, positions, rules)
        if problem is not None:
            yield Unindexable(record.line, problem + hint)
        else:
            yield Record(record.line, ids)


_MARKED_HEADER = " (the header's first name starts with a UTF-8 byte order mark)"

# The reason of an unindexable line 0 whose CSV header could not be read: it stands for the rest of its object (no
# record after it was indexed).
HEADER_PROBLEM = "header: "
