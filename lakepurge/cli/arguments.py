"""What every command shares: its output, the options common to all (--config, --json, --debug), the user ids
(USER ... and --users-file), --dataset, --on, and the configuration read from --config.

A command module has one ``register(commands)`` that adds its subcommand(s) with ``commands.add``, next to the
function that runs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, CliError, check_aws_environment
from lakepurge.core.config import Settings, load_settings
from lakepurge.core.config_identity import typed_request_forms
from lakepurge.records.identifiers import KIND_MARKER, RequestIdError

if TYPE_CHECKING:
    from lakepurge.purge.launch import SparkJob

DEFAULT_CONFIG = "lakepurge.toml"


class Output:
    """Human output goes to stderr; ``--json`` prints exactly one JSON document on stdout for scripts."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.written = False  # a document is on stdout already: an error after it adds none

    def say(self, text: str) -> None:
        print(text, file=sys.stderr)

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> None:
        """Rows under a header row, each column as wide as its widest cell (the last one left ragged)."""
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)] + [str(row[-1])]
            self.say((indent + "  ".join(cells)).rstrip())

    def result(self, document: Any) -> None:
        if self.as_json:
            self.written = True
            sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


Run = Callable[[argparse.Namespace, Output], int]


class Parser(argparse.ArgumentParser):
    """argparse, with a wrong argument raised to main()'s error boundary (so --json still gets its document)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise CliError("usage", f"{message} (see {self.prog} --help)")


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """--config, --json and --debug before the command (`lakepurge --config F lookup U`)."""
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="TOML configuration (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--debug", action="store_true", help="show the traceback of errors (or LAKEPURGE_DEBUG=1)")


class Commands:
    """The subcommands of ``lakepurge`` (or of a group such as ``lakepurge index``). Each takes --config, --json and
    --debug after its name too; SUPPRESS keeps a subcommand's unset option from overwriting the value given before
    it."""

    def __init__(
        self, parser: argparse.ArgumentParser, dest: str, common: argparse.ArgumentParser | None = None, path: str = ""
    ):
        self._path = path  # the words before this group's subcommands ("index "), for their examples
        self._subparsers = parser.add_subparsers(dest=dest, required=True)
        if common is None:
            common = Parser(add_help=False)
            common.add_argument(
                "--config", default=argparse.SUPPRESS, help=f"TOML configuration (default: {DEFAULT_CONFIG})"
            )
            common.add_argument(
                "--json", action="store_true", default=argparse.SUPPRESS, help="one JSON document on stdout"
            )
            common.add_argument(
                "--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of errors"
            )
        self._common = common

    def add(self, name: str, run: Run, help: str) -> argparse.ArgumentParser:
        """The subcommand ``name``, run by ``run(args, out)``; its options are added to the parser returned."""
        from lakepurge.cli.examples import epilog

        command = self._subparsers.add_parser(
            name,
            parents=[self._common],
            help=help,
            epilog=epilog(self._path + name),
            formatter_class=argparse.RawDescriptionHelpFormatter,  # the examples' lines as written
        )
        command.set_defaults(run=run)
        return command

    def group(self, name: str, help: str) -> Commands:
        """A command made of subcommands (``lakepurge index backfill``)."""
        return Commands(
            self._subparsers.add_parser(name, help=help), f"{name}_command", self._common, f"{self._path}{name} "
        )


def add_users(command: argparse.ArgumentParser) -> None:
    command.add_argument("users", nargs="*", metavar="USER")
    command.add_argument("--users-file")
    add_typed_ids(command)


def read_users(args: argparse.Namespace, required: bool = True) -> list[str]:
    """The user ids exactly as given: the index matches ids exactly, so nothing is trimmed or normalised (an id
    stored as " bob" must be erasable). --users-file holds one id per line; only the line terminator (LF or
    CR LF) is removed and empty lines are skipped. Not required: none may be given (purge --user-hash)."""
    users = list(args.users)
    if getattr(args, "users_file", None):
        users += _lines_of(args.users_file, "--users-file")
    if not users and required and not typed_texts(args):
        raise CliError("no_users", "no user ids given: name at least one, or pass --users-file FILE or --id KIND=VALUE")
    return list(dict.fromkeys(users))


def _lines_of(path: str, option: str) -> list[str]:
    """The non-empty lines of a file of ids, without their terminators (LF or CR LF)."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8-sig")  # a byte order mark is the file's, not an id's
    except FileNotFoundError:
        raise CliError("missing_file", f"{option} {path}: no such file: check the path") from None
    except UnicodeDecodeError as exc:
        raise CliError(
            "bad_users_file", f"{option} {path}: not UTF-8 text (byte {exc.start}): save it as UTF-8"
        ) from None
    except OSError as exc:
        raise CliError("missing_file", f"{option} {path}: {exc.strerror}: check the path") from None
    *terminated, last = text.split("\n")
    return [line for line in [line.removesuffix("\r") for line in terminated] + [last] if line]


def add_typed_ids(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--id",
        action="append",
        default=[],
        dest="typed_ids",
        metavar="KIND=VALUE",
        help="a typed id (repeatable): normalised as [identifiers.KIND] says, found in the datasets of that id_kind",
    )
    command.add_argument("--ids-file", help="typed ids, one KIND=VALUE a line (as --id)")


