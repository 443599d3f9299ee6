"""``lakepurge datasets import | check``: ``[[datasets]]`` entries from the AWS Glue Data Catalog, and the drift
between the configuration and the catalog (lakepurge.indexing.catalog)."""

from __future__ import annotations

import argparse
import os
import sys

from lakepurge.cli.arguments import Commands, Output, read_settings
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, CliError, check_aws_environment
from lakepurge.core.config import Settings


def register(commands: Commands) -> None:
    datasets = commands.group("datasets", help="[[datasets]] from the AWS Glue Data Catalog")

    imports = datasets.add(
        "import", cmd_datasets_import, help="write [[datasets]] entries from Glue tables (stdout, or --out)"
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

    check = datasets.add(
        "check", cmd_datasets_check, help="the drift between the configuration and the catalog (exit 1 on drift)"
    )
    check.add_argument("--glue-database", required=True, metavar="DB", help="the Glue database to compare with")


def _catalog_settings(args: argparse.Namespace, required: bool) -> Settings | None:
    """The configuration `datasets import` compares with (only when the file exists) or `datasets check` needs."""
    if not required and not os.path.exists(args.config):
        check_aws_environment()
        return None
    settings = read_settings(args)
    check_aws_environment()
    return settings


def _catalog_error(exc: Exception) -> CliError:
    return CliError("no_such_database", f"{exc}: check --glue-database, AWS_REGION and the account")


def cmd_datasets_import(args: argparse.Namespace, out: Output) -> int:
    """[[datasets]] entries from Glue tables (lakepurge.indexing.catalog): to stdout, or to --out."""
    from lakepurge.core import aws
    from lakepurge.indexing.catalog import CatalogError, import_datasets

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
    return EXIT_FAILED if not result.imported and (result.not_imported or not result.already_configured) else EXIT_OK


def cmd_datasets_check(args: argparse.Namespace, out: Output) -> int:
    """The drift between the configuration and the Glue database; exit 0 in sync, 1 drift."""
    from lakepurge.core import aws
    from lakepurge.indexing.catalog import CatalogError, check_catalog

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
    return EXIT_OK if result.in_sync else EXIT_FAILED
