"""The purge's ownership check of JSON Lines target lines (purge.ownership.Ownership) answers, for a chunk's lines at
once, what the indexer's reader answers for each line alone: a line is the users' only if it is a JSON object whose
id field, read with the indexer's grammar (escapes, spacing, integers, arrays, every value of a key written twice),
holds one of them; a line that is no JSON, or holds an id the index cannot keep, is nobody's."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakepurge.core.config import DatasetConfig
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.purge.ownership import Ownership
from lakepurge.records.ids import Record, parse_paths
from lakepurge.records.jsonl_records import jsonl_items

pytestmark = pytest.mark.unit

PSEUDONYMIZER = Pseudonymizer(b"a test key of 32 bytes, not secret")
DATASET = DatasetConfig(name="d", location="s3://lake/d/", format="jsonl", id_fields=("user_id",))
POOL = ["alice", "bob", "42", "café", "東京", 'a"b', "x\\y", "0", "-7"]


def indexer_owned(line: bytes, users: set[str]) -> bool:
    """What the indexer reads in the line alone, against the users."""
    items = list(jsonl_items(0, [line], parse_paths(["user_id"]), 1 << 20))
    return any(isinstance(item, Record) and users.intersection(item.user_ids) for item in items)


def escaped(text: str) -> str:
    """Every character of a JSON string's content as a \\uXXXX escape (a writer may spell any character so)."""
    return "".join(f"\\u{ord(char):04x}" for char in text)


ids = st.one_of(st.sampled_from(POOL), st.integers(-3, 50), st.text(max_size=4), st.just(""), st.none())
id_values = st.one_of(ids, st.lists(ids, max_size=3), st.fixed_dictionaries({"user_id": ids}))
texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(['"user_id": "alice"', '{"user_id":"bob"}', "\\u0075ser_id", "naïve café 東京 👍\n\t"]),
)


@st.composite
def lines(draw: Any) -> bytes:
    record: dict[str, Any] = {"review_id": draw(st.integers(0, 9))}
    if draw(st.booleans()):
        record["text"] = draw(texts)
    shape = draw(st.integers(0, 9))  # mostly a plain id (what the bulk path answers), else anything an id field holds
    if shape:
        record["user_id"] = draw(st.sampled_from(POOL) if shape < 8 else id_values)
    if draw(st.booleans()):
        record["meta"] = {"user_id": draw(ids)}
    if draw(st.booleans()):
        record = dict(reversed(record.items()))
    writer = draw(st.sampled_from(["json.dumps", "json.dumps compact utf-8", "orjson", "json.dumps spaced"]))
    if writer == "orjson":
        text = orjson.dumps(record).decode()
    elif writer == "json.dumps compact utf-8":
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    elif writer == "json.dumps spaced":
        text = json.dumps(record, separators=(" ,  ", " :\t"))
    else:
        text = json.dumps(record)
    change = draw(
        st.sampled_from(
            [None] * 20
            + ["escaped key", "escaped value", "key twice", "escaped key twice", "truncated", "garbage after"]
            + ["not an object", "lone surrogate", "NUL in id", "long id", "invalid UTF-8", "blank", "empty object"]
        )
    )
    plain = draw(st.sampled_from(POOL))
    if change == "escaped key":
        text = text.replace('"user_id"', f'"{escaped("user")}_id"', 1)  # the first: the nested one, if first
    elif change == "escaped value" and isinstance(record.get("user_id"), str):
        text = text.replace(json.dumps(record["user_id"]), f'"{escaped(record["user_id"])}"', 1)
    elif change == "key twice":
        text = text[:-1] + f', "user_id": {json.dumps(plain)}}}' if text.endswith("}") else text
    elif change == "escaped key twice":
        text = "{" + f'"{escaped("user_id")}": {json.dumps(plain)}, ' + text[1:] if len(text) > 2 else text
    elif change == "truncated":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    elif change == "garbage after":
        text += draw(st.sampled_from([" x", ",", "}", ' {"user_id": "alice"}']))
    elif change == "not an object":
        text = draw(st.sampled_from(['"alice"', '["alice"]', "42", "null", '[{"user_id": "alice"}]']))
    elif change == "lone surrogate":
        text = '{"user_id": "alice", "t": "\\ud800"}'
    elif change == "NUL in id":
        text = '{"user_id": "ali\\u0000ce"}'
    elif change == "long id":
        text = json.dumps({"user_id": "alice" * 300})
    elif change == "blank":
        text = draw(st.sampled_from(["", " ", "\t"]))
    elif change == "empty object":
        text = "{}"
    data = text.encode("utf-8", "surrogatepass")
    if change == "invalid UTF-8":
        data = data.replace(b"alice", b"al\xffice", 1) if b"alice" in data else data + b"\xff"
    return data


