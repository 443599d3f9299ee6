"""Settings for processes that are not started from the CLI (Lambda functions, Spark jobs on EMR).

The configuration comes from ``LAKEPURGE_CONFIG`` (a path to the TOML file shipped with the function) or
``LAKEPURGE_CONFIG_TOML`` (the TOML text itself, convenient as a template parameter). It is read and validated
once per process; a bad value fails the cold start with a message naming the key.
"""

from __future__ import annotations

import os
import tomllib
from functools import cache

from lakepurge.config import ConfigError, Settings, load_settings, parse_settings
from lakepurge.index import open_store
from lakepurge.index.base import IndexStore
from lakepurge.privacy import Pseudonymizer


@cache
def settings() -> Settings:
    if "LAKEPURGE_CONFIG_TOML" in os.environ:
        try:
            data = tomllib.loads(os.environ["LAKEPURGE_CONFIG_TOML"])
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"LAKEPURGE_CONFIG_TOML: not valid TOML: {exc}") from None
        return parse_settings(data, "LAKEPURGE_CONFIG_TOML")
    if "LAKEPURGE_CONFIG" in os.environ:
        return load_settings(os.environ["LAKEPURGE_CONFIG"])
    raise ConfigError("set LAKEPURGE_CONFIG (path to lakepurge.toml) or LAKEPURGE_CONFIG_TOML")


def settings_from(location: str | None) -> Settings:
    """A Spark job's settings: a TOML file, an ``s3://`` URI of one (how EMR Serverless jobs get it), or, for
    None, the environment as above."""
    if location is None:
        return settings()
    if not location.startswith("s3://"):
        return load_settings(location)
    from lakepurge import aws
    from lakepurge.s3uri import S3Uri

    uri = S3Uri.parse(location)
    body = aws.client("s3").get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read()
    try:
        data = tomllib.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{location}: not valid TOML: {exc}") from None
    return parse_settings(data, location)


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
    """Forget cached settings, secrets and connections (tests switch configurations between cases)."""
    from lakepurge import aws

    aws.clear_secrets()
    if index_store.cache_info().currsize:
        index_store().close()
    index_store.cache_clear()
    settings.cache_clear()
    pseudonymizer.cache_clear()
    require_pseudonymizer.cache_clear()
