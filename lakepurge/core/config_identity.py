"""The configuration of who a request names (issue 31, docs/design/PERSON.md): identifier kinds and their
normalisations, and the checks that tie datasets to them; the datasets a request may not erase ([[exemptions]]).
Kept apart from config.py, which holds the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, PrivateAttr, model_validator

from lakepurge.core.config_strict import Strict
from lakepurge.records.id_typing import CompositeKind, FieldKind, IdTyping, parse_spec, request_forms
from lakepurge.records.identifiers import IdentifierKind, Normalisation, id_forms
from lakepurge.records.ids import IdRules, parse_paths

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig

# The name of an identifier kind ([identifiers.NAME], a dataset's id_kind): it is part of every index form of the kind.
KindName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class IdentifierConfig(Strict):
    """A kind of identifier ([identifiers.NAME]: email, customer_id, ...) and how its values are normalised, in order,
    when a dataset's records are indexed and when a request names one (`--id NAME=VALUE`): trim, casefold, lower,
    digits, nfkc, number (docs/design/PERSON.md). None: exact. Changing it changes the index form of every id of the
    kind: its datasets are not covered (no request is certified) until `lakepurge index backfill --force` reads them
    again."""

    # how a value of the kind is normalised, in this order: trim, casefold, lower, digits (0-9 kept), nfkc, number
    # (a number by value: 12345.0 is 12345, 123.450 is 123.45); [] exact
    normalise: tuple[Normalisation, ...] = ()
    # a composite kind: its parts in order, each with its normalisation ({ first_name = ["trim", "casefold"],
    # birth_date = [] }); an id of it is every part, read from the columns a dataset's id_composites names
    parts: dict[KindName, tuple[Normalisation, ...]] | None = None

    @model_validator(mode="after")
    def _parts_or_normalise(self) -> IdentifierConfig:
        if self.parts is not None and (not self.parts or self.normalise):
            raise ValueError("parts: a composite kind names at least one part and normalises each (no 'normalise')")
        return self


class DatasetIdentity(Strict):
    """What a dataset's id fields hold, field by field (DatasetConfig extends it; its keys id_kinds and id_composites
    are DatasetConfig's, explained in config_reference.MEANINGS): checked here, turned into the readers' IdTyping by
    check_typed_datasets."""

    # Set by Settings (check_typed_datasets): how the readers turn typed fields into index forms (id_kind, id_kinds,
    # id_composites).
    _id_typing: IdTyping | None = PrivateAttr(default=None)

    @property
    def id_typing(self) -> IdTyping | None:
        """How every reader of the dataset's ids makes their index forms as it reads them (None: untyped, the ids as
        read). An id_kind is every id field typed that kind, as id_kinds would name them."""
        return self._id_typing

    @model_validator(mode="after")
    def _typed_fields_are_id_fields(self) -> DatasetIdentity:
        this: Any = self  # a DatasetConfig
        id_kinds: dict[str, str] = this.id_kinds
        id_composites: dict[str, dict[str, str]] = this.id_composites
        if not id_kinds and not id_composites:
            return self
        fields = this.id_fields or ()
        key = "id_kinds" if id_kinds else "id_composites"
        if this.id_kind is not None:
            raise ValueError(f"{key}: id_kind is every field one kind; give each field its kind in id_kinds instead")
        if this.id_fields is None or this.is_table or this.protection != "none" or this.column_names != "exact":
            raise ValueError(
                f"{key} is for datasets of files (jsonl, csv, parquet) with id_fields that are not pseudonymised"
                ' and column_names = "exact"'
            )
        for field, spec in id_kinds.items():
            if field not in fields:
                raise ValueError(f"id_kinds.{field}: not one of id_fields")
            try:
                parse_spec(spec)
            except ValueError as exc:
                raise ValueError(f"id_kinds.{field}: {exc}") from None
        parts_of = {f for parts in id_composites.values() for f in parts.values()}
        for kind, parts in id_composites.items():
            for part, field in parts.items():
                if field not in fields:
                    raise ValueError(f"id_composites.{kind}.{part}: '{field}' is not one of id_fields")
        untyped = [f for f in fields if f not in id_kinds and f not in parts_of]
        if untyped:
            raise ValueError(f"id field(s) {', '.join(untyped)}: no kind (name each in id_kinds or id_composites)")
        return self


ColumnName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class IdentifierLinkConfig(Strict):
    """A relational table linking a person's identifiers ([[identifier_links]]: a CRM's customers, with their email and
    customer id), which resolution reads with one SELECT per step (lakepurge.indexing.resolution). Only read: its DSN
    (``dsn``, plaintext, local use; deployed ``dsn_secret``, a Secrets Manager secret as [[relational]] has) should
    be a read-only one. ``columns`` maps a kind to the column holding its values, normalised as the kind says."""

    # the link's name, as reports, the approval page and certificates show it ("link table NAME")
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    # the database's URL, plaintext (local use); or dsn_secret
    dsn: Annotated[str, Field(min_length=1)] | None = None
    # the ARN or name of a Secrets Manager secret holding a (read-only) DSN, read at run time
    dsn_secret: Annotated[str, Field(min_length=1)] | None = None
    # the table (or schema.table) read
    table: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")]
    # kind -> the column holding its values, two kinds or more: { email = "email", customer_id = "cust_id" }
    columns: dict[KindName, ColumnName]

    @model_validator(mode="after")
    def _one_dsn_two_kinds(self) -> IdentifierLinkConfig:
        if (self.dsn is None) == (self.dsn_secret is None):
            raise ValueError(f"identifier link '{self.name}' needs exactly one of 'dsn' and 'dsn_secret'")
        if len(self.columns) < 2:
            raise ValueError(f"identifier link '{self.name}' links two kinds or more: its columns name one")
        return self


class ResolutionConfig(Strict):
    """How far a request's identifiers are expanded through links ([resolution], lakepurge.indexing.resolution)."""

    # steps from the request's identifiers (1: only what they are linked to directly)
    max_depth: Annotated[int, Field(ge=1, le=10)] = 2
    # an identifier linked to more distinct ids of one kind than this (a shared or test email) stops the request
    max_linked: Annotated[int, Field(ge=1)] = 10


