"""The check before a purge writes an object: its bulk answer (every id the bytes could hold, records.candidates) must
give exactly the lines the indexer's reader gives, whatever wrote the lines: orjson, json.dumps with its defaults
(`\\uXXXX` for non-ASCII, `", "` and `": "`), other spacings, escapes in keys and values, nested and array ids,
integers, keys written twice; and it must answer in bulk (parse no line), keys spelled with escapes included."""

from __future__ import annotations

import gc
import gzip
import io
import json
import logging
import re
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest import mock

import orjson
import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.records import candidates, lines, search
from lakepurge.records.candidates import KNOWN_ID_CHARS, KNOWN_IDS_MAX, IdCandidates, WantedIds
from lakepurge.records.formats import read_records
from lakepurge.records.ids import Record, parse_paths
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

HASHER = Pseudonymizer(b"a test key of 32 bytes, not secret")
MAX = 4096
WANTED = ["alice", "élise", "東京👍", 'a"b', "back\\slash", "tab\tx", "7", "0", "-5", "user_id"]
TEXTS = ["line\nbreak", 'say "hi"', "caf\u00e9 東京 👍", "\\u0041", "user_id"]
OTHERS = ["bob", "elise", "東京", "a", "tab x", "70", "8", "u0000123", "\u2028", "ab\u00e9"]
PATHS = {
    "top": (("user_id",),),
    "nested": (("orders", "buyer"),),
    "two fields": (("user_id",), ("profile", "id")),
}

ids = st.one_of(st.sampled_from(WANTED), st.sampled_from(OTHERS), st.text(max_size=6))
integers = st.sampled_from([0, 7, -5, 2**64, -(2**63), 10**30]) | st.integers(-9, 9)
others = st.sampled_from([None, True, 1.5, ""])
id_values = st.one_of(
    ids,
    ids,
    integers,
    others,
    # (an array holding a field's name as a string is split by it: it is read line by line, not in bulk)
    st.lists(ids.filter(lambda i: i not in ("user_id", "buyer", "id")) | integers, max_size=3),
    st.builds(lambda v: {"user_id": v}, ids),
)


@st.composite
def records(draw: st.DrawFn, shape: str) -> list[tuple[str, Any]]:
    """One record as its key-value pairs, in order (a key may come twice)."""
    pairs: list[tuple[str, Any]] = [("n", draw(st.integers(0, 99)))]
    if draw(st.booleans()):
        pairs.append(("text", draw(st.sampled_from(TEXTS))))
    if shape == "nested":
        buyers = draw(st.lists(st.builds(lambda v: [("buyer", v)], id_values), max_size=3))
        pairs.append(("orders", buyers if draw(st.booleans()) else (buyers[0] if buyers else [])))
    else:
        for _ in range(draw(st.integers(0, 2))):  # none, one, or the key written twice
            pairs.append(("user_id", draw(id_values)))
        if shape == "two fields" and draw(st.booleans()):
            pairs.append(("profile", [("id", draw(id_values))]))
    if draw(st.booleans()):
        pairs.append(("x", [("user_id", draw(ids))]))  # the key again, nested under another one
    return draw(st.permutations(pairs))


# How a writer spells JSON: the separators around its items, and how it escapes strings.
SEPARATORS = [(",", ":"), (", ", ": "), (" ,\t", " :  "), ("\t,", ":\r")]
STYLES = ["json.dumps", "utf-8", "upper hex", "escaped keys"]


def spelled(value: Any, style: str, separators: tuple[str, str], key: bool = False) -> str:
    item, colon = separators
    if isinstance(value, list) and (not value or isinstance(value[0], tuple)):  # an object, as its pairs
        body = item.join(spelled(k, style, separators, True) + colon + spelled(v, style, separators) for k, v in value)
        return "{" + body + "}"
    if isinstance(value, dict):
        return spelled(list(value.items()), style, separators)
    if isinstance(value, list):
        return "[" + item.join(spelled(v, style, separators) for v in value) + "]"
    if not isinstance(value, str):
        return json.dumps(value)
    if style == "escaped keys" and key:  # every ASCII character as \u00XX: what no common writer does
        return '"' + "".join(f"\\u{ord(c):04x}" if c.isascii() else c for c in value) + '"'
    text = json.dumps(value, ensure_ascii=style != "utf-8")
    return re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), text) if style == "upper hex" else text


