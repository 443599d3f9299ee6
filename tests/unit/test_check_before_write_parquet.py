"""The check before a write on Parquet objects: a top-level id column of strings or integers is asked at once (its
values as one Arrow column), and a clear answer is the indexer's, whatever the rows hold."""

from __future__ import annotations

import io
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.records import search
from lakepurge.records.formats import read_records
from lakepurge.records.ids import Record
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")
WANTED = ["alice", "7", "-5", "élise", "東京👍", "a\nb", "0"]
OTHERS = ["bob", "70", "5", "", "elise", "x\x00y"]
TYPES = {
    "string": (pa.string(), st.sampled_from(WANTED + OTHERS) | st.text(max_size=4)),
    "large string": (pa.large_string(), st.sampled_from(WANTED + OTHERS)),
    "int64": (pa.int64(), st.sampled_from([7, -5, 0, 70, 5, 2**62]) | st.integers(-9, 9)),
    "uint8": (pa.uint8(), st.integers(0, 255)),
    "list of strings": (pa.list_(pa.string()), st.lists(st.sampled_from(WANTED + OTHERS), max_size=2)),
    "double": (pa.float64(), st.sampled_from([7.0, 0.5, -5.0])),
}


@st.composite
def parquet_objects(draw: st.DrawFn) -> bytes:
    kind, values = TYPES[draw(st.sampled_from(sorted(TYPES)))]
    rows = draw(st.lists(st.none() | values, min_size=1, max_size=12))
    table = pa.table({"n": pa.array(range(len(rows)), pa.int64()), "user_id": pa.array(rows, kind)})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=draw(st.integers(1, 8)))
    return sink.getvalue()


def read_by_the_indexer(data: bytes, wanted: set[str]) -> list[int]:
    return [
        item.line
        for item in read_records(io.BytesIO(data), "x.parquet", "parquet", ("user_id",), 4096)
        if isinstance(item, Record) and wanted & set(item.user_ids)
    ]


def checked(data: bytes, users: Any) -> list[int]:
    if isinstance(users, HashedUsers):
        each, none_of, known = users.each_contained, users.none_of, users.ids_held()
    else:
        each, none_of, known = (lambda ids: [i in users for i in ids]), None, users
    source = io.BytesIO(data)
    return lines_holding(
        source, "x.parquet", "parquet", ["user_id"], 4096, DEFAULT_INFLATION, each, none_of, known=known
    )


def _one_column(values: list[Any], kind: pa.DataType) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": pa.array(values, kind)}), sink)
    return sink.getvalue()


@settings(max_examples=120, deadline=None)
@given(data=parquet_objects(), wanted=st.sets(st.sampled_from(WANTED), min_size=1, max_size=3))
@example(data=_one_column(["a\nb"], pa.string()), wanted={"a\nb"})  # an id holding a newline: not split in two
def test_given_an_id_column_of_any_type_when_checked_before_a_write_then_the_rows_are_those_the_indexer_reads(
    data: bytes, wanted: set[str]
) -> None:
    expected = read_by_the_indexer(data, wanted)

    assert checked(data, frozenset(wanted)) == expected
    assert checked(data, HashedUsers(HASHER.many(wanted), HASHER, known=wanted)) == expected
    assert checked(data, HashedUsers(HASHER.many(wanted), HASHER)) == expected  # (a worker holding only hashes)


@pytest.mark.parametrize("kind", [pa.string(), pa.int64()])
def test_given_parquet_without_the_users_when_checked_then_no_row_is_made_a_record(kind: pa.DataType) -> None:
    values = [f"u{n}" for n in range(1000)] if kind == pa.string() else list(range(1000))
    sink = io.BytesIO()
    pq.write_table(pa.table({"user_id": pa.array(values, kind)}), sink, row_group_size=300)
    users = HashedUsers(HASHER.many(["u1000", "1000"]), HASHER, known=["u1000", "1000"])

    with mock.patch.object(search, "read_records", side_effect=AssertionError("the rows were read one by one")):
        assert checked(sink.getvalue(), users) == []
    present = "u7" if kind == pa.string() else "7"
    assert checked(sink.getvalue(), HashedUsers(HASHER.many([present]), HASHER, known=[present])) == [7]