def check_links(links: Sequence[IdentifierLinkConfig], identifiers: Mapping[str, IdentifierConfig]) -> None:
    """Link names are unique and every kind a link's columns name is configured."""
    names = [link.name for link in links]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ValueError(f"identifier link names must be unique: {', '.join(duplicated)}")
    for link in links:
        unknown = sorted(set(link.columns) - set(identifiers))
        if unknown:
            known = ", ".join(sorted(identifiers)) or "none"
            raise ValueError(
                f"identifier link '{link.name}' names kind(s) {', '.join(unknown)} with no [identifiers.NAME] table"
                f" (configured: {known})"
            )


def check_typed_datasets(datasets: Sequence[DatasetConfig], identifiers: Mapping[str, IdentifierConfig]) -> None:
    """Every dataset's id_kind names a configured kind, and only datasets whose readers make index forms have one
    (nor case-insensitive column names: check_column_names). Each typed dataset is given its IdTyping
    (DatasetConfig.id_typing), which its readers apply."""
    check_column_names(datasets)
    for dataset in datasets:
        if dataset.id_kinds or dataset.id_composites:
            dataset._id_typing = _typing(dataset, identifiers)
        if dataset.id_kind is None:
            continue
        if dataset.id_kind not in identifiers:
            known = ", ".join(sorted(identifiers)) or "none"
            raise ValueError(
                f"dataset '{dataset.name}' names id_kind '{dataset.id_kind}', which has no"
                f" [identifiers.{dataset.id_kind}] table (configured: {known})"
            )
        if identifiers[dataset.id_kind].parts is not None:
            raise ValueError(
                f"dataset '{dataset.name}': id_kind '{dataset.id_kind}' is composite: name its parts' fields"
                " in id_composites"
            )
        # Tables, one-user-per-object and pseudonymised datasets: their readers make no index forms yet (issue 31).
        if dataset.is_table or dataset.per_object or dataset.protection != "none" or dataset.id_fields is None:
            raise ValueError(
                f"dataset '{dataset.name}': id_kind is for datasets of files (jsonl, csv, parquet) with id_fields"
                " that are not pseudonymised"
            )
        # Every id field typed the kind, as id_kinds would name it: one walk of a record makes its index forms, for
        # every reader (its coverage fingerprint stays the kind's alone: dataset_id_forms).
        kind = FieldKind(IdentifierKind(dataset.id_kind, identifiers[dataset.id_kind].normalise))
        dataset._id_typing = IdTyping(tuple((path, kind) for path in parse_paths(dataset.id_fields)))


def check_column_names(datasets: Sequence[DatasetConfig]) -> None:
    """Names matched case-insensitively only where every reader of the dataset's ids resolves them so."""
    for dataset in datasets:
        if dataset.column_names != "exact" and (dataset.is_table or dataset.per_object or dataset.protection != "none"):
            raise ValueError(
                f"dataset '{dataset.name}': column_names = \"case-insensitive\" is for datasets of files (jsonl, csv,"
                " parquet) with id_fields that are not pseudonymised; name the columns as the files spell them"
            )


