"""The ``lakepurge`` command line: ``main`` builds the parser from the command modules and is the one error
boundary.

Human output goes to stderr; ``--json`` prints exactly one JSON document on stdout for scripts. Each command module
registers its subcommand(s), their options next to the function that runs them:

- ``start``: ``init``, ``demo``
- ``index``: ``index backfill | reconcile | object``
- ``lookup``: ``lookup``; ``status``: ``status``
- ``request``: ``request``, ``requests``
- ``purge``: ``purge``; ``verify``: ``verify``, ``vacuum``
- ``export``: ``export`` (and ``--link``, ``--open``)
- ``datasets``: ``datasets import | check``
- ``pseudonymise``: ``pseudonymise --dataset D --to S3URI``, ``pseudonymise --check D``

What they share: ``arguments`` (output, common options, user ids, the configuration), ``errors`` (exit codes, the
one-line errors that name the fix).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from lakepurge.cli import datasets, export, index, lookup, pseudonymise, purge, request, start, status, verify
from lakepurge.cli.arguments import DEFAULT_CONFIG, Commands, Output, Parser, Run, add_global_options
from lakepurge.cli.errors import EXIT_INTERRUPTED, explain, one_line

# The order of `lakepurge --help`.
COMMAND_MODULES = (start, index, lookup, request, purge, export, verify, status, datasets, pseudonymise)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lakepurge")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lakepurge", description="Right to erasure for S3 data lakes.")
    parser.add_argument("--version", action="version", version=f"lakepurge {_version()}")
    add_global_options(parser)
    commands = Commands(parser, "command")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Commands talk to people on stderr, so logs stay quiet unless asked for (POWERTOOLS_LOG_LEVEL=INFO).
    from lakepurge.core.logs import SERVICE, STDERR, human_logs, root_logger

    log_level = os.environ.get("POWERTOOLS_LOG_LEVEL") or "WARNING"
    level_before = logging.getLogger(SERVICE).level
    words = list(sys.argv[1:] if argv is None else argv)
    out = Output("--json" in words)
    args: argparse.Namespace | None = None
    restore_logs = None
    from lakepurge.core import aws

    was_cli = aws.configure(cli=True)  # fast connect timeout, few retries: a person is waiting
    if os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
        os.environ["AWS_DEFAULT_REGION"] = os.environ["AWS_REGION"]  # boto3 reads only AWS_DEFAULT_REGION
    try:
        args = build_parser().parse_args(words)
        out = Output(args.json)
        run: Run = args.run
        logger = root_logger(level=log_level, stream=STDERR)
        restore_logs = human_logs(logger)  # warnings read as lines among the command's output, not JSON documents
        _show_progress_and_keep_spark_quiet()
        return run(args, out)
    except KeyboardInterrupt:
        out.say("lakepurge: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        debug = ("--debug" in words if args is None else args.debug) or bool(os.environ.get("LAKEPURGE_DEBUG"))
        return _report(exc, args, out, debug)
    finally:
        aws.configure(cli=was_cli)
        from lakepurge.core import progress

        progress.show_on(None)  # main() called in-process (tests) leaves the process's clients as they were
        logging.getLogger(SERVICE).setLevel(level_before)  # and its service logger's level and form
        if restore_logs is not None:
            restore_logs()


def _show_progress_and_keep_spark_quiet() -> None:
    """Long commands show progress on stderr (a bar on a terminal, one line per step elsewhere); a local Spark
    session logs to a file of its own, named when a command fails, not among the command's output."""
    import tempfile
    import time
    from pathlib import Path

    from lakepurge.core import progress, sparkutil

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
    message = one_line(error.message, users)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    out.say(f"lakepurge: {message}")
    from lakepurge.core.sparkutil import spark_log_file

    spark_log = spark_log_file()
    if error.code == "internal" and spark_log is not None and spark_log.exists() and spark_log.stat().st_size:
        out.say(f"lakepurge: Spark's own log, in case it says more: {spark_log}")
    if out.as_json and not out.written:
        out.result({"error": message, "code": error.code})
    return error.exit_code
