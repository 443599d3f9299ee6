"""The configuration of who a request names (issue 31, docs/design/PERSON.md): identifier kinds and their
normalisations, and the checks that tie datasets to them; the datasets a request may not erase ([[exemptions]]).
Kept apart from config.py, which holds the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, timedelta
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
