"""The configuration of who a request names (issue 31, docs/design/PERSON.md): identifier kinds and their
normalisations, and the checks that tie datasets to them. Kept apart from config.py, which holds the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from lakepurge.core.config_strict import Strict
from lakepurge.records.identifiers import Normalisation

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig

# The name of an identifier kind ([identifiers.NAME], a dataset's id_kind): it is part of every index form of the kind.
KindName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class IdentifierConfig(Strict):
    """A kind of identifier ([identifiers.NAME]: email, customer_id, ...) and how its values are normalised, in order,
    when a dataset's records are indexed and when a request names one (`--id NAME=VALUE`): trim, casefold, lower,
    digits, nfkc (docs/design/PERSON.md). None: exact. Changing it changes the index form of every id of the kind."""

    # how a value of the kind is normalised, in this order: trim, casefold, lower, digits (0-9 kept), nfkc; [] exact
    normalise: tuple[Normalisation, ...] = ()


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
    """Every dataset's id_kind names a configured kind, and only datasets whose readers make index forms have one."""
    for dataset in datasets:
        if dataset.id_kind is None:
            continue
        if dataset.id_kind not in identifiers:
            known = ", ".join(sorted(identifiers)) or "none"
            raise ValueError(
                f"dataset '{dataset.name}' names id_kind '{dataset.id_kind}', which has no"
                f" [identifiers.{dataset.id_kind}] table (configured: {known})"
            )
        # Tables, one-user-per-object and pseudonymised datasets: their readers make no index forms yet (issue 31).
        if dataset.is_table or dataset.per_object or dataset.protection != "none":
            raise ValueError(
                f"dataset '{dataset.name}': id_kind is for datasets of files (jsonl, csv, parquet) with id_fields"
                " that are not pseudonymised"
            )
