"""A bad record never hides its neighbours: an id no backend can store, a huge CSV field, an unterminated CSV quote
or an unreadable object leave every other record findable and erasable, and the bad one listed with its line."""

from __future__ import annotations

import io

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.s3io import list_objects
from lakepurge.core.sparkutil import job_environment
from lakepurge.index.base import WHOLE_OBJECT
from lakepurge.indexing import backfill
from lakepurge.indexing.backfill import index_partition, run_backfill
from lakepurge.indexing.indexer import index_object
from tests.support.lakes import index_toml
from tests.support.purging import purge_report, report_for

pytestmark = pytest.mark.integration

LONG_ID = "L" * 3000
HEADER = b"customer_id,note"


def jsonl(poison: bytes) -> tuple[bytes, list[str]]:
    users = [f"pz-j{n}" for n in range(6)]
    lines = [orjson.dumps({"user_id": u, "text": f"review {n}"}) for n, u in enumerate(users)]
    lines.insert(3, poison)
    return b"\n".join(lines) + b"\n", users


def csv_object(poison: bytes | None, big_note_for: int | None = None) -> tuple[bytes, list[str]]:
    users = [f"pz-c{n}" for n in range(6)]
    rows = [
        b"%s,%s" % (u.encode(), b"x" * 200_000 if n == big_note_for else b"note %d" % n) for n, u in enumerate(users)
    ]
    if poison is not None:
        rows.insert(3, poison)
    return b"\n".join([HEADER, *rows]) + b"\n", users


# key, body, the object's users (each on one line), the poison line (None: nothing unindexable), the reason
CASES = {
    "long-id-jsonl": ("reviews/poison/long-id.jsonl", *jsonl(orjson.dumps({"user_id": LONG_ID})), 3, "longer than"),
    "nul-id-jsonl": ("reviews/poison/nul-id.jsonl", *jsonl(b'{"user_id":"pz-\\u0000x"}'), 3, "NUL"),
    "long-id-csv": ("profiles/poison/long-id.csv", *csv_object(LONG_ID.encode() + b",n"), 4, "longer than"),
    "200kb-field-csv": ("profiles/poison/big-field.csv", *csv_object(None, big_note_for=4), None, None),
    "unterminated-csv": ("profiles/poison/open-quote.csv", *csv_object(b'pz-open,"never closed'), 4, "unterminated"),
}


def lines_of(body: bytes, user: str) -> list[int]:
    """The lines a user's record is on (ids are at the start of a CSV row, or a JSON string)."""
    mark = user.encode()
    return [n for n, line in enumerate(body.split(b"\n")) if line.startswith(mark + b",") or b'"%s"' % mark in line]


@pytest.mark.parametrize("case", list(CASES))
def test_given_a_poison_record_when_indexed_and_neighbours_erased_then_only_the_neighbours_lines_change(
    lake_factory, index_backend, case
):
    key, body, users, poison_line, reason = CASES[case]
    lake = lake_factory(index_backend, objects=4, users=4)
    settings = lake.settings
    s3 = aws.client("s3")
    s3.put_object(Bucket="lake", Key=key, Body=body)
    store = runtime.index_store()
    path = f"s3://lake/{key}"

    outcome = index_object(s3, store, settings, "lake", key)

    assert outcome.action == "indexed"
    lines = body.split(b"\n")
    expected = {u: lines_of(body, u) for u in users}
    found = store.lookup(users)
    assert {u: list(locations[0].lines) for u, locations in found.items()} == expected
    listed = [(u.line, u.reason) for p, u in store.unindexable(limit=1000) if p == path]
    if poison_line is None:
        assert listed == []
    else:
        [(line, text)] = listed
        assert line == poison_line and reason in text
        assert "LLLL" not in text and "never closed" not in text

    erased = {users[1], users[4]}  # one before and one after the poison line
    report = report_for(store, settings, sorted(erased))
    outcomes = purge_report(store, settings, report, erased)

    assert [o.status for o in outcomes] == ["erased"]
    after = s3.get_object(Bucket="lake", Key=key)["Body"].read().split(b"\n")
    assert len(after) == len(lines)
    fmt = "jsonl" if key.endswith(".jsonl") else "csv"
    erased_lines = {n for u in erased for n in expected[u]}
    for number, (before, now) in enumerate(zip(lines, after, strict=True)):
        if number in erased_lines:
            assert now == (b"{}" if fmt == "jsonl" else b","), number
        else:
            assert now == before, number
    assert store.lookup(sorted(erased)) == {}
    assert set(store.lookup(users)) == set(users) - erased


