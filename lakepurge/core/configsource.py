"""Where a deployed function's or Spark job's configuration lives, read through Powertools Parameters' cache.

A configuration URI names one of:

- ``s3://bucket/key``: an S3 object (what the SAM template deploys: no size limit, versioned, SSE-KMS);
- ``ssm:/path/name`` (or ``ssm:name``, or the parameter's ARN): an SSM Parameter Store parameter, a
  SecureString decrypted (at most 4 KB in the standard tier, 8 KB in the advanced one);
- ``appconfig://application/environment/profile``: an AWS AppConfig freeform configuration profile.

The text is kept ``max_age`` seconds per process (Powertools' cache of its providers; Powertools has no S3
provider, :class:`S3Provider` is one on the same base), then read again: a changed object or parameter reaches
every warm function within that time, without a redeploy. :class:`ConfigLoader` parses and validates the text only
when it differs from the last one read, so the Settings object stays the same while the text does.

Whoever can write the configuration controls the purge (approvers, the approval page's URL, safety limits, id
fields). A deployment pins the one it runs on: ``LAKEPURGE_CONFIG_SHA256`` (the stack's ConfigSha256) is the
SHA-256 of the text every function and job accepts; another text is refused, unparsed, until the pinned one is
back or the deployment pins the new one (:func:`check_pin`).

Errors name the source (its URI) and the cause, never the configuration's contents.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.parameters import BaseProvider, GetParameterError

from lakepurge.core import aws
from lakepurge.core.config import ConfigError, Settings, parse_settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3uri import S3Uri

log = get_logger()

URI_VARIABLE = "LAKEPURGE_CONFIG_URI"
MAX_AGE_VARIABLE = "LAKEPURGE_CONFIG_MAX_AGE"
PIN_VARIABLE = "LAKEPURGE_CONFIG_SHA256"
DEFAULT_MAX_AGE_SECONDS = 300.0
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

SourceKind = Literal["s3", "ssm", "appconfig"]

_SSM_ARN = re.compile(r"^arn:aws[a-z-]*:ssm:[a-z0-9-]+:\d{12}:parameter(/.+)$")
_APPCONFIG = re.compile(r"^appconfig://([^/]+)/([^/]+)/([^/]+)$")


@dataclass(frozen=True)
class ConfigSource:
    """A parsed configuration URI: its kind and the name its provider reads."""

    uri: str
    kind: SourceKind
    name: str  # s3: the URI itself; ssm: the parameter name; appconfig: the profile
    application: str = ""  # appconfig only
    environment: str = ""  # appconfig only

    @classmethod
    def parse(cls, uri: str) -> ConfigSource:
        if uri.startswith("s3://"):
            try:
                parsed = S3Uri.parse(uri)
            except ValueError as exc:
                raise ConfigError(f"{URI_VARIABLE} {uri}: {exc}") from None
            if not parsed.key or parsed.key.endswith("/"):
                raise ConfigError(f"{URI_VARIABLE} {uri}: names no object (s3://bucket/key)")
            return cls(uri, "s3", uri)
        if (arn := _SSM_ARN.match(uri)) is not None:
            return cls(uri, "ssm", arn.group(1))
        if uri.startswith("ssm:"):
            name = uri.removeprefix("ssm:")
            if not name or name == "/":
                raise ConfigError(f"{URI_VARIABLE} {uri}: names no parameter (ssm:/path/name)")
            return cls(uri, "ssm", name)
        if (app := _APPCONFIG.match(uri)) is not None:
            return cls(uri, "appconfig", app.group(3), application=app.group(1), environment=app.group(2))
        raise ConfigError(
            f"{URI_VARIABLE} {uri!r}: not a configuration URI (s3://bucket/key, ssm:/parameter/name or "
            "appconfig://application/environment/profile)"
        )


def max_age_from_environment() -> float:
    """LAKEPURGE_CONFIG_MAX_AGE: seconds a read configuration is kept (default 300; 0 reads it on every use)."""
    raw = os.environ.get(MAX_AGE_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MAX_AGE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{MAX_AGE_VARIABLE}={raw!r}: must be a number of seconds, e.g. 300") from None
    if not value >= 0:  # also refuses NaN
        raise ConfigError(f"{MAX_AGE_VARIABLE}={raw!r}: must be 0 or more seconds")
    return value


def pin_from_environment() -> str | None:
    """LAKEPURGE_CONFIG_SHA256: the SHA-256 (hex) of the only configuration text this process accepts; unset or
    empty: any (a deployment not pinned yet, the command line, tests)."""
    raw = os.environ.get(PIN_VARIABLE, "").strip().lower()
    if not raw:
        return None
    if not _SHA256.match(raw):
        raise ConfigError(f"{PIN_VARIABLE}={raw[:80]!r}: must be the configuration's SHA-256, 64 hex digits")
    return raw


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_pin(digest: str, source: str, pinned: str | None) -> None:
    """Refuse a configuration whose SHA-256 is not the pinned one (ConfigError naming both hashes, never the text)."""
    if pinned is not None and digest != pinned:
        raise ConfigError(
            f"{source}: refused: its SHA-256 {digest} is not the one this deployment pins ({PIN_VARIABLE}={pinned}):"
            " publish the pinned configuration again, or deploy the new one's hash (ConfigSha256)"
        )


class S3Provider(BaseProvider):
    """A Powertools Parameters provider of S3 objects: ``get("s3://bucket/key")`` is the object's text, cached like
    the SSM and Secrets Manager providers' values."""

    def __init__(self, client: Any) -> None:
        super().__init__(client=client)
        self.client = client

    def _get(self, name: str, **sdk_options: Any) -> str:
        uri = S3Uri.parse(name)
        body: bytes = self.client.get_object(Bucket=uri.bucket, Key=uri.key, **sdk_options)["Body"].read()
        return body.decode("utf-8")

    def _get_multiple(self, path: str, **sdk_options: Any) -> dict[str, str]:
        raise NotImplementedError("the S3 provider reads one object at a time")


