"""The access export (GDPR Art. 15) on a real (moto) S3 with both index backends: the archive holds exactly the
users' records (checked against the generator's ground truth, never lakepurge's own reading), nothing of anyone
else, the lake is left exactly as it was, and no raw id reaches the logs."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import tomllib
import uuid
from collections import defaultdict
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lakepurge import cli
from lakepurge.access.export import ExportRefused, export_users
from lakepurge.core.aws import client
from lakepurge.core.config import parse_settings
from lakepurge.core.s3uri import S3Uri
from lakepurge.index import open_store
from lakepurge.local.samples import generate_lake, settings_toml
from lakepurge.reports import layout
from tests.support.exports import kms_key, open_archive
from tests.support.invariant import record_spans
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_lake

pytestmark = pytest.mark.integration

OUT = "export-out"


@pytest.fixture(params=["postgres", "dynamodb"])
def backend(request, moto_server):
    if request.param == "postgres":
        return lambda: index_toml("postgres", request.getfixturevalue("pg_dsn"))
    return lambda: index_toml("dynamodb", table=f"index-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def hash_key(monkeypatch):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)


def fresh_lake(index: str, seed: int, extra_toml: str = ""):
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    s3 = client("s3")
    for name in (bucket, f"{bucket}-reports", OUT):
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    lake = generate_lake(bucket=bucket, objects=16, users=12, seed=seed)
    lake.upload(s3)
    toml = settings_toml(bucket, index, f"s3://{bucket}-reports/") + extra_toml
    return lake, parse_settings(tomllib.loads(toml)), toml


def index_closed(cfg: Any, lake: Any) -> None:
    store = open_store(cfg.index)
    try:
        index_lake(store, cfg, lake)
    finally:
        store.close()


def lake_state(s3: Any, bucket: str) -> list[tuple[Any, ...]]:
    """Every version and delete marker of the bucket, with its ETag: what 'the lake is unchanged' compares."""
    state: list[tuple[Any, ...]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        state += [(v["Key"], v["VersionId"], v["ETag"], v["IsLatest"], v["Size"]) for v in page.get("Versions", [])]
        state += [(m["Key"], m["VersionId"], "marker", m["IsLatest"]) for m in page.get("DeleteMarkers", [])]
    return sorted(state, key=repr)


def shift_one_object(s3: Any, lake: Any, users: set[str], truth: dict[str, set[int]]) -> str | None:
    """Rewrite one plain JSON Lines object holding the users after indexing, a stranger's line first: the index is
    stale and every line number moved. The ground truth moves with it."""
    for obj in lake.objects:
        path = f"s3://{lake.bucket}/{obj.key}"
        if obj.key.startswith("reviews/") and obj.key.endswith(".jsonl") and path in truth:
            s3.put_object(Bucket=lake.bucket, Key=obj.key, Body=b'{"user_id": "stranger-0"}\n' + obj.body)
            obj.body = b'{"user_id": "stranger-0"}\n' + obj.body
            truth[path] = {line + 1 for line in truth[path]}
            return path
    return None


def assert_exactly_the_users_records(lake: Any, cfg: Any, users: set[str], manifest: dict, archive: Any) -> None:
    import pyarrow.parquet as pq

    truth: dict[str, set[int]] = defaultdict(set)
    for user, path, line in lake.truth:
        if user in users:
            truth[path].add(line)
    bodies = {f"s3://{lake.bucket}/{o.key}": o.body for o in lake.objects}
    names = set(archive.namelist())
    exported_whole: dict[str, list[bytes]] = defaultdict(list)
    seen = set()
    for entry in manifest["objects"]:
        assert entry["file"] in names
        data = archive.read(entry["file"])
        dataset = cfg.dataset_named(entry["dataset"])
        if dataset.per_object:
            assert entry["lines"] == "whole-object"
            exported_whole[dataset.name].append(data)
            continue
        path = entry["object"]
        seen.add(path)
        lines = sorted(truth[path])
        assert entry["lines"] == lines, path
        body = bodies[path]
        text = gzip.decompress(body) if path.endswith(".gz") else body
        physical = text.split(b"\n")
        if dataset.format == "jsonl":
            assert data == b"".join(physical[n] + b"\n" for n in lines), path  # byte-identical lines
        elif dataset.format == "csv":
            spans = record_spans(text)
            wanted = [0] + [n for start in lines for n in range(start, start + spans[start])]
            assert data == b"".join(physical[n] + b"\n" for n in wanted), path  # header + records, byte-identical
        else:
            original = pq.read_table(io.BytesIO(body))
            exported = pq.read_table(io.BytesIO(data))
            assert exported.schema == original.schema
            assert exported.to_pylist() == [original.slice(n, 1).to_pylist()[0] for n in lines], path
    line_based = {p for p in truth if not cfg.dataset_for(lake.bucket, S3Uri.parse(p).key).per_object}
    assert seen == line_based  # every object holding them, and no other
    expected_whole: dict[str, list[bytes]] = defaultdict(list)
    for path in truth.keys() - line_based:
        expected_whole[cfg.dataset_for(lake.bucket, S3Uri.parse(path).key).name].append(bodies[path])
    assert {k: sorted(v) for k, v in exported_whole.items()} == {k: sorted(v) for k, v in expected_whole.items()}
    assert names == {"manifest.json", *(e["file"] for e in manifest["objects"])}


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a lake takes minutes; the seed is enough
)
@given(seed=st.integers(min_value=0, max_value=10_000), picks=st.lists(st.integers(0, 11), min_size=1, max_size=3))
def test_given_any_lake_when_users_exported_then_the_archive_holds_exactly_their_records_and_the_lake_is_unchanged(
    backend, hash_key, caplog, seed, picks
):
    lake, cfg, _ = fresh_lake(backend(), seed)
    store = open_store(cfg.index)
    store.truncate()
    try:
        index_lake(store, cfg, lake)
    finally:
        store.close()
    s3 = client("s3")
    users = {lake.users[p] for p in picks}
    for kind in ("reviews/", ".jsonl.gz", "profiles/", "events/", "clicks/"):  # every format, every example
        users.add(min(user for user, path, _ in lake.truth if kind in path))
    truth: dict[str, set[int]] = defaultdict(set)
    for user, path, line in lake.truth:
        if user in users:
            truth[path].add(line)
    shifted = shift_one_object(s3, lake, users, truth)
    if shifted is not None:  # the generator's truth for that object, moved by one line
        lake.truth = {(u, p, n + 1 if p == shifted else n) for u, p, n in lake.truth}
    before = lake_state(s3, lake.bucket)
    said: list[str] = []

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="lakepurge"):
        run = export_users(cfg, sorted(users), S3Uri(OUT, "subject/"), kms_key=kms_key(), say=said.append)

    assert lake_state(s3, lake.bucket) == before  # not one object or version written, deleted or added
    manifest, archive = open_archive(s3, run.archive)
    assert_exactly_the_users_records(lake, cfg, users, manifest, archive)
    assert manifest["users_found"] == len(users) and not run.empty
    formats = {e["source_format"] for e in manifest["objects"]} | {e["file"][-4:] for e in manifest["objects"]}
    assert {"jsonl", "csv", "parquet", "whole-object"} <= formats
    assert any(e["object"].endswith(".gz") for e in manifest["objects"])
    assert caplog.records  # the logs checked below are not empty
    if shifted is not None:
        assert [e["stale_index"] for e in manifest["objects"] if e["object"] == shifted] == [True]
    record = layout.read_document(s3, layout.export_record(cfg, run.request_id), layout.ExportDocument)
    assert record is not None and record.archive == run.archive and record.archive_sha256 == run.archive_sha256
    assert sum(record.records.values()) == sum(e["records"] for e in manifest["objects"])
    logged = "\n".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    documents = logged + "\n".join(said) + orjson.dumps(record.to_json()).decode()
    documents += archive.read("manifest.json").decode()
    for user in lake.users:
        assert user not in documents  # logs, messages, the record and the manifest name nobody


def test_given_a_user_unknown_to_the_index_when_exported_then_the_archive_has_an_empty_manifest(
    aws, pg_dsn, hash_key, tmp_path, capsys
):
    lake, cfg, toml = fresh_lake(index_toml("postgres", pg_dsn), seed=3)
    index_closed(cfg, lake)
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    key = kms_key()
    s3 = client("s3")
    before = lake_state(s3, lake.bucket)

    code = cli.main(
        ["export", "nobody-known", "--to", f"s3://{OUT}/x/", "--kms-key", key, "--config", str(config), "--json"]
    )

    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert document["empty"] is True and document["users_found"] == 0
    assert "nothing found" in captured.err and "nobody-known" not in captured.err + captured.out
    manifest, archive = open_archive(s3, document["archive"])
    assert manifest["objects"] == [] and manifest["relational"] == [] and "nothing found" in manifest["note"]
    assert archive.namelist() == ["manifest.json"]
    assert lake_state(s3, lake.bucket) == before


def test_given_relational_rows_and_csv_format_when_exported_then_rows_are_included_and_records_converted(
    aws, pg_dsn, hash_key, tmp_path, capsys
):
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS export_contacts")
        conn.execute("CREATE TABLE export_contacts (customer_id text, email text, since date)")
        conn.execute(
            "INSERT INTO export_contacts VALUES ('u0000001', 'one@example.com', '2024-01-02'),"
            " ('u0000002', 'two@example.com', '2024-03-04')"
        )
    relational = f'\n[[relational]]\nname = "crm"\ndsn = "{pg_dsn}"\ntable = "public.export_contacts"\n'
    relational += 'column = "customer_id"\n'
    lake, cfg, toml = fresh_lake(index_toml("postgres", pg_dsn), seed=5, extra_toml=relational)
    index_closed(cfg, lake)
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    key = kms_key()
    args = ["--to", f"s3://{OUT}/y/", "--kms-key", key, "--config", str(config), "--json"]

    code = cli.main(["export", "u0000001", "--format", "csv", "--request-id", "req-csv-1", *args])

    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert document["relational_rows"] == {"crm": 1}
    manifest, archive = open_archive(client("s3"), document["archive"])
    rows = [orjson.loads(line) for line in archive.read("relational/crm.jsonl").splitlines()]
    assert rows == [{"customer_id": "u0000001", "email": "one@example.com", "since": "2024-01-02"}]
    for entry in manifest["objects"]:
        if entry["source_format"] != "whole-object":
            assert entry["format"] == "csv" and entry["file"].endswith(".csv")
    # The same request id again is refused (the record is written once); so is a destination inside the lake.
    assert cli.main(["export", "u0000001", "--request-id", "req-csv-1", *args]) == 2
    with pytest.raises(ExportRefused):
        export_users(cfg, ["u0000001"], S3Uri(lake.bucket, "reviews/exports/"), kms_key=key, say=lambda _: None)