def users_as(mode: str, wanted: set[str]) -> Any:
    hashes = PSEUDONYMIZER.many(wanted)
    if mode == "hashes":  # a Spark executor's
        return HashedUsers(hashes, PSEUDONYMIZER)
    if mode == "ids in memory":  # an inline purge's
        return HashedUsers(hashes, PSEUDONYMIZER, known=wanted)
    return frozenset(wanted)  # no bulk lookup: line by line


@given(
    chunk=st.lists(lines(), min_size=1, max_size=6),
    wanted=st.sets(st.sampled_from(POOL), max_size=4),
    mode=st.sampled_from(["hashes", "ids in memory", "a set"]),
)
@example(chunk=[b'{"user_id": "alice", "t": "\\"user_id\\": \\"bob\\""}'], wanted={"bob"}, mode="ids in memory")
@example(chunk=[b'{"user_id": "bob", "user\\u005fid": "alice"}', b'{"user_id": "b"}'], wanted={"alice"}, mode="hashes")
@example(chunk=[b'{"user_id": {}, "user_id": "alice"}', b'{"user_id": "alice"}'], wanted={"alice"}, mode="hashes")
@example(chunk=[b'{"user_id": "alice", "user_id": "bob"}', b'{"user_id": "bob"}'], wanted={"alice"}, mode="hashes")
@example(chunk=[b'{"user\\u005fid": "alice", "user_id": "bob"}', b'{"user_id": "x"}'], wanted={"alice"}, mode="hashes")
@example(chunk=[b'{"user_id": 42}', b'{"user_id": "42"}', b'{"user_id": "4\\u0032"}'], wanted={"42"}, mode="hashes")
@example(chunk=[b'{"user_id": "alice"}', b'{"user_id": "alice"'], wanted={"alice"}, mode="ids in memory")
# (lines that are JSON only when joined by commas, into as many values as lines: a string or an array runs from one
# into the next; each alone is no JSON and nobody's, which a parse of the lines joined would not see)
@example(chunk=[b'{"user_id": "bob", "t": "a', b'b"}, {"user_id": "alice"}'], wanted={"alice"}, mode="ids in memory")
@example(chunk=[b'{"user_id": "bob", "a": [1', b'2]}, {"user_id": "alice"}'], wanted={"alice"}, mode="hashes")
@settings(max_examples=400, deadline=None)
def test_given_any_target_lines_when_decided_together_then_each_answer_is_the_indexers_for_that_line(
    chunk, wanted, mode
) -> None:
    expected = [indexer_owned(line, wanted) for line in chunk]
    numbers = list(range(len(chunk)))
    together = Ownership(DATASET, users_as(mode, wanted))
    assert together.json_lines(numbers, chunk) == expected
    assert together.erased == [n for n in numbers if expected[n]]
    assert together.not_matching == expected.count(False)
    one_by_one = Ownership(DATASET, users_as(mode, wanted))
    assert [one_by_one.json_line(n, line) for n, line in enumerate(chunk)] == expected
