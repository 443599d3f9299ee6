"""Record readers: positions, ids, blanks and every kind of bad line, without any service."""

from __future__ import annotations

import gzip
import io

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.records import lines as line_reader
from lakepurge.records.csv_records import csv_records
from lakepurge.records.formats import group_records, read_records
from lakepurge.records.ids import MAX_ID_BYTES, Record, Unindexable
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")

pytestmark = pytest.mark.unit

MAX = 1024


def read(data: bytes, key: str = "x.jsonl", fmt: str = "jsonl", fields: tuple[str, ...] = ("user_id",), **kw):
    return list(read_records(io.BytesIO(data), key, fmt, fields, kw.get("max_bytes", MAX)))


def records(items):
    return [(i.line, i.user_ids) for i in items if isinstance(i, Record)]


def problems(items):
    return [(i.line, i.reason) for i in items if isinstance(i, Unindexable)]


def test_given_jsonl_when_reading_then_each_record_has_its_zero_based_line_and_id():
    data = b'{"user_id":"a"}\n{"user_id":"b","x":1}\n{"user_id":42}\n'
    assert records(read(data)) == [(0, ("a",)), (1, ("b",)), (2, ("42",))]


def test_given_blank_and_empty_lines_when_reading_then_they_are_skipped_but_still_counted_as_lines():
    data = b'{}\n\n{"user_id":"a"}\n  \n{ }\n{"user_id":"b"}\n'
    assert records(read(data)) == [(2, ("a",)), (5, ("b",))]
    assert problems(read(data)) == []


def test_given_crlf_and_no_trailing_newline_when_reading_then_positions_are_exact():
    data = b'{"user_id":"a"}\r\n{}\r\n{"user_id":"b"}'
    assert records(read(data)) == [(0, ("a",)), (2, ("b",))]


def test_given_nested_fields_and_arrays_when_reading_then_every_id_is_found_once():
    line = {
        "buyer": {"id": "a"},
        "gift": {"recipients": ["b", "a", "c"]},
        "items": [{"seller": "s1"}, {"seller": "s2"}],
    }
    data = orjson.dumps(line) + b"\n"
    found = records(read(data, fields=("buyer.id", "gift.recipients", "items.seller")))
    assert found == [(0, ("a", "b", "c", "s1", "s2"))]


# -- a record that writes an id field's key more than once: every value counts, in every reader --------------------

REPEATED = (
    b'{"user_id":"carol"}\n'
    b'{"user_id":"alice","n":1,"user_id":"bob"}\n'  # orjson alone keeps only bob
    b'{"user_id":"dave","user\\u005fid":"erin"}\n'  # the same key, spelled with an escape
    b'{"user_id":"frank","user_id":null}\n'  # a null says no more than an absent field
    b'{"order":{"buyer":"gus","buyer":"hal"}}\n'
)


def test_given_a_record_writing_its_id_field_twice_when_reading_or_grouping_then_each_value_is_its_user(monkeypatch):
    expected = [(0, ("carol",)), (1, ("alice", "bob")), (2, ("dave", "erin")), (3, ("frank",))]
    assert records(read(REPEATED)) == expected
    assert records(read(REPEATED, fields=("order.buyer",))) == [(4, ("gus", "hal"))]
    for chunk in (1 << 20, 20):  # the whole object one chunk (the bulk path), and a chunk per line or so
        monkeypatch.setattr(line_reader, "CHUNK_BYTES", chunk)
        grouped = group_records(io.BytesIO(REPEATED), "x.jsonl", "jsonl", ("user_id",), MAX)
        assert grouped.lines_by_user == {"carol": [0], "alice": [1], "bob": [1], "dave": [2], "erin": [2], "frank": [3]}


def test_given_a_record_writing_its_id_field_twice_when_verifying_then_it_is_found_for_each_value():
    for wanted in ({"alice"}, {"bob"}, {"dave"}, {"frank"}):
        found, expected = holding_both_ways(REPEATED, "jsonl", False, wanted)
        assert found == expected != []
    assert holding_both_ways(REPEATED, "jsonl", False, {"nobody"}) == ([], [])


