"""Every reader of a typed dataset's ids agrees with the indexer (issue 31, slice 2): the purge's ownership check
(JSON Lines, CSV, Parquet), the check of the bytes it produced before writing them (lines_holding) and the access
export's Parquet rows all compare the index forms of the dataset's kind, read by the dataset's id rules as the indexer
reads them. The bulk paths that compare ids as read are for untyped datasets only."""

from __future__ import annotations

import io
import tomllib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakepurge.core.config import DatasetConfig, Settings, parse_settings
from lakepurge.core.config_identity import id_rules
from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.purge.ownership import Ownership
from lakepurge.purge.rewrite import rewrite_csv, rewrite_jsonl, rewrite_parquet
from lakepurge.records.formats import group_records
from lakepurge.records.identifiers import request_form
from lakepurge.records.lines import DEFAULT_INFLATION
from lakepurge.records.search import lines_holding

pytestmark = pytest.mark.unit

MAX = 4096
PSEUDONYMIZER = Pseudonymizer(b"a test key of 32 bytes, not secret")
# alice in three spellings her email kind (trim, casefold) makes one, bob, and a value that normalises to no email
EMAILS = [" Alice@Example.COM ", "bob@example.com", "alice@example.com", "   ", "ALICE@EXAMPLE.COM", "carol@x.org"]
ALICE_LINES = [0, 2, 4]


def settings_with(fmt: str, typed: bool) -> Settings:
    text = (
        '[index]\nbackend = "postgres"\ndsn = "postgresql://x@localhost/db"\n[reports]\nlocation = "s3://r/r/"\n'
        '[identifiers.email]\nnormalise = ["trim", "casefold"]\n'
        f'[[datasets]]\nname = "d"\nlocation = "s3://lake/d/"\nformat = "{fmt}"\nid_fields = ["email"]\n'
        + ('id_kind = "email"\n' if typed else "")
    )
    return parse_settings(tomllib.loads(text), "lakepurge.toml")


def lake_object(fmt: str) -> tuple[bytes, list[int]]:
    """The object's bytes and the line (record, row) number of each email."""
    if fmt == "jsonl":
        return b"".join(b'{"email":"%s","n":%d}\n' % (e.encode(), n) for n, e in enumerate(EMAILS)), list(range(6))
    if fmt == "csv":
        return b"email,n\n" + b"".join(b"%s,%d\n" % (e.encode(), n) for n, e in enumerate(EMAILS)), list(range(1, 7))
    sink = io.BytesIO()
    pq.write_table(pa.table({"email": EMAILS, "n": list(range(6))}), sink)
    return sink.getvalue(), list(range(6))


def indexed_lines(settings: Settings, dataset: DatasetConfig, raw: bytes, form: str) -> list[int]:
    """The lines the indexer keys by this index form (group_records by the dataset's id rules)."""
    grouped = group_records(io.BytesIO(raw), "d/a", dataset.format, ["email"], MAX, rules=id_rules(dataset))
    return grouped.lines_by_user.get(form, [])


def erased_by_purge(dataset: DatasetConfig, raw: bytes, lines: list[int], users: HashedUsers) -> tuple[list[int], Any]:
    """The lines the purge's ownership check takes among those named, and the bytes it produces."""
    if dataset.format == "parquet":
        staged, erased = rewrite_parquet(io.BytesIO(raw), lines, users, dataset)
        return erased, staged.body()
    owner = Ownership(dataset, users, id_rules(dataset))
    if dataset.format == "jsonl":
        staged = rewrite_jsonl(io.BytesIO(raw), False, lines, owner, drop=False)
    else:
        staged = rewrite_csv(io.BytesIO(raw), False, lines, owner, False, MAX)
    return owner.erased, staged.body()


def holding(dataset: DatasetConfig, raw: bytes, users: HashedUsers) -> list[int]:
    return lines_holding(
        io.BytesIO(raw), "d/a", dataset.format, ["email"], MAX, DEFAULT_INFLATION, users.each_contained,
        users.none_of, id_rules(dataset),
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
@pytest.mark.parametrize("known", [True, False], ids=["ids-known", "hashes-only"])
def test_given_a_typed_dataset_when_alice_is_requested_by_email_then_every_reader_takes_the_lines_the_index_names(
    fmt: str, known: bool
):
    settings = settings_with(fmt, typed=True)
    dataset = settings.datasets[0]
    alice = request_form("email=ALICE@example.com ", settings.identifier_kinds)
    users = HashedUsers([PSEUDONYMIZER(alice)], PSEUDONYMIZER, [alice] if known else [])
    raw, numbers = lake_object(fmt)
    hers = [numbers[i] for i in ALICE_LINES]

    assert indexed_lines(settings, dataset, raw, alice) == hers
    assert holding(dataset, raw, users) == hers  # the check of produced bytes finds each of her lines
    erased, produced = erased_by_purge(dataset, raw, numbers, users)  # every line named, as a stale index could
    assert sorted(erased) == hers  # bob, carol and the line holding no email are nobody's but theirs
    assert holding(dataset, produced, users) == []


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_given_an_untyped_dataset_when_alice_is_requested_by_email_then_no_reader_takes_a_line(fmt: str):
    settings = settings_with(fmt, typed=False)
    dataset = settings.datasets[0]
    alice = request_form("email=alice@example.com", settings.identifier_kinds)
    users = HashedUsers([PSEUDONYMIZER(alice)], PSEUDONYMIZER, [alice])
    raw, numbers = lake_object(fmt)

    assert indexed_lines(settings, dataset, raw, alice) == []
    assert holding(dataset, raw, users) == []
    erased, produced = erased_by_purge(dataset, raw, numbers, users)
    assert erased == [] and produced == raw
    # and the untyped id, as today: its exact spelling only
    untyped = HashedUsers([PSEUDONYMIZER("alice@example.com")], PSEUDONYMIZER, ["alice@example.com"])
    assert holding(dataset, raw, untyped) == [numbers[2]]
