"""Per-field identifier kinds, transforms and composite kinds (issue 31, docs/design/PERSON.md section 2).

A dataset of files may say that every id field holds one kind (``id_kind = "email"``: Settings types each of its
fields so, core.config_identity.check_typed_datasets), or, per id field, which kind it holds (``id_kinds = {
"buyer.email" = "email", customer = "customer_id" }``), that a column holds a named transform of a kind
(``email_sha = "sha256_hex(email)"``), and that several columns together make one id of a composite kind
(``id_composites = { name_dob = {...} }``). Such a dataset's ids are index forms as they are read:
:meth:`IdTyping.record_ids` is called by ``extract_ids`` and ``csv_ids`` (every reader of ids goes through them), in
the one walk over the record, so the indexer, the purge's ownership check, verification and the export make the same
forms. A request's ``--id`` makes them with :func:`request_forms`, from the same definitions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakepurge.records.identifiers import KIND_MARKER, IdentifierKind, RequestIdError, kind_of, request_form
from lakepurge.records.ids import IdFieldError, IdRules, collect, id_problem, no_id_field

if TYPE_CHECKING:
    from lakepurge.records.identifiers import Normalisation

# The named transforms a column may hold a kind's normalised value through: lower-case hex of a digest of its UTF-8
# bytes. Few on purpose, each documented (docs/DATASETS.md); the name is part of the index form.
TRANSFORMS: dict[str, Callable[[bytes], str]] = {
    "sha256_hex": lambda data: hashlib.sha256(data).hexdigest(),
    "md5_hex": lambda data: hashlib.md5(data, usedforsecurity=False).hexdigest(),
}
_HEX_DIGITS = {"sha256_hex": 64, "md5_hex": 32}
_HEX = re.compile(r"[0-9a-f]+")
# An id_kinds value: a kind ("email") or a transform of one ("sha256_hex(email)").
KIND_SPEC = re.compile(r"^(?:(?P<transform>[a-z0-9_]+)\((?P<of>[a-z][a-z0-9_]*)\)|(?P<kind>[a-z][a-z0-9_]*))$")


def parse_spec(spec: str) -> tuple[str, str | None]:
    """An id_kinds value as (kind, transform or None); ValueError naming what is wrong (not the config key: the
    caller names it)."""
    match = KIND_SPEC.fullmatch(spec)
    if match is None:
        raise ValueError(f"'{spec}' is neither a kind nor TRANSFORM(kind)")
    if match["kind"] is not None:
        return match["kind"], None
    if match["transform"] not in TRANSFORMS:
        raise ValueError(f"'{spec}': unknown transform '{match['transform']}' (known: {', '.join(TRANSFORMS)})")
    return match["of"], match["transform"]


@dataclass(frozen=True, slots=True)
class FieldKind:
    """What one id field holds: a kind's values, or a transform of them."""

    kind: IdentifierKind
    transform: str | None = None

    def form(self, value: str, what: str) -> str:
        if self.transform is None:
            return self.kind.index_form(value, what)
        digest = value.lower()
        if len(digest) != _HEX_DIGITS[self.transform] or not _HEX.fullmatch(digest):
            raise IdFieldError(f"{what} holds no {self.transform} of {self.kind.name} (lower- or upper-case hex)")
        return transformed_form(self.kind, self.transform, digest)

    def forms(self, values: list[str], what: str) -> list[str] | None:
        """The index forms of many values (a chunk's, one a line), each distinct value made once; None when any has
        none (the chunk is then read line by line, which says which line and why)."""
        made = {}
        try:
            for value in set(values):
                made[value] = self.form(value, what)
        except IdFieldError:
            return None
        return [made[value] for value in values]


def transformed_form(kind: IdentifierKind, transform: str, digest: str) -> str:
    """The index form of a transform's hex digest of a kind's value: marker, kind, marker, transform, marker, hex."""
    return f"{kind.prefix}{transform}{KIND_MARKER}{digest}"