def test_given_a_repeated_id_field_with_an_empty_value_when_reading_then_the_record_is_unindexable():
    # As an empty id in a list of ids: the record's ids cannot all be read, so it is reported, not half-indexed.
    assert problems(read(b'{"user_id":"","user_id":"alice"}\n')) == [(0, "id field 'user_id' is empty")]


def test_given_one_of_several_id_fields_present_when_reading_then_record_is_indexed():
    data = b'{"buyer":{"id":"a"}}\n'
    assert records(read(data, fields=("buyer.id", "gift.recipients"))) == [(0, ("a",))]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"user_id": "a", broken', "invalid JSON"),
        (b'{"user_id": "caf\xe9"}', "invalid UTF-8"),
        (b'\xef\xbb\xbf{"user_id": "x"}', "starts with a UTF-8 byte order mark"),  # valid UTF-8: not called invalid
        (b'{"name": "no id here"}', "id field 'user_id' missing"),
        (b'{"user_id": null}', "id field 'user_id' missing"),
        (b'{"user_id": ""}', "id field 'user_id' is empty"),
        (b'{"user_id": {"nested": 1}}', "holds a dict"),
        (b"[1, 2, 3]", "not a JSON object"),
    ],
)
def test_given_a_bad_line_when_reading_then_it_is_reported_with_its_line_and_the_others_are_indexed(line, reason):
    data = b'{"user_id":"a"}\n' + line + b'\n{"user_id":"b"}\n'
    items = read(data)
    assert records(items) == [(0, ("a",)), (2, ("b",))]
    [(number, message)] = problems(items)
    assert number == 1
    assert reason in message


def test_given_a_bad_line_when_reporting_then_the_reason_never_quotes_the_record():
    items = read(b'{"user_id": "alice@example.com", oops}\n')
    assert "alice" not in problems(items)[0][1]


def test_given_a_line_longer_than_the_limit_when_reading_then_it_is_reported_and_the_next_lines_are_indexed():
    huge = b'{"user_id":"big","pad":"' + b"x" * (5 * MAX) + b'"}'
    data = b'{"user_id":"a"}\n' + huge + b'\n{"user_id":"b"}\n'
    items = read(data)
    assert records(items) == [(0, ("a",)), (2, ("b",))]
    assert problems(items) == [(1, f"line longer than max_record_bytes ({MAX} bytes)")]


def test_given_a_50_mb_line_with_the_default_limit_when_reading_then_memory_stays_bounded_and_it_is_reported():
    huge = b'{"user_id":"big","pad":"' + b"x" * (50 * 1024 * 1024) + b'"}'
    items = read(b'{"user_id":"a"}\n' + huge + b'\n{"user_id":"b"}', max_bytes=16 * 1024 * 1024)
    assert records(items) == [(0, ("a",)), (2, ("b",))]
    assert problems(items)[0][0] == 1


def test_given_an_empty_object_when_reading_then_nothing_is_yielded():
    assert read(b"") == []
    assert read(b"", key="x.csv", fmt="csv") == []


def test_given_gzip_when_reading_then_lines_are_those_of_the_decompressed_object():
    data = gzip.compress(b'{"user_id":"a"}\n{}\n{"user_id":"b"}\n')
    assert records(read(data, key="x.jsonl.gz")) == [(0, ("a",)), (2, ("b",))]


def test_given_truncated_gzip_when_reading_then_lines_before_are_indexed_and_the_break_is_reported():
    body = b"".join(b'{"user_id":"u%d","pad":"%s"}\n' % (n, b"y" * 50) for n in range(2000))
    data = gzip.compress(body)[:-4000]
    items = read(data, key="x.jsonl.gz")
    indexed = records(items)
    assert indexed[0] == (0, ("u0",))
    assert [line for line, _ in indexed] == list(range(len(indexed)))
    [(number, message)] = problems(items)
    assert number >= len(indexed)
    assert "truncated gzip" in message


def test_given_csv_when_reading_then_header_is_line_zero_and_quoted_newlines_keep_start_lines():
    data = b'customer_id,note\nA,"two\nlines"\n,empty id\nB,plain\n,,\n'
    items = read(data, key="x.csv", fmt="csv", fields=("customer_id",))
    assert records(items) == [(1, ("A",)), (4, ("B",))]
    assert problems(items) == [(3, "id field 'customer_id' missing")]


