"""Every user id a stretch of JSON Lines could hold, found in bulk: the check before a purge writes an object reads
its bytes this way, at about the speed of a scan, and parses lines one by one only where this cannot answer.

What is found is a superset of the ids the indexer's reader (records.ids) gives the stretch's lines, whatever the
writer's spacing, escapes, nesting or arrays, so "none of them is wanted" proves that no line holds a wanted user:

- The id fields' names are plain ASCII (ids.PLAIN_FIELD). A line writes such a key as the token `"name"`, each
  character of the name as itself or as its `\\u00XX` escape (no other JSON escape gives a letter, digit, `_`, `.` or
  `-`). One regular expression matches every such spelling of every name, so the object is read once, escapes or
  not (one that holds no backslash at all is split at the plain token, which is faster).
- A JSON string cannot hold a bare `"`, so in a valid line every occurrence of a spelling is a key or a string value
  (the whole of it). The stretch is split at every occurrence (of the last name of each field's path: a nested
  field's key, at any depth, or a top-level one) and the start of each piece matched: a key's value, after `:` and
  any blanks, is a string, an integer, an array or something that is no id (an object, whose keys are pieces of
  their own, `null`, `true`, a fraction); a piece that ends after the `:` is a key whose value is a name itself.
  A string value (the piece does not start with `:`) names nobody.
- Strings without a backslash are taken as they are (their bytes are the id's UTF-8); integers as Python writes
  them (`-0` is 0, as the reader reads it); strings with escapes and arrays are decoded in Python, each once. An
  array that does not decode on its own is not answered here.
- Every value of a key a line writes twice is found (each occurrence is a piece), as parse_record keeps them all;
  values the reader would refuse (an empty string, a line that is not JSON) only add candidates.

The splits and matches run in Arrow's kernels (lakepurge.records.arrow_scan), outside the interpreter lock.

A process that holds the wanted users' raw ids (an inline purge) can answer with fewer steps (holds_none_of): one
regular expression over the whole stretch, made of the wanted ids themselves, matches every place where a key of an
id field (any spelling) is followed by a value that is, or could be, one of them. Its values are as above: a string
without a backslash is the id's UTF-8 between quotes, so it is matched by the ids as literals; an integer is matched
by the ids that are integers as JSON writes them (`-0` for 0 too); a string holding a backslash (an escape could
spell any id) and an array are matched whatever they hold. No match proves that no line holds a wanted user; a match
only means the stretch is read the general way. RE2 runs the pattern as one automaton over the bytes: no split, no
value taken out, nothing looked up. The automaton is compiled once for the purge (WantedIds, which holds the ids and
lives as long as they do) and shared by its threads.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lakepurge.records import re2_bytes
from lakepurge.records.arrow_scan import arrow, pieces_after, whole
from lakepurge.records.ids import PLAIN_FIELD, key_spellings

# After the key: `:`, blanks, then the start of its value: a string (up to its first quote or the line's end: a
# string with an escaped quote holds a backslash and is decoded in Python), an integer, or an array's bracket. A
# piece that does not match is a string value, or a key whose value is no id, or (_BARE) a key whose value is the
# token itself (`"user_id":"user_id"`: the next piece starts there). Binary is read as Latin-1 by RE2.
_VALUE = r'^[ \t\r]*:[ \t\r]*(?:"(?P<string>[^"\n]*)|(?P<integer>-?[0-9]+)|(?P<array>\[))'
_BARE = r"^[ \t\r]*:[ \t\r]*$"
_DECODER = json.JSONDecoder()
_BRACKET = b"["
# holds_none_of's automaton is made of at most KNOWN_IDS_MAX ids of KNOWN_ID_CHARS characters in all, compiled when a
# stretch first asks. It is compiled once a purge (2,000 ids of 8 characters: 1.7 ms; 5,000: 3.4; 20,000: 12) and its
# DFA builds a state the first time the bytes reach it, so it warms over the objects: on 3 MB objects of the hard lake,
# of ids close to the wanted ones, 1.5 -> 0.6 ms over 12 objects at 2,000 ids, 1.9 -> 0.8 at 5,000, 2.3 -> 1.4 at
# 10,000 (2,000 e-mail addresses, 62,000 characters: 1.6 -> 0.75), where the split, its values and their lookup take
# ~1.6 ms. (The count is asked first: summing 20,000 ids' lengths took 1 ms.)
KNOWN_IDS_MAX = 10_000
KNOWN_ID_CHARS = 64_000
# More ids (up to RENTED_IDS_MAX of RENTED_ID_CHARS characters) are worth an automaton only over many objects: at
# 20,000 ids it took 18-24 ms to build (the pattern 6.5, RE2 12-18) and searched 3 MB objects in 1.5 -> 0.8 ms over
# 40 objects (0.9 on average, the same at a max_mem of 64, 256 or 1,024 MiB; 50,000 ids: 41 ms, 1.2 -> 0.7; 100,000:
# 68 ms, 0.34), against ~1.6 by the split: over the 10 objects of a quick bench it cost 1.6-1.9x the splice against
# 0.9-1.0x. So the split answers first, and the automaton is compiled once the split has cost this purge's threads
# as much CPU as the compile is expected to (COMPILE_NS_AN_ID a wanted id): a purge of a few objects pays at most
# what the split costs, a long one (an inline purge of 10% of a lake's users touches most of its objects) about the
# automaton's cost. ("the same" above: the DFA's states of these ids fit in 64 MiB.)
# A purge that knows how many objects it will check (WantedIds.expect: a task's targets) compiles it at once, before
# the first object, when the automaton will save more than its compile over them: the split's cost less the
# automaton's, SAVED_NS_A_MB a MiB of the first stretch asking (20,000 ids, 3 MB objects of the hard lake: 1.4-1.9 ms
# by the split, 0.8-0.95 by the automaton once warm), times the objects not yet checked.
RENTED_IDS_MAX = 200_000
RENTED_ID_CHARS = 4_000_000
COMPILE_NS_AN_ID = 1_000
SAVED_NS_A_MB = 250_000
# RE2's memory for the compiled program and its DFA's states (built as the bytes reach them, so only what a purge
# needs is taken; freed with the WantedIds). A DFA that runs out falls back to the NFA, ~100 times slower: the
# sorted alternation of 20,000 8-character ids needed more than 32 MiB to stay in the DFA, 2,000 e-mail addresses
# more than 8. Past this bound, or if the DFA is slow for any other reason, a search costs more than
# KNOWN_SLOW_NS_A_BYTE of this thread's CPU: the automaton is then turned off for the rest of the purge (the split
# answers, as past KNOWN_IDS_MAX). A DFA warming up costs ~1 ns a byte, the split ~0.5.
KNOWN_MAX_MEM = 64 << 20
KNOWN_SLOW_NS_A_BYTE = 4
KNOWN_TIMED_FROM = 256 << 10  # bytes: a shorter search is too quick to time
# What follows a key's `:` that could be a wanted id whatever the ids are: a string holding a backslash before its
# end (an escape, or an escaped quote), or an array. (Binary is read as Latin-1 by RE2: `[^"\n]` is any other byte.)
_ANY_ESCAPED_OR_ARRAY = r'"[^"\n]*\\|\['
# The keys of the automaton of the wanted ids on their own, anywhere (WantedIds.automaton(CSV_VALUES)): what a CSV
# object's bytes must hold, once every '"' is taken out of them, for a field to be one of the ids (search.py,
# _csv_values_hold_none_of). None for ids holding a '"', '\r' or '\n', whose bytes a field may not hold as they are.
CSV_VALUES = ""
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class Candidates:
    """The ids a stretch could hold: `plain`, an Arrow array of UTF-8 bytes (an empty one is no id), and `decoded`,
    the ids read from escaped strings and arrays."""

    plain: Any
    decoded: list[str]


class IdCandidates:
    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._tokens = tuple(json.dumps(name) for name in names)
        # One pattern for every spelling of all the names: the object is read once, whatever its escapes.
        self._keys = key_spellings(names)

    def holds_none_of(self, data: bytes, known: WantedIds) -> bool:
        """True when no line of the stretch can hold any of the wanted ids (raw ids: the caller holds them), by one
        automaton over the bytes (module docstring); False when that cannot be told so: some key's value is one of
        them, or holds an escape or an array, or there is no automaton for these ids (too many, not yet worth its
        compile, or turned off for being slow: then use found, and tell split_paid what it cost)."""
        automaton = known.automaton(self._keys, len(data))
        return automaton is not None and automaton.matches(data) is False

    def split_paid(self, known: WantedIds, thread_ns: int) -> None:
        """What found's split cost this thread (CPU) in place of the automaton of these ids: their compile waits
        for it (WantedIds.automaton)."""
        known.rent(self._keys, thread_ns)

    @classmethod
    @functools.cache
    def of(cls, paths: tuple[tuple[str, ...], ...]) -> IdCandidates | None:
        """For a dataset's id field paths, or None when a name is not plain (then every line is parsed). Made once
        for each (the check asks it for every object: its pattern took ~40 us to build)."""
        # Only the last names are looked for: a key on the way to them, however spelled, holds them as keys.
        names = tuple(sorted({path[-1] for path in paths}))
        if not names or not all(PLAIN_FIELD.fullmatch(name) for name in names):
            return None
        return cls(names)

    def found(self, data: bytes) -> Candidates | None:
        """The candidates of a stretch of lines (None when an array does not decode on its own: the stretch is then
        parsed line by line)."""
        pa, pc = arrow()
        if b"\\" not in data and len(self._tokens) == 1:  # memchr: without escapes a key is spelled one way
            pieces = pieces_after(data, self._tokens[0])
        else:
            pieces = pc.list_flatten(pc.split_pattern_regex(whole(data), self._keys)).slice(1)
        values = None
        strings = _uniform_strings(pieces)
        if strings is None:
            values = pc.extract_regex(pieces, _VALUE)
            strings = values.field("string")
        plain = [strings]
        decoded: list[str] = []
        escaped = pc.match_substring(strings, "\\")
        if pc.any(escaped).as_py():
            decoded += _strings(pieces.filter(escaped).to_pylist())
            plain = [strings.filter(pc.invert(escaped))]
        if values is None:  # every piece a key and a string: no other value
            return Candidates(plain[0], decoded)
        integers = values.field("integer")
        if pc.any(pc.greater(pc.binary_length(integers), 0)).as_py():
            plain.append(pc.replace_substring_regex(integers, "^-0$", "0"))  # -0 is read as 0
        unmatched = pieces.filter(pc.is_null(values))  # few: keys holding no id, a name as a string value
        if len(unmatched) and pc.any(pc.match_substring_regex(unmatched, _BARE)).as_py():
            decoded += self._names  # a key whose value is a name's token (which one is not known: each)
        arrays = pc.equal(values.field("array"), _BRACKET)
        if pc.any(arrays).as_py():
            read = _arrays(pieces.filter(arrays).to_pylist())
            if read is None:
                return None
            decoded += read
        # Not made unique here: a lookup of every value costs less than that, and hashing dedupes its own.
        found = plain[0] if len(plain) == 1 else pa.chunked_array(plain, pa.large_binary()).combine_chunks()
        return Candidates(pc.drop_null(found), decoded)


# _uniform_strings reads a string value within this many bytes after the key's `:` and quote (a longer one: _VALUE).
_STRING_WINDOW = 64
_KEY_TO_STRING = re.compile(rb'[ \t\r]*:[ \t\r]*"')


def _uniform_strings(pieces: Any) -> Any:
    """The pieces' string values, each up to its first quote as _VALUE's string group takes it, when every piece
    starts with the same spelling of a key's `:` and a string's opening quote (a writer spaces every key one way) and
    each string ends within _STRING_WINDOW bytes: a slice and a split at the quote, instead of a pattern matched per
    piece (0.2 against 0.44 ms for 5,000 pieces). None otherwise (a value of another kind, another spacing, a long
    string)."""
    _, pc = arrow()
    if not len(pieces):
        return None
    opening = _KEY_TO_STRING.match(pieces[0].as_py()[:16])
    if opening is None:
        return None
    prefix = opening.group()
    if not pc.all(pc.starts_with(pieces, prefix.decode())).as_py():
        return None
    window = pc.binary_slice(pieces, len(prefix), len(prefix) + _STRING_WINDOW)
    split = pc.split_pattern(window, '"', max_splits=1)
    if pc.min(pc.list_value_length(split)).as_py() < 2:  # a string not closed within the window
        return None
    # (a string not closed on its line runs into the next: its line is no JSON and names nobody, and the next line's
    # keys are pieces of their own)
    return pc.list_element(split, 0)


class WantedIds(Collection[str]):
    """The wanted users' raw ids as a process that holds them has them (an inline purge: HashedUsers.ids_held), with
    the automata holds_none_of searches for them, one for each set of id fields' names: each compiled once, when a
    stretch first asks, and shared by the purge's threads (RE2 matches from many threads at once). They live exactly
    as long as this object, which holds the ids anyway; nothing else keeps them. (A Spark worker keeps its users, and
    so this object, for one request at a time, lakepurge.core.executor_ids: the cost docs/LIMITS.md states.) ``repr``
    shows a count, never an id."""

    __slots__ = ("__weakref__", "_automata", "_expected", "_ids", "_lock", "_ordered", "_rent", "_split")

    def __init__(self, ids: Iterable[str], ordered: Sequence[str] | None = None) -> None:
        """ordered: the same ids sorted, when the caller has them so (an executor's, sealed sorted): the automata's
        pattern is then built without sorting them again."""
        self._ids = frozenset(ids)
        self._ordered = ordered if ordered is not None and len(ordered) == len(self._ids) else None
        self._automata: dict[str, _Automaton | None] = {}
        self._rent: dict[str, int] = {}  # the split's CPU (ns) so far, for each automaton not yet compiled
        self._split: dict[str, int] = {}  # the stretches the split answered, for each automaton not yet compiled
        self._expected = 0  # the objects the purge said it will check (expect)
        self._lock = threading.Lock()

    def __contains__(self, user: object) -> bool:
        return user in self._ids

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"WantedIds({len(self._ids)} ids)"

    def automaton(self, keys: str, size: int = 0) -> _Automaton | None:
        """The automaton of these ids after these keys (IdCandidates._keys), or None when there is none (yet: more
        than KNOWN_IDS_MAX ids are compiled once the split has paid for it, see rent, or at once when the objects
        expected will pay for it, see expect). size: the bytes of the stretch asking."""
        with self._lock:  # (the threads that ask while it compiles wait for it: it is compiled once)
            if keys not in self._automata:
                if len(self._ids) > KNOWN_IDS_MAX and not self._pays(keys, size):
                    return None
                self._automata[keys] = _Automaton.of(keys, self._ids, self._ordered)
            return self._automata[keys]

    def _pays(self, keys: str, size: int) -> bool:
        """Whether the automaton after these keys is worth its compile now: the split has already cost as much, or
        the objects expected and not yet checked (each taken as large as this stretch) will save more."""
        compile_ns = COMPILE_NS_AN_ID * len(self._ids)
        left = self._expected - self._split.get(keys, 0)
        return self._rent.get(keys, 0) >= compile_ns or left * size * SAVED_NS_A_MB >= compile_ns << 20

    def rent(self, keys: str, thread_ns: int) -> None:
        """Adds what a split cost in place of the automaton after these keys, while it is not compiled."""
        with self._lock:
            if keys not in self._automata:
                self._rent[keys] = self._rent.get(keys, 0) + thread_ns
                self._split[keys] = self._split.get(keys, 0) + 1

    def expect(self, objects: int) -> None:
        """Tells that this many more objects will be checked for these ids (a purge task's, which shares them with
        the tasks before it in its process): their automaton is then compiled when the first stretch asks, if it
        will save more than its compile over them; without it, once the split has cost as much."""
        with self._lock:
            self._expected += objects


class _Automaton:
    """One compiled RE2 automaton of holds_none_of, and whether it still pays (it is turned off when slow)."""

    __slots__ = ("__weakref__", "_compiled", "working")

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.working = True

    @classmethod
    def of(cls, keys: str, ids: frozenset[str], ordered: Sequence[str] | None = None) -> _Automaton | None:
        if not ids or len(ids) > RENTED_IDS_MAX:
            return None
        if sum(map(len, ids)) > (KNOWN_ID_CHARS if len(ids) <= KNOWN_IDS_MAX else RENTED_ID_CHARS):
            return None
        pattern = _known_pattern(keys, ids, ordered)
        if pattern is None:
            return None
        automaton = re2_bytes.compiled(pattern.encode(), KNOWN_MAX_MEM)  # None: too large a pattern for max_mem
        return None if automaton is None else cls(automaton)

    def matches(self, data: bytes) -> bool | None:
        """Whether the pattern matches somewhere in the stretch; None when the automaton is turned off (it turns
        itself off when a search costs more than KNOWN_SLOW_NS_A_BYTE of this thread's CPU)."""
        if not self.working:
            return None
        start = time.thread_time_ns()
        found = re2_bytes.found_in(self._compiled, data)
        if len(data) >= KNOWN_TIMED_FROM and time.thread_time_ns() - start > KNOWN_SLOW_NS_A_BYTE * len(data):
            self.working = False
        return found


def _known_pattern(keys: str, ids: Collection[str], ordered: Sequence[str] | None = None) -> str | None:
    """The pattern of holds_none_of's automaton for these keys and ids (ordered: the same ids, sorted); None when an
    id is no UTF-8 (a lone surrogate: no reader's id, and no pattern can hold it). The ids sorted: RE2 factors the
    common prefixes of neighbouring alternatives (20,000 ids: a program of 42,000 instructions instead of 128,000, and
    a DFA with fewer and smaller states)."""
    ordered = sorted(ids if ordered is None else ordered)  # (~0.1 ms at 20,000 ids already sorted, 2.8 ms if not)
    # Most lakes' ids hold no character to escape: one check of them all (2 ms less at 20,000 ids than a
    # substitution each). (Letters and digits, of any script, are never escaped.)
    every = "".join(ordered)
    plain = every.isalnum() or _NOT_LITERAL.search(every) is None
    strings = "|".join(ordered if plain else map(_literal, ordered))
    try:
        strings.encode()
    except UnicodeEncodeError:
        return None
    if keys == CSV_VALUES:
        return None if '"' in every or "\r" in every or "\n" in every else f"(?:{strings})"
    # An integer starts with `-` or a digit: none among the ids sorted between them, no id to read (in the set's
    # order, as always: the same pattern).
    digits = bisect.bisect_left(ordered, ":") > bisect.bisect_left(ordered, "-")
    integers = [user for user in ids if user.lstrip("-").isdigit() and _INTEGER.fullmatch(user)] if digits else []
    integers += ["-0"] if "0" in ids else []
    values = [f'"(?:{strings})"', _ANY_ESCAPED_OR_ARRAY]
    if integers:  # an integer ends where its digits do
        values.append("(?:" + "|".join(integers) + ")(?:[^0-9]|$)")
    return keys + r"[ \t\r]*:[ \t\r]*(?:" + "|".join(values) + ")"


# An ASCII character RE2 could read as syntax (any but a letter or digit): written as its \xHH escape.
_NOT_LITERAL = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]")


def _literal(user: str) -> str:
    """An id as RE2 reads it literally from binary data: each ASCII character that is not a letter or digit as its
    \\xHH escape; every other character as its UTF-8 bytes, which RE2 (reading binary as Latin-1) matches byte by
    byte."""
    return _NOT_LITERAL.sub(_hex_escape, user)


def _hex_escape(found: re.Match[str]) -> str:
    return f"\\x{ord(found.group()):02x}"


def _strings(pieces: list[bytes]) -> list[str]:
    """The strings at the start of these pieces (after the key's `:`), decoded as JSON; one that does not decode (the
    line is not JSON) names nobody."""
    found = []
    for piece in dict.fromkeys(pieces):
        try:
            found.append(_value_of(piece))
        except ValueError:
            continue
    return _ids(found)


def _arrays(pieces: list[bytes]) -> list[str] | None:
    """The strings and integers of the arrays at the start of these pieces; None when one does not decode on its own
    (it holds objects writing the same key, which split it, or is not JSON)."""
    found = []
    for piece in dict.fromkeys(pieces):
        try:
            value = _value_of(piece)
        except ValueError:
            return None
        found += value
    return _ids(found)


def _value_of(piece: bytes) -> Any:
    text = piece.decode("utf-8", "surrogateescape")
    start = text.index(":") + 1
    start += len(text[start:]) - len(text[start:].lstrip(" \t\r"))
    return _DECODER.raw_decode(text, start)[0]


def _ids(values: list[Any]) -> list[str]:
    """The values the reader could take as ids: strings (as UTF-8 can hold them: the reader refuses a lone surrogate
    or invalid UTF-8) and integers, as it writes them."""
    found = []
    for value in values:
        if type(value) is int:
            found.append(str(value))
        elif type(value) is str:
            try:
                value.encode()
            except UnicodeEncodeError:
                continue
            found.append(value)
    return found
