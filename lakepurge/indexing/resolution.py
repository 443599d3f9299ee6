"""Resolution: a request's typed identifiers expanded to every identifier of the person (docs/design/PERSON.md, 4).

Two kinds of link are followed, step by step from the request's ids:

- **records**: a record holding two ids (an order with the buyer's email and customer id) is two index rows on one
  (object, line); the index answers which other ids sit beside known ones (``IndexStore.ids_beside``). No link is
  stored anywhere the index does not already hold it, and it goes when its record is erased.
- **link tables** (``[[identifier_links]]``, a CRM's customers): one SELECT per table and step for the rows holding any
  known value of its kinds; the values are normalised by their kind in memory only.

Guards (``[resolution]``): at most ``max_depth`` steps; an identifier linked to more than ``max_linked`` distinct ids
of one kind (a shared or test email) stops the request with ExpansionRefused naming the kind, the count and the
links, never followed silently; ``--no-expand KIND=VALUE`` names an identifier not to follow (erased only if the
request names it), which the report records. Untyped ids are never expanded: they keep today's meaning.

Everything here holds ids in memory only; what leaves (the report, logs, messages) has keyed hashes, kinds, counts and
link names.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakepurge.core.config_identity import held_transforms
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.records.id_typing import TRANSFORMS, digest_forms
from lakepurge.records.identifiers import KIND_MARKER, NORMALISATIONS, IdentifierKind, kind_of
from lakepurge.records.ids import IdFieldError

if TYPE_CHECKING:
    from lakepurge.core.config import Settings
    from lakepurge.core.config_identity import IdentifierLinkConfig
    from lakepurge.index.base import IndexStore

log = get_logger()

REQUEST = "request"  # the link an identifier the request names came by

# SQL for each named normalisation, applied to a link table's column so that its SELECT finds values stored
# unnormalised (' Alice@Example.COM'); rows found are normalised again exactly in Python before they count.
# casefold is approximated by lower() (they differ beyond ASCII, e.g. 'ß'); index the expression on a large table.
_SQL_NORMALISATION = {
    "trim": "btrim({})",
    "casefold": "lower({})",
    "lower": "lower({})",
    "digits": "regexp_replace({}, '[^0-9]', '', 'g')",
    "nfkc": "normalize({}, NFKC)",
    # a number's canonical decimal (trim_scale: no trailing zeros); what is no number there is no id (NULL). The
    # exponent is bounded so that no cell makes the cast fail: such a cell is no id in Python either.
    "number": "CASE WHEN {0} ~ '^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]{{1,4}})?$'"
    " THEN trim_scale({0}::numeric)::text END",
}
assert set(_SQL_NORMALISATION) == set(NORMALISATIONS)  # a kind's link table is read with every normalisation


class ExpansionRefused(Exception):
    """An identifier is linked to more distinct ids of one kind than [resolution] max_linked: a shared or test id
    would bring other people's records into the request. The message names kinds, counts, links and the identifier's
    keyed hash, never a value."""


@dataclass(frozen=True, slots=True)
class Identifier:
    """One identifier of the person: its index form (in memory only), the link it was found by and at which step."""

    form: str
    via: str  # REQUEST, "records of DATASET" or "link table NAME"
    depth: int  # 0: named by the request

    @property
    def kind(self) -> str:
        """Its kind as counted and certified: the kind, or the transform of it a dataset holds (sha256_hex(email)),
        so that her email and its digest, which the request names together, are not counted as two emails."""
        kind = kind_of(self.form)
        assert kind is not None
        transform, marker, _ = self.form[len(kind) + 2 :].partition(KIND_MARKER)
        return f"{transform}({kind})" if marker and transform in TRANSFORMS else kind


@dataclass(frozen=True)
class Expansion:
    """A request's ids and every identifier found through links."""

    untyped: tuple[str, ...]  # the request's untyped ids, never expanded
    identifiers: tuple[Identifier, ...]  # typed: the request's first, then by step
    not_expanded: tuple[str, ...] = ()  # forms named by --no-expand: not followed (kept only if the request names them)
    beyond_depth: int = 0  # identifiers linked to the last step's, not taken: the depth bound stopped there
    max_depth: int = 0
    max_linked: int = 0
    links: tuple[str, ...] = field(default=())  # the link tables read

    @property
    def forms(self) -> list[str]:
        """Every id the request erases: its untyped ids and every identifier of the expansion."""
        return [*self.untyped, *(identifier.form for identifier in self.identifiers)]

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for identifier in self.identifiers:
            counts[identifier.kind] += 1
        return dict(sorted(counts.items()))

    def by_link(self) -> dict[str, dict[str, int]]:
        """Per link (the request, a dataset's records, a link table): identifiers found per kind."""
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for identifier in self.identifiers:
            counts[identifier.via][identifier.kind] += 1
        return {via: dict(sorted(kinds.items())) for via, kinds in sorted(counts.items())}

    def counts(self) -> dict[str, Any]:
        """As the report's summary states a resolution (reports.report.identifiers_summary): counts only."""
        return {
            "kinds": self.kinds(),
            "links": self.by_link(),
            "not_expanded": len(self.not_expanded),
            "beyond_depth": self.beyond_depth,
            "max_depth": self.max_depth,
        }

    def to_report(self, pseudonymizer: Pseudonymizer) -> dict[str, Any]:
        """What the report keeps: keyed hashes with their kind and link (so the report's SHA-256 binds the expansion
        the approver approves), and the counts the approval page shows."""
        return {
            "kinds": self.kinds(),
            "links": self.by_link(),
            "found": [
                {"hash": pseudonymizer(i.form), "kind": i.kind, "via": i.via, "depth": i.depth}
                for i in self.identifiers
            ],
            "not_expanded": [{"hash": pseudonymizer(form), "kind": kind_of(form)} for form in self.not_expanded],
            "beyond_depth": self.beyond_depth,
            "max_depth": self.max_depth,
            "max_linked": self.max_linked,
        }


