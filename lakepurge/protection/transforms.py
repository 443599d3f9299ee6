"""The Spark transforms of pseudonymised data, for ingestion pipelines and readers:

    protected = protect_dataframe(df, settings, Protection("user_id", ("email", "name"), deterministic=("email",)))
    readable = reveal_dataframe(protected, settings, protection, types={"birth_date": DateType()})

Both run :func:`~lakepurge.protection.protect.protect_records` / ``reveal_records`` on the executors, over each
partition's rows in batches (an RDD's ``mapPartitions``: ``mapInArrow`` would need pandas, which lakepurge does not
install). An executor opens the vault once per Python worker and keeps it for the worker's next tasks, so a
person's key is unwrapped once per worker and ``cache_seconds``; the driver hands the executors its AWS settings and
hash key in the task closure (lakepurge.core.sparkutil), never keys of persons.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lakepurge.core.config import Settings
from lakepurge.core.sparkutil import apply_job_environment, job_environment
from lakepurge.protection.protect import Protection, protect_records, reveal_records, typed_column
from lakepurge.protection.vault import Vault

_workers_vault: dict[str, Vault] = {}  # one per vault configuration and Python worker


def worker_vault(settings: Settings) -> Vault:
    """This process's vault for these settings, opened once (its schema is the driver's to create)."""
    identity = settings.model_dump_json(include={"vault", "privacy"})
    vault = _workers_vault.get(identity)
    if vault is None:
        vault = _workers_vault[identity] = Vault.open(settings, create=False)
    return vault


_ROWS_PER_BATCH = 5000  # rows protected or revealed at once: one vault look-up per person and batch


def _batches(rows: Iterator[Any]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row.asDict(recursive=True))
        if len(batch) >= _ROWS_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def protect_dataframe(df: Any, settings: Settings, protection: Protection) -> Any:
    """The DataFrame with the id column replaced by pseudonyms and the personal columns by ciphertext (strings)."""
    from pyspark.sql.types import StringType, StructField, StructType

    changed = {protection.id_field, *protection.personal_fields}
    missing = sorted(changed - set(df.columns))
    if missing:
        raise ValueError(f"the DataFrame has no column(s) {', '.join(missing)}")
    schema = StructType(
        [StructField(f.name, StringType(), f.nullable) if f.name in changed else f for f in df.schema.fields]
    )
    Vault.open(settings).close()  # the vault's schema, created once by the driver
    env = job_environment(settings)
    names = df.columns

    def protect(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        apply_job_environment(env)
        vault = worker_vault(settings)
        for batch in _batches(rows):
            for record in protect_records(vault, batch, protection):
                yield tuple(record[name] for name in names)

    return df.sparkSession.createDataFrame(df.rdd.mapPartitions(protect), schema)


def reveal_dataframe(df: Any, settings: Settings, protection: Protection, types: dict[str, Any] | None = None) -> Any:
    """The DataFrame with its personal columns decrypted, each of the Spark type ``types`` names (default: a
    string; values that were not strings as JSON text); nulls for persons whose key is destroyed."""
    from pyspark.sql.pandas.types import to_arrow_type  # type conversion only: needs pyarrow, not pandas
    from pyspark.sql.types import StringType, StructField, StructType

    wanted = dict(types or {})
    schema = StructType(
        [
            StructField(f.name, wanted.get(f.name, StringType()), True) if f.name in protection.personal_fields else f
            for f in df.schema.fields
        ]
    )
    arrow_types = {name: to_arrow_type(dt) for name, dt in wanted.items()}
    env = job_environment(settings)
    names = df.columns
    personal = [name for name in names if name in protection.personal_fields]

    def reveal(rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        apply_job_environment(env)
        vault = worker_vault(settings)
        for batch in _batches(rows):
            records = reveal_records(vault, batch, protection)
            columns = {
                name: typed_column([r[name] for r in records], arrow_types.get(name)).to_pylist() for name in personal
            }
            for n, record in enumerate(records):
                yield tuple(columns[name][n] if name in columns else record[name] for name in names)

    return df.sparkSession.createDataFrame(df.rdd.mapPartitions(reveal), schema)
