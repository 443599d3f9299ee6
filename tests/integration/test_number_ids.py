"""Numbers by value in the index (issue 31), on both backends: datasets of an identifier kind normalised as `number`
(CSV, JSON Lines, and Parquet files whose order_no is an int64, a decimal128(10,2) and a string) are indexed by the
canonical decimal of each id, so `lakepurge lookup --id order_no=12345` finds the integer 12345, the decimal
12345.00 and the strings "12345" and "12345.0", and `--id order_no=123.450` the decimal 123.45."""

from __future__ import annotations

import io
from decimal import Decimal

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from tests.support.lakes import hand_made_lake

pytestmark = pytest.mark.integration

CONFIG = """
[identifiers.order_no]
normalise = ["number"]

[[datasets]]
name = "orders_csv"
location = "s3://lake/orders_csv/"
format = "csv"
id_fields = ["order_no"]
id_kind = "order_no"

[[datasets]]
name = "orders_jsonl"
location = "s3://lake/orders_jsonl/"
id_fields = ["order_no"]
id_kind = "order_no"

[[datasets]]
name = "orders_parquet"
location = "s3://lake/orders_parquet/"
format = "parquet"
id_fields = ["order_no"]
id_kind = "order_no"
"""


def parquet(column: pa.Array) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"order_no": column, "total": list(range(len(column)))}), sink)
    return sink.getvalue()


OBJECTS = {
    "orders_csv/a.csv": b"order_no,total\n12345,1\n123.450,2\n0012345,3\n777,4\n",
    "orders_jsonl/a.jsonl": b'{"order_no":12345}\n{"order_no":123.45}\n{"order_no":"12345.0"}\n{"order_no":7}\n',
    "orders_parquet/int64.parquet": parquet(pa.array([7, 12345], pa.int64())),
    "orders_parquet/decimal.parquet": parquet(
        pa.array([Decimal("123.45"), Decimal("12345.00"), Decimal("1.00")], pa.decimal128(10, 2))
    ),
    "orders_parquet/string.parquet": parquet(pa.array(["123.45", "x-1", "12345"], pa.string())),
}


@pytest.fixture
def number_lake(index_backend, tmp_path):
    """The three datasets on moto, each object indexed by the event indexer into the backend."""
    with hand_made_lake(index_backend, tmp_path, CONFIG, OBJECTS.items()) as lake:
        yield lake.store, lake.config


def looked_up(capsys: pytest.CaptureFixture[str], config: str, *ids: str) -> dict[str, dict[str, list[int]]]:
    capsys.readouterr()
    assert main(["lookup", *(a for i in ids for a in ("--id", i)), "--config", config, "--json"]) == 0
    users = orjson.loads(capsys.readouterr().out)["users"]
    return {user: {loc["s3path"]: loc["lines"] for loc in found} for user, found in users.items()}


def test_given_number_kinds_in_csv_json_lines_and_parquet_when_a_number_is_looked_up_then_each_spelling_is_found(
    number_lake, capsys
):
    _, config = number_lake
    found = looked_up(capsys, config, "order_no=12345", "order_no=123.450")
    assert found == {
        "order_no=12345": {
            "s3://lake/orders_csv/a.csv": [1, 3],
            "s3://lake/orders_jsonl/a.jsonl": [0, 2],
            "s3://lake/orders_parquet/int64.parquet": [1],
            "s3://lake/orders_parquet/decimal.parquet": [1],
            "s3://lake/orders_parquet/string.parquet": [2],
        },
        "order_no=123.45": {
            "s3://lake/orders_csv/a.csv": [2],
            "s3://lake/orders_jsonl/a.jsonl": [1],
            "s3://lake/orders_parquet/decimal.parquet": [0],
            "s3://lake/orders_parquet/string.parquet": [0],
        },
    }
    assert looked_up(capsys, config, "order_no=1")["order_no=1"] == {"s3://lake/orders_parquet/decimal.parquet": [2]}


def test_given_a_number_kind_when_a_value_is_no_number_then_its_line_is_unindexable_and_the_reason_never_quotes_it(
    number_lake,
):
    store, _ = number_lake
    assert [(path, u.line, u.reason) for path, u in store.unindexable(limit=100)] == [
        (
            "s3://lake/orders_parquet/string.parquet",
            1,
            "id field 'order_no' holds no order_no after normalisation (number)",
        )
    ]