def expands(settings: Settings, users: Iterable[str]) -> bool:
    """Whether a request is resolved: kinds are configured and it names a typed id (an untyped request never is)."""
    return bool(settings.identifiers) and any(kind_of(user) is not None for user in users)


def resolve(
    store: IndexStore,
    settings: Settings,
    users: Sequence[str],
    no_expand: Sequence[str] = (),
    pseudonymizer: Pseudonymizer | None = None,
) -> Expansion:
    """Expand the request's typed ids through records and link tables (see the module docstring). `no_expand`: index
    forms not to follow. Raises ExpansionRefused (pseudonymizer: names the identifier by its keyed hash)."""
    resolution = settings.resolution
    kinds = settings.identifier_kinds
    skipped = set(no_expand)
    untyped = tuple(dict.fromkeys(user for user in users if kind_of(user) is None))
    known: dict[str, Identifier] = {}
    for user in dict.fromkeys(users):
        if kind_of(user) is not None:
            known[user] = Identifier(user, REQUEST, 0)
    frontier = [form for form in known if form not in skipped]
    transforms = held_transforms(settings.datasets)
    beyond = 0
    with _LinkTables() as tables:
        for depth in range(1, resolution.max_depth + 2):
            if not frontier:
                break
            linked = _linked(store, settings, kinds, frontier, tables)
            _guard(linked, known, resolution.max_linked, pseudonymizer)
            new: dict[str, Identifier] = {}
            for source in frontier:
                for other, via in sorted(linked.get(source, {}).items()):
                    # an email found by a link is looked for in the hashed columns too, as a request's email is
                    for each in (other, *digest_forms(other, kinds, transforms)):
                        if each not in known and each not in skipped and each not in new:
                            new[each] = Identifier(each, via, depth)
            if depth > resolution.max_depth:
                beyond = len(new)  # looked at only to check the guard and say what the bound left
                break
            known.update(new)
            frontier = list(new)
    expansion = Expansion(
        untyped=untyped,
        identifiers=tuple(known.values()),
        not_expanded=tuple(sorted(skipped)),
        beyond_depth=beyond,
        max_depth=resolution.max_depth,
        max_linked=resolution.max_linked,
        links=tuple(link.name for link in settings.identifier_links),
    )
    log.info(
        "request resolved",
        extra={"kinds": expansion.kinds(), "links": expansion.by_link(), "beyond_depth": beyond},
    )
    return expansion


class _LinkTables:
    """The link tables' connections of one resolution: each opened when first read, closed when it ends."""

    def __init__(self) -> None:
        self._connections: dict[str, Any] = {}

    def __enter__(self) -> _LinkTables:
        return self

    def __exit__(self, *_: object) -> None:
        for connection in self._connections.values():
            connection.close()

    def connection(self, link: IdentifierLinkConfig) -> Any:
        if link.name not in self._connections:
            import psycopg

            self._connections[link.name] = psycopg.connect(link_dsn(link), autocommit=True)
        return self._connections[link.name]


def _linked(
    store: IndexStore,
    settings: Settings,
    kinds: dict[str, IdentifierKind],
    frontier: Sequence[str],
    tables: _LinkTables,
) -> dict[str, dict[str, str]]:
    """Per frontier form: every typed id linked to it, with the (first, by name) link it came by."""
    linked: dict[str, dict[str, str]] = defaultdict(dict)
    for beside in store.ids_beside(frontier):
        if kind_of(beside.other) in settings.identifiers:  # composite kinds too: a name and birth date beside her email
            via = f"records of {beside.dataset}"
            held = linked[beside.form].get(beside.other)
            linked[beside.form][beside.other] = via if held is None else min(held, via)
    for link in settings.identifier_links:
        wanted = {kind: [f for f in frontier if kind_of(f) == kind] for kind in link.columns}
        if not any(wanted.values()):
            continue
        for row in _link_rows(link, kinds, wanted, tables.connection(link)):
            for source in row.intersection(frontier):
                for other in row - {source}:
                    linked[source].setdefault(other, f"link table {link.name}")
    return linked


