"""Settings for processes that are not started from the CLI (Lambda functions, Spark jobs on EMR).

Where the configuration comes from, first match wins:

- ``LAKEPURGE_CONFIG_URI``: an S3 object (``s3://bucket/key``, what the SAM template deploys), an SSM parameter
  (``ssm:/path/name``) or an AppConfig profile (``appconfig://application/environment/profile``), read through
  Powertools Parameters' cache (lakepurge.core.configsource) and read again once older than ``LAKEPURGE_CONFIG_MAX_AGE``
  seconds (default 300). A changed configuration reaches warm functions within that time, without a redeploy:
  the Settings object is rebuilt when the text changed, and the index connection and the keyed hash with it when
  their sections did.
- ``LAKEPURGE_CONFIG_TOML``: the TOML text itself, for small local setups and tests (a Lambda environment holds at
  most 4 KB, about 15 datasets); read once per process.
- ``LAKEPURGE_CONFIG``: a path to a TOML file (local use, the demo); read once per process.

Every source is validated when read; a bad value fails with a message naming the source and the key. With
``LAKEPURGE_CONFIG_SHA256`` set (the stack's ConfigSha256), a text with another SHA-256 is refused before it is
parsed, whatever its source (lakepurge.core.configsource.check_pin).
"""

from __future__ import annotations

import hashlib
import os
import threading
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from lakepurge.core import configsource
from lakepurge.core.config import ConfigError, Settings, load_settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_existing, open_store
from lakepurge.index.base import IndexStore

URI_VARIABLE = configsource.URI_VARIABLE
TOML_VARIABLE = "LAKEPURGE_CONFIG_TOML"
PATH_VARIABLE = "LAKEPURGE_CONFIG"
# Any of these tells a process (and a local Spark job it starts) where its configuration is.
CONFIG_VARIABLES = (URI_VARIABLE, TOML_VARIABLE, PATH_VARIABLE)


@cache
def _loader(uri: str, max_age: float, pinned: str | None) -> configsource.ConfigLoader:
    return configsource.ConfigLoader(uri, max_age, pinned)


@cache
def _static_settings() -> Settings:
    pinned = configsource.pin_from_environment()
    if TOML_VARIABLE in os.environ:
        text = os.environ[TOML_VARIABLE]
        configsource.check_pin(configsource.sha256_of(text), TOML_VARIABLE, pinned)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{TOML_VARIABLE}: not valid TOML: {exc}") from None
        return parse_settings(data, TOML_VARIABLE)
    if PATH_VARIABLE in os.environ:
        return _pinned_file(os.environ[PATH_VARIABLE], pinned)
    raise ConfigError(
        f"set {URI_VARIABLE} (s3://bucket/key or ssm:/name of lakepurge.toml), {PATH_VARIABLE} (path to "
        f"lakepurge.toml) or {TOML_VARIABLE}"
    )


def settings() -> Settings:
    """The process's settings: the same object while the configuration's text stays the same."""
    uri = os.environ.get(URI_VARIABLE, "").strip()
    if uri:
        return _loader(uri, configsource.max_age_from_environment(), configsource.pin_from_environment()).settings()
    return _static_settings()


def settings_from(location: str | None) -> Settings:
    """A Spark job's settings, read once: a configuration URI (``s3://``, ``ssm:``, ``appconfig://``: how EMR
    Serverless jobs get it, launcher.config_uri), a local TOML file, or, for None, the environment as above. With
    LAKEPURGE_CONFIG_SHA256 set (the stack sets it in the Spark application's driver environment), any other text is
    refused."""
    if location is None:
        return settings()
    pinned = configsource.pin_from_environment()
    if location.startswith(("s3://", "ssm:", "appconfig://", "arn:")):
        text = configsource.read_text(location, max_age=0)
        configsource.check_pin(configsource.sha256_of(text), location, pinned)
        return configsource.settings_from_text(text, location)
    return _pinned_file(location, pinned)


def _pinned_file(path: str, pinned: str | None) -> Settings:
    if pinned is not None:
        try:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            return load_settings(path)  # its own error: missing or unreadable, named
        configsource.check_pin(digest, path, pinned)
    return load_settings(path)


# What is built from a section of the settings is kept while that section stays equal, and rebuilt (the old
# index connection closed) when a reloaded configuration changed it. Lambda handlers run one invocation at a time;
# the lock covers threads of a job.
_built: dict[str, tuple[Any, Any]] = {}
_lock = threading.Lock()


def _kept(name: str, section: Any, build: Any, discard: Any = None) -> Any:
    with _lock:
        previous = _built.get(name)
        if previous is not None and previous[0] == section:
            return previous[1]
        value = build()
        _built[name] = (section, value)
    if previous is not None and discard is not None:
        discard(previous[1])
    return value


def pseudonymizer() -> Pseudonymizer | None:
    """The keyed hash of user ids, or None when the key is not configured (suppression checks are then off)."""
    privacy = settings().privacy
    found: Pseudonymizer | None = _kept("pseudonymizer", privacy, lambda: Pseudonymizer.optional(privacy))
    return found


def require_pseudonymizer() -> Pseudonymizer:
    """The keyed hash of user ids, for the workflow (which cannot run without it)."""
    privacy = settings().privacy
    found: Pseudonymizer = _kept("require_pseudonymizer", privacy, lambda: Pseudonymizer.from_config(privacy))
    return found


def index_store(create: bool = True) -> IndexStore:
    """One index connection per process, reused across warm invocations (reopened if [index] changed). A function
    that only reads the index passes create=False: nothing is created (its role may be read-only), and an index
    never built is IndexMissing."""
    index = settings().index
    store: IndexStore = _kept(
        "index_store", index, lambda: open_store(index) if create else open_existing(index), lambda old: old.close()
    )
    return store


def reset() -> None:
    """Forget cached settings, configuration reads, secrets and connections (tests switch configurations)."""
    from lakepurge.core import aws

    aws.clear_secrets()
    configsource.clear_cache()
    with _lock:
        built = dict(_built)
        _built.clear()
    if "index_store" in built:
        built["index_store"][1].close()
    _static_settings.cache_clear()
    _loader.cache_clear()