@st.composite
def lakes(draw: st.DrawFn) -> tuple[str, bytes, str]:
    shape = draw(st.sampled_from(sorted(PATHS)))
    style = draw(st.sampled_from(STYLES))
    separators = draw(st.sampled_from(SEPARATORS))
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.sampled_from([b"{}", b"", b"{not json", b'["user_id"]', b'{"user_id":"alice"'])))
        else:
            lines.append(spelled(draw(records(shape)), style, separators).encode())
    return shape, b"\n".join(lines) + draw(st.sampled_from([b"\n", b""])), style


def _read_for_ids(lake: tuple[str, bytes, str]) -> tuple[bytes, tuple[str, ...], IdCandidates]:
    """A drawn lake's bytes, its id fields and their bulk reader."""
    shape, data, _ = lake
    fields = tuple(".".join(path) for path in PATHS[shape])
    candidates = IdCandidates.of(parse_paths(fields))
    assert candidates is not None
    return data, fields, candidates


def read_by_the_indexer(data: bytes, paths: tuple[str, ...], wanted: set[str]) -> list[int]:
    return [
        item.line
        for item in read_records(io.BytesIO(data), "x.jsonl", "jsonl", paths, MAX)
        if isinstance(item, Record) and wanted & set(item.user_ids)
    ]


def checked(data: bytes, fields: tuple[str, ...], users: Any, gz: bool = False) -> list[int]:
    """As the purge's still_holding asks: by the users' raw ids too when it holds them (a set; every id given)."""
    raw = gzip.compress(data) if gz else data
    key = "x.jsonl.gz" if gz else "x.jsonl"
    if isinstance(users, HashedUsers):
        return lines_holding(
            io.BytesIO(raw),
            key,
            "jsonl",
            fields,
            MAX,
            DEFAULT_INFLATION,
            users.each_contained,
            users.none_of,
            known=users.ids_held(),
        )
    each = lambda ids: [i in users for i in ids]  # noqa: E731
    return lines_holding(io.BytesIO(raw), key, "jsonl", fields, MAX, DEFAULT_INFLATION, each, known=users)


