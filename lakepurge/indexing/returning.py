"""Returning users: erased users whose records are in the lake again (a restored backup, a replayed pipeline).

Indexing counts, per object, the users on the suppression list (``returning_users``); this module names them: each such
object, each returning user by keyed hash, and the request that erased them. Raw ids are never returned: the only
place they are looked up is :func:`resolve_hashes`, which turns the hashes an operator copied from ``lakepurge
status`` back into the ids a purge needs, and reads them only among the users of the flagged objects.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.base import IndexStore

# How many flagged objects are read when none is given: each costs one read of its rows.
DEFAULT_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Returning:
    """One erased user found again in one object: by keyed hash, never by id."""

    s3path: str
    user_hash: str
    request_id: str  # the request that erased the user (first)
    lines: tuple[int, ...]  # the user's lines in the object (-1: the whole object)


def _flagged(store: IndexStore, limit: int) -> Iterable[tuple[str, dict[str, list[int]]]]:
    """Each object the index flags (returning users > 0) with its rows, up to limit objects."""
    for s3path in store.returning_user_objects(limit):
        yield s3path, store.object_rows(s3path)


def returning_users(store: IndexStore, pseudonymizer: Pseudonymizer, limit: int = DEFAULT_LIMIT) -> list[Returning]:
    """The erased users in the objects the index flags, with the request that erased each, by object then hash."""
    found: list[Returning] = []
    for s3path, rows in _flagged(store, limit):
        hashes = {pseudonymizer(user): lines for user, lines in rows.items()}
        requests = store.erased_requests(list(hashes))
        found.extend(
            Returning(s3path, user_hash, requests[user_hash], tuple(hashes[user_hash]))
            for user_hash in sorted(requests)
        )
    return found


def resolve_hashes(
    store: IndexStore, pseudonymizer: Pseudonymizer, hashes: Sequence[str], limit: int = DEFAULT_LIMIT
) -> list[str]:
    """The ids behind the given keyed hashes, among the users of the flagged objects, in the order of the hashes.

    Raises UnknownHashes naming those that match no returning user (not a user of a flagged object, or not on the
    suppression list): a hash is only purged again as what `lakepurge status` listed."""
    wanted = list(dict.fromkeys(hashes))
    asked = set(wanted)
    ids: dict[str, str] = {}
    for _, rows in _flagged(store, limit):
        for user in rows:
            user_hash = pseudonymizer(user)
            if user_hash in asked:
                ids.setdefault(user_hash, user)
    erased = store.erased_among(list(ids))
    missing = [user_hash for user_hash in wanted if user_hash not in erased]
    if missing:
        raise UnknownHashes(missing)
    return [ids[user_hash] for user_hash in wanted]


def record_erasure(store: IndexStore, pseudonymizer: Pseudonymizer, user_hashes: Sequence[str], request_id: str) -> int:
    """How every erasure ends, the operator's (`lakepurge purge`) and the workflow's (VerifyPurge) alike: its users go
    on the suppression list (keyed hashes), and the objects flagged for returning users are counted again, so that
    those the erasure cleaned are no longer flagged. Returns how many objects are still flagged."""
    store.record_erased(list(user_hashes), request_id)
    return recount(store, pseudonymizer)


def recount(store: IndexStore, pseudonymizer: Pseudonymizer, limit: int = DEFAULT_LIMIT) -> int:
    """Bring the flagged objects' counts of returning users back in line with their rows (a purge erased some of
    them again); an object re-indexed meanwhile keeps its own count. Returns how many objects are still flagged."""
    flagged = 0
    for s3path in store.returning_user_objects(limit):
        held = store.get_object(s3path)
        if held is None:
            continue
        count = len(store.erased_among([pseudonymizer(user) for user in held.lines_by_user]))
        if count != held.returning_users:
            store.set_returning_users(s3path, held.etag, count)
        flagged += count > 0
    return flagged


def purge_again_command(hashes: Sequence[str], config: str, default_config: str) -> str | None:
    """The one command that purges every returning user again, by hash (None when there is none)."""
    unique = list(dict.fromkeys(hashes))
    if not unique:
        return None
    words = ["lakepurge", "purge", *(word for user_hash in unique for word in ("--user-hash", user_hash)), "--yes"]
    if config != default_config:
        words += ["--config", config]
    return shlex.join(words)


class UnknownHashes(LookupError):
    """Hashes given to purge again that name no returning user."""

    def __init__(self, hashes: Sequence[str]) -> None:
        super().__init__(f"no returning user has the hash {', '.join(hashes)}")
        self.hashes = list(hashes)
