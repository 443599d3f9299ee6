"""Keyed hashes that stand in for user ids wherever an id must be recognisable but not readable: reports,
certificates, the suppression list of erased users."""

from __future__ import annotations

import functools
import hashlib
import operator
import os
import threading
from collections.abc import Iterable, Iterator
from itertools import compress
from typing import Any

from lakepurge.core import aws
from lakepurge.core.config import ConfigError, PrivacyConfig
from lakepurge.records.candidates import WantedIds
from lakepurge.records.ids import decoded_ids

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
        return self.of_utf8(user_id.encode())

    def of_utf8(self, user_id: bytes) -> str:
        """The hash of an id given as its UTF-8 bytes."""
        inner = self._inner.copy()
        inner.update(user_id)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def each(self, user_ids: Iterable[str]) -> Iterator[str]:
        """The hash of each id, in order."""
        return map(self.of_utf8, map(str.encode, user_ids))

    def many(self, user_ids: Iterable[str]) -> list[str]:
        return sorted({self(u) for u in user_ids})


# Ids each thread of a HashedUsers remembers the answer for (as str and, for none_of, as UTF-8 bytes). Past it a thread
# remembers no more (it never forgets: a lake with more users than this cannot make it hash the same ids over and
# over); new ids are then hashed each time they come. About 30 MB a thread when full.
MEMO_IDS = 200_000


class _Memo:
    """One thread's memory of ids it has answered for: nothing in it is shared, so no lock is needed."""

    def __init__(self, known: frozenset[str]) -> None:
        self.seen: dict[str, bool] = dict.fromkeys(known, True)
        self.clean: set[bytes] = set()  # none_of's, by the ids' UTF-8 bytes (set operations over an object's ids)
        self.wanted: set[bytes] = set()


