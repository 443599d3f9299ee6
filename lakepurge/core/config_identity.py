"""The configuration of who a request names (issue 31, docs/design/PERSON.md): identifier kinds and their
normalisations, and the checks that tie datasets to them. Kept apart from config.py, which holds the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from lakepurge.core.config_strict import Strict
from lakepurge.records.identifiers import IdentifierKind, Normalisation
from lakepurge.records.ids import IdRules

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig

# The name of an identifier kind ([identifiers.NAME], a dataset's id_kind): it is part of every index form of the kind.
KindName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class IdentifierConfig(Strict):
    """A kind of identifier ([identifiers.NAME]: email, customer_id, ...) and how its values are normalised, in order,
    when a dataset's records are indexed and when a request names one (`--id NAME=VALUE`): trim, casefold, lower,
    digits, nfkc, number (docs/design/PERSON.md). None: exact. Changing it changes the index form of every id of the
    kind."""

    # how a value of the kind is normalised, in this order: trim, casefold, lower, digits (0-9 kept), nfkc, number
    # (a number by value: 12345.0 is 12345, 123.450 is 123.45); [] exact
    normalise: tuple[Normalisation, ...] = ()


def check_typed_datasets(datasets: Sequence[DatasetConfig], identifiers: Mapping[str, IdentifierConfig]) -> None:
    """Every dataset's id_kind names a configured kind, and only datasets whose readers make index forms have one
    (nor case-insensitive column names: check_column_names)."""
    check_column_names(datasets)
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


def check_column_names(datasets: Sequence[DatasetConfig]) -> None:
    """Names matched case-insensitively only where every reader of the dataset's ids resolves them so."""
    for dataset in datasets:
        if dataset.column_names != "exact" and (dataset.is_table or dataset.per_object or dataset.protection != "none"):
            raise ValueError(
                f"dataset '{dataset.name}': column_names = \"case-insensitive\" is for datasets of files (jsonl, csv,"
                " parquet) with id_fields that are not pseudonymised; name the columns as the files spell them"
            )


def id_rules(dataset: DatasetConfig, kind: IdentifierKind | None = None) -> IdRules:
    """How the dataset's ids are read, besides their paths: names in any case (column_names), numbers by value (a
    kind normalised as `number`). Every reader of the dataset's ids reads them by these rules, so they agree."""
    return IdRules(folded=dataset.column_names == "case-insensitive", numbers=kind is not None and kind.numbers)
