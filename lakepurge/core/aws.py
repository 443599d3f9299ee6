"""boto3 clients. boto3 itself honours AWS_ENDPOINT_URL and AWS_REGION/AWS_DEFAULT_REGION, so nothing here
overrides them: the same code talks to AWS, a moto server or any S3-compatible endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.utils import parse_timestamp

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

# Adaptive retries absorb S3 503 SlowDown and DynamoDB throttling without hand-written loops.
_CLIENT_CONFIG = Config(retries={"max_attempts": 10, "mode": "adaptive"}, max_pool_connections=32)
# The command line has a person waiting: a wrong endpoint or a closed port fails in seconds, not a retry storm.
_CLI_CONFIG = Config(connect_timeout=2, retries={"max_attempts": 3, "mode": "adaptive"}, max_pool_connections=32)
_active = {"config": _CLIENT_CONFIG}


def configure(cli: bool) -> bool:
    """Clients made from now on use the command line's settings (cli=True) or the default ones (Lambdas, jobs).
    Returns the previous setting, to restore it."""
    previous = _active["config"] is _CLI_CONFIG
    chosen = _CLI_CONFIG if cli else _CLIENT_CONFIG
    if _active["config"] is not chosen:
        _active["config"] = chosen
        client.cache_clear()
    return previous


@cache
def client(service: str) -> Any:
    """One client per service and process (clients are thread-safe; sessions are not)."""
    core = botocore.session.get_session()
    loader = _data_loader()
    core.register_component("data_loader", loader)
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_timestamp)
    session = boto3.session.Session(botocore_session=core)
    loader.search_paths[:] = dict.fromkeys(loader.search_paths)  # each boto3 session adds its folder again
    return session.client(service, config=_active["config"])  # type: ignore[call-overload]


@cache
def _data_loader() -> Any:
    """botocore's reader of its own JSON (endpoints, service models), kept per process: each new session read it
    again (~0.1 s a client). The sessions stay new, so credentials are resolved afresh for each client, as before."""
    return botocore.loaders.create_loader()


def _timestamp(value: Any) -> Any:
    """A response's timestamp: ISO 8601 (each listed object's LastModified) by the standard library, ~1,000x faster
    than botocore's dateutil parser, which took ~0.1 s per 1,000 keys listed; any other form (an RFC 822 header,
    epoch seconds) by botocore's."""
    if isinstance(value, str) and value[4:5] == "-":
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return parse_timestamp(value)


# Presigned links are signed with SigV4 (X-Amz-Algorithm=AWS4-HMAC-SHA256): botocore may presign S3 GETs with SigV2
# (AWSAccessKeyId=...&Signature=...&Expires=...), which S3 refuses for SSE-KMS objects such as the export archives.
_PRESIGN = Config(signature_version="s3v4")


@dataclass(frozen=True)
class Presigner:
    """An S3 client that presigns with SigV4, and the credentials it signs with: a link lives no longer than they do
    when they are temporary (lakepurge.access.export.presigned_link)."""

    client: Any
    credentials: Any  # botocore Credentials (RefreshableCredentials: temporary, with their expiry), or None


def presigner() -> Presigner:
    """A SigV4 presigner on the process's credentials, as boto3 finds them now."""
    session = boto3.session.Session()
    client = session.client("s3", config=_active["config"].merge(_PRESIGN))
    return Presigner(client, session.get_credentials())


@dataclass(frozen=True)
class Clients:
    s3: S3Client
    kms: Any  # no stubs for KMS in the dev dependencies
    sqs: SQSClient | None = None  # reads the indexer's dead-letter queue; None: the process's SQS client when needed

    @classmethod
    def from_environment(cls) -> Clients:
        """The process's S3, KMS and SQS clients (boto3's standard settings, AWS_ENDPOINT_URL locally)."""
        return cls(client("s3"), client("kms"), client("sqs"))


# How long a secret read at run time is kept before it is read again: a rotated secret (the PostgreSQL password)
# reaches every warm function and job within this many seconds, without a redeploy.
SECRET_MAX_AGE_SECONDS = 300


class SecretUnavailable(RuntimeError):
    """A configured secret could not be read (missing, no permission, empty). The message names the secret, never
    its value."""


def secret_string(name: str, max_age: int = SECRET_MAX_AGE_SECONDS) -> str:
    """The SecretString of a Secrets Manager secret (ARN or name), through Powertools Parameters' cache: read at most
    once per ``max_age`` seconds per process (a value read with max_age 0 is not kept). ``clear_secrets`` forgets
    what was read."""
    from aws_lambda_powertools.utilities import parameters

    try:
        value = parameters.get_secret(name, max_age=max_age)
    except parameters.exceptions.GetParameterError as exc:
        # the provider's message is botocore's (the secret's name and the error code), never a value
        raise SecretUnavailable(f"secret {name}: could not be read: {exc}") from None
    if not isinstance(value, str) or not value:
        raise SecretUnavailable(f"secret {name}: no SecretString (a binary or empty secret)")
    return value


def clear_secrets() -> None:
    """Forget every secret read so far: the next read asks Secrets Manager (tests; after a rotation)."""
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()
