"""Which texts may spell an id field's key with an escape (records.ids.IdKeys): such a text is read exactly, every
value of a key it writes twice; any other is taken by the bulk paths. Only escapes that can spell a plain name's
character count, so a lake whose texts are full of other escapes (json.dumps's `\\u00e9`) stays on the bulk paths."""

from __future__ import annotations

import io
import json
import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.records import ids, re2_bytes
from lakepurge.records.formats import group_records
from lakepurge.records.ids import IdKeys, IdRules, parse_paths

pytestmark = pytest.mark.unit

MAX = 4096
# (escapes that spell a name's character and others, quotes, colons, spacing, bytes that are no UTF-8)
PIECES = [b"\\u005f", b"\\u005F", b"\\u00e9", b"\\u212A", b"\\u0130", b"\\u0041", b'"', b":", b" ", b"\n", b"\xff"]
PIECES += [b"\xc3\xa9", b"a", b"\\", b"\r", b"\t", b"\x00", b"\xe2\x84\xaa", b"user_id"]


def test_given_names_in_any_case_when_a_key_is_spelled_with_an_escape_lowered_into_ascii_then_both_spellings_count():
    # "\u212a" is the Kelvin sign, which str.lower() makes "k": the second line writes the field twice.
    data = b'{"key":"a"}\n{"\\u212Aey":"b","key":"c"}\n{"key":"d"}\n'
    read = group_records(io.BytesIO(data), "x.jsonl", "jsonl", ("key",), MAX, rules=IdRules(folded=True))
    assert read.lines_by_user == {"a": [0], "d": [2]}
    assert [u.line for u in read.unindexable] == [1]


@pytest.mark.parametrize(
    ("text", "may_repeat"),
    [
        (json.dumps({"user_id": "u1", "body": 'café naïve 東京 👍\n\t"q"'}), False),  # escapes of other text only
        (json.dumps({"café": "x", "user_id": "u1"}), False),  # an escaped key, but of no plain name's character
        ('{"user\\u005fid": "u1"}', True),
        ('{"USER\\u005FID": "u1"}', True),
        ('{"user_id": "u1", "user_id": "u2"}', True),
    ],
)
def test_given_a_text_when_asked_whether_it_may_write_the_id_key_twice_then_only_a_name_spelled_otherwise_counts(
    text, may_repeat
) -> None:
    keys = IdKeys.of(parse_paths(["user_id"]))
    assert keys.may_repeat(text.encode()) is may_repeat


@given(st.lists(st.sampled_from(PIECES), max_size=14))
@settings(max_examples=300, deadline=None)
def test_given_any_text_when_searched_for_an_escaped_key_by_re2_or_by_re_then_both_answer_alike(pieces) -> None:
    # Every text is searched by the compiled RE2 automaton: it answers as Python's re reads the same pattern.
    text = b"".join(pieces)
    by_re2 = re2_bytes.found_in(ids._ESCAPED_KEY, text)
    by_re = re.search(ids.ESCAPED_KEY, text) is not None
    assert by_re2 is by_re


def test_given_the_target_lines_of_a_chunk_when_one_writes_the_key_twice_once_escaped_then_they_are_read_line_by_line():
    # A chunk's target lines joined (past COUNTED_FROM: every spelling counted by one RE2 pass): a second spelling
    # far into the text is still found; a key spelled only with an escape is one occurrence like any other.
    lines = [json.dumps({"user_id": f"u{n}", "body": "café " * 20}).encode() for n in range(1_000)]
    keys = IdKeys.of(parse_paths(["user_id"]))
    twice = [*lines[:-1], lines[-1].replace(b"}", b', "user\\u005fid": "u0"}')]
    once = [*lines[:-1], lines[-1].replace(b'"user_id"', b'"user\\u005fid"')]
    assert len(b"\n".join(lines)) > ids.COUNTED_FROM
    assert keys.repeated_among(twice, len(lines))
    assert not keys.repeated_among(once, len(lines))
    assert keys.repeated_among(lines, len(lines) - 1)  # one line more holds the key than the reader said


# Keys a generated line may write: the id field's in every spelling, at the top or nested, and others.
KEYS = ["user_id", "user\\u005fid", "\\u0075ser_id", "user\\u005Fid", "USER_ID", "body", "user"]
VALUES = st.one_of(
    st.sampled_from(["u1", "u2", "café", '"user_id"', "user_id", "\\u0075ser_id"]),
    st.integers(-3, 3),
    st.sampled_from([{"user_id": "u3"}, ["u4"], None]),
)
PAD = json.dumps({"pad": "\u00e9" * 12_000})  # a line holding no key, long enough for the one-pass count


@given(st.lists(st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=4), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_given_any_lines_when_none_is_said_to_repeat_the_key_then_the_bulk_read_of_each_is_the_indexers(objects):
    # What Ownership.json_lines and the check rely on: when repeated_among says no, each line's one top-level value
    # (orjson's, which keeps a repeated key's last value) is every id the indexer's reader (parse_record) gives it.
    lines = [
        ("{" + ", ".join(f'"{key}": {json.dumps(value, ensure_ascii=True)}' for key, value in pairs) + "}").encode()
        for pairs in objects
    ] + [PAD.encode()]
    keys = IdKeys.of(parse_paths(["user_id"]))
    values = [orjson.loads(line).get("user_id") for line in lines]
    holding = sum(value is not None for value in values)
    assert len(b"\n".join(lines)) >= ids.COUNTED_FROM
    if keys.repeated_among(lines, holding):
        return
    for line, value in zip(lines, values, strict=True):
        record = ids.parse_record(line, keys)
        every = record["user_id"] if type(record.get("user_id")) is ids._Repeated else [record.get("user_id")]
        assert every == [value]
