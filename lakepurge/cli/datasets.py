"""``lakepurge datasets import | check``: ``[[datasets]]`` entries from the AWS Glue Data Catalog or a Hive
metastore, and the drift between the configuration and the catalog (lakepurge.indexing.catalog)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lakepurge.cli.arguments import Commands, Output, read_settings
from lakepurge.cli.errors import EXIT_FAILED, EXIT_OK, CliError, check_aws_environment
from lakepurge.core.config import Settings

if TYPE_CHECKING:
    from lakepurge.indexing.catalog_sources import TableSource


def _add_catalog_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """--glue-database DB, or --hive-metastore URI with --database DB."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--glue-database", metavar="DB", help=f"the Glue database to {verb}")
    source.add_argument(
        "--hive-metastore",
        metavar="URI",
        help="a Hive metastore's Thrift URI, thrift://host:9083 (hive.metastore.uris; with --database)",
    )
    parser.add_argument("--database", metavar="DB", help=f"the Hive metastore's database to {verb}")


def register(commands: Commands) -> None:
    datasets = commands.group("datasets", help="[[datasets]] from the AWS Glue Data Catalog or a Hive metastore")

    imports = datasets.add(
        "import", cmd_datasets_import, help="write [[datasets]] entries from a catalog's tables (stdout, or --out)"
    )
    _add_catalog_arguments(imports, "read")
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
    _add_catalog_arguments(check, "compare with")


def _catalog_settings(args: argparse.Namespace, required: bool) -> Settings | None:
    """The configuration `datasets import` compares with (only when the file exists) or `datasets check` needs."""
    if args.hive_metastore is None:
        check_aws_environment()
        if args.database is not None:
            raise CliError("usage", "--database names a Hive metastore's database: with --glue-database, leave it out")
    elif args.database is None:
        raise CliError("usage", "--hive-metastore needs --database DB: the metastore's database to read")
    if not required and not os.path.exists(args.config):
        return None
    return read_settings(args)


@contextmanager
def _catalog(args: argparse.Namespace) -> Iterator[tuple[TableSource, str]]:
    """The catalog the arguments name and its database; its faults as one line that says what to check."""
    from lakepurge.core.hive_metastore import BadUri, HiveMetastore, MetastoreError
    from lakepurge.indexing.catalog_sources import CatalogError, GlueTables, HiveTables

    try:
        if args.hive_metastore is None:
            from lakepurge.core import aws

            yield GlueTables(aws.client("glue")), args.glue_database
        else:
            with HiveMetastore(args.hive_metastore) as metastore:
                yield HiveTables(metastore), args.database
    except CatalogError as exc:
        check = "--glue-database, AWS_REGION and the account" if args.hive_metastore is None else "--database"
        raise CliError("no_such_database", f"{exc}: check {check}") from None
    except BadUri as exc:
        raise CliError("bad_uri", f"--hive-metastore {exc}") from None
    except MetastoreError as exc:
        raise CliError("metastore_unreachable", f"{exc}: check --hive-metastore and that the metastore runs") from None


def cmd_datasets_import(args: argparse.Namespace, out: Output) -> int:
    """[[datasets]] entries from Glue tables (lakepurge.indexing.catalog): to stdout, or to --out."""
    from lakepurge.indexing.catalog import import_datasets

    if args.out and os.path.exists(args.out) and not args.force:
        raise CliError("file_exists", f"{args.out} exists already: keep it, or run again with --force to overwrite it")
    settings = _catalog_settings(args, required=False)
    with _catalog(args) as (source, database):
        result = import_datasets(source, database, args.table, args.id_column, settings)
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
    """The drift between the configuration and the catalog's database; exit 0 in sync, 1 drift."""
    from lakepurge.indexing.catalog import check_catalog

    settings = _catalog_settings(args, required=True)
    assert settings is not None
    with _catalog(args) as (source, database):
        result = check_catalog(source, database, settings)
        where = source.where(database)
    for drift in result.drift:
        dataset = f" (dataset {drift.dataset})" if drift.dataset and drift.dataset != drift.table else ""
        out.say(f"{drift.kind.upper().replace('_', ' ')} {drift.table}{dataset}: {drift.detail}")
    verdict = "in sync" if result.in_sync else f"{len(result.drift)} difference(s)"
    out.say(
        f"{args.config} and {where}: {verdict} ({len(result.checked)} dataset(s) compared,"
        f" {result.tables} table(s) in the catalog)"
    )
    if result.not_from_catalog:
        out.say(f"  not from this database (left alone): {', '.join(result.not_from_catalog)}")
    out.result(result.summary())
    return EXIT_OK if result.in_sync else EXIT_FAILED