class HashedUsers:
    """A set of users known by their keyed hashes: `id in users` hashes the id and looks it up.

    Executors of the purge job get this instead of raw ids, so raw ids never travel in job arguments or task
    closures. A process that already holds the users' raw ids (an inline purge: the operator's CLI, the workflow's
    StartPurge, which opens the sealed request; a Spark executor, which opens the ids sealed for it:
    lakepurge.core.executor_ids) passes them as ``known``: each is kept only if its hash is one of the
    hashes, and when they stand for every hash an id is answered by a set lookup, never hashed (the check before a
    write reads every id of an object). Ids already proven to be exactly the hashes' (sealed bound to them) are given
    to :meth:`of_proven_ids` instead, which does not hash them again. They are kept in memory only, never logged or
    written (``repr`` shows counts). Each thread answers from its own memory of ids (a purge task's threads share one
    HashedUsers), so nothing mutable is shared between threads.
    """

    _given: tuple[str, ...]  # (of_proven_ids: the hashes as given, for _hashes)

    def __init__(
        self,
        hashes: Iterable[str],
        pseudonymizer: Pseudonymizer,
        known: Iterable[str] = (),
    ) -> None:
        self._hashes = frozenset(hashes)  # (set here: the cached property below is not used)
        self._count = len(self._hashes)
        self._pseudonymizer = pseudonymizer
        held = {user: self._pseudonymizer(user) for user in dict.fromkeys(known) if _utf8(user)}
        # Every user is known by id: answered by lookups alone (a hash covered by no id would need hashing).
        by_id = bool(self._hashes) and self._hashes <= set(held.values())
        self._hold(frozenset(user for user, hashed in held.items() if hashed in self._hashes), by_id)

    @classmethod
    def of_proven_ids(cls, hashes: Iterable[str], pseudonymizer: Pseudonymizer, ids: Iterable[str]) -> HashedUsers:
        """The users by ids already proven to be exactly these hashes' (each id's keyed hash one of ``hashes``, each
        hash some id's), so that no id is hashed here: a Spark executor's, from a sealed document whose binding to
        these hashes it checked (lakepurge.core.executor_ids). Only for ids so proven: an id given here is a user.
        """
        ordered = sorted(ids)  # (nearly free for ids sealed sorted, as executor_ids seals them)
        given, known = tuple(hashes), frozenset(ordered)
        # (hashes given more than once count more than once here: such users are then only slower to build)
        if not given or len(known) < len(given):  # cannot be every hash's: each id is hashed, as for ``known``
            return cls(given, pseudonymizer, known)
        users = cls.__new__(cls)
        users._given = given  # their set is made when first asked for (_hashes): answers by id never need it
        users._count = len(known)  # (one id a hash: proven)
        users._pseudonymizer = pseudonymizer
        users._hold(known, True, ordered)
        return users

    @functools.cached_property
    def _hashes(self) -> frozenset[str]:
        """The users' hashes as a set; of_proven_ids makes it only when first needed (hashing 20,000 hashes' strings
        into a set took ~1.5 ms of a new worker's opening, and its checks by id never ask)."""
        return frozenset(self._given)

    def _hold(self, known: frozenset[str], by_id: bool, ordered: list[str] | None = None) -> None:
        self._known = known
        self._by_id = by_id
        self._known_array: Any = None
        # The ids again with the automata the check before a write searches for them, compiled once for this purge
        # and shared by its threads; they go when this object goes (records.candidates.WantedIds).
        self._held: WantedIds | None = None
        if self._by_id:
            self._held = WantedIds(self._known, ordered)  # (without ordered ids, sorted when an automaton is built)
        self._memos = threading.local()

    def _known_as_array(self) -> Any:
        """The known ids as an Arrow array, made when none_of first needs it: the check before a write asks the
        automaton first (WantedIds), and an executor's opening of 20,000 ids no longer pays ~0.5 ms for an array its
        tasks may never use. (Threads that ask at once may each make it: the same array.)"""
        if self._known_array is None:
            import pyarrow as pa

            self._known_array = pa.array(list(self._known), pa.large_string())
        return self._known_array

    def __repr__(self) -> str:
        return f"HashedUsers({self._count} hashes, {len(self._known)} known by id)"

    def _memo(self) -> _Memo:
        memo: _Memo | None = getattr(self._memos, "memo", None)
        if memo is None:
            memo = self._memos.memo = _Memo(self._known)
        return memo

    def __contains__(self, user_id: object) -> bool:
        if not isinstance(user_id, str):
            return False
        if self._by_id:
            return user_id in self._known
        return self.each_contained([user_id])[0]

    def __len__(self) -> int:
        return self._count

    def ids_held(self) -> WantedIds | None:
        """Every user's raw id when this process was given them all (``known``), else None: for a search of bytes by
        the ids themselves (the check before a write), by an automaton compiled the first time it is asked and kept
        as long as this object. In memory only, as ``known``."""
        return self._held

    def hashes_of(self, user_ids: Iterable[str]) -> list[str]:
        """The keyed hashes of other ids (forms of these users' ids found elsewhere, e.g. truncated)."""
        return self._pseudonymizer.many(user_ids)

    def including(self, hashes: Iterable[str]) -> HashedUsers:
        """These users and the ids of these other hashes."""
        return HashedUsers([*self._hashes, *hashes], self._pseudonymizer, self._known)

    def each_contained(self, user_ids: list[str]) -> list[bool]:
        """Whether each id is one of the users, in order: the ids of a batch of records checked at once. Known ids and
        ids this thread has seen before are answered from memory; the others are hashed together, each once."""
        if self._by_id:
            return list(map(self._known.__contains__, user_ids))
        seen = self._memo().seen
        known = list(map(seen.get, user_ids))
        if None in known:
            new = dict.fromkeys(compress(user_ids, map(_IS_NONE, known)))  # each once, in order
            answers = dict(zip(new, map(self._hashes.__contains__, self._pseudonymizer.each(new)), strict=True))
            if len(seen) < MEMO_IDS:
                seen.update(answers)
            known = list(map(answers.get, user_ids, known))  # a new id's answer, else the one remembered
        return known  # type: ignore[return-value]

    def none_of(self, user_ids: Any) -> bool:
        """Whether none of these ids (UTF-8 bytes: a list, or an Arrow binary array; an invalid sequence reads as
        U+FFFD, as a decoder would) is one of the users: the answer verification wants for a whole object's ids.
        Known users are looked up in C (an Arrow array without a step per id); other ids this thread has seen
        before are answered by set operations; the others are hashed, each once."""
        if self._by_id:
            return self._none_known(user_ids)
        return self._none_hashed(user_ids)

    def _none_known(self, user_ids: Any) -> bool:
        """none_of when every user is known by id."""
        if not isinstance(user_ids, list):
            import pyarrow as pa
            import pyarrow.compute as pc

            try:
                valid = user_ids.cast(pa.large_string())  # checks the UTF-8
            except pa.ArrowInvalid:
                user_ids = user_ids.to_pylist()
            else:  # (Arrow hashes the value set on every call: the smaller side is hashed)
                probe, table = sorted((valid, self._known_as_array()), key=len, reverse=True)
                return not pc.any(pc.is_in(probe, value_set=table)).as_py()
        return self._known.isdisjoint(decoded_ids(user_ids))

    def _none_hashed(self, user_ids: Any) -> bool:
        """none_of by the hashes, with this thread's memory of ids."""
        if not isinstance(user_ids, list):
            user_ids = user_ids.to_pylist()
        memo = self._memo()
        # Each id once (a CSV column repeats its ids); a user found before is never clean.
        unknown = list(set(user_ids).difference(memo.clean))
        if not unknown:
            return True
        if not memo.wanted.isdisjoint(unknown):
            return False
        try:  # valid UTF-8 each (a newline ends any broken sequence): hashed as they are, not decoded and encoded
            b"\n".join(unknown).decode()
        except UnicodeDecodeError:
            owned = self.each_contained([user.decode("utf-8", "replace") for user in unknown])
        else:
            owned = list(map(self._hashes.__contains__, map(self._pseudonymizer.of_utf8, unknown)))
        if len(memo.clean) < MEMO_IDS:
            memo.clean.update(compress(unknown, map(operator.not_, owned)))
        memo.wanted.update(compress(unknown, owned))
        return True not in owned

    def expect(self, objects: int) -> None:
        """Tells the check before a write that this many more objects will be checked for these users (a purge task's
        objects): with the ids held, their automaton is compiled before the first when it will pay over them
        (records.candidates.WantedIds.expect)."""
        if self._held is not None:
            self._held.expect(objects)


def _utf8(user: str) -> bool:
    try:
        user.encode()
    except UnicodeEncodeError:
        return False
    return True