@settings(max_examples=150, deadline=None)
@given(lake=lakes(), wanted=st.sets(st.sampled_from(WANTED), min_size=1, max_size=len(WANTED)), gz=st.booleans())
def test_given_lines_of_any_writer_when_checked_before_a_write_then_the_lines_are_those_the_indexer_reads(
    lake, wanted, gz
) -> None:
    shape, data, _ = lake
    fields = tuple(".".join(path) for path in PATHS[shape])
    expected = read_by_the_indexer(data, fields, wanted)
    hashes = HASHER.many(wanted)
    part = sorted(wanted)[: len(wanted) // 2]
    as_users = {
        "a plain set": wanted,
        "keyed hashes (Spark executors)": HashedUsers(hashes, HASHER),
        "their ids in memory (inline)": HashedUsers(hashes, HASHER, known=[*wanted, "bob"]),
        "some ids in memory": HashedUsers(hashes, HASHER, known=part),
    }
    for name, users in as_users.items():
        assert checked(data, fields, users, gz) == expected, name


@settings(max_examples=150, deadline=None)
@given(lake=lakes())
def test_given_lines_of_any_writer_when_their_ids_are_found_in_bulk_then_every_id_the_indexer_reads_is_among_them(
    lake,
) -> None:
    shape, data, _ = lake
    fields = tuple(".".join(path) for path in PATHS[shape])
    read = {user for item in read_records(io.BytesIO(data), "x.jsonl", "jsonl", fields, MAX) for user in _ids(item)}

    found = IdCandidates.of(parse_paths(fields)).found(data)  # type: ignore[union-attr]

    assert found is not None  # answered without parsing a line, whatever the writer
    candidates = {value.decode("utf-8", "replace") for value in found.plain.to_pylist()} | set(found.decoded)
    assert read <= candidates


def _ids(item: object) -> tuple[str, ...]:
    return item.user_ids if isinstance(item, Record) else ()


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        (b'{"user\\u005fid": "alice"}', "alice"),  # the key spelled with an escape
        (b'{"user\\u005Fid":"x","user_id":"bob"}', "x"),
        (b'{"us\\u0065r_id": 7}', "7"),
        (b'{"user_id": -0}', "0"),  # read as the integer 0
        (b'{"user_id": "\\u00e9lise"}', "élise"),
        (b'{"user_id": "a\\"b"}', 'a"b'),
        (b'{"user_id" :\t[ "bob" , 7 ]}', "7"),
        (b'{"user_id":"bob","user_id":"alice"}', "alice"),  # every value of a key written twice
        (b'{"user_id": "user_id"}', "user_id"),  # the value is the key's own token
        (b'{"orders":[{"buyer":"alice"}]}', None),  # not the dataset's field
    ],
)
def test_given_a_line_only_an_exact_reader_understands_when_checked_then_its_user_is_found(line, wanted) -> None:
    data = b'{"user_id": "carol"}\n' + line + b"\n"
    users = {"alice", "élise", 'a"b', "7", "0", "x", "user_id"}
    expected = [1] if wanted is not None else []
    assert read_by_the_indexer(data, ("user_id",), users) == expected
    hashes = HASHER.many(users)
    assert checked(data, ("user_id",), HashedUsers(hashes, HASHER)) == expected
    assert checked(data, ("user_id",), HashedUsers(hashes, HASHER, known=users)) == expected


def test_given_json_dumps_lines_with_escapes_everywhere_when_their_ids_are_found_then_no_line_is_parsed() -> None:
    # What the hard lake of bench/erase_path_bench.py holds: the bulk answer reads these without a parse per line.
    lines = [
        json.dumps({"review_id": f"r{n}", "user_id": f"u{n:07d}", "body": 'caf\u00e9 "quoted"\n\tnaïve 👍'}).encode()
        for n in range(50)
    ]
    found = IdCandidates.of((("user_id",),)).found(b"\n".join(lines))  # type: ignore[union-attr]
    assert found is not None
    assert sorted(found.plain.to_pylist()) == [f"u{n:07d}".encode() for n in range(50)]
    assert found.decoded == []
    assert orjson.loads(lines[0])["body"].startswith("café")


@settings(max_examples=300, deadline=None)
@given(lake=lakes(), wanted=st.sets(ids | integers.map(str), min_size=1, max_size=6))
def test_given_lines_of_any_writer_when_searched_by_the_wanted_ids_themselves_then_a_clear_answer_is_the_indexers(
    lake, wanted
) -> None:
    # The ids drawn as the lines' are (wanted, others, any text, integers), so most sets are absent from the lines
    # and the automaton answers: its "none" must be the indexer's, whatever the writer's escapes, spacing, nesting,
    # arrays, integers and repeated keys.
    data, fields, candidates = _read_for_ids(lake)

    clear = candidates.holds_none_of(data, WantedIds(wanted))

    expected = read_by_the_indexer(data, fields, wanted)
    if clear:
        assert expected == []
    assert checked(data, fields, frozenset(wanted)) == expected
    assert checked(data, fields, HashedUsers(HASHER.many(wanted), HASHER, known=wanted)) == expected


HARD_LINES = [
    json.dumps({"review_id": f"r{n}", "user_id": f"u{n:07d}", "n": n, "body": 'caf\u00e9 "q"\n\tnaïve 👍 \\'}).encode()
    for n in range(200)
]