def test_given_csv_without_the_id_column_when_reading_then_every_row_is_reported():
    data = b"name\nx\ny\n"
    assert problems(read(data, key="x.csv", fmt="csv", fields=("customer_id",))) == [
        (1, "id column 'customer_id' not in header"),
        (2, "id column 'customer_id' not in header"),
    ]


def test_given_csv_whose_header_starts_with_a_byte_order_mark_when_reading_then_the_rows_say_why_it_is_missing():
    data = "\ufeffcustomer_id,note\nA,x\n".encode()
    assert problems(read(data, key="x.csv", fmt="csv", fields=("customer_id",))) == [
        (1, "id column 'customer_id' not in header (the header's first name starts with a UTF-8 byte order mark)")
    ]
    # A mark before another column hides no id column: nothing to say, the rows are read.
    marked_note = "\ufeffnote,customer_id\nx,A\n".encode()
    assert records(read(marked_note, key="x.csv", fmt="csv", fields=("customer_id",))) == [(1, ("A",))]


def test_given_csv_with_invalid_utf8_in_the_id_when_reading_then_it_is_reported():
    data = b"customer_id,note\nA,caf\xe9 ok\n\xff\xfe,x\r\n"
    items = read(data, key="x.csv", fmt="csv", fields=("customer_id",))
    assert records(items) == [(1, ("A",))]
    assert problems(items) == [(2, "invalid UTF-8 in id field 'customer_id'")]


def test_given_parquet_when_reading_then_rows_are_numbered_across_row_groups():
    table = pa.table({"user_id": ["a", None, "c", "d", "e"], "v": [1, 2, 3, 4, 5]})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=2)
    items = read(out.getvalue(), key="x.parquet", fmt="parquet")
    assert records(items) == [(0, ("a",)), (2, ("c",)), (3, ("d",)), (4, ("e",))]
    assert problems(items) == [(1, "id field 'user_id' missing")]


def test_given_parquet_with_nested_struct_ids_when_reading_then_they_are_found():
    table = pa.table({"order": [{"buyer": "a"}, {"buyer": "b"}]})
    out = io.BytesIO()
    pq.write_table(table, out)
    assert records(read(out.getvalue(), key="x.parquet", fmt="parquet", fields=("order.buyer",))) == [
        (0, ("a",)),
        (1, ("b",)),
    ]


# -- group_records: the indexer's reader; its fast path for chunks of well-formed lines must change nothing --------

LINE_KINDS = st.sampled_from(
    [
        b'{"user_id":"alice","n":1}',
        b'{"user_id":"b\xc3\xa9a","text":"caf\xc3\xa9 \xf0\x9f\x99\x82"}',
        b'{"user_id":"carol"}\r',
        b'{"user_id":"",  "n":2}',
        b'{"user_id":["dave","erin"]}',
        b'{"user_id":7}',
        b'{"other":"x"}',
        b"{}",
        b"",
        b"   ",
        b"[1,2]",
        b'{"user_id":"frank"',
        b'{"user_id":"gr\xffce"}',
        b'{"user_id":"hal","pad":"' + b"x" * 90 + b'"}',
        # an id field's key written twice (orjson alone keeps the last value): each value counts
        b'{"user_id":"ivy","n":1,"user_id":"jo"}',
        b'{"user_id":"kim","user_id":null}',
        b'{"user_id":null,"user_id":"lee"}',
        b'{"user_id":"mo","user\\u005fid":"ned"}',
        b'{"user_id":"ola","x":{"user_id":"pia"}}',
        b'{"user_id":"quin","user_id":["rob","quin"]}',
        b'{"user_id":"sam","user_id":""}',
        b'{"note":"\\"user_id\\"","user_id":"tom"}',
    ]
)


