"""The key vault: per person a random key, stored wrapped by KMS (envelope encryption), and the pseudonym of the
person's identifier. Configured like the index (``[vault]``: PostgreSQL or DynamoDB, a table of its own).

- A person is named in the vault by the keyed hash of their id (lakepurge.core.privacy.Pseudonymizer: the hash
  reports, certificates and the suppression list name users by), never by the id: the purge, which knows the users
  only by those hashes, destroys their keys, and the vault holds no raw id.
- A key is created on first sight: KMS GenerateDataKey (AES-256) under the encryption context
  ``{"lakepurge_vault_person": <keyed hash>}``, so a wrapped key unwraps only as its own person's (a copied row
  does not open another person's data; a key policy can require the context key, kms:EncryptionContextKeys). Of
  two writers that create a person's key at once, the first stored wins and both use it.
- Unwrapped keys are kept in this process's memory for ``cache_seconds`` (60 by default), never longer, never
  logged, never written anywhere (:class:`~lakepurge.protection.aead.PersonKey` has no repr and refuses pickling).
- :meth:`Vault.destroy` deletes a person's key and pseudonym entries: what crypto-shredding is
  (lakepurge.protection.shred).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakepurge.core import aws
from lakepurge.core.config import Settings, VaultConfig
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.protection.aead import PersonKey

log = get_logger()

CONTEXT_KEY = "lakepurge_vault_person"  # the encryption context key of every wrapped person key
_KMS_THREADS = 16  # unwraps and creations are one KMS call per person: a few at once


@dataclass(frozen=True)
class KeyEntry:
    """A person's entry as stored: the wrapped key, the KMS key that wrapped it, the pseudonym of their identifier."""

    person: str  # the keyed hash of the person's id
    wrapped_key: bytes
    kms_key_id: str
    pseudonym: str
    created_at: str

    def __repr__(self) -> str:  # the wrapped key is no secret without KMS, but it stays out of logs all the same
        return f"KeyEntry(person={self.person[:12]}..., kms_key_id={self.kms_key_id!r})"


@dataclass(frozen=True)
class Backup:
    """A copy of the vault that can restore a destroyed key: its name, when it was taken, when it goes (None: never,
    until someone deletes it)."""

    name: str
    created_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True)
class VaultCopies:
    """What the vault's backend says of its copies: the point-in-time recovery window (days; 0 when off, None when
    the backend cannot tell), the backups it lists, replicas, and what it cannot know."""

    recovery_days: int | None
    backups: tuple[Backup, ...] = ()
    replicas: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


class VaultStore(ABC):
    """A vault backend: entries read and written by the person's keyed hash, and by pseudonym."""

    name: str  # the table (DynamoDB) or table prefix (PostgreSQL), for certificates and messages

    @abstractmethod
    def ensure_schema(self) -> None: ...

    @abstractmethod
    def entries(self, persons: Sequence[str]) -> dict[str, KeyEntry]:
        """The persons' entries (strongly consistent reads), by keyed hash; absent persons are left out."""

    @abstractmethod
    def add(self, entries: Sequence[KeyEntry]) -> dict[str, KeyEntry]:
        """Store new persons' entries, each unless the person has one already. Returns every person's stored entry:
        another writer's where it came first."""

    @abstractmethod
    def persons_of(self, pseudonyms: Sequence[str]) -> dict[str, str]:
        """pseudonym -> the person's keyed hash, for the pseudonyms the vault resolves."""

    @abstractmethod
    def destroy(self, persons: Sequence[str]) -> list[str]:
        """Delete the persons' keys and pseudonym entries; returns the persons that had an entry."""

    @abstractmethod
    def copies(self) -> VaultCopies:
        """The copies of the vault outside the table itself (point-in-time recovery, backups, replicas)."""

    @abstractmethod
    def close(self) -> None: ...


def open_store(config: VaultConfig, create: bool = True) -> VaultStore:
    store: VaultStore
    if config.backend == "postgres":
        from lakepurge.index import postgres_dsn
        from lakepurge.protection.vault_postgres import PostgresVault

        store = PostgresVault(postgres_dsn(config), config.table or "lakepurge_vault", config.backup_retention_days)
    else:
        from lakepurge.protection.vault_dynamodb import DynamoVault

        assert config.table is not None
        store = DynamoVault(config.table, config.backup_retention_days)
    if create:
        store.ensure_schema()
    return store


def vault_config(settings: Settings) -> VaultConfig:
    if settings.vault is None:
        from lakepurge.core.config import ConfigError

        raise ConfigError("[vault]: not configured (backend, dsn or table, kms_key_id): pseudonymised data needs it")
    return settings.vault