@pytest.mark.parametrize("erase_first", [True, False])
def test_given_csv_with_a_multiline_field_and_a_stray_quote_when_a_user_is_erased_then_records_keep_their_bytes(
    lake_factory, index_backend, erase_first
):
    settings = lake_factory(index_backend, objects=4, users=4).settings
    s3 = aws.client("s3")
    body = (
        b"customer_id,note,city\r\n"
        b'pz-m1,"first\r\n\r\n,,,\r\n\r\nlast",Lyon\r\n'  # a quoted field holding an empty line and a line of commas
        b'pz-s1,a 27" screen,Oslo\r\n'  # a stray quote in an unquoted field: literal, the record ends here
        b"pz-s2,plain,Rome\r\n"
        b'pz-m2,"two\nlines",Nice'  # no final newline
    )
    key = "profiles/weird/mixed.csv"
    s3.put_object(Bucket="lake", Key=key, Body=body)
    store = runtime.index_store()
    index_object(s3, store, settings, "lake", key)
    found = {u: list(loc[0].lines) for u, loc in store.lookup(["pz-m1", "pz-s1", "pz-s2", "pz-m2"]).items()}
    assert found == {"pz-m1": [1], "pz-s1": [6], "pz-s2": [7], "pz-m2": [8]}
    assert store.unindexable() == []

    erased = {"pz-s1"} if erase_first else {"pz-s2", "pz-m2"}
    purge_report(store, settings, report_for(store, settings, sorted(erased)), erased)

    after = s3.get_object(Bucket="lake", Key=key)["Body"].read()
    lines, now = body.split(b"\n"), after.split(b"\n")
    assert len(now) == len(lines)
    blanked = {6: b",,\r"} if erase_first else {7: b",,\r", 8: b",,", 9: b""}
    for number, before in enumerate(lines):
        assert now[number] == blanked.get(number, before), number
    assert set(store.lookup(["pz-m1", "pz-s1", "pz-s2", "pz-m2"])) == {"pz-m1", "pz-s1", "pz-s2", "pz-m2"} - erased


