"""The ``lakepurge`` command line.

Human output goes to stderr; ``--json`` prints exactly one JSON document on stdout for scripts.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from lakepurge.config import ConfigError, Settings, load_settings
from lakepurge.s3uri import S3Uri

if TYPE_CHECKING:
    from lakepurge.launch import SparkJob
    from lakepurge.privacy import Pseudonymizer

DEFAULT_CONFIG = "lakepurge.toml"
# The index does not cover every dataset (lakepurge.coverage): nothing can be certified until it does.
EXIT_NOT_CERTIFIABLE = 4


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.written = False  # a document is on stdout already: an error after it adds none

    def say(self, text: str) -> None:
        print(text, file=sys.stderr)

    def result(self, document: Any) -> None:
        if self.as_json:
            self.written = True
            sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


# --- errors that say what to do -------------------------------------------------------------------------------
# main() is the one error boundary: a fault of the environment (region, endpoint, credentials, database, a file,
# an argument, a missing package) becomes one line naming the cause and the fix, exit 2; --debug adds the
# traceback. Messages never hold user ids: those are the arguments of lookup, request, purge and verify.

EXIT_USAGE = 2
EXIT_INTERNAL = 1
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


def _endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or None


def _site(url: str) -> str:
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

    endpoint = _endpoint()
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
        if endpoint:
            return CliError(
                "endpoint_unreachable",
                f"cannot connect to AWS_ENDPOINT_URL {_site(endpoint)}: start the service there, or fix or unset"
                " AWS_ENDPOINT_URL",
            )
        url = str(getattr(exc, "kwargs", {}).get("endpoint_url", ""))
        return CliError(
            "endpoint_unreachable",
            f"cannot connect to AWS ({_site(url)}): check the network connection and AWS_REGION"
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
        endpoint = _endpoint()
        where = f" on {_site(endpoint)}" if endpoint else ""
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


def explain(exc: BaseException, config: str = DEFAULT_CONFIG) -> CliError:
    """The one-line cause and fix of a failure; anything not recognised is an internal error (exit 1)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, ConfigError):
        return CliError("config", f"configuration error: {exc}")
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
        EXIT_INTERNAL,
    )


def _one_line(text: str, users: Sequence[str]) -> str:
    """The message on one line, with any user id given on the command line masked (belt and braces)."""
    line = " ".join(text.split())
    for user in sorted(users, key=len, reverse=True):
        if len(user.strip()) >= 3:
            line = line.replace(user, "<user id>")
    return line


def _known_datasets(args: argparse.Namespace, settings: Settings) -> list[str]:
    """The --dataset names, each checked against the configuration (a typo is an error, not an empty run)."""
    import difflib

    names = [d.name for d in settings.datasets]
    for name in getattr(args, "dataset", None) or []:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            listed = ", ".join(names) if names else "none: add [[datasets]] tables"
            raise CliError(
                "unknown_dataset", f"no dataset named {name!r}{hint} in {args.config}; the datasets are: {listed}"
            )
    return list(getattr(args, "dataset", None) or [])


def _settings(args: argparse.Namespace) -> Settings:
    if not os.path.exists(args.config):
        raise CliError(
            "missing_file",
            f"{args.config}: no such configuration file: create one with `lakepurge init`, or pass --config FILE",
        )
    check_aws_environment(need_region=False)
    settings = load_settings(args.config)
    _known_datasets(args, settings)
    return settings


def _need_spark() -> None:
    """A command that runs local Spark fails before touching anything when pyspark or Java is missing."""
    import importlib
    import shutil

    importlib.import_module("pyspark")  # an ImportError names the extra to install (explain)
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))) and not shutil.which("java"):
        raise CliError(
            "missing_dependency", "Java is not installed and Spark needs it: install Java 17 (or set JAVA_HOME)"
        )


def _lake_settings(args: argparse.Namespace, spark: bool = False) -> Settings:
    """The configuration of a command that reads or writes the lake: a dataset holding a Delta, Iceberg or Hudi
    table is refused (a configuration error, exit 2) before anything is touched."""
    from lakepurge import aws
    from lakepurge.tableformats import refuse_table_formats

    settings = _settings(args)
    if spark:
        _need_spark()
    check_aws_environment()
    refuse_table_formats(aws.client("s3"), settings.datasets)
    return settings


def _remote(args: argparse.Namespace, out: Output, job: SparkJob) -> int:
    """Run a heavy command's job on EMR Serverless and follow it (``--on emr-serverless``)."""
    from lakepurge.remote import run_remote

    settings = _settings(args)
    check_aws_environment()
    run = run_remote(settings, job, out.say)
    out.say(f"{job.script}: {run.status.state.lower()} ({run.status.detail}); logs: {run.logs}")
    out.result(run.summary())
    return 0 if run.succeeded else 1


