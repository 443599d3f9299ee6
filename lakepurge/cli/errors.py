"""The command line's exit codes and its errors that say what to do.

``lakepurge.cli.main`` is the one error boundary: a fault of the environment (region, endpoint, credentials,
database, a file, an argument, a missing package) becomes one line naming the cause and the fix, exit 2; --debug
adds the traceback. Messages never hold user ids: those are the arguments of lookup, request, purge and verify.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from lakepurge.core.config import ConfigError
from lakepurge.core.sparkutil import JavaMissing
from lakepurge.index.base import IndexMissing

# Every exit code of `lakepurge` (docs/COMMANDS.md): scripts branch on these.
EXIT_OK = 0  # done (a dry run, a rejected request and "in sync" are done too)
EXIT_FAILED = 1  # something failed, is not verified or drifted; or an unexpected error (--debug shows it)
EXIT_USAGE = 2  # a fault of the environment, the configuration or the arguments: one line names the fix
EXIT_REFUSED = 3  # refused by a safety limit, or a reviewed report that changed: nothing erased
EXIT_NOT_CERTIFIABLE = 4  # the index does not cover every dataset (lakepurge.indexing.coverage): nothing erased
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)

# Optional packages, by the extra that installs them.
_EXTRAS = {"pyspark": "spark", "py4j": "spark", "moto": "local", "werkzeug": "local", "flask": "local"}
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "InvalidToken",
    "AuthFailure",
}


class CliError(Exception):
    """A fault the person at the terminal can fix. ``code`` is stable, for scripts (``--json``)."""

    def __init__(self, code: str, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code


_NO_REGION = "no AWS region is set: export AWS_REGION=<region> (e.g. eu-west-1), or set region in an AWS profile"


def endpoint() -> str | None:
    """AWS_ENDPOINT_URL, when set: an S3-compatible endpoint (the local stack) instead of AWS."""
    return os.environ.get("AWS_ENDPOINT_URL") or None


def site(url: str) -> str:
    """scheme://host:port of a URL: the path and query of a request may name an object (and keys can hold ids)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else "the endpoint"


def check_aws_environment(need_region: bool = True) -> None:
    """Refuse a scheme-less or malformed AWS_ENDPOINT_URL[_<SERVICE>] and a missing region before any call."""
    from urllib.parse import urlsplit

    for name, value in sorted(os.environ.items()):
        if name.startswith("AWS_ENDPOINT_URL") and value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise CliError(
                    "bad_endpoint",
                    f"{name}={value!r} is not a URL: write it with its scheme, e.g. http://{value.split('://')[-1]}"
                    f" (or unset {name} to use AWS)",
                )
    if need_region:
        import boto3

        if not boto3.session.Session().region_name:
            raise CliError("no_region", _NO_REGION)


def _aws_setup_error(exc: Exception) -> CliError | None:
    """No region, no credentials, an endpoint that does not answer."""
    from botocore import exceptions as bx

    custom = endpoint()
    if isinstance(exc, bx.NoRegionError):
        return CliError("no_region", _NO_REGION)
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return CliError(
            "no_credentials",
            "no AWS credentials found: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            " (aws configure, aws sso login)",
        )
    if isinstance(exc, bx.TokenRetrievalError | bx.SSOTokenLoadError | bx.UnauthorizedSSOTokenError):
        return CliError("no_credentials", "the AWS SSO session has expired: run aws sso login, then try again")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ConnectionClosedError):
        if custom:
            return CliError(
                "endpoint_unreachable",
                f"cannot connect to AWS_ENDPOINT_URL {site(custom)}: start the service there, or fix or unset"
                " AWS_ENDPOINT_URL",
            )
        url = str(getattr(exc, "kwargs", {}).get("endpoint_url", ""))
        return CliError(
            "endpoint_unreachable",
            f"cannot connect to AWS ({site(url)}): check the network connection and AWS_REGION"
            " (or set AWS_ENDPOINT_URL for an S3-compatible endpoint)",
        )
    return None


