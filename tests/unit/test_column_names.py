"""Case-insensitive column names (issue 31, column_names = "case-insensitive"): an id field names the key or column
of any case, a record or file that spells it two ways is unindexable with both names, and the purge's ownership
check and verification's search read exactly what the indexer reads."""

from __future__ import annotations

import io
import tomllib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.core.config import ConfigError, DatasetConfig, parse_settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.purge.ownership import Ownership, owned_rows
from lakepurge.records.csv_records import HEADER_PROBLEM, csv_records
from lakepurge.records.formats import Grouped, group_records
from lakepurge.records.ids import EXACT, IdRules, ambiguous, parse_paths
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

FOLDED = IdRules(folded=True)
HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")
MAX = 4096
# Lines 0-2: one field in three cases; 3: two spellings in one record; 4: one spelling written twice (both values
# count, as for any repeated key); 5: a nested field in other cases.
JSONL = (
    b'{"userId":"alice","n":1}\n'
    b'{"USERID":"bob","n":2}\n'
    b'{"userid":"alice","n":3}\n'
    b'{"userId":"carol","USERID":"dave"}\n'
    b'{"Userid":"erin","Userid":"frank"}\n'
    b'{"BUYER":{"Id":"gus"}}\n'
)
FIELDS = ("userid", "buyer.id")


def grouped(data: bytes, fmt: str, fields: tuple[str, ...], rules: IdRules) -> Grouped:
    return group_records(io.BytesIO(data), f"x.{fmt}", fmt, fields, MAX, rules=rules)


def dataset(fmt: str, fields: tuple[str, ...], column_names: str = "case-insensitive") -> DatasetConfig:
    return DatasetConfig.model_validate(
        {"name": "d", "location": "s3://lake/d/", "format": fmt, "id_fields": fields, "column_names": column_names}
    )


def test_given_case_insensitive_names_when_json_lines_spell_the_field_in_any_case_then_each_spelling_is_its_id():
    read = grouped(JSONL, "jsonl", FIELDS, FOLDED)
    assert read.lines_by_user == {"alice": [0, 2], "bob": [1], "erin": [4], "frank": [4], "gus": [5]}
    assert [(u.line, u.reason) for u in read.unindexable] == [(3, ambiguous("userid", ["userId", "USERID"]))]
    assert "'userId', 'USERID'" in read.unindexable[0].reason and "carol" not in read.unindexable[0].reason


def test_given_exact_names_when_json_lines_spell_the_field_otherwise_then_only_the_exact_spelling_is_read():
    read = grouped(JSONL, "jsonl", FIELDS, EXACT)
    assert read.lines_by_user == {"alice": [2]}
    assert [u.line for u in read.unindexable] == [0, 1, 3, 4, 5]


def test_given_a_chunk_whose_lines_hold_the_exact_key_when_one_also_spells_it_otherwise_then_that_line_is_unindexable():
    # Every line holds "userid": the bulk path could answer the chunk, but one line writes USERID too.
    data = b'{"userid":"a"}\n{"userid":"a"}\n{"userid":"b","USERID":"c"}\n{"userid":"a"}\n'
    read = grouped(data, "jsonl", ("userid",), FOLDED)
    assert read.lines_by_user == {"a": [0, 1, 3]}
    assert [u.line for u in read.unindexable] == [2]
    # The files spell it userId, the catalog userid: the chunk is read by that spelling, and the line that also
    # writes USERID is still caught.
    camel = data.replace(b'"userid"', b'"userId"')
    read = grouped(camel, "jsonl", ("userid",), FOLDED)
    assert read.lines_by_user == {"a": [0, 1, 3]} and [u.line for u in read.unindexable] == [2]
    assert grouped(camel.replace(b',"USERID":"c"', b""), "jsonl", ("userid",), FOLDED).lines_by_user == {
        "a": [0, 1, 3],
        "b": [2],
    }
    # The purge's check and verification's search, asked in bulk as the purge asks, agree on both spellings.
    config = dataset("jsonl", ("userid",))
    for text in (data, camel):
        lines = text.split(b"\n")[:-1]
        for user, mine in (("a", [True, True, False, True]), ("b", [False] * 4), ("c", [False] * 4)):
            users = HashedUsers(HASHER.many([user]), HASHER)
            assert Ownership(config, users, id_rules(config)).json_lines([0, 1, 2, 3], lines) == mine
            found = lines_holding(
                io.BytesIO(text),
                "x.jsonl",
                "jsonl",
                ("userid",),
                MAX,
                DEFAULT_INFLATION,
                users.each_contained,
                users.none_of,
                FOLDED,
            )
            assert found == [n for n, owned in enumerate(mine) if owned]


