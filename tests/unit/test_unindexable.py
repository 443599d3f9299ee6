"""Reading unindexable lines for a request's ids: the byte forms an id may be written in, and the line search that
streams an object in chunks (a line and an id may both span chunks), held to a plain split of the whole text."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.indexing import unindexable
from lakepurge.indexing.unindexable import Needles, _text_lines
from lakepurge.records.formats import UNREAD_FROM_HERE as UNREAD

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("user", "line"),
    [
        ("alice", b'{"user_id": "alice", "note": broken}'),
        ("J\u00f6rg", b'{"user_id": "J\\u00f6rg",'),  # JSON with ASCII escapes (json.dumps' default)
        ("J\u00f6rg", '{"user_id": "J\u00f6rg",'.encode()),  # JSON in UTF-8
        ('ali"ce', b'{"user_id": "ali\\"ce", '),  # a quote, JSON-escaped
        ('ali"ce', b'7,"ali""ce,unterminated'),  # a quote, CSV-doubled
        ("a\\b", b'{"user_id": "a\\\\b"'),  # a backslash, JSON-escaped
        ("x" * 2000, b'{"user_id": "' + b"x" * 2000 + b'"}'),  # an id too long to index
        ("J\u00f6rg", b"7,J\xf6rg,invalid UTF-8"),  # a Latin-1 export
    ],
    ids=["raw", "json-ascii", "json-utf8", "json-quote", "csv-quote", "json-backslash", "over-long", "latin-1"],
)
def test_given_an_id_written_in_any_of_its_forms_when_a_line_is_searched_then_it_is_found(user: str, line: bytes):
    assert Needles([user]).found_in(line)
    assert not Needles(["somebody-else"]).found_in(line)


@settings(max_examples=200, deadline=None)
@given(
    users=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=40),
    data=st.binary(max_size=200),
    planted=st.integers(min_value=0, max_value=39),
)
def test_given_many_ids_when_searching_through_their_prefixes_then_the_answer_is_the_plain_search(users, data, planted):
    """Past a few dozen forms the search goes through the forms' common-length prefixes: the same answer."""
    needles = Needles(users)
    forms = needles._forms
    if planted < len(users):
        data += users[planted].encode("utf-8", "surrogatepass")
    assert needles.found_in(data) == any(form in data for form in forms)


def test_given_no_requested_id_when_searching_then_nothing_is_found():
    assert not Needles([]).found_in(b"anything")


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from([b"", b"{}", b'{"user_id": "bob", broken', b"x" * 30, b'"alice"', b"al"]), max_size=30
    ),
    targets=st.sets(st.integers(min_value=0, max_value=35), min_size=1),
    chunk=st.integers(min_value=1, max_value=40),
    final_newline=st.booleans(),
)
def test_given_a_stream_read_in_chunks_when_target_lines_are_searched_then_the_answer_is_the_whole_texts(
    lines, targets, chunk, final_newline
):
    text = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    needles = Needles(["alice", "bob"])
    holding, read_to = _text_lines(io.BytesIO(text), sorted(targets), needles, chunk)
    whole = text.split(b"\n")
    assert holding == {t for t in targets if t < len(whole) and needles.found_in(whole[t])}
    assert read_to >= min(max(targets), len(whole) - 1)
    assert all(t <= read_to for t in targets if t < len(whole))
    assert all(t > read_to for t in targets if t >= len(whole))


class _Broken(io.RawIOBase):
    """A stream that hands out its bytes, then fails as a truncated gzip stream does."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if not self._data:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        chunk, self._data = self._data[:size], self._data[size:]
        return chunk


def test_given_a_stream_that_breaks_when_searched_then_lines_past_the_break_are_unread():
    holding, read_to = _text_lines(_Broken(b"line0\nline1 bob\nline2 par"), [1, 2, 5], Needles(["bob"]), 8)
    assert holding == {1}
    assert read_to == 1  # line 2 was cut: it may hold anyone, as may line 5


def test_given_statements_when_summarised_then_the_plan_says_what_reading_found():
    statements = [
        {"dataset": "events", "lines": 3, "objects": 1, "may_hold_lines": 0, "not_read": 0},
        {"dataset": "orders", "lines": 5, "objects": 2, "may_hold_lines": 1, "not_read": 0},
        {"dataset": "clicks", "lines": 2, "objects": 2, "may_hold_lines": 0, "not_read": 2},
    ]
    assert unindexable.plan_lines(unindexable.summary(statements)) == [
        "  dataset clicks: 2 unindexable line(s) in 2 object(s), not read for the requested users",
        "  dataset events: 3 unindexable line(s) in 1 object(s), read for the requested users: none holds them",
        "  dataset orders: 5 unindexable line(s) in 2 object(s), 1 may hold the requested users: NOT CERTIFIABLE",
    ]
    assert json.dumps(unindexable.summary(statements))  # what the email and page are built from


def test_given_parquet_rows_when_target_rows_are_searched_then_their_values_are_read_as_json():
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    table = pa.table({"user_id": [1, 42, 7], "note": ["synthetic", "x", "J\u00f6rg"]})
    pq.write_table(table, sink, row_group_size=2)
    # Row 1's id is an integer (unindexable: not a string) that a request for "42" names; row 2 holds "Jörg".
    holding, read_to = unindexable._parquet_rows(io.BytesIO(sink.getvalue()), [0, 1, 2], Needles(["42", "J\u00f6rg"]))
    assert holding == {1, 2} and read_to == 2


def test_given_a_truncated_gzip_object_when_searched_then_the_lines_past_the_break_are_unread():
    import gzip

    from lakepurge.records.lines import open_decompressed

    whole = gzip.compress(b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"y" * 50) for i in range(2000)))
    stream = open_decompressed(io.BytesIO(whole[: len(whole) // 2]), "x.jsonl.gz")
    holding, read_to = _text_lines(stream, [3, 1999], Needles(["bob"]), 4096)
    assert holding == set() and 3 <= read_to < 1999


def test_given_lines_standing_for_the_rest_of_their_object_when_judged_then_they_may_hold_anyone_unread():
    from datetime import UTC, datetime

    from lakepurge.index.base import UnindexableObject

    obj = UnindexableObject("s3://lake/p/a.csv.gz", "p", '"e"', None, datetime.now(UTC), 2, ())
    lines = [(0, "header: id column 'customer_id' not in header"), (7, "truncated gzip stream: " + UNREAD)]
    verdicts = unindexable._verdicts(None, None, None, obj, lines, Needles(["bob"]))  # type: ignore[arg-type]
    assert sorted(verdicts) == [0, 7]
    assert all(why.startswith("the object is not read past it") for why in verdicts.values())