def grouped_the_slow_way(data: bytes, key: str, max_bytes: int):
    lines_by_user: dict[str, list[int]] = {}
    found = read_records(io.BytesIO(data), key, "jsonl", ("user_id",), max_bytes)
    items = list(found)
    for item in items:
        if isinstance(item, Record):
            for user in item.user_ids:
                lines_by_user.setdefault(user, []).append(item.line)
    return lines_by_user, len(records(items)), problems(items)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(LINE_KINDS, max_size=60),
    trailing_newline=st.booleans(),
    chunk=st.integers(min_value=7, max_value=400),
    gz=st.booleans(),
)
def test_given_any_mix_of_lines_and_chunk_sizes_when_grouping_then_it_equals_grouping_read_records(
    lines, trailing_newline, chunk, gz
):
    # Tiny chunks: lines cross chunk boundaries, and chunks of clean lines (fast path) alternate with chunks that
    # hold a bad line (line by line); a 100-byte limit makes the padded line too long.
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    key = "x.jsonl.gz" if gz else "x.jsonl"
    if gz:
        data = gzip.compress(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_reader, "CHUNK_BYTES", chunk)
        grouped = group_records(io.BytesIO(data), key, "jsonl", ("user_id",), 100)
        lines_by_user, count, reported = grouped_the_slow_way(data, key, 100)
    assert grouped.lines_by_user == lines_by_user
    assert grouped.records == count
    assert [(u.line, u.reason) for u in grouped.unindexable] == reported


def test_given_a_clean_object_when_grouping_then_lines_are_ascending_per_user_across_chunks(monkeypatch):
    monkeypatch.setattr(line_reader, "CHUNK_BYTES", 64)
    data = b"".join(b'{"user_id":"u%d","n":%d}\n' % (n % 3, n) for n in range(50))
    grouped = group_records(io.BytesIO(data), "x.jsonl", "jsonl", ("user_id",), MAX)
    assert grouped.records == 50 and grouped.unindexable == []
    assert grouped.lines_by_user == {f"u{k}": list(range(k, 50, 3)) for k in range(3)}