def test_given_case_insensitive_names_when_the_purge_and_verification_read_the_lines_then_they_find_the_indexers():
    read = grouped(JSONL, "jsonl", FIELDS, FOLDED)
    config = dataset("jsonl", FIELDS)
    lines = JSONL.split(b"\n")[:-1]
    for user in ("alice", "bob", "carol", "dave", "erin", "frank", "gus"):
        mine = read.lines_by_user.get(user, [])
        found = lines_holding(
            io.BytesIO(JSONL), "x.jsonl", "jsonl", FIELDS, MAX, DEFAULT_INFLATION, _wanted(user), None, FOLDED
        )
        assert found == mine, user
        owner = Ownership(config, {user}, id_rules(config))
        assert [n for n, line in enumerate(lines) if owner.json_line(n, line)] == mine, user
        owner = Ownership(config, {user}, id_rules(config))
        assert [n for n, owned in enumerate(owner.json_lines(list(range(len(lines))), lines)) if owned] == mine


def _wanted(user: str):
    return lambda ids: [i == user for i in ids]


CSV = b"UserId,note\nalice,a\nbob,b\nalice,c\n"


def test_given_a_csv_header_in_another_case_when_read_indexed_purged_and_verified_then_all_find_the_same_rows():
    read = grouped(CSV, "csv", ("userid",), FOLDED)
    assert read.lines_by_user == {"alice": [1, 3], "bob": [2]} and read.unindexable == []
    assert grouped(CSV, "csv", ("userid",), EXACT).lines_by_user == {}  # exact: the header has no userid
    found = lines_holding(
        io.BytesIO(CSV), "x.csv", "csv", ("userid",), MAX, DEFAULT_INFLATION, _wanted("alice"), None, FOLDED
    )
    assert found == [1, 3]
    config = dataset("csv", ("userid",))
    owner = Ownership(config, {"alice"}, id_rules(config))
    rows = list(csv_records(io.BytesIO(CSV), MAX))
    owner.csv_header(rows[0].row or [])
    assert [r.line for r in rows[1:] if owner.csv_record(r.line, r.row or [])] == [1, 3]


def test_given_a_csv_header_naming_the_field_twice_when_read_then_the_object_is_unindexable_naming_both_and_nobodys():
    data = b"UserId,USERID\nalice,bob\n"
    read = grouped(data, "csv", ("userid",), FOLDED)
    assert read.lines_by_user == {}
    assert [(u.line, u.reason) for u in read.unindexable] == [
        (0, HEADER_PROBLEM + ambiguous("userid", ["UserId", "USERID"]))
    ]
    config = dataset("csv", ("userid",))
    owner = Ownership(config, {"alice", "bob"}, id_rules(config))
    owner.csv_header(["UserId", "USERID"])
    assert owner.csv_record(1, ["alice", "bob"]) is False
    assert (
        lines_holding(
            io.BytesIO(data), "x.csv", "csv", ("userid",), MAX, DEFAULT_INFLATION, _wanted("alice"), None, FOLDED
        )
        == []
    )


def parquet(columns: dict[str, list[str]]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def test_given_a_parquet_column_in_another_case_when_read_and_dropped_then_both_find_the_same_rows():
    data = parquet({"userId": ["alice", "bob", "alice"], "note": ["a", "b", "c"]})
    assert grouped(data, "parquet", ("userid",), FOLDED).lines_by_user == {"alice": [0, 2], "bob": [1]}
    assert grouped(data, "parquet", ("userid",), EXACT).lines_by_user == {}
    table = pq.read_table(io.BytesIO(data))
    assert owned_rows(table, parse_paths(["userid"]), {"alice"}, FOLDED) == [True, False, True]


def test_given_parquet_columns_that_both_match_the_field_when_read_then_every_row_is_unindexable_naming_both():
    data = parquet({"userId": ["alice", "bob"], "USERID": ["carol", "dave"]})
    read = grouped(data, "parquet", ("userid",), FOLDED)
    reason = ambiguous("userid", ["userId", "USERID"])
    assert read.lines_by_user == {} and [(u.line, u.reason) for u in read.unindexable] == [(0, reason), (1, reason)]
    table = pq.read_table(io.BytesIO(data))
    assert owned_rows(table, parse_paths(["userid"]), {"alice", "carol"}, FOLDED) == [False, False]


def test_given_case_insensitive_names_when_configured_for_a_table_then_the_configuration_is_refused():
    base = '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n[reports]\nlocation = "s3://r/r/"\n'
    entry = '[[datasets]]\nname = "t"\nlocation = "s3://lake/t/"\nformat = "{}"\nid_fields = ["userid"]\n'
    accepted = parse_settings(tomllib.loads(base + entry.format("parquet") + 'column_names = "case-insensitive"\n'))
    assert accepted.datasets[0].column_names == "case-insensitive"
    with pytest.raises(ConfigError, match='column_names = "case-insensitive" is for datasets of files'):
        parse_settings(tomllib.loads(base + entry.format("delta") + 'column_names = "case-insensitive"\n'))