def typed_texts(args: argparse.Namespace) -> list[str]:
    """The typed ids as given (--id, then the lines of --ids-file), KIND=VALUE each."""
    texts = list(getattr(args, "typed_ids", None) or [])
    if getattr(args, "ids_file", None):
        texts += _lines_of(args.ids_file, "--ids-file")
    return texts


def add_no_expand(command: argparse.ArgumentParser) -> None:
    """--no-expand, on the commands that resolve a typed request themselves (lookup, purge, export)."""
    command.add_argument(
        "--no-expand",
        action="append",
        default=[],
        dest="no_expand",
        metavar="KIND=VALUE",
        help="an identifier resolution does not follow (repeatable): a shared or test email; recorded in the report",
    )


def read_typed_ids(args: argparse.Namespace, settings: Settings, option: str = "typed_ids") -> list[str]:
    """The index forms of the --id KIND=VALUE given (lakepurge.records.identifiers), in order, each once: a kind
    that datasets hold through a transform (sha256_hex(email)) is looked for in that form too, a composite kind's
    VALUE is a JSON object of its parts (lakepurge.records.id_typing). Option "no_expand": those of --no-expand,
    none where the command has no such option."""
    forms = []
    for text in typed_texts(args) if option == "typed_ids" else getattr(args, option, []):
        try:
            forms.extend(typed_request_forms(text, settings.datasets, settings.identifiers))
        except RequestIdError as exc:
            raise CliError("bad_id", f"--{'id' if option == 'typed_ids' else 'no-expand'}: {exc}") from None
    return list(dict.fromkeys(forms))


def with_typed_ids(args: argparse.Namespace, settings: Settings, users: list[str]) -> list[str]:
    """The request's ids: the untyped ones as given, then the index forms of its --id KIND=VALUE. Once kinds are
    configured, an untyped id beginning with their marker is refused: it would read as a typed one."""
    if settings.identifiers and any(user.startswith(KIND_MARKER) for user in users):
        raise CliError(
            "bad_id", "an untyped id begins with U+001F, the marker of identifier kinds: use --id KIND=VALUE"
        )
    return list(dict.fromkeys(users + read_typed_ids(args, settings)))


def add_dataset_filter(command: argparse.ArgumentParser) -> None:
    command.add_argument("--dataset", action="append", default=[], help="only this dataset (repeatable)")


def known_datasets(args: argparse.Namespace, settings: Settings) -> list[str]:
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


def read_settings(args: argparse.Namespace) -> Settings:
    """The configuration --config names, its --dataset names checked."""
    if not os.path.exists(args.config):
        raise CliError(
            "missing_file",
            f"{args.config}: no such configuration file: create one with `lakepurge init`, or pass --config FILE",
        )
    check_aws_environment(need_region=False)
    settings = load_settings(args.config)
    known_datasets(args, settings)
    return settings


def need_spark() -> None:
    """A command that runs local Spark fails before touching anything when pyspark or Java is missing (a JAVA_HOME
    without bin/java included: sparkutil.check_java)."""
    import importlib

    from lakepurge.core.sparkutil import check_java

    importlib.import_module("pyspark")  # an ImportError names the extra to install (errors.explain)
    check_java()


def add_engine(command: argparse.ArgumentParser) -> None:
    """--engine of verify, vacuum and backfill: in this process below [jobs]' thresholds, else local Spark."""
    command.add_argument(
        "--engine",
        choices=("auto", "inline", "spark"),
        default="auto",
        help="auto: in this process (no JVM) when the work is at most [jobs] in_process_max_objects objects (500)"
        " and in_process_max_bytes bytes (1 GiB), else local Spark; inline or spark: that one, whatever the size",
    )


def read_lake_settings(args: argparse.Namespace, spark: bool = False) -> Settings:
    """The configuration of a command that reads or writes the lake: a dataset holding a Delta, Iceberg or Hudi
    table is refused (a configuration error, exit 2) before anything is touched."""
    from lakepurge.core import aws
    from lakepurge.tables.detect import refuse_table_formats

    settings = read_settings(args)
    if spark:
        need_spark()
    check_aws_environment()
    refuse_table_formats(aws.client("s3"), settings.datasets)
    return settings


def add_on(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--on",
        choices=("local", "emr-serverless"),
        default="local",
        help="local: Spark on this machine (default); emr-serverless: the job on [workflow.launcher]'s application,"
        " followed until it ends",
    )


def run_remote(args: argparse.Namespace, out: Output, job: SparkJob) -> int:
    """Run a heavy command's job on EMR Serverless and follow it (``--on emr-serverless``)."""
    from lakepurge.ops.remote_jobs import run_remote as start_and_follow

    settings = read_settings(args)
    check_aws_environment()
    run = start_and_follow(settings, job, out.say)
    out.say(f"{job.script}: {run.status.state.lower()} ({run.status.detail}); logs: {run.logs}")
    out.result(run.summary())
    return EXIT_OK if run.succeeded else EXIT_FAILED
