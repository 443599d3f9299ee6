"""The check before a write on CSV objects with quoted fields: the automaton of the wanted ids over the bytes with
every '"' taken out answers "none" only when the indexer's reader finds none of the users, whatever the quoting."""

from __future__ import annotations

import io
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.records import search
from lakepurge.records.candidates import WantedIds
from lakepurge.records.formats import read_records
from lakepurge.records.ids import Record
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")
MAX = 4096
WANTED = ["alice", "u123", "élise", "東京👍", 'a"b', "two\nlines", "cr\rx", "comma,x", " sp"]
OTHERS = ["bob", "u1234", "u12", "elise", "東京", "a", "ab", "x,comma"]
TEXTS = ['say "hi", then', "a\nb", "ali", "ce", "caf\u00e9 👍"]

values = st.one_of(st.sampled_from(WANTED), st.sampled_from(OTHERS), st.text(max_size=5))


@st.composite
def fields(draw: st.DrawFn, value: str) -> str:
    """One field holding value, written as csv.writer would, or as other writers do: its value split by a quoted part
    that the reader continues (`"u1"23`), a quote taken literally in an unquoted field, or text that is no field of
    its own (an unbalanced quote, which makes the record unreadable)."""
    special = any(c in value for c in ',"\r\n')
    style = draw(st.sampled_from(["plain", "quoted", "split", "literal quote", "broken"]))
    if style == "quoted" or (special and style in ("plain", "split")):
        return '"' + value.replace('"', '""') + '"'
    if style == "split" and value:
        cut = draw(st.integers(0, len(value)))
        return '"' + value[:cut] + '"' + value[cut:]
    if style == "literal quote" and not special and value:
        return value[:1] + '"' + value[1:]
    if style == "broken":
        return '"' + value
    return value


@st.composite
def csv_objects(draw: st.DrawFn) -> bytes:
    columns = draw(st.permutations(["customer_id", "note", "n"]))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    rows = [",".join(columns)]
    for number in range(draw(st.integers(1, 8))):
        row = {"customer_id": draw(values), "note": draw(st.sampled_from(TEXTS) | values), "n": str(number)}
        rows.append(",".join(draw(fields(row[c])) for c in columns))
    return (ending.join(rows) + draw(st.sampled_from([ending, ""]))).encode()


def read_by_the_indexer(data: bytes, wanted: set[str]) -> list[int]:
    return [
        item.line
        for item in read_records(io.BytesIO(data), "x.csv", "csv", ("customer_id",), MAX)
        if isinstance(item, Record) and wanted & set(item.user_ids)
    ]


def checked(data: bytes, users: Any, known: Any) -> list[int]:
    each = users.each_contained if isinstance(users, HashedUsers) else lambda ids: [i in users for i in ids]
    return lines_holding(io.BytesIO(data), "x.csv", "csv", ["customer_id"], MAX, DEFAULT_INFLATION, each, known=known)


@settings(max_examples=150, deadline=None)
@given(data=csv_objects(), wanted=st.sets(st.sampled_from(WANTED), min_size=1, max_size=4))
def test_given_csv_quoted_any_way_when_checked_by_the_wanted_ids_then_a_clear_answer_is_the_indexers(
    data: bytes, wanted: set[str]
) -> None:
    clear = search._csv_values_hold_none_of(data, WantedIds(wanted))

    expected = read_by_the_indexer(data, wanted)
    if clear:
        assert expected == []
    assert checked(data, frozenset(wanted), frozenset(wanted)) == expected
    users = HashedUsers(HASHER.many(wanted), HASHER, known=wanted)
    assert checked(data, users, users.ids_held()) == expected


@pytest.mark.parametrize(("value", "lines"), [('"u1"23', [1]), ('u"123', []), ('"u"1"23"', [])])
def test_given_a_field_that_spells_an_id_with_quotes_inside_when_checked_then_it_is_read_as_the_indexer_reads_it(
    value: str, lines: list[int]
) -> None:
    # csv.reader, not strict, reads `"u1"23` as u123, and `u"123` and `"u"1"23"` as values holding a quote: the quotes
    # are taken out before the search, so the first is never cleared (the others only cost an exact read).
    data = f"customer_id,note\n{value},x\nbob,y\n".encode()

    assert read_by_the_indexer(data, {"u123"}) == lines
    assert checked(data, frozenset({"u123"}), frozenset({"u123"})) == lines
    assert search._csv_values_hold_none_of(data, WantedIds({"u123"})) is False


def test_given_a_quoted_csv_without_the_users_when_checked_by_their_ids_then_no_row_is_parsed() -> None:
    rows = [f'u{n:07d},"note {n}, with a comma and ""quotes"""' for n in range(500)]
    data = ("customer_id,note\n" + "\n".join(rows) + "\n").encode()
    wanted = frozenset({"u0000500", "u9999999"})

    with mock.patch.object(search, "read_csv", side_effect=AssertionError("the rows were parsed")):
        assert checked(data, wanted, WantedIds(wanted)) == []
    assert checked(data, wanted | {"u0000007"}, wanted | {"u0000007"}) == [8]  # present: read exactly


def test_given_a_wanted_id_holding_a_quote_or_a_line_break_when_checked_then_the_rows_are_read_exactly() -> None:
    data = b'customer_id,note\n"a""b",x\n"two\nlines",y\n'
    for wanted in ({'a"b'}, {"two\nlines"}):
        assert search._csv_values_hold_none_of(data, WantedIds(wanted)) is False
        assert checked(data, frozenset(wanted), frozenset(wanted)) == read_by_the_indexer(data, wanted) != []
