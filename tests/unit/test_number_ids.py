"""Numbers by value (issue 31, the normalisation `number`): an integer, a float, a Parquet decimal and a numeric string
that are one number are one index form, and a request's `--id order_no=12345` is normalised to the same; an untyped
field keeps today's rule (strings and integers; a float or a decimal is unindexable)."""

from __future__ import annotations

import io
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.records.formats import group_records
from lakepurge.records.id_typing import FieldKind, IdTyping
from lakepurge.records.identifiers import IdentifierKind, RequestIdError, request_form
from lakepurge.records.ids import EXACT, IdRules

pytestmark = pytest.mark.unit

ORDER = IdentifierKind("order_no", ("number",))
KINDS = {"order_no": ORDER}
NUMBERS = IdRules(typing=IdTyping(((("order_no",), FieldKind(ORDER)),)))  # id_kind = "order_no", as Settings expands it


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("12345", "12345"),
        ("12345.0", "12345"),
        ("1.2345e4", "12345"),
        ("0012345", "12345"),
        ("+12345", "12345"),
        ("123.450", "123.45"),
        ("-12.10", "-12.1"),
        ("-0.00", "0"),
        (".5", "0.5"),
        ("1E+3", "1000"),
        ("1e-3", "0.001"),
    ],
)
def test_given_a_number_kind_when_a_number_is_written_any_way_then_its_form_is_its_canonical_decimal(
    written, canonical
):
    assert request_form(f"order_no={written}", KINDS) == "\x1forder_no\x1f" + canonical


def test_given_long_numbers_that_differ_in_the_last_digit_when_normalised_then_they_stay_two_ids():
    # Decimal's context would round both to 28 digits: the canonical form keeps every digit.
    a, b = "1234567890123456789012345678901234567890", "1234567890123456789012345678901234567891"
    assert request_form(f"order_no={a}", KINDS) != request_form(f"order_no={b}", KINDS)
    assert request_form(f"order_no={a}.000", KINDS) == ORDER.prefix + a


@pytest.mark.parametrize("written", ["12,345", "1_000", " 12", "NaN", "Infinity", "0x1F", "12a", "", "1e99999999"])
def test_given_a_number_kind_when_a_request_names_no_number_then_it_is_refused_naming_the_kind_not_the_value(written):
    with pytest.raises(RequestIdError) as refused:
        request_form(f"order_no={written}", KINDS)
    assert "order_no" in str(refused.value) and (not written or written not in str(refused.value))


def forms(data: bytes, key: str, fmt: str, rules: IdRules):
    read = group_records(io.BytesIO(data), key, fmt, ("order_no",), 4096, rules=rules)
    return read.lines_by_user, [(u.line, u.reason) for u in read.unindexable]


JSONL = (
    b'{"order_no":12345}\n{"order_no":12345.0}\n{"order_no":"12345"}\n{"order_no":1.2345e4}\n'
    b'{"order_no":123.45}\n{"order_no":"123.450"}\n{"order_no":true}\n{"order_no":"n/a"}\n'
)


def test_given_json_lines_of_a_number_kind_when_indexed_then_every_spelling_of_a_number_is_one_id():
    rows, bad = forms(JSONL, "x.jsonl", "jsonl", NUMBERS)
    assert rows == {ORDER.prefix + "12345": [0, 1, 2, 3], ORDER.prefix + "123.45": [4, 5]}
    assert bad == [
        (6, "id field 'order_no' holds a bool, not a string or integer"),
        (7, "id field 'order_no' holds no order_no after normalisation (number)"),
    ]


def test_given_json_lines_of_an_untyped_field_when_indexed_then_floats_stay_unindexable_as_today():
    rows, bad = forms(JSONL, "x.jsonl", "jsonl", EXACT)
    assert rows == {"12345": [0, 2], "123.450": [5], "n/a": [7]}
    assert [line for line, _ in bad] == [1, 3, 4, 6]
    assert bad[0] == (1, "id field 'order_no' holds a float, not a string or integer")


def test_given_parquet_decimals_and_floats_of_a_number_kind_when_indexed_then_they_match_by_value():
    sink = io.BytesIO()
    column = pa.array([Decimal("123.45"), Decimal("12345.00"), Decimal("0.10"), None], pa.decimal128(10, 2))
    pq.write_table(pa.table({"order_no": column, "x": [1, 2, 3, 4]}), sink)
    rows, bad = forms(sink.getvalue(), "x.parquet", "parquet", NUMBERS)
    assert rows == {ORDER.prefix + "123.45": [0], ORDER.prefix + "12345": [1], ORDER.prefix + "0.1": [2]}
    assert bad == [(3, "id field 'order_no' missing")]
    untyped, refused = forms(sink.getvalue(), "x.parquet", "parquet", EXACT)
    assert untyped == {} and refused[0] == (0, "id field 'order_no' holds a Decimal, not a string or integer")


def test_given_a_float_that_is_not_finite_when_read_for_a_number_kind_then_its_record_is_unindexable():
    sink = io.BytesIO()
    pq.write_table(pa.table({"order_no": [float("nan"), float("inf"), 2.5]}), sink)
    rows, bad = forms(sink.getvalue(), "x.parquet", "parquet", NUMBERS)
    assert rows == {ORDER.prefix + "2.5": [2]}
    assert bad == [(line, "id field 'order_no' holds a number that is not finite") for line in (0, 1)]