def id_rules(dataset: DatasetConfig) -> IdRules:
    """How the dataset's ids are read, besides their paths: names in any case (column_names), typed fields (id_kind,
    id_kinds, id_composites: numbers by value where a kind is normalised as `number`). Every reader of the dataset's
    ids reads them by these rules, so they agree."""
    if dataset._id_typing is None and (dataset.id_kind is not None or dataset.id_kinds or dataset.id_composites):
        # read untyped, its values would never meet a request's forms: only Settings knows the kinds they name
        raise ValueError(f"dataset '{dataset.name}': its identifier kinds are resolved by the Settings it is read with")
    return IdRules(folded=dataset.column_names == "case-insensitive", typing=dataset._id_typing)


def _typing(dataset: DatasetConfig, identifiers: Mapping[str, IdentifierConfig]) -> IdTyping:
    """A dataset's id_kinds and id_composites as its readers apply them; errors name the dataset and the key."""
    where = f"dataset '{dataset.name}'"
    fields = []
    for field, spec in dataset.id_kinds.items():
        name, transform = parse_spec(spec)
        config = identifiers.get(name)
        if config is None:
            raise ValueError(f"{where}: id_kinds.{field} names kind '{name}', which has no [identifiers.{name}] table")
        if config.parts is not None:
            raise ValueError(f"{where}: id_kinds.{field}: '{name}' is a composite kind: name it in id_composites")
        fields.append((parse_paths([field])[0], FieldKind(IdentifierKind(name, config.normalise), transform)))
    composites = []
    for name, columns in dataset.id_composites.items():
        config = identifiers.get(name)
        if config is None or config.parts is None:
            raise ValueError(f"{where}: id_composites.{name}: no composite [identifiers.{name}] table with parts")
        if set(columns) != set(config.parts):
            raise ValueError(
                f"{where}: id_composites.{name} names the fields of exactly its parts: {', '.join(config.parts)}"
            )
        kind = CompositeKind(name, tuple(config.parts.items()))
        composites.append((kind, parse_paths([columns[part] for part in kind.part_names])))
    return IdTyping(tuple(fields), tuple(composites))


def typed_request_forms(
    text: str, datasets: Sequence[DatasetConfig], identifiers: Mapping[str, IdentifierConfig]
) -> list[str]:
    """The index forms a request's --id KIND=VALUE is looked for under (records.id_typing.request_forms): its
    kind's, the transforms of it that configured datasets hold, or a composite kind's. Raises RequestIdError."""
    composites = {n: CompositeKind(n, tuple(c.parts.items())) for n, c in identifiers.items() if c.parts is not None}
    return request_forms(text, value_kinds(identifiers), composites, held_transforms(datasets))


def value_kinds(identifiers: Mapping[str, IdentifierConfig]) -> dict[str, IdentifierKind]:
    """The configured kinds of one value (not composite ones), as the readers and the request side apply them."""
    return {name: IdentifierKind(name, kind.normalise) for name, kind in identifiers.items() if kind.parts is None}


def held_transforms(datasets: Sequence[DatasetConfig]) -> dict[str, set[str]]:
    """Per kind, the transforms configured datasets hold it through (id_kinds' ``sha256_hex(email)``)."""
    transforms: dict[str, set[str]] = {}
    for dataset in datasets:
        for spec in dataset.id_kinds.values():
            name, transform = parse_spec(spec)
            if transform is not None:
                transforms.setdefault(name, set()).add(transform)
    return transforms


def dataset_kinds(dataset: DatasetConfig) -> tuple[str, ...]:
    """The identifier kinds a dataset's ids are of (id_kind, or those id_kinds and id_composites name); () untyped."""
    if dataset.id_kind is not None:
        return (dataset.id_kind,)
    kinds = {parse_spec(spec)[0] for spec in dataset.id_kinds.values()} | set(dataset.id_composites)
    return tuple(sorted(kinds))


def dataset_id_forms(dataset: DatasetConfig) -> str:
    """The fingerprint of the index forms a dataset's ids are indexed in, which its coverage records: "" for an
    untyped dataset of exact names (what an older coverage row reads as), else every setting that changes a form or
    which column a form is read from: the kind and its normalisations, each typed field's kind and transform, each
    composite's parts and columns, names in any case. A dataset indexed under another is not covered until
    re-indexed."""
    parts = []
    typing = dataset._id_typing
    if typing is not None and dataset.id_kind is not None:
        # every field that one kind: the kind alone, as coverage has recorded an id_kind dataset since it came
        parts.append(id_forms(typing.fields[0][1].kind))
    elif typing is not None:
        for path, field_kind in typing.fields:
            transform = f"/{field_kind.transform}" if field_kind.transform else ""
            parts.append(f"{'.'.join(path)}={id_forms(field_kind.kind)}{transform}")
        for composite, paths in typing.composites:
            columns = ",".join(".".join(path) for path in paths)
            normalised = ",".join(f"{part}:{'+'.join(steps)}" for part, steps in composite.parts)
            parts.append(f"{composite.name}({normalised})<-{columns}")
    if dataset.column_names != "exact":
        parts.append(f"names:{dataset.column_names}")
    return ";".join(parts)


