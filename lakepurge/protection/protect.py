"""The write and read sides of pseudonymised data, on records (dicts) and on Arrow record batches.

:func:`protect_records` / :func:`protect_batch` replace the id field by the person's pseudonym and each personal
field by its ciphertext under the person's key (lakepurge.protection.aead), creating a key for each person seen for
the first time. :func:`reveal_records` does the reverse for a reader that holds vault access;
a person whose key was destroyed reads as nulls in the personal fields (their data is erased) and keeps the
pseudonym, which no longer resolves. The Spark transforms over these are lakepurge.protection.transforms.

Errors name the record's position and the field, never a value.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig
from lakepurge.protection.aead import NotCiphertext, NotDecryptable, PersonKey
from lakepurge.protection.vault import Vault

if TYPE_CHECKING:
    import pyarrow as pa


class RecordRefused(ValueError):
    """A record cannot be protected or revealed as asked; the message names its position and the field."""


@dataclass(frozen=True)
class Protection:
    """What is protected in a dataset: the id field (its value becomes the person's pseudonym), the personal fields
    (ciphertext), and which of them are encrypted deterministically (equality joins on them)."""

    id_field: str
    personal_fields: tuple[str, ...]
    deterministic: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.id_field in self.personal_fields:
            raise ValueError(f"the id field {self.id_field!r} becomes the pseudonym: it is not a personal field")
        stray = sorted(set(self.deterministic) - set(self.personal_fields))
        if stray:
            raise ValueError(f"deterministic field(s) {', '.join(stray)} are not among the personal fields")

    @classmethod
    def of(cls, dataset: DatasetConfig) -> Protection:
        """A crypto-shred dataset's protection, as its configuration states it."""
        if dataset.protection != "crypto-shred" or dataset.id_fields is None:
            raise ValueError(f"dataset {dataset.name} is not a crypto-shred dataset")
        return cls(dataset.id_fields[0], dataset.personal_fields)


def person_id(value: Any, position: int, field: str) -> str:
    """A record's person: its id field as text (a whole number is taken as its digits, as the index reads it)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    state = "missing or null" if value is None else f"not a string or whole number ({type(value).__name__})"
    raise RecordRefused(f"record {position}: the id field {field!r} is {state}: it cannot be pseudonymised")


def _plain(value: Any) -> Any:
    """A value as JSON can hold it: Decimal as its digits, bytes in base64 (what the ciphertext carries)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _seal(key: PersonKey, field: str, value: Any, deterministic: bool) -> str | None:
    try:
        return key.seal(field, value, deterministic)
    except TypeError:
        return key.seal(field, _plain(value), deterministic)


def protect_records(vault: Vault, records: Sequence[dict[str, Any]], protection: Protection) -> list[dict[str, Any]]:
    """Each record with its id replaced by the person's pseudonym and each personal field by its ciphertext (new
    dicts, the other fields as they were, the order of fields kept)."""
    ids = [person_id(record.get(protection.id_field), n, protection.id_field) for n, record in enumerate(records)]
    keys = vault.keys_for(ids, create=True)
    deterministic = set(protection.deterministic)
    personal = set(protection.personal_fields)
    protected = []
    for record, identifier in zip(records, ids, strict=True):
        key, pseudonym = keys[identifier]
        out: dict[str, Any] = {}
        for name, value in record.items():
            if name == protection.id_field:
                out[name] = pseudonym
            elif name in personal:
                out[name] = _seal(key, name, value, name in deterministic)
            else:
                out[name] = value
        protected.append(out)
    return protected


def reveal_records(vault: Vault, records: Sequence[dict[str, Any]], protection: Protection) -> list[dict[str, Any]]:
    """Each record with its personal fields decrypted (new dicts). A person whose key is gone gets nulls there."""
    keys = vault.keys_of_pseudonyms(
        {r[protection.id_field] for r in records if isinstance(r.get(protection.id_field), str)}
    )
    revealed = []
    for position, record in enumerate(records):
        key = keys.get(record.get(protection.id_field))  # type: ignore[arg-type]
        out = dict(record)
        for name in protection.personal_fields:
            if name in out:
                out[name] = _open(key, name, out[name], position)
        revealed.append(out)
    return revealed


def _open(key: PersonKey | None, field: str, token: Any, position: int) -> Any:
    if key is None:
        return None  # the person's key is destroyed (or never was): their data reads as erased
    try:
        return key.open(field, token)
    except (NotCiphertext, NotDecryptable) as exc:
        raise RecordRefused(f"record {position}: {exc}") from None


def reveal_for_person(
    vault: Vault, records: Sequence[dict[str, Any]], protection: Protection, owners: dict[str, str]
) -> list[dict[str, Any]]:
    """A person's own records in clear (the access export): personal fields decrypted and the pseudonym replaced by
    the person's identifier (``owners``: pseudonym -> identifier)."""
    revealed = reveal_records(vault, records, protection)
    for record in revealed:
        pseudonym = record.get(protection.id_field)
        if isinstance(pseudonym, str) and pseudonym in owners:
            record[protection.id_field] = owners[pseudonym]
    return revealed


# -- Arrow ------------------------------------------------------------------------------------------------------------


def protect_batch(vault: Vault, batch: pa.RecordBatch, protection: Protection) -> pa.RecordBatch:
    """An Arrow record batch protected: the id column and each personal column become strings (pseudonyms,
    ciphertext); the other columns are passed through untouched."""
    import pyarrow as pa

    names = batch.schema.names
    missing = [f for f in (protection.id_field,) if f not in names]
    if missing:
        raise RecordRefused(f"the batch has no id field {protection.id_field!r}")
    ids = [
        person_id(value, n, protection.id_field)
        for n, value in enumerate(batch.column(names.index(protection.id_field)).to_pylist())
    ]
    keys = vault.keys_for(ids, create=True)
    columns: list[pa.Array] = []
    fields: list[pa.Field] = []
    for index, field in enumerate(batch.schema):
        column = batch.column(index)
        if field.name == protection.id_field:
            column = pa.array([keys[i][1] for i in ids], pa.string())
        elif field.name in protection.personal_fields:
            deterministic = field.name in protection.deterministic
            values = column.to_pylist()
            column = pa.array(
                [_seal(keys[i][0], field.name, v, deterministic) for i, v in zip(ids, values, strict=True)],
                pa.string(),
            )
        columns.append(column)
        fields.append(pa.field(field.name, column.type, field.nullable, field.metadata))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, metadata=batch.schema.metadata))


def typed_column(values: list[Any], type_: pa.DataType | None) -> pa.Array:
    """Revealed values as an Arrow column of ``type_`` (None: strings as they were, other values as JSON text)."""
    import orjson
    import pyarrow as pa

    if type_ is None:
        text = [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in values]
        return pa.array(text, pa.string())
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # dates, timestamps and decimals travel as text in the ciphertext: Arrow parses them back
        return pa.array([None if v is None else str(v) for v in values], pa.string()).cast(type_)
