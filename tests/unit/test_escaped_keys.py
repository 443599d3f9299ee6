"""Which texts may spell an id field's key with an escape (records.ids.IdKeys): such a text is read exactly, every
value of a key it writes twice; any other is taken by the bulk paths. Only escapes that can spell a plain name's
character count, so a lake whose texts are full of other escapes (json.dumps's `\\u00e9`) stays on the bulk paths."""

from __future__ import annotations

import io
import json

import pytest

from lakepurge.records.formats import group_records
from lakepurge.records.ids import IdKeys, IdRules, parse_paths

pytestmark = pytest.mark.unit

MAX = 4096


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
