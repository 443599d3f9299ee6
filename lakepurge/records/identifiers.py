"""Identifier kinds: what the values of an id field are (an email, a customer id) and how they are normalised, so that
a record's id and a request's id meet in one string, the id's *index form* (docs/design/PERSON.md).

An untyped id (a dataset without ``id_kind``, a request's plain USER) is its own index form: nothing about it
changes. A typed one is U+001F, the kind's name, U+001F and the value normalised as its kind says; the index stores
that string where it stores an id, and its keyed hash is the keyed hash of (kind, id). The indexer and the request
side both make it with :meth:`IdentifierKind.index_form`, so the two cannot normalise differently.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, get_args

from lakepurge.records.ids import MAX_ID_BYTES, IdFieldError, id_problem

# Starts (and ends) a typed id's kind. A control character no kind name can hold: `kind` + marker + value is read
# back unambiguously, and an untyped id beginning with it is refused wherever kinds are configured.
KIND_MARKER = "\x1f"
KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")

Normalisation = Literal["trim", "casefold", "lower", "digits", "nfkc", "number"]

_ASCII_DIGITS = frozenset("0123456789")


def _digits(value: str) -> str:
    return "".join(c for c in value if c in _ASCII_DIGITS)


# A decimal number as a record or a request writes one: a sign, digits with an optional fraction, an optional
# exponent. Nothing else (no blanks, '_', ',', NaN or Infinity): Decimal() alone would take those.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# The furthest a number's digits may lie from its point: past it, its canonical form would be longer than any id.
_NUMBER_REACH = MAX_ID_BYTES


def _number(value: str) -> str:
    """The canonical decimal string of a number: no exponent, no trailing zeros, no '+' ("123.450" -> "123.45",
    "12345.0" and "1.2345e4" -> "12345", "-0" -> "0"); "" for anything that is no number (no id: the line is
    unindexable, a request refused)."""
    if len(value) > _NUMBER_REACH or not _NUMBER.fullmatch(value):
        return ""
    try:
        sign, digits, exponent = Decimal(value).as_tuple()
    except InvalidOperation:
        return ""
    assert isinstance(exponent, int)  # a finite number
    # Trailing zeros dropped by hand: Decimal.normalize() would round to the context's 28 digits (two long ids one).
    kept = len(digits)
    while kept > 1 and digits[kept - 1] == 0:
        kept -= 1
    exponent += len(digits) - kept
    digits = digits[:kept]
    if digits == (0,):
        return "0"
    if abs(exponent) > _NUMBER_REACH:
        return ""
    return format(Decimal((sign, digits, exponent)), "f")


# The named normalisations, applied in the order a kind lists them. Few on purpose: each is documented in
# docs/design/PERSON.md and its meaning never changes (a changed normalisation is a new index form for every id).
NORMALISATIONS: dict[Normalisation, Callable[[str], str]] = {
    "trim": str.strip,  # white space around the value (Unicode's, as str.strip)
    "casefold": str.casefold,  # Unicode case folding: "Straße" and "STRASSE" agree
    "lower": str.lower,
    "digits": _digits,  # only 0-9 kept: "+44 (0)20 7946-0000" -> "4402079460000"
    "nfkc": functools.partial(unicodedata.normalize, "NFKC"),
    # numbers by value: 12345, 12345.0 and 1.2345E+4 are one id; a Parquet decimal or float id is read as one
    "number": _number,
}
assert set(NORMALISATIONS) == set(get_args(Normalisation))


@dataclass(frozen=True, slots=True)
class IdentifierKind:
    """A kind of identifier ([identifiers.NAME]) and its normalisation, in order (none: exact)."""

    name: str
    normalise: tuple[Normalisation, ...] = ()

    def __post_init__(self) -> None:
        if not KIND_NAME.fullmatch(self.name):
            raise ValueError(f"identifier kind {self.name!r}: a name is lower-case letters, digits and '_'")
        unknown = [n for n in self.normalise if n not in NORMALISATIONS]
        if unknown:
            raise ValueError(f"identifier kind '{self.name}': unknown normalisation {', '.join(unknown)}")

    @property
    def numbers(self) -> bool:
        """Whether the kind's values are numbers: its fields' floats and decimals are ids (an untyped field's or
        another kind's are not: a float has no one spelling to match)."""
        return "number" in self.normalise

    @property
    def prefix(self) -> str:
        return f"{KIND_MARKER}{self.name}{KIND_MARKER}"

    def normalised(self, value: str) -> str:
        for step in self.normalise:
            value = NORMALISATIONS[step](value)
        return value

    def index_form(self, value: str, what: str = "id") -> str:
        """The index form of a value of this kind. Raises IdFieldError when the normalised value is no id (empty,
        too long, NUL); `what` names where the value came from, the message never quotes it."""
        normalised = self.normalised(value)
        if not normalised:
            raise IdFieldError(f"{what} holds no {self.name} after normalisation ({', '.join(self.normalise)})")
        form = self.prefix + normalised
        problem = id_problem(form, what)
        if problem is not None:
            raise IdFieldError(problem)
        return form


def id_forms(kind: IdentifierKind) -> str:
    """The fingerprint of the index forms a kind's ids are indexed in: the kind and its normalisations (a dataset's
    coverage records it, core.config_identity.dataset_id_forms). A dataset indexed in another is not covered until
    re-indexed."""
    return f"{kind.name}:{','.join(kind.normalise)}"


def kind_of(form: str) -> str | None:
    """The kind an index form is of, None for an untyped id."""
    if not form.startswith(KIND_MARKER):
        return None
    end = form.find(KIND_MARKER, 1)
    return form[1:end] if end > 1 and KIND_NAME.fullmatch(form[1:end]) else None


def shown(form: str) -> str:
    """An index form as the operator wrote it: KIND=VALUE (normalised) for a typed id, an untyped id as it is."""
    kind = kind_of(form)
    if kind is None:
        return form
    value = form[len(kind) + 2 :]
    transform, marker, digest = value.partition(KIND_MARKER)  # a transform's form (records.id_typing)
    return f"{transform}({kind})={digest}" if marker else f"{kind}={value}"


class RequestIdError(ValueError):
    pass


def typed_kinds(users: Iterable[str]) -> list[str]:
    """The kinds of the typed ids among a request's ids, sorted, each once (none: an untyped request)."""
    return sorted({kind for kind in map(kind_of, users) if kind is not None})


def request_form(text: str, kinds: Mapping[str, IdentifierKind]) -> str:
    """The index form of a request's typed id, ``KIND=VALUE`` (``--id email=alice@example.com``): normalised as the
    configuration says that kind is, exactly as the indexer normalises that kind's fields. The errors name the
    kind, never the value."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise RequestIdError("a typed id is KIND=VALUE (e.g. email=alice@example.com)")
    kind = kinds.get(name)
    if kind is None:
        known = ", ".join(sorted(kinds)) or "none: add an [identifiers.NAME] table"
        raise RequestIdError(f"identifier kind '{name}' is not configured (configured: {known})")
    try:
        return kind.index_form(value, f"the {name} given")
    except IdFieldError as exc:
        raise RequestIdError(str(exc)) from None


def without_marked_ids(
    lines_by_user: dict[str, list[int]], refuse_marked: bool, what: str
) -> tuple[dict[str, list[int]], dict[int, str]]:
    """An untyped object's rows (id -> lines, as its records name them), and the lines that are unindexable for it
    with why: kept as they are, but for ids beginning with the kind marker when `refuse_marked` (kinds are
    configured): such an id could read as a typed one, so its line is unindexable as a whole (its other ids are not
    indexed either). A typed dataset's ids are index forms as read (records.id_typing) and need no such step."""
    bad: dict[int, str] = {}
    if not refuse_marked or not any(user.startswith(KIND_MARKER) for user in lines_by_user):
        return lines_by_user, bad
    for user, lines in lines_by_user.items():
        if user.startswith(KIND_MARKER):
            bad.update(dict.fromkeys(lines, f"{what} begins with U+001F, the marker of identifier kinds"))
    kept: dict[str, list[int]] = {}
    for user, lines in lines_by_user.items():
        remaining = sorted({line for line in lines if line not in bad})
        if remaining and not user.startswith(KIND_MARKER):
            kept[user] = remaining
    return kept, bad