def test_given_an_unreadable_object_when_indexed_by_event_or_cli_then_it_is_recorded_failed_and_retried_later(
    lake_factory, pg_dsn, tmp_path, capsys
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake = lake_factory(index_toml("postgres", pg_dsn), objects=4, users=4)
    s3 = aws.client("s3")
    key = "events/poison/corrupt.parquet"
    s3.put_object(Bucket="lake", Key=key, Body=b"PAR1 not parquet at all PAR1")
    store = runtime.index_store()

    outcome = index_object(s3, store, lake.settings, "lake", key)

    assert outcome.action == "failed"
    assert outcome.error.startswith("object could not be indexed: ArrowInvalid: ")
    assert [(p, u.line, u.reason) for p, u in store.unindexable()] == [
        (f"s3://lake/{key}", WHOLE_OBJECT, outcome.error)
    ]

    config = tmp_path / "lakepurge.toml"
    config.write_text(lake.toml)
    capsys.readouterr()
    assert main(["index", "object", f"s3://lake/{key}", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if not line.startswith("lakepurge: warning: ")]  # not the log lines
    assert said == [f"failed: s3://lake/{key}  {outcome.error}"]
    assert "Traceback" not in err

    fixed = io.BytesIO()
    pq.write_table(pa.table({"user_id": ["pz-p1", "pz-p2"]}), fixed)
    s3.put_object(Bucket="lake", Key=key, Body=fixed.getvalue())
    assert index_object(s3, store, lake.settings, "lake", key).action == "indexed"
    assert set(store.lookup(["pz-p1", "pz-p2"])) == {"pz-p1", "pz-p2"}
    assert store.unindexable() == []


def test_given_a_prefix_with_poison_objects_when_backfilled_on_spark_then_every_other_record_is_indexed(
    spark, lake_factory, pg_dsn
):
    lake = lake_factory(index_toml("postgres", pg_dsn), objects=20, users=10)
    s3 = aws.client("s3")
    for name in ("long-id-jsonl", "nul-id-jsonl", "unterminated-csv", "200kb-field-csv"):
        key, body, *_ = CASES[name]
        s3.put_object(Bucket="lake", Key=key, Body=body)
    s3.put_object(Bucket="lake", Key="events/poison/corrupt.parquet", Body=b"PAR1 not parquet at all PAR1")

    result = run_backfill(spark, lake.settings)

    [(path, reason)] = result.failed
    assert path == "s3://lake/events/poison/corrupt.parquet"
    assert reason.startswith("object could not be indexed: ArrowInvalid")
    store = runtime.index_store()
    dump = store.dump()
    assert lake.lake.truth <= dump
    for name in ("long-id-jsonl", "nul-id-jsonl", "unterminated-csv", "200kb-field-csv"):
        _, _, users, _, _ = CASES[name]
        assert set(store.lookup(users)) == set(users), name
    listed = {(p, u.line) for p, u in store.unindexable(limit=1000)}
    assert listed == {
        ("s3://lake/reviews/poison/long-id.jsonl", 3),
        ("s3://lake/reviews/poison/nul-id.jsonl", 3),
        ("s3://lake/profiles/poison/open-quote.csv", 4),
        ("s3://lake/events/poison/corrupt.parquet", WHOLE_OBJECT),
    }


class _FailingStore:
    """An index whose batch writes fail whenever they hold one given object (a row the backend refuses)."""

    def __init__(self, inner, poison: str) -> None:
        self._inner, self._poison = inner, poison

    def replace_objects(self, objects, force=False):
        if any(o.s3path == self._poison and o.records for o in objects):
            raise RuntimeError("index row size exceeds the maximum for index")
        return self._inner.replace_objects(objects, force=force)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_given_a_batch_write_that_fails_for_one_object_when_backfilling_then_the_others_are_written_one_by_one(
    lake_factory, pg_dsn, monkeypatch
):
    lake = lake_factory(index_toml("postgres", pg_dsn), objects=12, users=6)
    settings = lake.settings
    s3 = aws.client("s3")
    items = [(d.name, bucket, key) for d in settings.datasets for bucket, key, _ in list_objects(s3, d)]
    poison = next(f"s3://lake/{key}" for _, _, key in items if key.endswith(".jsonl"))
    real_open = backfill.open_store
    monkeypatch.setattr(
        backfill, "open_store", lambda config, create=True: _FailingStore(real_open(config, create=create), poison)
    )
    monkeypatch.setattr(backfill, "apply_job_environment", lambda env: None)

    rows = [r for r in index_partition(settings, job_environment(settings), False, items) if r[0]]

    failed = [(r[0], r[6]) for r in rows if r[1] == "failed"]
    assert failed == [
        (poison, "object could not be indexed: RuntimeError: index row size exceeds the maximum for index")
    ]
    assert sorted(r[0] for r in rows) == sorted(f"s3://lake/{key}" for _, _, key in items)
    store = runtime.index_store()
    assert {row for row in lake.lake.truth if row[1] != poison} == {row for row in store.dump() if row[1] != poison}
    assert [(u.line, u.reason) for p, u in store.unindexable() if p == poison] == [(WHOLE_OBJECT, failed[0][1])]
    assert store.get_object(poison).etag == ""  # type: ignore[union-attr]