def test_given_a_truncated_gzip_when_grouping_then_lines_before_are_kept_and_the_break_is_reported():
    full = gzip.compress(b"".join(b'{"user_id":"u%d"}\n' % n for n in range(20_000)))
    grouped = group_records(io.BytesIO(full[: len(full) // 2]), "x.jsonl.gz", "jsonl", ("user_id",), MAX)
    assert grouped.records > 0 and len(grouped.unindexable) == 1
    (broken,) = grouped.unindexable
    assert broken.line == grouped.records and "truncated gzip stream" in broken.reason


# -- ids no index backend can store: unindexable lines, in every reader ------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("L" * 3000, "id field 'user_id' is longer than 1024 bytes"),
        ("\u00e9" * 513, "id field 'user_id' is longer than 1024 bytes"),  # 513 characters, 1026 bytes
        ("a\x00b", "id field 'user_id' contains a NUL character"),
    ],
)
def test_given_an_id_a_backend_cannot_store_when_reading_jsonl_then_its_line_is_unindexable_and_never_quoted(
    value, reason
):
    good = b"".join(b'{"user_id":"u%d"}\n' % n for n in range(5))
    data = good + orjson.dumps({"user_id": value}) + b"\n" + good
    items = read(data, max_bytes=1 << 20)
    assert [line for line, _ in records(items)] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert problems(items) == [(5, reason)]
    grouped = group_records(io.BytesIO(data), "x.jsonl", "jsonl", ("user_id",), 1 << 20)  # the fast path too
    assert grouped.lines_by_user == {f"u{n}": [n, n + 6] for n in range(5)}
    assert [(u.line, u.reason) for u in grouped.unindexable] == [(5, reason)]


def test_given_ids_at_the_byte_limit_when_reading_then_they_are_indexed():
    at_limit = ["a" * MAX_ID_BYTES, "\u00e9" * (MAX_ID_BYTES // 2)]
    data = b"".join(orjson.dumps({"user_id": v}) + b"\n" for v in at_limit)
    assert records(read(data, max_bytes=1 << 20)) == [(0, (at_limit[0],)), (1, (at_limit[1],))]
    grouped = group_records(io.BytesIO(data), "x.jsonl", "jsonl", ("user_id",), 1 << 20)
    assert grouped.lines_by_user == {at_limit[0]: [0], at_limit[1]: [1]}


def test_given_a_long_id_among_several_fields_when_reading_then_the_record_is_unindexable():
    data = orjson.dumps({"buyer": {"id": "a"}, "gift": {"recipients": ["b", "x" * 2000]}}) + b"\n"
    assert problems(read(data, fields=("buyer.id", "gift.recipients"), max_bytes=1 << 20)) == [
        (0, "id field 'gift.recipients' is longer than 1024 bytes")
    ]


def test_given_parquet_with_a_long_and_a_nul_id_when_reading_then_those_rows_are_unindexable():
    table = pa.table({"user_id": ["a", "x" * 3000, "b\x00c", "d"]})
    out = io.BytesIO()
    pq.write_table(table, out)
    items = read(out.getvalue(), key="x.parquet", fmt="parquet")
    assert records(items) == [(0, ("a",)), (3, ("d",))]
    assert problems(items) == [
        (1, "id field 'user_id' is longer than 1024 bytes"),
        (2, "id field 'user_id' contains a NUL character"),
    ]


def test_given_csv_with_a_long_a_nul_and_an_invalid_utf8_id_when_reading_then_only_those_rows_are_unindexable():
    data = b"customer_id,note\nA,1\n" + b"x" * 3000 + b",2\nB\x00,3\n\xed\xa0\x80,4\nC,5\n"
    items = read(data, key="x.csv", fmt="csv", fields=("customer_id",), max_bytes=1 << 20)
    assert records(items) == [(1, ("A",)), (5, ("C",))]
    assert problems(items) == [
        (2, "id field 'customer_id' is longer than 1024 bytes"),
        (3, "id field 'customer_id' contains a NUL character"),
        (4, "invalid UTF-8 in id field 'customer_id'"),
    ]


# -- the CSV record grammar the indexer and the purge share ------------------------------------------------------


def read_csv_items(data: bytes, max_bytes: int = 1 << 20):
    return read(data, key="x.csv", fmt="csv", fields=("id",), max_bytes=max_bytes)


def test_given_a_200_kb_csv_field_when_reading_then_the_record_is_indexed():
    data = b'id,note\nA,"' + b"x" * 200_000 + b'"\nB,' + b"y" * 200_000 + b"\nC,z\n"
    items = read_csv_items(data)
    assert records(items) == [(1, ("A",)), (2, ("B",)), (3, ("C",))]
    assert problems(items) == []


def test_given_a_quoted_field_holding_an_empty_line_and_a_line_of_commas_when_reading_then_they_are_that_record():
    data = b'id,note\nA,"one\n\n,,,\ntwo"\nB,x\n'
    assert records(read_csv_items(data)) == [(1, ("A",)), (5, ("B",))]
    [first, second] = [r for r in csv_records(io.BytesIO(data), MAX) if r.line > 0]
    assert first.lines == [b'A,"one', b"", b",,,", b'two"'] and first.row == ["A", "one\n\n,,,\ntwo"]
    assert second.lines == [b"B,x"]


def test_given_a_stray_quote_in_an_unquoted_field_when_reading_then_it_is_literal_and_the_record_ends_there():
    data = b'id,note\nA,a 27" screen\nB,x\n'
    records_ = [r for r in csv_records(io.BytesIO(data), MAX) if r.line > 0]
    assert [(r.line, r.lines, r.row) for r in records_] == [
        (1, [b'A,a 27" screen'], ["A", 'a 27" screen']),
        (2, [b"B,x"], ["B", "x"]),
    ]


def test_given_an_unterminated_quote_when_reading_then_its_line_is_unindexable_and_the_next_lines_are_read():
    data = b'id,note\nA,x\nB,"never closed\nC,y\nD,z'
    items = read_csv_items(data)
    assert records(items) == [(1, ("A",)), (3, ("C",)), (4, ("D",))]
    assert problems(items) == [(2, "unterminated quoted field (not closed before the end of the object)")]


def test_given_a_quote_open_past_max_record_bytes_when_reading_then_memory_is_bounded_and_later_records_read():
    rows = b"".join(b"U%d,%s\n" % (n, b"p" * 30) for n in range(200))
    data = b'id,note\nA,"open\n' + rows
    items = read_csv_items(data, max_bytes=256)
    assert problems(items) == [(1, "unterminated quoted field (not closed within max_record_bytes, 256 bytes)")]
    assert records(items) == [(n + 2, (f"U{n}",)) for n in range(200)]


def test_given_a_bare_carriage_return_in_an_unquoted_field_when_reading_then_only_that_record_is_unindexable():
    items = read_csv_items(b"id,note\nA,a\rb\nB,x\r\n")
    assert records(items) == [(2, ("B",))]
    assert problems(items) == [(1, "malformed CSV record (new-line character seen in unquoted field)")]


def test_given_an_over_long_line_inside_a_quoted_field_when_reading_then_the_record_and_the_line_are_reported():
    data = b'id,note\nA,"start\n' + b"x" * 300 + b'\nend"\nB,y\n'
    items = read_csv_items(data, max_bytes=256)
    assert problems(items)[:2] == [
        (1, "unterminated quoted field (not closed within max_record_bytes, 256 bytes)"),
        (2, "line longer than max_record_bytes (256 bytes)"),
    ]
    assert (4, ("B",)) in records(items)


CSV_LINES = st.sampled_from(
    [
        b"A,plain",
        b"B,plain\r",
        b'C,"quoted, with comma"',
        b'D,"opens',
        b'closes",E',
        b'F,a 27" screen',
        b"",
        b",,",
        b'"',
        b'G,"a ""doubled"" quote"',
        b"H,caf\xc3\xa9",
        b"I,\xff\xfe",
        b"J," + b"y" * 80,
        b"K,a\rb",
    ]
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(CSV_LINES, max_size=25), trailing_newline=st.booleans(), gz=st.booleans())
def test_given_any_csv_when_each_indexed_record_is_erased_then_exactly_its_lines_are_blanked(
    lines, trailing_newline, gz
):
    # The purge's rewrite and the indexer read the same records: whatever the indexer finds at a line, the rewrite
    # blanks there (keeping the line count), and every other byte, unparseable lines included, stays as it was.
    from types import SimpleNamespace

    from lakepurge.purge.ownership import Ownership
    from lakepurge.purge.rewrite import rewrite_csv

    body = b"\n".join([b"id,note", *lines]) + (b"\n" if trailing_newline else b"")
    raw = gzip.compress(body) if gz else body
    key = "x.csv.gz" if gz else "x.csv"
    found = [i for i in read_records(io.BytesIO(raw), key, "csv", ("id",), 100) if isinstance(i, Record)]
    physical = body.split(b"\n")
    starts = {r.line: r for r in csv_records(io.BytesIO(body), 100)}
    for record in found:
        owner = Ownership(SimpleNamespace(id_fields=["id"]), {record.user_ids[0]})  # type: ignore[arg-type]
        out = rewrite_csv(io.BytesIO(raw), gz, [record.line], owner, False, 100).body()
        after = (gzip.decompress(out) if gz else out).split(b"\n")
        assert owner.erased == [record.line]
        assert len(after) == len(physical)
        span = range(record.line, record.line + len(starts[record.line].lines))
        for number, before in enumerate(physical):
            if number not in span:
                assert after[number] == before
            elif number == record.line:
                fields = len(starts[number].row or [])
                assert after[number] == b"," * (fields - 1) + (b"\r" if before.endswith(b"\r") else b"")
            else:
                assert after[number] == b""
    # A target line that is no indexed record's start is never blanked.
    unindexed = [n for n in range(1, len(physical)) if n not in {r.line for r in found}]
    owner = Ownership(SimpleNamespace(id_fields=["id"]), set("ABCDEFGHIJK"))  # type: ignore[arg-type]
    out = rewrite_csv(io.BytesIO(raw), gz, unindexed, owner, False, 100).body()
    assert (gzip.decompress(out) if gz else out) == body


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet='a,\r\x00é "', max_size=12), min_size=1, max_size=8))
def test_given_any_lines_when_split_into_csv_records_then_rows_are_those_of_the_csv_module(texts):
    # csv_records splits a line without quotes itself: it must give what csv.reader gives for the whole object.
    import csv

    data = "\n".join(texts).encode() + b"\n"
    ours = list(csv_records(io.BytesIO(data), MAX))
    if any(r.row is None for r in ours):
        return  # a record csv.reader cannot parse either (it raises for the whole object)
    try:
        theirs = list(csv.reader(line + "\n" for line in data.decode().split("\n")[:-1]))
    except csv.Error:
        return
    assert [r.row for r in ours] == theirs


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from(
            [
                b'{"user_id":"alice","n":1}',
                b'{"user_id":"bob"}',
                b"{}",
                b"",
                b'{"other":1}',
                b'{"user_id":7}',
                b'{"user_id":7,"name":"x"}',
                b'{"user_id":["alice","carol"]}',
                b"[1,2]",
                b"not json",
                b'{"user_id":""}',
                b'{"user_id":null}',
                # Lines the one-expression scan over a chunk must not misread (it answers only "no user here"):
                b'{"x":{"user_id":"alice"}}',
                b'{"user_id":"al\\u0069ce"}',
                b'{"user\\u005fid":"alice"}',
                b'{"note":"\\"user_id\\":\\"alice\\""}',
                b'{"user_id" :\t "alice"}',
                b'{"user_id": "bob", "n": 3}',
                b'{"user_id":"bob"user_id":"alice"}',
                b'{"user_id":"bob","user_id":"alice"}',
                b'{"user_id":"a\\"b"}',
                b'{"a":"x\\\\","user_id":"alice"}',
                b'{"user_id":"al\xffice"}',
                b'{"k":"user_id"}',
                b'{"user_id":"alice"}\r',
                b'{"user_id":"alice","pad":"' + b"p" * 100 + b'"}',
                b'{"user_id":"carol","n":2}',
                # an id field's key written twice: each value counts (orjson alone keeps the last)
                b'{"user_id":"alice","n":1,"user_id":"bob"}',
                b'{"user_id":"alice","user_id":null}',
                b'{"user_id":null,"user_id":"bob"}',
                b'{"user_id":"alice","user\\u005fid":"bob"}',
                b'{"user_id":"bob","x":{"user_id":"alice"}}',
                b'{"user_id":7,"user_id":"bob"}',
            ]
        ),
        max_size=60,
    ),
    gz=st.booleans(),
)
def test_given_any_rewritten_lines_when_looking_for_users_then_the_lines_are_those_read_records_gives(lines, gz):
    # The verification before a write takes a bulk path where it can; it must find exactly what the indexer finds.
    found, expected = holding_both_ways(b"\n".join(lines) + b"\n", "jsonl", gz, {"alice", "7"})
    assert found == expected


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.sampled_from(
            [
                b"alice,1,x",
                b"bob,2,y",
                b"carol,3,z",
                b",,",  # a blanked record
                b"",
                b"alice,1",  # a short row
                b"bob,2,y,extra",
                b"alice\r,1,x",
                b'"alice",1,x',
                b'bob,"a, quoted",x',
                b"\xffalice,1,x",
                b"alic\xc3\xa9,1,x",
            ]
        ),
        max_size=40,
    ),
    header=st.sampled_from([b"user_id,n,note", b"n,user_id,note", b"n,note,other"]),
    final=st.booleans(),
    gz=st.booleans(),
)
def test_given_any_csv_when_looking_for_users_then_the_lines_are_those_read_records_gives(rows, header, final, gz):
    # Verification answers a quote-free CSV of one width from its id column in bulk: it must find what the indexer
    # finds, whatever the rows (and the id column moved by the header).
    body = b"\n".join([header, *rows]) + (b"\n" if final else b"")
    found, expected = holding_both_ways(body, "csv", gz, {"alice", "1"})
    assert found == expected


def holding_both_ways(body: bytes, fmt: str, gz: bool, wanted: set[str]) -> tuple[list[int], list[int]]:
    """The lines holding the wanted users as verification finds them, and as the indexer's reader reads them."""
    raw = gzip.compress(body) if gz else body
    key = f"x.{fmt}.gz" if gz else f"x.{fmt}"
    expected = [
        item.line
        for item in read_records(io.BytesIO(raw), key, fmt, ("user_id",), 100)
        if isinstance(item, Record) and wanted & set(item.user_ids)
    ]
    found = lines_holding(
        io.BytesIO(raw), key, fmt, ("user_id",), 100, DEFAULT_INFLATION, lambda ids: [i in wanted for i in ids]
    )
    # As the purge asks: users known by their keyed hashes, whose bulk answer is by set operations on the ids' bytes.
    hashed = HashedUsers(HASHER.many(wanted), HASHER)
    found_by_hash = lines_holding(
        io.BytesIO(raw), key, fmt, ("user_id",), 100, DEFAULT_INFLATION, hashed.each_contained, hashed.none_of
    )
    assert found_by_hash == found
    return found, expected