_providers: dict[tuple[str, ...], Any] = {}


def _provider(source: ConfigSource) -> Any:
    """One provider (and so one cache) per kind of source, per process; created with lakepurge's boto3 clients,
    which honour AWS_ENDPOINT_URL like every other client."""
    key: tuple[str, ...] = (source.kind, source.application, source.environment)
    if key not in _providers:
        if source.kind == "s3":
            _providers[key] = S3Provider(aws.client("s3"))
        elif source.kind == "ssm":
            _providers[key] = parameters.SSMProvider(boto3_client=aws.client("ssm"))
        else:
            _providers[key] = parameters.AppConfigProvider(
                environment=source.environment,
                application=source.application,
                boto3_client=aws.client("appconfigdata"),
            )
    return _providers[key]


def read_text(uri: str, max_age: float = DEFAULT_MAX_AGE_SECONDS) -> str:
    """The configuration's text, from the provider's cache while younger than max_age seconds, else read now."""
    source = ConfigSource.parse(uri)
    options: dict[str, Any] = {"decrypt": True} if source.kind == "ssm" else {}
    try:
        # Powertools types max_age as int; its cache takes any number of seconds (timedelta(seconds=max_age)).
        value = _provider(source).get(source.name, max_age=max_age, **options)
    except GetParameterError as exc:
        # botocore's message (the error code and the operation) or the decoding error: never the contents
        raise ConfigError(f"{uri}: the configuration could not be read: {exc}") from None
    if isinstance(value, bytes):  # AppConfig returns bytes
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{uri}: the configuration is not UTF-8 text: {exc.reason}") from None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{uri}: the configuration is empty")
    return value


def settings_from_text(text: str, source: str) -> Settings:
    """Parse and validate a configuration's TOML text; errors name the source."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return parse_settings(data, source)


def clear_cache() -> None:
    """Forget every configuration read so far: the next read asks its source (tests; after a change that must
    apply now). Powertools' clear_caches does not reach these providers: they are lakepurge's own."""
    _providers.clear()


class ConfigLoader:
    """The settings at a configuration URI, read through the cache and rebuilt only when the text changes.

    A text that fails to parse or validate, or is not the pinned one (``pinned``: its SHA-256; it is then not even
    parsed), raises ConfigError naming the URI on every use until it is fixed (the last good settings are not kept
    in its place: a deployment runs on the configuration it was given or not at all)."""

    def __init__(self, uri: str, max_age: float = DEFAULT_MAX_AGE_SECONDS, pinned: str | None = None) -> None:
        ConfigSource.parse(uri)  # a malformed URI fails here, at the cold start
        self.uri = uri
        self.max_age = max_age
        self.pinned = pinned
        self._digest: str | None = None
        self._text: str | None = None  # the cached text object last seen: the same object, nothing to compare
        self._settings: Settings | None = None
        self._error: ConfigError | None = None
        self.loads = 0  # how many different texts were parsed (an unchanged text is not parsed again)

    def settings(self) -> Settings:
        text = read_text(self.uri, self.max_age)
        if text is self._text and self._error is None and self._settings is not None:
            return self._settings
        self._text = text
        digest = sha256_of(text)
        if digest != self._digest:
            self._digest, self._settings, self._error = digest, None, None
            self.loads += 1
            try:
                check_pin(digest, self.uri, self.pinned)
                self._settings = settings_from_text(text, self.uri)
            except ConfigError as exc:
                self._error = exc
            # which version a process runs on: the source and a hash of the text, never the text
            log.info(
                "configuration read",
                extra={
                    "source": self.uri,
                    "sha256": digest[:16],
                    "pinned": self.pinned is not None,
                    "valid": self._error is None,
                    "datasets": len(self._settings.datasets) if self._settings is not None else None,
                },
            )
        if self._error is not None:
            raise ConfigError(str(self._error))
        assert self._settings is not None
        return self._settings
