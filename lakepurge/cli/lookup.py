"""``lakepurge lookup USER ...``: where each user's records are, by the index, with the coverage gaps that would
make the answer incomplete."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from lakepurge.cli.arguments import (
    Commands,
    Output,
    add_no_expand,
    add_users,
    read_settings,
    read_typed_ids,
    read_users,
    with_typed_ids,
)
from lakepurge.cli.errors import EXIT_OK, EXIT_REFUSED
from lakepurge.core.config import Settings
from lakepurge.records.identifiers import shown

if TYPE_CHECKING:
    from lakepurge.index.base import IndexStore
    from lakepurge.tables.index import TableStatus


def register(commands: Commands) -> None:
    lookup = commands.add("lookup", cmd_lookup, help="where each user's records are")
    add_users(lookup)
    add_no_expand(lookup)


def cmd_lookup(args: argparse.Namespace, out: Output) -> int:
    from lakepurge.index import open_existing
    from lakepurge.indexing.coverage import of_index
    from lakepurge.indexing.resolution import ExpansionRefused, expands, plan_lines, resolve

    settings = read_settings(args)
    users = with_typed_ids(args, settings, read_users(args))
    store = open_existing(settings.index)
    try:
        tables = tables_status(settings, store, follow=True)  # rows of each table's current version
        expansion = None
        if expands(settings, users):  # a typed request: every identifier of the person, found through links
            try:
                expansion = resolve(store, settings, users, read_typed_ids(args, settings, "no_expand"))
            except ExpansionRefused as exc:
                out.say(f"lakepurge lookup: {exc}")
                out.result({"status": "REFUSED", "reason": str(exc)})
                return EXIT_REFUSED
            users = expansion.forms
        found = store.lookup(users)
        old_versions = {user: store.noncurrent_of([user]) for user in users}
        gaps = [c for c in of_index(settings, store) if not c.complete]
    finally:
        store.close()
    document: dict[str, Any] = {}
    for user in users:
        locations = found.get(user, [])
        document[shown(user)] = [
            {"s3path": loc.s3path, "etag": loc.etag, "lines": "whole-object" if loc.whole_object else list(loc.lines)}
            for loc in locations
        ] + [
            {"s3path": path, "noncurrent_versions": sorted(versions)}
            for path, versions in sorted(old_versions[user].items())
        ]
        records = sum(0 if loc.whole_object else len(loc.lines) for loc in locations)
        versions = sum(len(v) for v in old_versions[user].values())
        out.say(f"{shown(user)}: {len(locations)} object(s), {records} record(s), {versions} noncurrent version(s)")
        for loc in locations:
            where = "whole object" if loc.whole_object else "lines " + ",".join(map(str, loc.lines))
            out.say(f"  {loc.s3path}  {where}")
        for path, ids in sorted(old_versions[user].items()):
            out.say(f"  {path}  noncurrent version(s) {', '.join(sorted(ids))}")
    for gap in gaps:
        out.say(f"WARNING: dataset {gap.dataset} is {gap.reason}: its records may be missing here (run: {gap.fix})")
    for table in tables:
        out.say(table.line())
    if expansion is not None:
        for line in plan_lines(expansion.counts()):
            out.say(line)
    out.result(
        {"users": document, "coverage_gaps": [g.to_dict() for g in gaps]}
        | ({"tables": [t.to_dict() for t in tables]} if tables else {})
        | ({"identifiers": {"kinds": expansion.kinds(), "links": expansion.by_link()}} if expansion else {})
    )
    return EXIT_OK


def tables_status(settings: Settings, store: IndexStore, follow: bool = False) -> list[TableStatus]:
    """Table datasets' versions (lakepurge.tables.index.tables_status); none configured: nothing is asked.
    `lookup` and `status` both print them."""
    if not any(d.is_table for d in settings.datasets):
        return []
    from lakepurge.core import aws
    from lakepurge.tables.index import tables_status as of_tables

    return of_tables(aws.client("s3"), store, settings, follow=follow)
