"""RE2 automata over bytes (google-re2), each compiled once by whoever keeps it: the check's automaton of the wanted
ids (records.candidates, for as long as its purge) and the search for an escaped key (records.ids, for the process).

Built from the binding's RE2 itself, not re2.compile, which keeps every pattern in a module-level cache (a pattern
made of raw ids would outlive the purge holding them). Bytes are read as Latin-1, each byte a character, so a UTF-8
sequence in a pattern matches the same bytes; RE2's printing of a pattern it refuses is off (it could quote ids)."""

from __future__ import annotations

from typing import Any

from re2 import _re2

_UNANCHORED = _re2.RE2.Anchor.UNANCHORED


def compiled(pattern: bytes, max_mem: int | None = None) -> Any | None:
    """The automaton of the pattern, or None when RE2 refuses it (its error is not read: it could quote the pattern);
    max_mem bounds the memory of its program and DFA states."""
    options = _re2.RE2.Options()
    options.encoding = _re2.RE2.Options.Encoding.LATIN1
    if max_mem is not None:
        options.max_mem = max_mem
    options.log_errors = False
    automaton = _re2.RE2(pattern, options)
    return automaton if automaton.ok() else None


def found_in(automaton: Any, data: bytes) -> bool:
    """Whether the automaton matches anywhere in data (the binding leaves the interpreter lock while it searches)."""
    return bool(automaton.Match(_UNANCHORED, data, 0, len(data))[0][0] != -1)