def _aws_refusal(exc: Exception) -> CliError | None:
    """AWS answered no: rejected credentials, a denied permission, a bucket that does not exist. Only the error
    code and the operation are repeated: AWS's own message can name the object, and keys can hold user ids."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    error = exc.response.get("Error", {})
    code, operation = str(error.get("Code", "")), exc.operation_name
    if code in _CREDENTIAL_CODES:
        return CliError(
            "credentials_rejected",
            f"AWS rejected the credentials ({code} on {operation}): renew them or fix AWS_ACCESS_KEY_ID,"
            " AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or AWS_PROFILE",
        )
    if code in ("AccessDenied", "AccessDeniedException", "Forbidden", "403"):
        return CliError(
            "access_denied",
            f"AWS denied {operation} ({code}): give these credentials that permission (docs/OPERATIONS.md),"
            " or use a role that has it",
        )
    if code == "NoSuchBucket":
        custom = endpoint()
        where = f" on {site(custom)}" if custom else ""
        return CliError(
            "no_such_bucket",
            f"bucket {error.get('BucketName') or '(named in the configuration)'} does not exist{where}: fix"
            " datasets.location or reports.location, or create the bucket",
        )
    return None


def _local_error(exc: Exception, config: str) -> CliError | None:
    """A missing optional package or Java, PostgreSQL down, a missing file, a scheme-less endpoint."""
    package = (getattr(exc, "name", None) or "").split(".")[0]
    if isinstance(exc, ImportError) and package in _EXTRAS:
        return CliError(
            "missing_dependency",
            f"{package} is not installed and this command needs it: pip install 'lakepurge[{_EXTRAS[package]}]'",
        )
    if type(exc).__name__ == "PySparkRuntimeError" and "JAVA_GATEWAY_EXITED" in str(exc):
        return CliError(
            "missing_dependency", "Spark could not start Java: install Java 17 and put it on PATH (or set JAVA_HOME)"
        )
    if "psycopg" in sys.modules and isinstance(exc, sys.modules["psycopg"].OperationalError):
        lines = str(exc).strip().splitlines()
        cause = lines[0].removeprefix("connection failed: ") if lines else "connection failed"
        return CliError(
            "database_unreachable",
            f"cannot use the PostgreSQL database ({cause}): start the server, or fix the dsn of [index] (or of a"
            f" [[relational]] table) in {config}",
        )
    if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError) and exc.filename:
        what = {FileNotFoundError: "no such file", IsADirectoryError: "is a directory"}.get(type(exc), "not readable")
        return CliError("missing_file", f"{exc.filename}: {what}: check the path")
    if isinstance(exc, ValueError) and str(exc).startswith("Invalid endpoint"):
        return CliError(
            "bad_endpoint",
            "AWS_ENDPOINT_URL is not a URL: write it with its scheme (http://host:port), or unset it to use AWS",
        )
    return None


def explain(exc: BaseException, config: str = "the configuration file") -> CliError:
    """The one-line cause and fix of a failure; anything not recognised is an unexpected error (exit 1).
    ``config`` names the configuration file the command read (``--config``)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, ConfigError):
        return CliError("config", f"configuration error: {exc}")
    if isinstance(exc, JavaMissing):
        return CliError("missing_dependency", str(exc))
    if isinstance(exc, IndexMissing):
        return CliError(
            "index_missing",
            f"{exc}: nothing was created (commands that only read never do): build the index with `lakepurge index"
            f" reconcile` (or `index backfill`), or fix [index] in {config}",
        )
    if isinstance(exc, Exception):
        known = _local_error(exc, config)
        if known is None and "botocore" in sys.modules:
            known = _aws_setup_error(exc) or _aws_refusal(exc)
        if known is not None:
            return known
    detail = type(exc).__name__
    if "botocore" in sys.modules and isinstance(exc, sys.modules["botocore"].exceptions.ClientError):
        detail += f" {exc.response.get('Error', {}).get('Code', '')} on {exc.operation_name}"
    return CliError(
        "internal",
        f"unexpected error ({detail}): run again with --debug for the traceback, and report it if it persists",
        EXIT_FAILED,
    )


def one_line(text: str, users: Sequence[str]) -> str:
    """The message on one line, with any user id given on the command line masked (belt and braces)."""
    line = " ".join(text.split())
    for user in sorted(users, key=len, reverse=True):
        if len(user.strip()) >= 3:
            line = line.replace(user, "<user id>")
    return line
