"""Keyed hashes that stand in for user ids wherever an id must be recognisable but not readable: reports,
certificates, the suppression list of erased users."""

from __future__ import annotations

import functools
import hashlib
import operator
import os
from collections.abc import Iterable, Iterator
from itertools import compress, filterfalse

from lakepurge.core import aws
from lakepurge.core.config import ConfigError, PrivacyConfig

# Keys a Spark driver handed to this executor process with the task closure (lakepurge.core.sparkutil), by source: an
# executor hashes with the driver's key and never asks Secrets Manager itself. Held in memory only.
_handed: dict[str, bytes] = {}


def _source(config: PrivacyConfig) -> str:
    return f"secret:{config.hash_key_secret}" if config.hash_key_secret is not None else f"env:{config.hash_key_env}"


def read_hash_key(config: PrivacyConfig) -> bytes | None:
    """The key from its configured source, never from a handed-over copy: privacy.hash_key_secret read through the
    Powertools cache (aws.secret_string: a rotated secret is read again within aws.SECRET_MAX_AGE_SECONDS; an
    unreadable one raises aws.SecretUnavailable), or privacy.hash_key_env (None when unset)."""
    if config.hash_key_secret is not None:
        return aws.secret_string(config.hash_key_secret).encode()
    value = os.environ.get(config.hash_key_env or "")
    return value.encode() if value else None


def hash_key(config: PrivacyConfig) -> bytes:
    """The secret key of the keyed hashes: the one a Spark driver handed to this process, else the configured
    source's (:func:`read_hash_key`)."""
    value = _handed.get(_source(config)) or read_hash_key(config)
    if not value:
        raise ConfigError(
            f"privacy.hash_key_env: set {config.hash_key_env} to a secret of at least 16 characters"
            " (keyed hashes of user ids; keep it stable across runs), or name a Secrets Manager secret with"
            " privacy.hash_key_secret"
        )
    return value


def hand_over_key(config: PrivacyConfig, key: bytes) -> None:
    """Use ``key`` as the configured source's key in this process (an executor, given the driver's key)."""
    _handed[_source(config)] = key


def forget_handed_keys() -> None:
    _handed.clear()


# How reports, results, certificates, export records and `status` name an object of a one-user-per-object dataset,
# whose key may name its user: "ref:" and a keyed hash of its path.
OBJECT_REFERENCE = "ref:"


def object_reference(s3path: str, pseudonymizer: Pseudonymizer) -> str:
    """An object's reference: a keyed hash of its path (the hash key of the user ids), so it cannot be reversed by
    guessing ids the way a plain hash of a key that contains an id can."""
    return OBJECT_REFERENCE + pseudonymizer(f"s3path:{s3path}")


_BLOCK = 64  # SHA-256's block size
_IS_NONE = functools.partial(operator.is_, None)


