"""The configuration of who a request names (issue 31, docs/design/PERSON.md): identifier kinds and their
normalisations, and the checks that tie datasets to them. Kept apart from config.py, which holds the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from lakepurge.core.config_strict import Strict
from lakepurge.records.identifiers import IdentifierKind, Normalisation

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig

# The name of an identifier kind ([identifiers.NAME], a dataset's id_kind): it is part of every index form of the kind.
KindName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class IdentifierConfig(Strict):
    """A kind of identifier ([identifiers.NAME]: email, customer_id, ...) and how its values are normalised, in order,
    when a dataset's records are indexed and when a request names one (`--id NAME=VALUE`): trim, casefold, lower,
    digits, nfkc (docs/design/PERSON.md). None: exact. Changing it changes the index form of every id of the kind:
    its datasets are not covered (no request is certified) until `lakepurge index backfill --force` reads them again."""

    # how a value of the kind is normalised, in this order: trim, casefold, lower, digits (0-9 kept), nfkc; [] exact
    normalise: tuple[Normalisation, ...] = ()


def check_typed_datasets(datasets: Sequence[DatasetConfig], identifiers: Mapping[str, IdentifierConfig]) -> None:
    """Every dataset's id_kind names a configured kind, and only datasets whose readers make index forms have one.
    Each typed dataset is given its kind (DatasetConfig.kind), which its readers apply."""
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
        dataset._kind = IdentifierKind(dataset.id_kind, identifiers[dataset.id_kind].normalise)