def _guard(
    linked: dict[str, dict[str, str]], known: dict[str, Identifier], limit: int, pseudonymizer: Pseudonymizer | None
) -> None:
    """Refuse when a frontier identifier is linked to more than `limit` distinct ids of one kind."""
    for source, others in linked.items():
        by_kind: dict[str, set[str]] = defaultdict(set)
        vias: dict[str, set[str]] = defaultdict(set)
        for other, via in others.items():
            kind = kind_of(other)
            assert kind is not None
            by_kind[kind].add(other)
            vias[kind].add(via)
        for kind, others_of_kind in sorted(by_kind.items()):
            if len(others_of_kind) > limit:
                identifier = known.get(source)
                origin = (
                    "named in the request"
                    if identifier is None or identifier.depth == 0
                    else f"found through {identifier.via}"
                )
                hashed = f" (keyed hash {pseudonymizer(source)})" if pseudonymizer is not None else ""
                raise ExpansionRefused(
                    f"resolution refused: the {kind_of(source)} {origin}{hashed} is linked to {len(others_of_kind)}"
                    f" distinct {kind} through {', '.join(sorted(vias[kind]))}, more than [resolution] max_linked ="
                    f" {limit}: a shared or test identifier would bring other people's records in. Nothing was"
                    f" erased; name it with --no-expand {kind_of(source)}=VALUE to erase without following it"
                )


def link_dsn(link: IdentifierLinkConfig) -> str:
    """The link table's DSN: its dsn, or the DSN its secret holds (read at run time)."""
    if link.dsn_secret is not None:
        from lakepurge.index import secret_dsn

        return secret_dsn(link.dsn_secret)
    assert link.dsn is not None
    return link.dsn


def _link_rows(
    link: IdentifierLinkConfig, kinds: dict[str, IdentifierKind], wanted: dict[str, list[str]], conn: Any
) -> list[frozenset[str]]:
    """The link table's rows holding any wanted value (forms per kind), each as the set of its ids' index forms."""
    from psycopg import sql

    names = sorted(link.columns)
    conditions = []
    parameters = []
    for name in names:
        if wanted.get(name):
            column = sql.SQL("{}::text").format(sql.Identifier(link.columns[name]))
            for step in kinds[name].normalise:
                column = sql.SQL(_SQL_NORMALISATION[step]).format(column)
            conditions.append(sql.SQL("{} = ANY(%s)").format(column))
            parameters.append([form[len(kinds[name].prefix) :] for form in wanted[name]])
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(
        sql.SQL(", ").join(sql.Identifier(link.columns[name]) for name in names),
        sql.Identifier(*link.table.split(".")),
        sql.SQL(" OR ").join(conditions),
    )
    fetched = conn.execute(query, parameters).fetchall()
    rows = []
    for values in fetched:
        forms = set()
        for name, value in zip(names, values, strict=True):
            if value is None:
                continue
            try:
                forms.add(kinds[name].index_form(str(value), f"link table {link.name} column {link.columns[name]}"))
            except IdFieldError:
                continue  # an empty or malformed cell links nothing
        rows.append(frozenset(forms))
    return rows


def plan_lines(summary: dict[str, Any] | None) -> list[str]:
    """A resolution as the approver reads it (the report summary's "identifiers"): identifiers per kind and through
    which link, counts only (no value, no hash). None: the request was not resolved (no line)."""
    if not summary:
        return []
    kinds = summary["kinds"]
    counted = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    lines = [
        f"Identifiers of the person: {sum(kinds.values())} ({counted}), through links up to"
        f" {summary['max_depth']} step(s) from the request's:"
    ]
    for via, by_kind in sorted(summary["links"].items()):
        lines.append(f"  {via}: " + ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items())))
    if summary["not_expanded"]:
        lines.append(f"  not followed (--no-expand): {summary['not_expanded']} identifier(s)")
    if summary["beyond_depth"]:
        beyond = summary["beyond_depth"]
        lines.append(f"  the depth bound ([resolution] max_depth) left {beyond} further linked identifier(s) out")
    return lines


def certified(identifiers: dict[str, Any]) -> dict[str, Any] | None:
    """What a certificate states of a report's resolution: the identifiers erased per kind (keyed hashes), the links
    used with their counts, those not followed. None: the request was not resolved."""
    if not identifiers:
        return None
    erased: dict[str, list[str]] = defaultdict(list)
    for found in identifiers["found"]:
        erased[found["kind"]].append(found["hash"])
    return {
        "erased": {kind: sorted(hashes) for kind, hashes in sorted(erased.items())},
        "links": identifiers["links"],
        "not_expanded": identifiers["not_expanded"],
        "max_depth": identifiers["max_depth"],
        "beyond_depth": identifiers["beyond_depth"],
    }
