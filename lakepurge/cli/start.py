"""The first two commands: ``init`` writes a commented configuration to start from, ``demo`` runs the whole
pipeline on an embedded local stack."""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from typing import Any

from lakepurge.cli.arguments import DEFAULT_CONFIG, Commands, Output
from lakepurge.cli.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    check_aws_environment,
    endpoint,
)
from lakepurge.cli.init_template import init_text
from lakepurge.core.config import ConfigError


def register(commands: Commands) -> None:
    init = commands.add("init", cmd_init, help="write a commented lakepurge.toml to start from")
    init.add_argument("--path", default=DEFAULT_CONFIG, help="where to write it (default: %(default)s)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="NAME=S3PREFIX",
        help="a dataset to write, e.g. reviews=s3://my-lake/reviews/ (repeatable; default: one example to edit)",
    )
    init.add_argument(
        "--format", choices=("jsonl", "csv", "parquet"), default="jsonl", help="the datasets' format (%(default)s)"
    )
    init.add_argument(
        "--id-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="the field holding the user id, a dotted path for a nested one (repeatable; default: user_id)",
    )
    init.add_argument(
        "--reports",
        default="s3://lakepurge-reports/",
        metavar="S3PREFIX",
        help="where reports and certificates go (default: %(default)s; a prefix outside the datasets)",
    )

    completion = commands.add("completion", cmd_completion, help="print a shell completion script")
    completion.add_argument(
        "shell", choices=("bash",), help="bash (zsh too, after: autoload bashcompinit; bashcompinit)"
    )

    demo = commands.add("demo", cmd_demo, help="the whole pipeline on an embedded local stack")
    demo.add_argument("--objects", type=int, default=100, help="objects in the sample lake (default: %(default)s)")
    # Not args.users: that is the user ids of other commands, which the error boundary masks in its messages.
    demo.add_argument(
        "--users",
        dest="sample_users",
        metavar="USERS",
        type=int,
        default=100,
        help="users in the sample lake (default: %(default)s)",
    )
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


def cmd_init(args: argparse.Namespace, out: Output) -> int:
    import boto3

    check_aws_environment(need_region=False)
    path = args.path
    if os.path.exists(path) and not args.force:
        raise CliError("file_exists", f"{path} exists already: keep it, or run again with --force to overwrite it")
    datasets = [_dataset_argument(value) for value in args.dataset]
    region = boto3.session.Session().region_name
    text = init_text(
        endpoint(),
        region,
        dynamodb=_answers_dynamodb() if endpoint() and region else None,
        datasets=datasets,
        format=args.format,
        id_fields=args.id_field or ["user_id"],
        reports=args.reports,
    )
    from lakepurge.core.config import parse_settings

    parse_settings(tomllib.loads(text), "the configuration init would write")  # a bad --dataset is named here
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except FileNotFoundError:
        raise CliError("missing_file", f"{path}: its directory does not exist: create it first") from None
    config = "" if path == DEFAULT_CONFIG else f" --config {path}"
    edit = "check" if datasets else "edit"
    steps = [
        f"wrote {path}. Next:",
        f"  1. {edit} [index] (a PostgreSQL you can reach, or a DynamoDB table), [reports] and [[datasets]]",
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
    return EXIT_OK


def cmd_completion(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.cli import _version, build_parser
    from lakepurge.cli.examples import bash_completion

    sys.stdout.write(bash_completion(build_parser(), _version()))
    return EXIT_OK


def _dataset_argument(value: str) -> tuple[str, str]:
    name, _, location = value.partition("=")
    if not name or not location.startswith("s3://"):
        raise CliError(
            "usage", f"--dataset {value!r}: write NAME=s3://bucket/prefix/ (e.g. reviews=s3://lake/reviews/)"
        )
    return name, location if location.endswith("/") else location + "/"


def _answers_dynamodb() -> bool:
    """Whether AWS_ENDPOINT_URL serves DynamoDB too (moto, LocalStack): then the index can be a table there, and no
    PostgreSQL is needed. One quick call; any failure means no."""
    from lakepurge.core import aws

    try:
        aws.client("dynamodb").list_tables(Limit=1)
    except Exception:  # an S3-only endpoint answers with anything from a 404 to a closed socket
        return False
    return True


def cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.local.demo import DemoError, run_demo

    if args.objects < 1 or args.sample_users < 1:
        raise ConfigError("--objects and --users must be at least 1")
    if not 0 <= args.port <= 65535:
        raise ConfigError("--port must be between 0 (any free port) and 65535")

    def print_while_kept(document: dict[str, Any]) -> None:
        out.result(document)
        sys.stdout.flush()

    try:
        document = run_demo(
            objects=args.objects,
            users=args.sample_users,
            say=out.say,
            interactive=args.interactive,
            port=args.port,
            approval_timeout=args.approval_timeout,
            backfill=args.backfill,
            keep=print_while_kept if args.keep else None,
        )
    except DemoError as exc:
        out.say(f"lakepurge demo: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        out.say("lakepurge demo: stopped (the local stack is gone with it; nothing outside it was touched)")
        return EXIT_INTERRUPTED
    if not args.keep:
        out.result(document)
    return EXIT_OK if document["status"] in ("SUCCEEDED", "REJECTED") else EXIT_FAILED