@pytest.mark.parametrize(
    ("wanted", "clear"),
    [
        ({"u0000200", "u1000000", "r5", "5"}, True),  # absent, or only elsewhere than an id field's value
        ({"u0000199"}, False),
        ({"u0000200", "7"}, True),  # 7 is an `n`, not an id
    ],
)
def test_given_json_dumps_lines_with_escapes_in_every_text_when_searched_by_the_ids_then_one_automaton_answers(
    wanted, clear
) -> None:
    data = b"\n".join(HARD_LINES) + b"\n"
    candidates = IdCandidates.of((("user_id",),))
    assert candidates is not None
    assert candidates.holds_none_of(data, WantedIds(wanted)) is clear
    assert checked(data, ("user_id",), frozenset(wanted)) == ([] if clear else [199])


@pytest.mark.parametrize(
    "line",
    [
        b'{"user_id": "al\\u0069ce"}',  # the id spelled with an escape
        b'{"user\\u005Fid": "alice"}',  # the key spelled with one
        b'{"user_id" :\t[ "bob" , "alice" ]}',
        b'{"user_id": 42}',
        b'{"user_id": -0}',
        b'{"user_id":"bob", "user_id" : "alice"}',
        b'{"x": {"user_id": "alice"}}',
    ],
)
def test_given_a_line_holding_a_wanted_id_in_any_spelling_when_searched_by_the_ids_then_it_is_never_cleared(
    line,
) -> None:
    wanted = frozenset({"alice", "42", "0"})
    data = b'{"user_id": "carol"}\n' + line + b"\n"
    candidates = IdCandidates.of((("user_id",),))
    assert candidates is not None
    assert not candidates.holds_none_of(data, WantedIds(wanted))
    assert checked(data, ("user_id",), wanted) == read_by_the_indexer(data, ("user_id",), set(wanted))