class Vault:
    """The vault as its users see it: keys and pseudonyms by identifier or by pseudonym, created on first sight,
    cached for ``cache_seconds``."""

    def __init__(
        self, store: VaultStore, config: VaultConfig, pseudonymizer: Pseudonymizer, kms: Any | None = None
    ) -> None:
        self.store = store
        self.config = config
        self._pseudonymizer = pseudonymizer
        self._kms = kms if kms is not None else aws.client("kms")
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[float, PersonKey, str]] = {}  # person -> (until, key, pseudonym)
        self._persons: dict[str, tuple[float, str]] = {}  # pseudonym -> (until, person)

    @classmethod
    def open(cls, settings: Settings, create: bool = True) -> Vault:
        config = vault_config(settings)
        return cls(open_store(config, create), config, Pseudonymizer.from_config(settings.privacy))

    def close(self) -> None:
        self.forget()
        self.store.close()

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- by identifier (the writers, the access export) --------------------------------------------------------------

    def person_of(self, identifier: str) -> str:
        """A person's name in the vault: the keyed hash of their id."""
        return self._pseudonymizer(identifier)

    def keys_for(self, identifiers: Iterable[str], create: bool = False) -> dict[str, tuple[PersonKey, str]]:
        """identifier -> (the person's key, their pseudonym), for those with a key; ``create`` makes a key for each
        identifier seen for the first time."""
        by_person = {self.person_of(identifier): identifier for identifier in dict.fromkeys(identifiers)}
        found = self._cached(list(by_person))
        missing = [person for person in by_person if person not in found]
        if missing:
            stored = self.store.entries(missing)
            found.update(self._unwrap(list(stored.values())))
            if create:
                new = [(person, by_person[person]) for person in missing if person not in stored]
                found.update(self._create(new))
        return {by_person[person]: value for person, value in found.items()}

    def pseudonyms_of(self, identifiers: Iterable[str]) -> dict[str, str]:
        """identifier -> pseudonym for the identifiers the vault knows (no KMS call)."""
        by_person = {self.person_of(identifier): identifier for identifier in dict.fromkeys(identifiers)}
        return {by_person[p]: entry.pseudonym for p, entry in self.store.entries(list(by_person)).items()}

    # -- by pseudonym (the readers) ------------------------------------------------------------------------------------

    def keys_of_pseudonyms(self, pseudonyms: Iterable[str]) -> dict[str, PersonKey]:
        """pseudonym -> the person's key, for the pseudonyms that still resolve (a shredded person's do not)."""
        wanted = list(dict.fromkeys(pseudonyms))
        now = time.monotonic()
        with self._lock:
            persons = {p: v[1] for p in wanted if (v := self._persons.get(p)) is not None and v[0] > now}
        unknown = [p for p in wanted if p not in persons]
        if unknown:
            resolved = self.store.persons_of(unknown)
            until = now + self.config.cache_seconds
            with self._lock:
                for pseudonym, person in resolved.items():
                    self._persons[pseudonym] = (until, person)
            persons.update(resolved)
        found = self._cached(list(set(persons.values())))
        missing = [person for person in set(persons.values()) if person not in found]
        if missing:
            found.update(self._unwrap(list(self.store.entries(missing).values())))
        return {pseudonym: found[person][0] for pseudonym, person in persons.items() if person in found}

    # -- destroying ----------------------------------------------------------------------------------------------------

    def destroy(self, persons: Sequence[str]) -> list[str]:
        """Destroy the persons' keys and pseudonyms (by keyed hash): in the vault, and in this process's cache."""
        self.forget(persons)
        destroyed = self.store.destroy(list(persons)) if persons else []
        log.info("vault keys destroyed", extra={"persons": len(destroyed)})
        return destroyed

    def forget(self, persons: Iterable[str] | None = None) -> None:
        """Drop cached keys (all, or these persons')."""
        with self._lock:
            if persons is None:
                self._keys.clear()
                self._persons.clear()
                return
            gone = set(persons)
            for person in gone:
                self._keys.pop(person, None)
            for pseudonym in [p for p, (_, person) in self._persons.items() if person in gone]:
                del self._persons[pseudonym]

    # -- the cache, KMS ------------------------------------------------------------------------------------------------

    def _cached(self, persons: list[str]) -> dict[str, tuple[PersonKey, str]]:
        now = time.monotonic()
        with self._lock:
            return {p: (v[1], v[2]) for p in persons if (v := self._keys.get(p)) is not None and v[0] > now}

    def _keep(self, person: str, key: PersonKey, pseudonym: str) -> None:
        if self.config.cache_seconds:
            with self._lock:
                self._keys[person] = (time.monotonic() + self.config.cache_seconds, key, pseudonym)

    def _unwrap(self, entries: list[KeyEntry]) -> dict[str, tuple[PersonKey, str]]:
        def unwrap(entry: KeyEntry) -> tuple[str, PersonKey, str]:
            answer = self._kms.decrypt(
                CiphertextBlob=entry.wrapped_key,
                KeyId=entry.kms_key_id,
                EncryptionContext={CONTEXT_KEY: entry.person},
            )
            return entry.person, PersonKey(answer["Plaintext"]), entry.pseudonym

        found = {}
        for person, key, pseudonym in _on_threads(unwrap, entries):
            self._keep(person, key, pseudonym)
            found[person] = (key, pseudonym)
        return found

    def _create(self, new: list[tuple[str, str]]) -> dict[str, tuple[PersonKey, str]]:
        def generate(item: tuple[str, str]) -> tuple[KeyEntry, PersonKey]:
            person, identifier = item
            answer = self._kms.generate_data_key(
                KeyId=self.config.kms_key_id, KeySpec="AES_256", EncryptionContext={CONTEXT_KEY: person}
            )
            key = PersonKey(answer["Plaintext"])
            entry = KeyEntry(
                person=person,
                wrapped_key=answer["CiphertextBlob"],
                kms_key_id=str(answer["KeyId"]),
                pseudonym=key.pseudonym(identifier),
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
            return entry, key

        if not new:
            return {}
        generated = _on_threads(generate, new)
        stored = self.store.add([entry for entry, _ in generated])
        found: dict[str, tuple[PersonKey, str]] = {}
        for entry, key in generated:
            if stored[entry.person].wrapped_key == entry.wrapped_key:
                self._keep(entry.person, key, entry.pseudonym)
                found[entry.person] = (key, entry.pseudonym)
        # Where another writer created a person's key first, that one is the person's key.
        found.update(self._unwrap([stored[p] for p, _ in new if p not in found]))
        log.info("vault keys created on first sight", extra={"persons": len(new)})
        return found


def _on_threads(fn: Any, items: Sequence[Any]) -> list[Any]:
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(_KMS_THREADS, len(items)), thread_name_prefix="lakepurge-vault") as pool:
        return list(pool.map(fn, items))