def hmac_pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer padded keys (RFC 2104): a user id's keyed hash is
    sha256(outer + sha256(inner + id)), computed so wherever the ids are (DuckDB's second reader hashes there)."""
    block = hashlib.sha256(key).digest() if len(key) > _BLOCK else key
    padded = block.ljust(_BLOCK, b"\0")
    return bytes(byte ^ 0x36 for byte in padded), bytes(byte ^ 0x5C for byte in padded)


class Pseudonymizer:
    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ConfigError("the hash key must be at least 16 bytes")
        self._key = key
        # HMAC-SHA256 (RFC 2104) from the key's two padded blocks, hashed once: each id then costs two copies of a
        # hash state, not the key schedule OpenSSL's one-shot HMAC redoes on every call (three times slower). The
        # purge hashes the id of every target line with it.
        inner, outer = hmac_pads(key)
        self._inner = hashlib.sha256(inner)
        self._outer = hashlib.sha256(outer)

    @classmethod
    def from_config(cls, config: PrivacyConfig) -> Pseudonymizer:
        return cls(hash_key(config))

    @classmethod
    def optional(cls, config: PrivacyConfig) -> Pseudonymizer | None:
        """The configured pseudonymizer, or None without a key (suppression checks are then off). A configured
        secret is required: one that cannot be read, or holds a short key, raises."""
        if config.hash_key_secret is not None:
            return cls.from_config(config)
        try:
            return cls.from_config(config)
        except ConfigError:
            return None

    def __call__(self, user_id: str) -> str:
        inner = self._inner.copy()
        inner.update(user_id.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def each(self, user_ids: Iterable[str]) -> Iterator[str]:
        """The hash of each id, in order."""
        return map(self, user_ids)

    def many(self, user_ids: Iterable[str]) -> list[str]:
        return sorted({self(u) for u in user_ids})


class HashedUsers:
    """A set of users known only by their keyed hashes: `id in users` hashes the id and looks it up.

    Executors of the purge job get this instead of raw ids, so raw ids never travel in job arguments.
    """

    def __init__(self, hashes: Iterable[str], pseudonymizer: Pseudonymizer) -> None:
        self._hashes = frozenset(hashes)
        self._pseudonymizer = pseudonymizer
        self._seen: dict[str, bool] = {}
        # none_of's memory, by the ids' UTF-8 bytes: sets, so that an object's ids are answered by set operations.
        self._clean: set[bytes] = set()
        self._wanted: set[bytes] = set()

    def __contains__(self, user_id: object) -> bool:
        if not isinstance(user_id, str):
            return False
        known = self._seen.get(user_id)
        if known is None:
            if len(self._seen) > 100_000:
                self._seen.clear()
            known = self._seen[user_id] = self._pseudonymizer(user_id) in self._hashes
        return known

    def __len__(self) -> int:
        return len(self._hashes)

    def hashes_of(self, user_ids: Iterable[str]) -> list[str]:
        """The keyed hashes of other ids (forms of these users' ids found elsewhere, e.g. truncated)."""
        return self._pseudonymizer.many(user_ids)

    def including(self, hashes: Iterable[str]) -> HashedUsers:
        """These users and the ids of these other hashes."""
        return HashedUsers([*self._hashes, *hashes], self._pseudonymizer)

    def each_contained(self, user_ids: list[str]) -> list[bool]:
        """Whether each id is one of the users, in order: the ids of a batch of records checked at once. Ids seen
        before are answered from memory; the others are hashed together, each once."""
        # The memo is shared by a task's purge threads: another thread may clear it at any moment, so the answers of
        # this call are read back from its own dict of new answers, never from the memo (each step is one C call).
        seen = self._seen
        known = list(map(seen.get, user_ids))
        if None in known:
            new = dict.fromkeys(compress(user_ids, map(_IS_NONE, known)))  # each once, in order
            answers = dict(zip(new, map(self._hashes.__contains__, self._pseudonymizer.each(new)), strict=True))
            if len(seen) > 100_000:
                seen.clear()
            seen.update(answers)
            known = list(map(answers.get, user_ids, known))  # a new id's answer, else the one remembered
        return known  # type: ignore[return-value]

    def none_of(self, user_ids: list[bytes]) -> bool:
        """Whether none of these ids (UTF-8; an invalid sequence reads as U+FFFD, as a decoder would) is one of the
        users: the answer verification wants for a whole object's ids. Ids seen before are answered from memory by
        set lookups in C; the others are hashed, each once."""
        # Each id once (a CSV column repeats its ids); a user found before is never clean.
        unknown = list(dict.fromkeys(filterfalse(self._clean.__contains__, user_ids)))
        if not unknown:
            return True
        if not self._wanted.isdisjoint(unknown):
            return False
        if len(self._clean) > 100_000:
            self._clean.clear()
        owned = self.each_contained([user.decode("utf-8", "replace") for user in unknown])
        self._clean.update(compress(unknown, map(operator.not_, owned)))
        self._wanted.update(compress(unknown, owned))
        return True not in owned