class ExemptionConfig(Strict):
    """A dataset a request may not erase ([[exemptions]]): records kept under a legal obligation (GDPR Art. 17(3),
    e.g. invoices under tax law) until a date, or under a legal hold until the hold is lifted. A report finds and
    counts the users there, the purge leaves every object and version of it as it is, and the certificate and the
    approval page state it with its basis (docs/design/PERSON.md, section 5)."""

    # the [[datasets]] name of the dataset kept
    dataset: Annotated[str, Field(min_length=1)]
    # why it is kept, as the certificate states it to the data subject: "Art. 17(3)(b): tax law (HGB 257)"
    basis: Annotated[str, Field(min_length=1)]
    # the last day the records are kept: a report made after it erases the dataset as usual, and says so
    retain_until: date | None = None
    # or: how many days after the request the records are kept (the certificate states the date)
    retention_days: Annotated[int, Field(gt=0)] | None = None
    # a legal hold (litigation, an investigation): kept, with or without an end date, until this table is removed
    legal_hold: bool = False

    @model_validator(mode="after")
    def _retention(self) -> ExemptionConfig:
        if self.retain_until is not None and self.retention_days is not None:
            raise ValueError(f"exemption of dataset '{self.dataset}': give retain_until or retention_days, not both")
        if self.retain_until is None and self.retention_days is None and not self.legal_hold:
            raise ValueError(
                f"exemption of dataset '{self.dataset}' says for how long: retain_until = YYYY-MM-DD or"
                " retention_days = N (a legal hold without an end: legal_hold = true)"
            )
        return self

    def kept_until(self, requested: date) -> date | None:
        """The last day a request made on ``requested`` keeps the records (None: a legal hold without an end)."""
        if self.retention_days is not None:
            return requested + timedelta(days=self.retention_days)
        return self.retain_until

    def expired(self, on: date) -> bool:
        """Whether the exemption no longer keeps anything on that day: its retain_until has passed."""
        return self.retain_until is not None and self.retain_until < on

    @staticmethod
    def check(datasets: Sequence[DatasetConfig], exemptions: Sequence[ExemptionConfig]) -> None:
        """Every exemption names a configured dataset, once, whose records the purge can keep (a file dataset)."""
        named = {dataset.name: dataset for dataset in datasets}
        seen: set[str] = set()
        for i, exemption in enumerate(exemptions):
            where = f"exemptions[{i}].dataset"
            dataset = named.get(exemption.dataset)
            if dataset is None:
                known = ", ".join(sorted(named)) or "none"
                raise ValueError(f"{where}: '{exemption.dataset}' names no [[datasets]] (configured: {known})")
            if exemption.dataset in seen:
                raise ValueError(f"{where}: dataset '{exemption.dataset}' has another exemption before: merge them")
            seen.add(exemption.dataset)
            # A table's history and a crypto-shred dataset's keys are erased for every dataset at once (one commit,
            # one key per person), so one of them cannot be kept while the rest is erased.
            if dataset.is_table or dataset.protection != "none":
                raise ValueError(
                    f"{where}: dataset '{exemption.dataset}' is a table or pseudonymised; an exemption keeps a"
                    " dataset of files (jsonl, csv, parquet) that is not pseudonymised"
                )


def exempt_datasets(exemptions: Sequence[ExemptionConfig], on: date) -> dict[str, ExemptionConfig]:
    """The exemptions in force on that day, by dataset name."""
    return {exemption.dataset: exemption for exemption in exemptions if not exemption.expired(on)}


def check_identities(
    datasets: Sequence[DatasetConfig],
    identifiers: Mapping[str, IdentifierConfig],
    links: Sequence[IdentifierLinkConfig],
    exemptions: Sequence[ExemptionConfig],
) -> None:
    """Settings' checks of who a request names: the datasets' kinds, the link tables' kinds, the exemptions."""
    check_typed_datasets(datasets, identifiers)
    check_links(links, identifiers)
    ExemptionConfig.check(datasets, exemptions)