@pytest.mark.parametrize(
    "many",
    [
        frozenset(f"v{n}" for n in range(KNOWN_IDS_MAX + 1)),
        frozenset(f"v{n}@example.com" for n in range(KNOWN_ID_CHARS // 10)),
    ],
    ids=["ids", "characters"],
)
def test_given_more_ids_than_the_automaton_takes_when_searched_then_the_split_answers_instead(many) -> None:
    data = b"\n".join(HARD_LINES) + b"\n"
    candidates = IdCandidates.of((("user_id",),))
    assert candidates is not None
    assert not candidates.holds_none_of(data, WantedIds(many))
    assert checked(data, ("user_id",), many) == []


# More ids than an automaton is compiled for at once (KNOWN_IDS_MAX): ids no generated line holds (longer than
# st.text's six characters), with the ids the lines are drawn from.
FILLERS = frozenset(f"filler-{n:05d}" for n in range(KNOWN_IDS_MAX + 500))
_RENTED: dict[str, WantedIds] = {}


def _rented() -> WantedIds:
    """One WantedIds of WANTED and FILLERS for the module (its automata compiled once, ~10 ms each)."""
    if not _RENTED:
        _RENTED["ids"] = WantedIds(FILLERS | set(WANTED))
    return _RENTED["ids"]


def test_given_more_ids_than_compiled_at_once_when_the_split_has_cost_the_purge_the_compile_then_it_is_compiled():
    data = b"\n".join(HARD_LINES) + b"\n"
    wanted = WantedIds(FILLERS | {"u0000042"})
    candidates_ = IdCandidates.of((("user_id",),))
    assert candidates_ is not None
    candidates_.found(data)  # (Arrow imported and its pattern compiled first: a split's own cost is what is paid)
    compiled = mock.patch.object(candidates._Automaton, "of", wraps=candidates._Automaton.of)
    with compiled as compile_calls:
        assert checked(data, ("user_id",), wanted) == [42]  # by the split, which pays part of the compile
        assert compile_calls.call_count == 0
        assert not candidates_.holds_none_of(data, wanted)  # (the split has not paid it all: no automaton yet)
        candidates_.split_paid(wanted, candidates.COMPILE_NS_AN_ID * len(wanted))
        assert checked(data, ("user_id",), wanted) == [42]  # the automaton finds u0000042, the split reads it
        assert compile_calls.call_count == 1
        clean = b"\n".join(line for line in HARD_LINES if b'"u0000042"' not in line) + b"\n"
        assert candidates_.holds_none_of(clean, wanted)  # cleared by the automaton alone
        assert checked(clean, ("user_id",), wanted) == []
        candidates_.split_paid(wanted, 10**12)  # the split's cost is no more counted once compiled
        assert compile_calls.call_count == 1


@pytest.mark.parametrize(("expected", "compiled_at_once"), [(0, False), (1, False), (10**6, True)])
def test_given_the_objects_a_purge_will_check_when_they_pay_for_the_automaton_then_it_is_compiled_before_the_first(
    expected, compiled_at_once
) -> None:
    # A task tells its users how many objects it will check (HashedUsers.expect): many objects of this size save more
    # than the compile of KNOWN_IDS_MAX + 1 ids, so the first object is searched by the automaton; one object does
    # not, and without a word (0) the split answers until it has paid for the compile, as before.
    data = b"\n".join(line for line in HARD_LINES if b'"u0000042"' not in line) + b"\n"
    ids = FILLERS | {"u0000042"}
    users = HashedUsers(map(HASHER, ids), HASHER, known=ids)
    users.expect(expected)
    held = users.ids_held()
    candidates_ = IdCandidates.of((("user_id",),))
    assert held is not None and candidates_ is not None
    compiled = mock.patch.object(candidates._Automaton, "of", wraps=candidates._Automaton.of)
    with compiled as compile_calls:
        assert candidates_.holds_none_of(data, held) is compiled_at_once  # the first object: cleared by it alone
        assert compile_calls.call_count == int(compiled_at_once)
        assert checked(data, ("user_id",), users) == []
        assert checked(data.replace(b'"u0000041"', b'"u0000042"'), ("user_id",), users) == [41]


@settings(max_examples=30, deadline=None)
@given(lake=lakes())
def test_given_lines_of_any_writer_when_an_automaton_of_more_than_compiled_at_once_clears_them_then_the_indexer_does(
    lake,
) -> None:
    # An automaton of KNOWN_IDS_MAX + 510 ids (compiled once the split paid for it) clears a stretch only when the
    # indexer's reader finds none of them in it, whatever the writer's escapes, spacing, nesting, arrays, integers,
    # and exactly when the automaton of the ids the lines may hold (WANTED: no line holds a filler) clears it.
    data, fields, candidates_ = _read_for_ids(lake)
    many = _rented()
    candidates_.split_paid(many, candidates.COMPILE_NS_AN_ID * len(many))

    clear = candidates_.holds_none_of(data, many)

    assert many.automaton(candidates_._keys) is not None
    expected = read_by_the_indexer(data, fields, set(WANTED))
    assert clear is (expected == [] and candidates_.holds_none_of(data, WantedIds(WANTED)))
    assert checked(data, fields, many) == expected


@pytest.mark.parametrize(("wanted", "expected"), [({"u0000200", "r5"}, []), ({"u0000200", "u0000042"}, [42])])
def test_given_an_object_too_big_to_hold_when_searched_by_the_ids_then_each_chunk_is_answered_as_the_whole_is(
    wanted, expected
) -> None:
    data = b"\n".join(HARD_LINES) + b"\n"
    with mock.patch.object(search, "IN_MEMORY_BYTES", 1000), mock.patch.object(lines, "CHUNK_BYTES", 4096):
        assert checked(data, ("user_id",), frozenset(wanted)) == expected
        assert checked(data, ("user_id",), HashedUsers(HASHER.many(wanted), HASHER, known=wanted)) == expected


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        ids | st.text(min_size=60, max_size=70) | st.text("abc\u00e9", min_size=60, max_size=70), max_size=8
    ),
    style=st.sampled_from(STYLES),
    separators=st.sampled_from(SEPARATORS),
)
def test_given_lines_whose_every_id_is_a_string_spaced_one_way_when_found_in_bulk_then_each_is_among_them(
    values, style, separators
) -> None:
    # The lake's common shape (one writer, string ids), which is read by a slice and a split at the quote instead
    # of a pattern per piece: long strings, escapes and quotes inside them, keys spelled with escapes.
    data = b"\n".join(spelled([("user_id", value), ("n", 1)], style, separators).encode() for value in values)
    read = {
        user for item in read_records(io.BytesIO(data), "x.jsonl", "jsonl", ("user_id",), MAX) for user in _ids(item)
    }

    found = IdCandidates.of((("user_id",),)).found(data)  # type: ignore[union-attr]

    assert found is not None
    assert read <= {value.decode("utf-8", "replace") for value in found.plain.to_pylist()} | set(found.decoded)


