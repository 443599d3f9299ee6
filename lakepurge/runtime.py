"""Settings for processes that are not started from the CLI (Lambda functions, Spark jobs on EMR).

The configuration comes from ``LAKEPURGE_CONFIG`` (a path to the TOML file shipped with the function) or
``LAKEPURGE_CONFIG_TOML`` (the TOML text itself, convenient as a template parameter). It is read and validated
once per process; a bad value fails the cold start with a message naming the key.
"""

from __future__ import annotations

import os
from functools import cache

from lakepurge.config import ConfigError, Settings, load_settings, parse_settings
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.privacy import Pseudonymizer


@cache
def settings() -> Settings:
    if "LAKEPURGE_CONFIG_TOML" in os.environ:
        import tomllib

        try:
            data = tomllib.loads(os.environ["LAKEPURGE_CONFIG_TOML"])
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"LAKEPURGE_CONFIG_TOML: not valid TOML: {exc}") from None
        return parse_settings(data, "LAKEPURGE_CONFIG_TOML")
    if "LAKEPURGE_CONFIG" in os.environ:
        return load_settings(os.environ["LAKEPURGE_CONFIG"])
    raise ConfigError("set LAKEPURGE_CONFIG (path to lakepurge.toml) or LAKEPURGE_CONFIG_TOML")


@cache
def pseudonymizer() -> Pseudonymizer | None:
    """The keyed hash of user ids, or None when the key is not configured (suppression checks are then off)."""
    return Pseudonymizer.optional(settings().privacy)


@cache
def require_pseudonymizer() -> Pseudonymizer:
    """The keyed hash of user ids, for the workflow (which cannot run without it)."""
    return Pseudonymizer.from_config(settings().privacy)


@cache
def index_store() -> IndexStore:
    """One index connection per process, reused across warm invocations."""
    return open_store(settings().index)


def reset() -> None:
    """Forget cached settings and connections (tests switch configurations between cases)."""
    if index_store.cache_info().currsize:
        index_store().close()
    index_store.cache_clear()
    settings.cache_clear()
    pseudonymizer.cache_clear()
    require_pseudonymizer.cache_clear()