@dataclass(frozen=True, slots=True)
class CompositeKind:
    """A kind made of several named parts ([identifiers.NAME] parts = {...}), each normalised as it says; an id of it
    is all its parts, in the kind's order."""

    name: str
    parts: tuple[tuple[str, tuple[Normalisation, ...]], ...]

    @property
    def part_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.parts)

    def form(self, values: Sequence[str], what: str) -> str:
        """The index form: the kind's marker, then the JSON array of the normalised parts in the kind's order
        (compact, non-ASCII kept as it is). Raises IdFieldError when a part normalises to nothing."""
        normalised = []
        for (part, steps), value in zip(self.parts, values, strict=True):
            text = IdentifierKind(self.name, steps).normalised(value)
            if not text:
                raise IdFieldError(f"{what}: part '{part}' holds no value after normalisation")
            normalised.append(text)
        form = IdentifierKind(self.name).prefix + json.dumps(normalised, ensure_ascii=False, separators=(",", ":"))
        problem = id_problem(form, what)
        if problem is not None:
            raise IdFieldError(problem)
        return form


Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IdTyping:
    """A dataset's typed fields and composites, as its readers turn a record into index forms."""

    fields: tuple[tuple[Path, FieldKind], ...] = ()
    composites: tuple[tuple[CompositeKind, tuple[Path, ...]], ...] = ()

    def single_field(self) -> FieldKind | None:
        """The kind of the dataset's one top-level id field, when that is all it has (the indexer's bulk path reads
        such a chunk's values at once, then makes their forms)."""
        if len(self.fields) == 1 and not self.composites and len(self.fields[0][0]) == 1:
            return self.fields[0][1]
        return None

    def record_ids(self, record: Mapping[str, Any], rules: IdRules) -> tuple[str, ...]:
        """The index forms of every id the record holds: each typed field's values in its kind (or transform), each
        composite whose parts are all present. Raises IdFieldError when a value has no index form or the record
        holds no id at all (it is unindexable, as an untyped record without its id field is)."""
        found: list[str] = []
        for path, field_kind in self.fields:
            field = ".".join(path)
            values: list[str] = []
            collect(record, path, field, values, _numbers(rules, field_kind.kind.numbers))
            found.extend(field_kind.form(value, f"id field '{field}'") for value in values)
        for composite, paths in self.composites:
            parts = []
            for (part, steps), path in zip(composite.parts, paths, strict=True):
                values = []
                collect(record, path, ".".join(path), values, _numbers(rules, "number" in steps))
                if len(set(values)) > 1:
                    raise IdFieldError(
                        f"{composite.name} part '{part}' (field '{'.'.join(path)}') holds several values"
                    )
                if not values:
                    break  # a part missing: the record does not hold this kind
                parts.append(values[0])
            else:
                found.append(composite.form(parts, f"the {composite.name} of fields {_names(paths)}"))
        if not found and not self.composites:  # none of the fields present: said as of an untyped record
            raise IdFieldError(no_id_field([path for path, _ in self.fields]))
        if not found:
            held = [f"id field(s) {_names(path for path, _ in self.fields)} missing"] if self.fields else []
            held += [f"{', '.join(c.name for c, _ in self.composites)} incomplete"] if self.composites else []
            raise IdFieldError(f"no id: {'; '.join(held)}")
        return tuple(dict.fromkeys(found))


def _numbers(rules: IdRules, numbers: bool) -> IdRules:
    """The rules for one field: floats and decimals are ids where its kind (its part) is normalised as `number`."""
    return rules if rules.numbers == numbers else rules._replace(numbers=numbers)


def _names(paths: Iterable[Path]) -> str:
    return ", ".join(repr(".".join(path)) for path in paths)


def composite_request(kind: CompositeKind, text: str) -> str:
    """The index form of a request's composite id, a JSON object of the kind's parts
    (``name_dob={"first_name": "Alice", ...}``). The errors name the kind and parts, never a value."""
    try:
        parts = json.loads(text)
    except ValueError:
        raise RequestIdError(f"a {kind.name} id is a JSON object of its parts ({', '.join(kind.part_names)})") from None
    if not isinstance(parts, dict) or set(parts) != set(kind.part_names):
        raise RequestIdError(f"a {kind.name} id names exactly its parts: {', '.join(kind.part_names)}")
    values = [parts[name] for name in kind.part_names]
    if not all(isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
        raise RequestIdError(f"the parts of a {kind.name} id are strings or integers")
    try:
        return kind.form([str(v) for v in values], f"the {kind.name} given")
    except IdFieldError as exc:
        raise RequestIdError(str(exc)) from None


def request_forms(
    text: str,
    kinds: Mapping[str, IdentifierKind],
    composites: Mapping[str, CompositeKind],
    transforms: Mapping[str, Iterable[str]],
) -> list[str]:
    """Every index form a request's ``KIND=VALUE`` is found under: the kind's own, one per transform a configured
    dataset holds the kind through (`transforms`: kind -> transform names), or a composite kind's."""
    name, equals, value = text.partition("=")
    if equals and name in composites:
        return [composite_request(composites[name], value)]
    form = request_form(text, kinds)
    return [form, *digest_forms(form, kinds, transforms)]


def digest_forms(form: str, kinds: Mapping[str, IdentifierKind], transforms: Mapping[str, Iterable[str]]) -> list[str]:
    """The forms of an index form of a kind under each transform a configured dataset holds that kind through
    (`transforms`: kind -> transform names): how a hashed column holds that identifier, whether a request named it or
    a link found it. None for a composite's or a transform's own form."""
    name = kind_of(form)
    kind = kinds.get(name) if name is not None else None
    if kind is None or not transforms.get(kind.name):
        return []
    normalised = form[len(kind.prefix) :]
    if KIND_MARKER in normalised:  # already a transform's (a record or a request cannot give a value holding U+001F)
        return []
    data = normalised.encode("utf-8")
    return [transformed_form(kind, t, TRANSFORMS[t](data)) for t in sorted(transforms[kind.name])]