def _many_objects() -> tuple[list[bytes], set[str]]:
    """24 stretches of json.dumps lines with escapes in every text; five hold a wanted user (one spelled with an
    escape, which only the general read can tell), the others none."""
    wanted = {f"u{k * 50 + 3:07d}" for k in range(24)} | {"u9999999", "alice"}
    objects = []
    for k in range(24):
        users = [f"u{k * 50 + n:07d}" for n in range(50)]
        lines = [
            json.dumps({"user_id": user, "body": 'caf\u00e9 "q"\n\t\\'})
            for user in users
            if k % 6 == 0 or user not in wanted
        ]
        if k == 7:
            lines.append('{"user_id": "u\\u0030000353"}')  # u0000353
        objects.append(("\n".join(lines) + "\n").encode())
    return objects, wanted


def _found_spy(objects: list[bytes], asked: set[int]) -> Any:
    """IdCandidates.found as it is, noting which object each stretch it is asked about is part of."""

    def found(self: IdCandidates, data: bytes) -> Any:
        asked.update(n for n, whole in enumerate(objects) if data.strip() in whole)
        return original(self, data)

    original = IdCandidates.found
    return mock.patch.object(IdCandidates, "found", autospec=True, side_effect=found)


def test_given_many_threads_of_a_purge_when_searched_by_the_ids_then_one_automaton_answers_as_the_indexer() -> None:
    objects, wanted = _many_objects()
    expected = [read_by_the_indexer(data, ("user_id",), wanted) for data in objects]
    holding = {n for n, lines in enumerate(expected) if lines}
    assert holding == {0, 6, 7, 12, 18}
    users = HashedUsers(HASHER.many(wanted), HASHER, known=wanted)
    start = threading.Barrier(4)

    def check(data: bytes) -> list[int]:
        start.wait()  # the four threads ask at once, the first time while the automaton compiles
        return checked(data, ("user_id",), users)

    asked: set[int] = set()
    compiled = mock.patch.object(candidates._Automaton, "of", wraps=candidates._Automaton.of)
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns within the compile too
    try:
        with compiled as compile_calls, _found_spy(objects, asked), ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(check, objects * 4))
    finally:
        sys.setswitchinterval(switching)

    assert answers == expected * 4
    assert compile_calls.call_count == 1  # compiled once for the purge, by whichever thread asked first
    assert asked == holding  # the automaton cleared every other object, from whichever thread


def test_given_a_purge_holding_the_ids_when_it_is_dropped_then_its_compiled_automaton_goes_with_it() -> None:
    cached = re2._Regexp._make.cache_info().currsize  # google-re2's module-level cache of compiled patterns
    objects, wanted = _many_objects()
    users = HashedUsers(HASHER.many(wanted), HASHER, known=wanted)
    assert checked(objects[1], ("user_id",), users) == []
    held = users.ids_held()
    assert held is not None and repr(held) == f"WantedIds({len(wanted)} ids)"
    keys = IdCandidates.of((("user_id",),))._keys  # type: ignore[union-attr]
    automaton = weakref.ref(held.automaton(keys))  # type: ignore[arg-type]
    assert automaton() is not None

    del users, held
    gc.collect()

    assert automaton() is None
    assert re2._Regexp._make.cache_info().currsize == cached  # nothing of the ids kept there either