def cmd_index_backfill(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.backfill import run_backfill
    from lakepurge.remote import backfill_job
    from lakepurge.sparkutil import spark_session

    if args.on == "emr-serverless":
        return _remote(args, out, backfill_job(args.dataset, args.force))
    settings = _lake_settings(args, spark=True)
    out.say(f"backfilling {len(settings.datasets)} dataset(s) on local Spark ...")
    with spark_session("lakepurge-backfill") as spark:
        result = run_backfill(spark, settings, force=args.force, datasets=args.dataset)
    out.say(
        f"objects {result.objects}  read {result.scanned}  noncurrent versions {result.versions}  records"
        f" {result.records}  rows {result.rows}  unindexable lines {result.unindexable}  failed {len(result.failed)}"
    )
    for path, error in result.failed:
        out.say(f"  FAILED {path}: {error}")
    out.result(asdict(result))
    return 1 if result.failed else 0


def cmd_index_reconcile(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.backfill import run_reconcile
    from lakepurge.remote import reconcile_job

    if args.on == "emr-serverless":
        return _remote(args, out, reconcile_job(args.dataset, args.report_only))
    settings = _lake_settings(args, spark=args.spark)
    if args.spark:
        from lakepurge.sparkutil import spark_session

        with spark_session("lakepurge-reconcile") as spark:
            results = run_reconcile(spark, settings, args.dataset, fix=not args.report_only)
    else:
        results = run_reconcile(None, settings, args.dataset, fix=not args.report_only)
    for r in results:
        out.say(
            f"{r.dataset}: {r.objects} object(s) listed, {r.versions} noncurrent version(s) read;"
            f" missing {r.missing}  changed {r.changed}  gone {r.gone}  fixed {r.fixed}  left {r.drift}"
        )
        for path, error in r.failed:
            out.say(f"  FAILED {path}: {error}")
    out.result({"datasets": [asdict(r) for r in results]})
    return 1 if any(r.drift for r in results) else 0


def cmd_index_object(args: argparse.Namespace, out: Output) -> int:
    from lakepurge import aws
    from lakepurge.index import open_store
    from lakepurge.indexer import index_object
    from lakepurge.privacy import Pseudonymizer

    try:
        uri = S3Uri.parse(args.uri)
    except ValueError:  # the message would repeat the argument: a key can hold a user id
        raise CliError("bad_uri", "S3URI must be an object's address, s3://bucket/key") from None
    settings = _lake_settings(args)
    store = open_store(settings.index)
    try:
        outcome = index_object(
            aws.client("s3"),
            store,
            settings,
            uri.bucket,
            uri.key,
            force=args.force,
            pseudonymizer=Pseudonymizer.optional(settings.privacy),
        )
    finally:
        store.close()
    if outcome.reason is not None:
        out.say(f"skipped: {outcome.reason}: {outcome.s3path} is not data (nothing indexed)")
        out.result(asdict(outcome))
        return 0
    if outcome.action == "failed":  # recorded in the index as failed; `lakepurge status` lists it
        out.say(f"failed: {outcome.s3path}  {outcome.error}")
        out.result(asdict(outcome))
        return 1
    out.say(f"{outcome.action}: {outcome.s3path}  records {outcome.records}  unindexable {outcome.unindexable}")
    if outcome.reappeared:
        out.say(f"  WARNING: {outcome.reappeared} user(s) erased before are in this object again")
    out.result(asdict(outcome))
    return 2 if outcome.action == "ignored" else 0


def _read_users(args: argparse.Namespace, required: bool = True) -> list[str]:
    """The user ids exactly as given: the index matches ids exactly, so nothing is trimmed or normalised (an id
    stored as " bob" must be erasable). --users-file holds one id per line; only the line terminator (LF or
    CR LF) is removed and empty lines are skipped. Not required: none may be given (purge --user-hash)."""
    users = list(args.users)
    if getattr(args, "users_file", None):
        try:
            with open(args.users_file, "rb") as handle:
                text = handle.read().decode("utf-8-sig")  # a byte order mark is the file's, not an id's
        except FileNotFoundError:
            raise CliError("missing_file", f"--users-file {args.users_file}: no such file: check the path") from None
        except UnicodeDecodeError as exc:
            raise CliError(
                "bad_users_file", f"--users-file {args.users_file}: not UTF-8 text (byte {exc.start}): save it as UTF-8"
            ) from None
        except OSError as exc:
            raise CliError("missing_file", f"--users-file {args.users_file}: {exc.strerror}: check the path") from None
        *terminated, last = text.split("\n")
        for user in [line.removesuffix("\r") for line in terminated] + [last]:
            if user:
                users.append(user)
    if not users and required:
        raise CliError("no_users", "no user ids given: name at least one, or pass --users-file FILE")
    return list(dict.fromkeys(users))


def cmd_lookup(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.coverage import of_index
    from lakepurge.index import open_store

    settings = _settings(args)
    users = _read_users(args)
    store = open_store(settings.index)
    try:
        tables = _tables_status(settings, store, follow=True)  # rows of each table's current version
        found = store.lookup(users)
        old_versions = {user: store.noncurrent_of([user]) for user in users}
        gaps = [c for c in of_index(settings, store) if not c.complete]
    finally:
        store.close()
    document: dict[str, Any] = {}
    for user in users:
        locations = found.get(user, [])
        document[user] = [
            {"s3path": loc.s3path, "etag": loc.etag, "lines": "whole-object" if loc.whole_object else list(loc.lines)}
            for loc in locations
        ] + [
            {"s3path": path, "noncurrent_versions": sorted(versions)}
            for path, versions in sorted(old_versions[user].items())
        ]
        records = sum(0 if loc.whole_object else len(loc.lines) for loc in locations)
        versions = sum(len(v) for v in old_versions[user].values())
        out.say(f"{user}: {len(locations)} object(s), {records} record(s), {versions} noncurrent version(s)")
        for loc in locations:
            where = "whole object" if loc.whole_object else "lines " + ",".join(map(str, loc.lines))
            out.say(f"  {loc.s3path}  {where}")
        for path, ids in sorted(old_versions[user].items()):
            out.say(f"  {path}  noncurrent version(s) {', '.join(sorted(ids))}")
    for gap in gaps:
        out.say(f"WARNING: dataset {gap.dataset} is {gap.reason}: its records may be missing here (run: {gap.fix})")
    for table in tables:
        out.say(table.line())
    out.result(
        {"users": document, "coverage_gaps": [g.to_dict() for g in gaps]}
        | ({"tables": [t.to_dict() for t in tables]} if tables else {})
    )
    return 0


def _tables_status(settings: Settings, store: Any, follow: bool = False) -> list[Any]:
    """Table datasets' versions (lakepurge.tables.index.tables_status); none configured: nothing is asked."""
    if not any(d.is_table for d in settings.datasets):
        return []
    from lakepurge import aws
    from lakepurge.tables.index import tables_status

    return tables_status(aws.client("s3"), store, settings, follow=follow)


def _shown(settings: Settings, s3path: str, pseudonymizer: Pseudonymizer | None) -> str:
    """An object's path as the CLI prints it: in one-user-per-object datasets the key may name its user, so it is
    the object's keyed reference (masked without the hash key)."""
    from lakepurge.logs import object_ref

    uri = S3Uri.parse(s3path)
    dataset = settings.dataset_for(uri.bucket, uri.key)
    return s3path if dataset is None else object_ref(s3path, dataset, pseudonymizer)


def cmd_status(args: argparse.Namespace, out: Output) -> int:
    from lakepurge import aws
    from lakepurge.coverage import dead_letter_count, of_index
    from lakepurge.index import open_store
    from lakepurge.privacy import Pseudonymizer
    from lakepurge.returning import purge_again_command, returning_users

    settings = _settings(args)
    pseudonymizer = Pseudonymizer.optional(settings.privacy)
    store = open_store(settings.index)
    try:
        status = store.status()
        problems = store.unindexable(limit=args.limit)
        dead_letters = dead_letter_count(aws.client("sqs"), settings.indexing.dead_letter_queue_url)
        coverage = of_index(settings, store, dead_letters)
        tables = _tables_status(settings, store)
        returning = (
            returning_users(store, pseudonymizer)
            if pseudonymizer is not None and status.objects_with_erased_users
            else []
        )
    finally:
        store.close()
    for dataset in coverage:
        if dataset.complete:
            out.say(
                f"dataset {dataset.dataset}: covered ({dataset.method} {dataset.indexed_at},"
                f" {dataset.objects} object(s), {dataset.versions} noncurrent version(s))"
            )
        else:
            out.say(f"dataset {dataset.dataset}: NOT COVERED, {dataset.reason} (run: {dataset.fix})")
    for table in tables:
        out.say(table.line())
    out.say(
        f"objects {status.objects}  records {status.records}  users {status.users}  index rows {status.rows}\n"
        f"unindexable lines {status.unindexable_lines} in {status.objects_with_unindexable} object(s)\n"
        f"objects holding erased users again: {status.objects_with_erased_users}"
    )
    if status.objects_with_erased_users:
        out.say("  WARNING: erased users came back (restored backup? replayed pipeline?): purge them again")
    if status.objects_with_erased_users and pseudonymizer is None:
        out.say(f"  set {settings.privacy.hash_key_env} (the hash key) to list them")
    # By keyed hash only: the raw ids are looked up again by `purge --user-hash`, never shown.
    for user in returning:
        where = "whole object" if user.lines == (-1,) else f"{len(user.lines)} line(s)"
        shown = _shown(settings, user.s3path, pseudonymizer)
        out.say(f"  {shown}  user {user.user_hash[:16]}  {where}  erased by {user.request_id}")
    again = purge_again_command([user.user_hash for user in returning], args.config, DEFAULT_CONFIG)
    if again:
        out.say(f"  purge them again: {again}")
    if status.unindexable_lines:
        out.say("  these lines may hold personal data that lakepurge cannot locate; fix or remove them:")
        for path, problem in problems:
            where = "whole object" if problem.line < 0 else f"line {problem.line}"
            out.say(f"  {_shown(settings, path, pseudonymizer)} {where}: {problem.reason}")
    requests = _requests_status(settings, out) if settings.workflow is not None else []
    out.result(
        {
            "index": asdict(status),
            "coverage": [c.to_dict() for c in coverage],
            "unindexable": [
                {"s3path": _shown(settings, p, pseudonymizer), "line": u.line, "reason": u.reason} for p, u in problems
            ],
            "requests": requests,
            "returning": [
                asdict(user) | {"s3path": _shown(settings, user.s3path, pseudonymizer)} for user in returning
            ],
            "returning_command": again,
        }
        | ({"tables": [t.to_dict() for t in tables]} if tables else {})
    )
    return 0


def _requests_status(settings: Settings, out: Output) -> list[dict[str, Any]]:
    """The deletion requests with their deadlines; open ones past their deadline stand out."""
    from lakepurge import aws
    from lakepurge.workflow.store import RequestStore, list_requests

    views = list_requests(RequestStore(settings, aws.client("s3"), aws.client("kms")))
    overdue = [v for v in views if v.overdue]
    out.say(f"requests {len(views)}  open {sum(v.open for v in views)}  overdue {len(overdue)}")
    for view in views:
        flag = "  !! OVERDUE" if view.overdue else ""
        out.say(f"  {view.request_id:<44} {view.state:<20} due {view.deadline[:10]} ({view.days_left:+d} days){flag}")
    return [asdict(v) for v in views]


def cmd_requests(args: argparse.Namespace, out: Output) -> int:
    from lakepurge import aws
    from lakepurge.history import list_history

    settings = _settings(args)
    check_aws_environment()
    records = list_history(settings, aws.client("s3"), aws.client("kms"))
    shown = records[: args.limit]
    out.say(
        f"requests {len(records)}  open {sum(r.open for r in records)}  overdue {sum(r.overdue for r in records)}"
        + (f"  (showing {len(shown)}; --limit N for more)" if len(shown) < len(records) else "")
    )
    for r in shown:
        due = f"due {r.deadline[:10]} ({r.days_left:+d} days)" if r.deadline and r.days_left is not None else ""
        erased = f"{r.lines_erased} line(s) erased" if r.lines_erased is not None else ""
        flag = "  !! OVERDUE" if r.overdue else ""
        out.say(f"  {r.request_id:<44} {r.kind:<8} {r.state:<20} {r.created_at[:16]:<16} {due} {erased}{flag}")
        if r.certificate:
            out.say(f"      certificate {r.certificate}")
    out.result({"requests": [asdict(r) | {"open": r.open} for r in shown], "total": len(records)})
    return 0


def cmd_request(args: argparse.Namespace, out: Output) -> int:
    import uuid

    from lakepurge import aws
    from lakepurge.privacy import Pseudonymizer
    from lakepurge.workflow.intake import file_request
    from lakepurge.workflow.store import RequestRefused

    users = _read_users(args)  # a wrong argument is reported before anything is touched
    settings = _lake_settings(args)
    request_id = args.request_id or f"req-{uuid.uuid4()}"
    try:
        filed = file_request(
            settings,
            aws.Clients.from_environment(),
            aws.client("stepfunctions"),
            Pseudonymizer.from_config(settings.privacy),
            users,
            args.requester,
            request_id,
            kind="access" if args.access else "erasure",
        )
    except RequestRefused as exc:
        raise CliError("request_refused", str(exc)) from None
    out.say(f"request {filed.request_id} filed for {len(users)} user(s); due {filed.deadline}")
    out.say(f"  execution {filed.execution_arn}: the approvers get an email once the report is ready")
    out.result({"request_id": filed.request_id, "execution_arn": filed.execution_arn, "deadline": filed.deadline})
    return 0


def cmd_purge(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.coverage import IndexIncomplete
    from lakepurge.operator_purge import ReviewedReportMismatch, purge_users
    from lakepurge.report import ReportTampered, SafetyLimitExceeded

    hashes = list(dict.fromkeys(h.strip().lower() for h in args.user_hash))
    for user_hash in hashes:
        if len(user_hash) != 64 or any(c not in "0123456789abcdef" for c in user_hash):
            # Not echoed: a raw id given here by mistake must not be printed.
            raise CliError(
                "bad_user_hash", "--user-hash takes a keyed hash, 64 hex characters, as `lakepurge status` prints it"
            )
    users = _read_users(args, required=not hashes)
    settings = _lake_settings(args)
    if args.verify is not None:
        settings = settings.model_copy(update={"purge": settings.purge.model_copy(update={"verify": args.verify})})
    if hashes:
        from lakepurge.index import open_store
        from lakepurge.privacy import Pseudonymizer
        from lakepurge.returning import UnknownHashes, resolve_hashes

        store = open_store(settings.index)
        try:
            returning = resolve_hashes(store, Pseudonymizer.from_config(settings.privacy), hashes)
        except UnknownHashes as exc:
            raise CliError(
                "unknown_user_hash",
                f"{exc}: run `lakepurge status` for the hashes of the erased users found again",
            ) from None
        finally:
            store.close()
        users = list(dict.fromkeys(users + returning))
        args.users = users  # the error boundary masks these in any message
        out.say(f"{len(returning)} returning user(s) found by hash")
    try:
        run = purge_users(
            settings,
            users,
            dry_run=not args.yes,
            force=args.force,
            say=out.say,
            report_id=args.report,
            report_sha256=args.sha256,
            engine=args.engine,
        )
    except SafetyLimitExceeded as exc:
        out.say(f"lakepurge purge: refused by the safety limits ([purge] in the configuration): {exc}")
        out.say("  check the user ids; the dry run (without --yes) prints the whole plan; to erase anyway, add --force")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return 3
    except (ReportTampered, ReviewedReportMismatch) as exc:
        out.say(f"lakepurge purge: refused, nothing erased: {exc}")
        out.result({"status": "REFUSED", "reason": str(exc)})
        return 3
    except IndexIncomplete as exc:
        out.say(f"lakepurge purge: NOT CERTIFIABLE, nothing erased: the index does not cover every dataset: {exc}")
        out.result(
            {
                "status": "INDEX_INCOMPLETE",
                "reason": str(exc),
                "datasets": [{"dataset": g.dataset, "reason": g.reason, "fix": g.fix} for g in exc.gaps],
            }
        )
        return EXIT_NOT_CERTIFIABLE
    if run.result is not None and not run.result.failed:
        # Users erased again leave the objects that flagged them: `lakepurge status` stops counting those.
        from lakepurge.index import open_store
        from lakepurge.privacy import Pseudonymizer
        from lakepurge.returning import recount

        store = open_store(settings.index)
        try:
            recount(store, Pseudonymizer.from_config(settings.privacy))
        finally:
            store.close()
    document = run.summary()
    out.result(document)
    if run.result is None:
        return 3 if run.refused else 0
    return 0 if run.result.verified else 1


def cmd_export(args: argparse.Namespace, out: Output) -> int:
    """GDPR Art. 15: a copy of the users' records, one encrypted archive, a time-limited link (lakepurge.export)."""
    from lakepurge.export import DEFAULT_RETENTION_DAYS, ExportFailed, ExportRefused, export_users

    if args.open is not None:
        return _open_export(args, out)
    if args.link is not None:
        return _export_link(args, out)
    if args.to is None:
        raise CliError("usage", "--to s3://bucket/prefix/ is needed to export (or --open ARCHIVE --out DIR)")
    users = _read_users(args)
    try:
        to = S3Uri.parse(args.to)
    except ValueError:
        raise CliError("usage", "--to takes an s3://bucket/prefix/ URI") from None
    settings = _lake_settings(args)
    retention = args.retention_days or (
        settings.workflow.export_retention_days if settings.workflow is not None else DEFAULT_RETENTION_DAYS
    )
    try:
        run = export_users(
            settings,
            users,
            to,
            fmt=args.format,
            request_id=args.request_id,
            kms_key=args.kms_key,
            expires_seconds=round(args.expires_days * 86400),
            say=out.say,
            retention_days=retention,
        )
    except ExportRefused as exc:
        raise CliError("export_refused", f"export refused, nothing read or written: {exc}") from None
    except ExportFailed as exc:
        raise CliError("export_failed", f"export failed, nothing written: {exc}", EXIT_INTERNAL) from None
    out.result(run.summary())
    return 0


def _export_link(args: argparse.Namespace, out: Output) -> int:
    """``export --link REQUEST_ID``: a new link to an exported archive, signed with this process's credentials (an
    IAM user's long-term keys make a link of up to 7 days; temporary ones end it with their session)."""
    from datetime import datetime

    from lakepurge import aws, layout
    from lakepurge.export import LINK_LIMITS, presigned_link

    settings = _settings(args)
    check_aws_environment()
    where = layout.export_record(settings, args.link)
    record = layout.read_document(aws.client("s3"), where, layout.ExportDocument)
    if record is None:
        raise CliError("export_refused", f"request {args.link} has no export record ({where})")
    expiry = datetime.fromisoformat(record.archive_expires_at) if record.archive_expires_at else None
    if expiry is not None and expiry <= datetime.now(expiry.tzinfo):
        raise CliError("export_refused", f"the archive of request {args.link} expired at {record.archive_expires_at}")
    link = presigned_link(S3Uri.parse(record.archive), round(args.expires_days * 86400), not_after=expiry)
    out.say(f"link to {record.archive}, valid until {link.expires_at.isoformat()}{LINK_LIMITS[link.limited_by]}:")
    out.say(f"  {link.url}")
    out.result(
        {
            "request_id": args.link,
            "archive": record.archive,
            "link": link.url,
            "link_expires_at": link.expires_at.isoformat(),
            "link_limited_by": link.limited_by,
        }
    )
    return 0


def _open_export(args: argparse.Namespace, out: Output) -> int:
    """``export --open ARCHIVE --out DIR``: decrypt a delivered archive (s3:// URI or local file; needs kms:Decrypt
    on its key under its context) and unpack it into DIR, once it is shown to be the archive of the request it is
    opened as (``--request-id``, else the archive's name ``<request id>.zip.enc``): its export record names these
    bytes. Only that request's users' records are in it."""
    import io
    import zipfile
    from pathlib import Path, PurePosixPath

    from lakepurge import aws
    from lakepurge.export import ARCHIVE_SUFFIX, ExportRefused, open_archive

    if args.out is None:
        raise CliError("usage", "--open needs --out DIR, where the archive's files are written")
    name = args.open.rsplit("/", 1)[-1]
    request_id = args.request_id or (name.removesuffix(ARCHIVE_SUFFIX) if name.endswith(ARCHIVE_SUFFIX) else None)
    if not request_id:
        raise CliError("usage", f"--open {args.open}: name the request it is the archive of with --request-id ID")
    settings = _settings(args)
    if args.open.startswith("s3://"):
        location = S3Uri.parse(args.open)
        sealed = aws.client("s3").get_object(Bucket=location.bucket, Key=location.key)["Body"].read()
    else:
        try:
            sealed = Path(args.open).read_bytes()
        except OSError as exc:
            raise CliError("usage", f"--open {args.open}: {exc.strerror}") from None
    try:
        plaintext = open_archive(settings, aws.client("s3"), aws.client("kms"), sealed, request_id)
    except ValueError as exc:
        raise CliError("usage", f"--open {args.open}: {exc}") from None
    except ExportRefused as exc:
        raise CliError("export_refused", f"--open {args.open}: refused, nothing written: {exc}") from None
    target = Path(args.out)
    with zipfile.ZipFile(io.BytesIO(plaintext)) as archive:
        names = archive.namelist()
        for name in names:
            relative = PurePosixPath(name)
            if relative.is_absolute() or ".." in relative.parts:
                raise CliError("usage", f"--open {args.open}: the archive names a file outside its folder")
        target.mkdir(parents=True, exist_ok=True)
        archive.extractall(target)
    manifest = orjson.loads((target / "manifest.json").read_bytes()) if "manifest.json" in names else {}
    out.result(
        {
            "archive": args.open,
            "out": str(target),
            "files": len(names),
            "request_id": manifest.get("request_id"),
            "objects": len(manifest.get("objects", [])),
        }
    )
    return 0


def cmd_verify(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.operator_purge import RemoteJobFailed, verify_users

    users = _read_users(args)
    if args.on == "emr-serverless":
        settings = _settings(args)
        check_aws_environment()
        try:
            document = verify_users(settings, users, on=args.on, say=out.say)
        except RemoteJobFailed as exc:
            raise CliError("job_failed", str(exc), EXIT_INTERNAL) from exc
    else:
        document = verify_users(_lake_settings(args, spark=True), users)
    out.say(
        f"checked {document['objects_checked']} object(s) and their noncurrent versions:"
        f" {len(document['remaining'])} still hold the users; index locations left: {document['index_locations']}"
    )
    for place in document["remaining"]:
        held = f"{place['lines']} line(s)" if "lines" in place else place.get("reason", "")
        out.say(f"  {place['object']} version {place.get('version_id')}: {held}")
    out.result(document)
    return 0 if document["verified"] else 1


def cmd_vacuum(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.purge.vacuum import run_vacuum
    from lakepurge.remote import vacuum_job
    from lakepurge.sparkutil import spark_session

    if args.on == "emr-serverless":
        return _remote(args, out, vacuum_job(args.dataset, args.yes))
    settings = _lake_settings(args, spark=True)
    with spark_session("lakepurge-vacuum") as spark:
        run = run_vacuum(spark, settings, args.dataset, apply=args.yes)
    verb = "removed" if run.applied else "would remove"
    for outcome in run.outcomes:
        if outcome.error and outcome.error != "gone":
            out.say(f"  FAILED {outcome.s3path}: {outcome.error}")
        elif outcome.placeholders or outcome.versions_deleted:
            out.say(
                f"  {outcome.s3path}: {outcome.placeholders} placeholder line(s),"
                f" {len(outcome.versions_deleted)} version(s) holding erased users"
            )
    out.say(
        f"vacuum {verb} {run.placeholders} placeholder line(s) from {len(run.outcomes) - len(run.failed)} object(s)"
        f" and {'deleted' if run.applied else 'would delete'} {run.versions} noncurrent version(s) holding erased"
        f" users; {len(run.failed)} failed"
    )
    if not run.applied:
        out.say("dry run: nothing changed (run again with --yes to apply)")
    elif run.record:
        out.say(f"record {run.record}")
    out.result(run.summary())
    return 1 if run.failed else 0


def _catalog_settings(args: argparse.Namespace, required: bool) -> Settings | None:
    """The configuration `datasets import` compares with (only when the file exists) or `datasets check` needs."""
    if not required and not os.path.exists(args.config):
        check_aws_environment()
        return None
    settings = _settings(args)
    check_aws_environment()
    return settings


def _catalog_error(exc: Exception) -> CliError:
    return CliError("no_such_database", f"{exc}: check --glue-database, AWS_REGION and the account")


def cmd_datasets_import(args: argparse.Namespace, out: Output) -> int:
    """[[datasets]] entries from Glue tables (lakepurge.catalog): to stdout, or to --out."""
    from lakepurge import aws
    from lakepurge.catalog import CatalogError, import_datasets

    if args.out and os.path.exists(args.out) and not args.force:
        raise CliError("file_exists", f"{args.out} exists already: keep it, or run again with --force to overwrite it")
    settings = _catalog_settings(args, required=False)
    try:
        result = import_datasets(aws.client("glue"), args.glue_database, args.table, args.id_column, settings)
    except CatalogError as exc:
        raise _catalog_error(exc) from None
    for item in result.imported:
        keys = f", partitioned by {', '.join(item.partition_keys)}" if item.partition_keys else ""
        out.say(f"imported {item.table}: {item.format} at {item.location}, ids {', '.join(item.id_fields)}{keys}")
        for note in item.notes:
            out.say(f"  note: {note}")
    for kept in result.already_configured:
        out.say(f"left out {kept.table}: {kept.reason}")
    for refused in result.not_imported:
        out.say(f"NOT IMPORTED {refused.table}: {refused.reason}")
    document = result.summary() | {"written": None}
    if result.imported and args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(result.toml)
        except FileNotFoundError:
            raise CliError("missing_file", f"{args.out}: its directory does not exist: create it first") from None
        document["written"] = args.out
        entries = "entry" if len(result.imported) == 1 else "entries"
        out.say(f"wrote {len(result.imported)} [[datasets]] {entries} to {args.out}: append them to {args.config}")
    elif result.imported and not out.as_json:
        sys.stdout.write(result.toml)
    out.say(
        f"{len(result.imported)} imported, {len(result.not_imported)} not imported,"
        f" {len(result.already_configured)} configured already"
    )
    out.result(document)
    return 1 if not result.imported and (result.not_imported or not result.already_configured) else 0


def cmd_datasets_check(args: argparse.Namespace, out: Output) -> int:
    """The drift between the configuration and the Glue database; exit 0 in sync, 1 drift."""
    from lakepurge import aws
    from lakepurge.catalog import CatalogError, check_catalog

    settings = _catalog_settings(args, required=True)
    assert settings is not None
    try:
        result = check_catalog(aws.client("glue"), args.glue_database, settings)
    except CatalogError as exc:
        raise _catalog_error(exc) from None
    for drift in result.drift:
        dataset = f" (dataset {drift.dataset})" if drift.dataset and drift.dataset != drift.table else ""
        out.say(f"{drift.kind.upper().replace('_', ' ')} {drift.table}{dataset}: {drift.detail}")
    verdict = "in sync" if result.in_sync else f"{len(result.drift)} difference(s)"
    out.say(
        f"{args.config} and Glue database {result.database}: {verdict} ({len(result.checked)} dataset(s) compared,"
        f" {result.tables} table(s) in the catalog)"
    )
    if result.not_from_catalog:
        out.say(f"  not from this database (left alone): {', '.join(result.not_from_catalog)}")
    out.result(result.summary())
    return 0 if result.in_sync else 1


def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.local.demo import DemoError, run_demo

    if args.objects < 1 or args.users < 1:
        raise ConfigError("--objects and --users must be at least 1")
    if not 0 <= args.port <= 65535:
        raise ConfigError("--port must be between 0 (any free port) and 65535")

    def print_while_kept(document: dict[str, Any]) -> None:
        out.result(document)
        sys.stdout.flush()

    try:
        document = run_demo(
            objects=args.objects,
            users=args.users,
            say=out.say,
            interactive=args.interactive,
            port=args.port,
            approval_timeout=args.approval_timeout,
            backfill=args.backfill,
            keep=print_while_kept if args.keep else None,
        )
    except DemoError as exc:
        out.say(f"lakepurge demo: {exc}")
        return 1
    except KeyboardInterrupt:
        out.say("lakepurge demo: stopped (the local stack is gone with it; nothing outside it was touched)")
        return 130
    if not args.keep:
        out.result(document)
    return 0 if document["status"] in ("SUCCEEDED", "REJECTED") else 1


_INIT_HEADER = """\
# lakepurge configuration, written by `lakepurge init`. Check it with `lakepurge status`.
# Every key is described in README.md (Configuration); examples/lakepurge.toml shows all of them.
#
# AWS: {where}
# lakepurge reads boto3's usual settings (AWS_ENDPOINT_URL, AWS_REGION, credentials): they are not repeated here.

# The index: user id -> (object, line). PostgreSQL (dsn) or a DynamoDB table (table).
[index]
{index}

# Reports, certificates and deletion requests are written under this prefix (best: a bucket of its own).
[reports]
location = "s3://lakepurge-reports/"
"""
_INIT_INDEX_LOCAL = """\
backend = "postgres"
dsn = "postgresql://postgres@127.0.0.1:5432/lakepurge"
# backend = "dynamodb"
# table = "lakepurge-index\""""
_INIT_INDEX_AWS = """\
backend = "dynamodb"
table = "lakepurge-index"
# backend = "postgres"
# dsn = "postgresql://lakepurge@db.example.internal:5432/lakepurge\""""
_INIT_BODY = """
# One [[datasets]] table per dataset: every object under a prefix, one format, one place for the user id.
[[datasets]]
name = "reviews"
location = "s3://my-lake/reviews/"     # a prefix ending in '/'
format = "jsonl"                       # jsonl | csv | parquet; objects ending in .gz are gzip
id_fields = ["user_id"]                # dotted paths reach nested fields ("buyer.id"); several are allowed
# erase = "blank"                      # blank | drop | delete-object (default: drop for parquet, else blank)
# skip = ["manifests/*"]               # more keys that are not data (globs relative to location)

# One user per object, the id taken from the key (or id_sidecar, id_tag: see README.md):
# [[datasets]]
# name = "exports"
# location = "s3://my-lake/exports/"
# id_from_key = '(?P<id>[^/]+)/[^/]+$'
# erase = "delete-object"

# Safety limits: a request erasing more than these shares is refused unless --force.
[purge]
max_object_fraction = 0.5
max_dataset_fraction = 0.05
delete_noncurrent_versions = true      # old S3 versions hold the erased data too

# The key of the keyed hashes that stand for user ids in reports and certificates (keep it stable and secret).
[privacy]
hash_key_env = "LAKEPURGE_HASH_KEY"
"""


def init_text(endpoint: str | None, region: str | None) -> str:
    """The commented starting configuration `lakepurge init` writes, for this endpoint."""
    if endpoint:
        where = f"the endpoint {_site(endpoint)} (AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    else:
        where = f"AWS itself (no AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    index = _INIT_INDEX_LOCAL if endpoint else _INIT_INDEX_AWS
    return _INIT_HEADER.format(where=where, index=index) + _INIT_BODY


def cmd_init(args: argparse.Namespace, out: Output) -> int:
    import boto3

    check_aws_environment(need_region=False)
    path = args.path
    if os.path.exists(path) and not args.force:
        raise CliError("file_exists", f"{path} exists already: keep it, or run again with --force to overwrite it")
    text = init_text(_endpoint(), boto3.session.Session().region_name)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except FileNotFoundError:
        raise CliError("missing_file", f"{path}: its directory does not exist: create it first") from None
    config = "" if path == DEFAULT_CONFIG else f" --config {path}"
    steps = [
        f"wrote {path}. Next:",
        "  1. edit [index] (a PostgreSQL you can reach, or a DynamoDB table), [reports] and [[datasets]]",
        "  2. export LAKEPURGE_HASH_KEY=<a long random secret, kept stable>   (the keyed hashes of user ids)",
        f"  3. lakepurge index reconcile{config}     index the lake and record its coverage (or: index backfill)",
        f"  4. lakepurge status{config}              objects, users, coverage of every dataset",
        f"  5. lakepurge lookup USER{config}         where one user's records are",
        f"  6. lakepurge purge USER{config}          the dry run: the whole plan, nothing erased",
        f"  7. lakepurge purge USER --yes{config}    erase, verify, certificate",
    ]
    for line in steps:
        out.say(line)
    out.result({"written": path, "next": [line.strip() for line in steps[1:]]})
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lakepurge")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a wrong argument raised to main()'s error boundary (so --json still gets its document)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise CliError("usage", f"{message} (see {self.prog} --help)")


def _add_on(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--on",
        choices=("local", "emr-serverless"),
        default="local",
        help="local: Spark on this machine (default); emr-serverless: the job on [workflow.launcher]'s application,"
        " followed until it ends",
    )


def build_parser() -> argparse.ArgumentParser:
    # --config and --json are accepted before or after the command (`lakepurge --config F lookup U`); SUPPRESS
    # keeps a subcommand's unset option from overwriting the value given before it.
    common = _Parser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help=f"TOML configuration (default: {DEFAULT_CONFIG})")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="one JSON document on stdout")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of errors")

    parser = _Parser(prog="lakepurge", description="Right to erasure for S3 data lakes.")
    parser.add_argument("--version", action="version", version=f"lakepurge {_version()}")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="TOML configuration (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--debug", action="store_true", help="show the traceback of errors (or LAKEPURGE_DEBUG=1)")
    commands = parser.add_subparsers(dest="command", required=True)

    init = commands.add_parser("init", parents=[common], help="write a commented lakepurge.toml to start from")
    init.add_argument("--path", default=DEFAULT_CONFIG, help="where to write it (default: %(default)s)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(run=cmd_init)

    demo = commands.add_parser("demo", parents=[common], help="the whole pipeline on an embedded local stack")
    demo.add_argument("--objects", type=int, default=100, help="objects in the sample lake (default: %(default)s)")
    demo.add_argument("--users", type=int, default=100, help="users in the sample lake (default: %(default)s)")
    demo.add_argument(
        "--interactive",
        action="store_true",
        help="print the approval link and wait for a person to press Approve or Reject in a browser"
        " (default: the demo approves by itself, on a terminal or not)",
    )
    demo.add_argument(
        "--port", type=int, default=0, help="port of the approval page on 127.0.0.1 (default: any free port)"
    )
    demo.add_argument(
        "--approval-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="how long the request waits for a decision (default: 900 with --interactive, else 600)",
    )
    demo.add_argument(
        "--backfill", action="store_true", help="also rebuild the index with the Spark backfill and compare"
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the local stack running afterwards and print how to point the other commands at it"
        " (Ctrl-C stops it)",
    )
    demo.set_defaults(run=cmd_demo)

    index = commands.add_parser("index", help="build or refresh the index")
    index_commands = index.add_subparsers(dest="index_command", required=True)
    backfill = index_commands.add_parser("backfill", parents=[common], help="index every object (Spark)")
    backfill.add_argument("--force", action="store_true", help="re-index objects already indexed at this ETag")
    backfill.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    _add_on(backfill)
    backfill.set_defaults(run=cmd_index_backfill)
    reconcile = index_commands.add_parser(
        "reconcile",
        parents=[common],
        help="compare the lake's listing with the index, index what differs, record coverage",
    )
    reconcile.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    reconcile.add_argument(
        "--report-only", action="store_true", help="only count the differences (the dataset stays not covered)"
    )
    reconcile.add_argument("--spark", action="store_true", help="index the differences on local Spark")
    _add_on(reconcile)
    reconcile.set_defaults(run=cmd_index_reconcile)
    one = index_commands.add_parser("object", parents=[common], help="index one object now")
    one.add_argument("uri", metavar="S3URI")
    one.add_argument("--force", action="store_true")
    one.set_defaults(run=cmd_index_object)

    lookup = commands.add_parser("lookup", parents=[common], help="where each user's records are")
    lookup.add_argument("users", nargs="*", metavar="USER")
    lookup.add_argument("--users-file")
    lookup.set_defaults(run=cmd_lookup)

    request = commands.add_parser("request", parents=[common], help="file a deletion request (approval workflow)")
    request.add_argument("users", nargs="*", metavar="USER")
    request.add_argument("--users-file")
    request.add_argument("--requester", default="cli", help="who asked (kept encrypted with the ids)")
    request.add_argument("--request-id", help="idempotency key: filing the same id twice files it once")
    request.add_argument(
        "--access",
        action="store_true",
        help="an access request (GDPR Art. 15): approved, it exports the users' records instead of erasing them",
    )
    request.set_defaults(run=cmd_request)

    history = commands.add_parser(
        "requests", parents=[common], help="every request, workflow and operator: state, deadline, certificate"
    )
    history.add_argument("--limit", type=int, default=50, help="how many to list (default: %(default)s)")
    history.set_defaults(run=cmd_requests)

    purge = commands.add_parser("purge", parents=[common], help="report, erase, verify, certify (dry run unless --yes)")
    purge.add_argument("users", nargs="*", metavar="USER")
    purge.add_argument("--users-file")
    purge.add_argument(
        "--user-hash",
        action="append",
        default=[],
        metavar="HASH",
        help="an erased user found again, by the keyed hash `lakepurge status` lists (repeatable)",
    )
    mode = purge.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only write the report (the default)")
    mode.add_argument("--yes", action="store_true", help="erase for real")
    purge.add_argument("--force", action="store_true", help="go past the [purge] safety limits")
    purge.add_argument(
        "--engine",
        choices=("auto", "inline", "spark"),
        default="auto",
        help="auto: in this process when the report has at most workflow.inline_max_objects objects (20 by"
        " default) and workflow.inline_max_bytes bytes to read (256 MiB), else local Spark",
    )
    purge.add_argument(
        "--verify",
        choices=("checksum", "full"),
        help="checksum: the bytes are verified before the write and S3 must store their CRC64NVME; full: every"
        " version is read again after the purge (default: [purge] verify, checksum)",
    )
    purge.add_argument(
        "--report",
        metavar="REQUEST_ID",
        help="execute exactly the report a dry run wrote (give the same user ids), instead of building a new one",
    )
    purge.add_argument("--sha256", help="with --report: the SHA-256 the dry run printed; a changed report is refused")
    purge.set_defaults(run=cmd_purge)

    export = commands.add_parser(
        "export", parents=[common], help="a copy of the users' records (GDPR Art. 15): encrypted archive, link"
    )
    export.add_argument("users", nargs="*", metavar="USER")
    export.add_argument("--users-file")
    export.add_argument("--to", metavar="S3URI", help="s3://bucket/prefix/ for the archive (not the lake)")
    export.add_argument(
        "--open",
        metavar="ARCHIVE",
        help="instead: decrypt a delivered archive (s3:// URI or file; needs kms:Decrypt on its key) into --out,"
        " once its export record shows it is the archive of --request-id (default: its name, <id>.zip.enc)",
    )
    export.add_argument(
        "--link",
        metavar="REQUEST_ID",
        help="instead: a new link to that request's archive, signed with your credentials (--expires-days)",
    )
    export.add_argument("--out", metavar="DIR", help="with --open: the folder the archive's files are written to")
    export.add_argument(
        "--format",
        choices=("original", "jsonl", "csv"),
        default="original",
        help="original (default): each dataset's own format; jsonl or csv: records converted",
    )
    export.add_argument("--request-id", help="names the archive and the record exports/<id>.json (default: new)")
    export.add_argument(
        "--retention-days",
        type=int,
        help="days the archive is kept; older archives under --to are deleted"
        " (default: [workflow] export_retention_days, 30)",
    )
    export.add_argument("--kms-key", help="KMS key of the archive's data key (default: [workflow] kms_key_id)")
    export.add_argument(
        "--expires-days", type=float, default=7.0, help="lifetime of the link, at most 7 days (default: %(default)s)"
    )
    export.set_defaults(run=cmd_export)

    verify = commands.add_parser("verify", parents=[common], help="is any of these users still anywhere?")
    verify.add_argument("users", nargs="*", metavar="USER")
    verify.add_argument("--users-file")
    _add_on(verify)
    verify.set_defaults(run=cmd_verify)

    vacuum = commands.add_parser(
        "vacuum", parents=[common], help="remove the placeholders purges wrote, re-index (dry run unless --yes)"
    )
    vacuum.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")
    vacuum.add_argument("--yes", action="store_true", help="apply (the default is a dry run that prints the plan)")
    _add_on(vacuum)
    vacuum.set_defaults(run=cmd_vacuum)

    status = commands.add_parser(
        "status", parents=[common], help="index counts, unindexable lines, requests and deadlines"
    )
    status.add_argument("--limit", type=int, default=50, help="unindexable lines to list")
    status.set_defaults(run=cmd_status)

    datasets = commands.add_parser("datasets", help="[[datasets]] from the AWS Glue Data Catalog")
    datasets_commands = datasets.add_subparsers(dest="datasets_command", required=True)
    imports = datasets_commands.add_parser(
        "import", parents=[common], help="write [[datasets]] entries from Glue tables (stdout, or --out)"
    )
    imports.add_argument("--glue-database", required=True, metavar="DB", help="the Glue database to read")
    imports.add_argument("--table", action="append", default=[], help="only this table (repeatable; default: all)")
    imports.add_argument(
        "--id-column",
        action="append",
        default=[],
        metavar="FIELD",
        help="the id field of tables without the table parameter lakepurge.id_fields (repeatable)",
    )
    imports.add_argument("--out", metavar="FILE", help="write the entries to this file instead of stdout")
    imports.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    imports.set_defaults(run=cmd_datasets_import)
    check = datasets_commands.add_parser(
        "check", parents=[common], help="the drift between the configuration and the catalog (exit 1 on drift)"
    )
    check.add_argument("--glue-database", required=True, metavar="DB", help="the Glue database to compare with")
    check.set_defaults(run=cmd_datasets_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Commands talk to people on stderr, so logs stay quiet unless asked for (POWERTOOLS_LOG_LEVEL=INFO).
    from lakepurge.logs import SERVICE, STDERR, root_logger

    log_level = os.environ.get("POWERTOOLS_LOG_LEVEL") or "WARNING"
    level_before = logging.getLogger(SERVICE).level
    words = list(sys.argv[1:] if argv is None else argv)
    out = Output("--json" in words)
    args: argparse.Namespace | None = None
    from lakepurge import aws

    was_cli = aws.configure(cli=True)  # fast connect timeout, few retries: a person is waiting
    if os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
        os.environ["AWS_DEFAULT_REGION"] = os.environ["AWS_REGION"]  # boto3 reads only AWS_DEFAULT_REGION
    try:
        args = build_parser().parse_args(words)
        out = Output(args.json)
        run: Callable[[argparse.Namespace, Output], int] = args.run
        root_logger(level=log_level, stream=STDERR)
        _show_progress_and_keep_spark_quiet()
        return run(args, out)
    except KeyboardInterrupt:
        out.say("lakepurge: interrupted")
        return 130
    except Exception as exc:
        debug = ("--debug" in words if args is None else args.debug) or bool(os.environ.get("LAKEPURGE_DEBUG"))
        return _report(exc, args, out, debug)
    finally:
        aws.configure(cli=was_cli)
        from lakepurge import progress

        progress.show_on(None)  # main() called in-process (tests) leaves the process's clients as they were
        logging.getLogger(SERVICE).setLevel(level_before)  # and its service logger's level


def _show_progress_and_keep_spark_quiet() -> None:
    """Long commands show progress on stderr (a bar on a terminal, one line per step elsewhere); a local Spark
    session logs to a file of its own, named when a command fails, not among the command's output."""
    import tempfile
    import time
    from pathlib import Path

    from lakepurge import progress, sparkutil

    progress.show_on(sys.stderr)
    logs = Path(tempfile.gettempdir()) / f"lakepurge-{os.getuid()}"
    sparkutil.send_spark_logs_to(logs / f"spark-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")


def _report(exc: Exception, args: argparse.Namespace | None, out: Output, debug: bool) -> int:
    """The error boundary's output: the traceback with --debug, one line on stderr, and with --json one JSON
    document {"error", "code"} on stdout (unless the command printed its document already)."""
    import traceback

    config = getattr(args, "config", DEFAULT_CONFIG)
    error = explain(exc, config)
    users = list(getattr(args, "users", None) or [])
    message = _one_line(error.message, users)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    out.say(f"lakepurge: {message}")
    from lakepurge.sparkutil import spark_log_file

    spark_log = spark_log_file()
    if error.code == "internal" and spark_log is not None and spark_log.exists() and spark_log.stat().st_size:
        out.say(f"lakepurge: Spark's own log, in case it says more: {spark_log}")
    if out.as_json and not out.written:
        out.result({"error": message, "code": error.code})
    return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