@pytest.mark.parametrize("max_mem", [1 << 10, 32 << 10], ids=["refused: too large", "its DFA out of memory"])
def test_given_an_automaton_re2_refuses_or_cannot_run_when_searched_then_nothing_of_the_ids_is_printed_or_logged(
    max_mem, capfd, caplog
) -> None:
    # A short field name: RE2 would print the pattern's start, the ids in it, on the standard error.
    wanted = {"alice@example.com", "bob@example.com", *(f"u{n:07d}" for n in range(0, 2000, 7))}
    data = b"\n".join(b'{"id": "u%07d", "body": "x"}' % n for n in range(1, 2000, 7)) + b'\n{"id": "bob@example.com"}\n'
    with caplog.at_level(logging.DEBUG), mock.patch.object(candidates, "KNOWN_MAX_MEM", max_mem):
        assert checked(data, ("id",), frozenset(wanted)) == [286]
        assert checked(data, ("id",), HashedUsers(HASHER.many(wanted), HASHER, known=wanted)) == [286]
    printed = capfd.readouterr()
    assert printed.err == "" and printed.out == ""
    assert "example.com" not in caplog.text and "u0000007" not in caplog.text


def test_given_an_automaton_slower_than_the_split_when_searched_then_it_turns_itself_off_for_the_purge() -> None:
    objects, wanted = _many_objects()
    users = HashedUsers(HASHER.many(wanted), HASHER, known=wanted)
    asked: set[int] = set()
    with mock.patch.multiple(candidates, KNOWN_SLOW_NS_A_BYTE=0, KNOWN_TIMED_FROM=0), _found_spy(objects, asked):
        answers = [checked(data, ("user_id",), users) for data in objects]

    assert answers == [read_by_the_indexer(data, ("user_id",), wanted) for data in objects]
    assert asked == set(range(len(objects)))  # the first search was too slow: the split answered every object


def _pattern_escaping_each_id(keys: str, ids: frozenset[str]) -> str | None:
    """The automaton's pattern as built before one check for all ids: every id escaped by its own substitution, every
    id tried as an integer (the oracle the faster builder must match byte for byte)."""
    try:
        strings = "|".join(candidates._NOT_LITERAL.sub(lambda m: f"\\x{ord(m.group()):02x}", u) for u in sorted(ids))
        strings.encode()
    except UnicodeEncodeError:
        return None
    integers = [u for u in ids if re.fullmatch(r"-?(?:0|[1-9][0-9]*)", u)] + (["-0"] if "0" in ids else [])
    values = [f'"(?:{strings})"', candidates._ANY_ESCAPED_OR_ARRAY]
    values += ["(?:" + "|".join(integers) + ")(?:[^0-9]|$)"] if integers else []
    return keys + r"[ \t\r]*:[ \t\r]*(?:" + "|".join(values) + ")"


pattern_ids = st.one_of(
    st.text(st.sampled_from("abcXYZ019"), max_size=8),  # most lakes' ids: nothing to escape
    st.text(st.sampled_from("ab09-.|()[]*+?^$\\{}\"' \t/:@`~_é東👍"), max_size=6),
    st.sampled_from(["", "0", "-0", "-5", "007", "12", "-", "a\ud800", "user_id", "²"]),
    st.text(max_size=4),
)


@settings(max_examples=150, deadline=None)
@given(st.frozensets(pattern_ids, max_size=40), st.sampled_from(['"user_id"', '"(?:user_id|uid)"']))
def test_given_any_ids_when_their_automatons_pattern_is_built_then_it_is_the_pattern_of_each_id_escaped_alone(
    wanted, keys
) -> None:
    expected = _pattern_escaping_each_id(keys, wanted)
    assert candidates._known_pattern(keys, wanted) == expected
    # (the ids already sorted by their holder, HashedUsers: not sorted again, the same pattern)
    assert candidates._known_pattern(keys, wanted, sorted(wanted)) == expected
