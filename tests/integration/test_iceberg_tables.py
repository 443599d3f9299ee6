"""Apache Iceberg tables (format = "iceberg") through the operator's commands, on the moto server: the index follows
the table's snapshots, the erasure commits one snapshot through the table's catalog (a SQL catalog on the test
PostgreSQL or SQLite, the Glue catalog on moto) and expires the snapshots that reached the users, the files only
they reached and every other version naming the users are deleted, and a second reader (DuckDB's iceberg extension)
and a scan of every object version verify it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from lakepurge.core.aws import client
from tests.support import iceberg as I
from tests.support.cli import cli
from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

HASH_KEY = "iceberg-tests-hash-key-0123456789abcdef"
LIMITS = "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n[[datasets]]"


@pytest.fixture
def lake(aws, monkeypatch, tmp_path, request):
    """Empty buckets, a catalog of the kind asked for, and the configuration's file."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = client("s3")
    s3.create_bucket(Bucket=I.BUCKET)
    s3.create_bucket(Bucket="lake-reports")

    def configure(index: str, catalog_kind: str, versioned: bool = False):
        if versioned:
            s3.put_bucket_versioning(Bucket=I.BUCKET, VersioningConfiguration={"Status": "Enabled"})
        dsn = None
        if catalog_kind.startswith("postgres"):
            dsn = request.getfixturevalue("pg_dsn")
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:  # the shared cluster keeps other tests' catalogs
                conn.execute("DROP TABLE IF EXISTS iceberg_tables, iceberg_namespace_properties")
        config = I.catalog_config(catalog_kind, dsn, str(tmp_path / "catalog.db"))
        path = tmp_path / "lakepurge.toml"
        path.write_text(I.config_toml(index, config).replace("[[datasets]]", LIMITS))
        return str(path), I.open_catalog(config)

    return configure


def row_of(s3path: str, row: int) -> dict:
    bucket, key = s3path.removeprefix("s3://").split("/", 1)
    body = client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body)).slice(row, 1).to_pylist()[0]


@pytest.mark.parametrize(
    ("backend", "catalog_kind", "versioned"),
    [("postgres", "postgres", True), ("dynamodb", "glue", False)],
    ids=["postgres-sql-catalog-versioned", "dynamodb-glue-catalog-plain"],
)
def test_given_a_table_with_snapshots_and_deletes_when_purged_then_no_version_of_any_object_names_the_users(
    lake, request, capsys, backend, catalog_kind, versioned
):
    index = index_toml(backend, request.getfixturevalue("pg_dsn") if backend == "postgres" else None)
    config, catalog = lake(index, catalog_kind, versioned)
    history = I.make_history_table(catalog)
    erased = [history.edge, history.old_only, history.masked, history.eq_deleted]
    # alice in manifests' bounds, olga in an overwritten file, mia in a data file and a position delete file, eve in
    # a data file and an equality delete file
    assert all(I.holding(user) for user in erased)
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    before = I.current_rows(catalog)
    assert {r["user_id"] for r in before} == history.current

    code, found = cli(capsys, "lookup", *erased, "--config", config)
    assert code == 0 and found["tables"][0]["version_indexed"] == found["tables"][0]["newest_version"]
    live = [e for e in found["users"][history.edge] if "lines" in e]
    assert len(live) == 2  # days d1 and d3, each the data file and the 0-based row in it
    for entry in live:
        assert all(row_of(entry["s3path"], row)["user_id"] == history.edge for row in entry["lines"])
    for user in (history.old_only, history.masked, history.eq_deleted):  # not in the table: history holders
        assert found["users"][user] and not any("lines" in e for e in found["users"][user])

    code, purged = cli(capsys, "purge", *erased, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True
    table = purged["tables"][0]
    assert table["status"] == "erased" and table["rows_erased"] == 2 and table["remaining"] == []
    assert table["manifests_rewritten"] and table["versions_cut"]
    # the position delete file dropped (it hid mia's row only), the equality delete file rewritten without eve
    assert sorted(d["after"] is None for d in table["delete_files"]) == [False, True]
    # By the second reader; sam stays hidden in the older file and shown in the newer one: the equality delete was
    # rewritten without eve and kept its sequence number.
    assert I.current_rows(catalog) == [r for r in before if r["user_id"] not in erased]
    assert [r["amount"] for r in I.current_rows(catalog) if r["user_id"] == history.returned] == [50]
    for user in erased:
        assert I.holding(user) == []  # data, delete files, manifests (bounds), manifest lists, metadata files
    code, after = cli(capsys, "lookup", *erased, "--config", config)
    assert after["users"] == {user: [] for user in erased}
    others = sorted(history.current)
    code, kept = cli(capsys, "lookup", *others, "--config", config)
    for user in others:  # rows of rewritten files, moved in the index past the rows dropped (masked ones too)
        live = [(e["s3path"], row) for e in kept["users"][user] for row in e.get("lines", ())]
        assert all(row_of(path, row)["user_id"] == user for path, row in live)
        assert len(live) == len([r for r in I.current_rows(catalog) if r["user_id"] == user])
    assert cli(capsys, "verify", *erased, "--config", config)[0] == 0
    certificate = json.loads(
        client("s3").get_object(Bucket="lake-reports", Key=purged["certificate"].split("/", 3)[3])["Body"].read()
    )
    assert certificate["tables"][0]["snapshot_id"] == table["snapshot_id"]
    assert certificate["tables"][0]["versions_cut"] == table["versions_cut"]


@pytest.fixture
def indexed(lake, capsys):
    """The history table in a SQL catalog on PostgreSQL through psycopg 3 (postgresql+psycopg://), indexed on
    DynamoDB in an unversioned bucket."""
    config, catalog = lake(index_toml("dynamodb"), "postgres3")
    history = I.make_history_table(catalog)
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    return config, catalog, history


def test_given_a_commit_between_the_report_and_the_erasure_when_purged_then_it_stays_and_older_snapshots_stay_readable(
    indexed, capsys, monkeypatch
):
    from lakepurge.purge import iceberg as erasure

    config, catalog, _history = indexed
    kept_snapshot = catalog.load_table(I.TABLE).current_snapshot().snapshot_id
    before = I.current_rows(catalog)
    catalog.load_table(I.TABLE).append(I.rows(["zoe@example.com", "kim@example.com"], "d5", 50))
    code, plan = cli(capsys, "purge", "zoe@example.com", "--config", config)  # the dry run writes the report
    assert code == 0
    real_commit = erasure.IcebergErasure.commit
    raced = []

    def racing_commit(self, *args, **kwargs):  # another writer commits between the erasure's read and its commit
        if not raced:
            raced.append(True)
            catalog.load_table(I.TABLE).append(I.rows(["hugo@example.com", "zoe@example.com"], "d6", 60))
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(erasure.IcebergErasure, "commit", racing_commit)
    code, purged = cli(
        capsys, "purge", "zoe@example.com", "--report", plan["request_id"], "--sha256", plan["report_sha256"], "--yes",
        "--config", config,
    )  # fmt: skip

    assert code == 0 and purged["verified"] is True and raced
    rows = I.current_rows(catalog)
    assert {r["user_id"] for r in rows if r["day"] in ("d5", "d6")} == {"kim@example.com", "hugo@example.com"}
    assert I.holding("zoe@example.com") == []
    # The snapshots before zoe's append never held her: they stay, and time travel reads them whole.
    assert kept_snapshot not in purged["tables"][0]["versions_cut"]
    assert I.current_rows(catalog, kept_snapshot) == before


def test_given_a_snapshot_the_index_never_saw_when_purged_then_it_is_read_first_or_the_request_is_not_certified(
    indexed, capsys, monkeypatch
):
    import lakepurge.tables.plan as planning

    config, catalog, _history = indexed
    catalog.load_table(I.TABLE).append(I.rows(["ivan@example.com"], "d7", 70))  # no event reaches the index here
    monkeypatch.setattr(planning, "MAX_CATCHUP_COMMITS", 0)
    code, refused = cli(capsys, "purge", "ivan@example.com", "--yes", "--config", config)
    assert code == 4 and refused["status"] == "INDEX_INCOMPLETE"
    assert "moved on by 1 commits" in refused["datasets"][0]["reason"]
    assert [r for r in I.current_rows(catalog) if r["user_id"] == "ivan@example.com"]  # nothing was touched

    monkeypatch.setattr(planning, "MAX_CATCHUP_COMMITS", 1000)
    code, purged = cli(capsys, "purge", "ivan@example.com", "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True and purged["tables"][0]["rows_erased"] == 1
    assert I.holding("ivan@example.com") == []


def test_given_users_the_table_never_held_when_purged_then_it_gets_no_commit_and_loses_no_object(indexed, capsys):
    config, catalog, _history = indexed
    pointer = catalog.load_table(I.TABLE).metadata_location
    before = I.every_version_bytes()

    code, purged = cli(capsys, "purge", "nobody@example.com", "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True and purged["tables"][0]["status"] == "nothing-to-erase"
    assert catalog.load_table(I.TABLE).metadata_location == pointer  # no commit, no expiry
    assert I.every_version_bytes() == before  # nothing written or deleted under the location


def test_given_an_erased_user_planted_back_when_verified_then_verify_exits_1_naming_where(indexed, capsys):
    config, catalog, history = indexed
    code, purged = cli(capsys, "purge", history.old_only, "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True
    assert cli(capsys, "verify", history.old_only, "--config", config)[0] == 0

    orphan = io.BytesIO()  # a file no snapshot adds (a failed writer's), holding the user
    pq.write_table(I.rows([history.old_only], "d2"), orphan)
    key = f"{I.ROOT}data/day=d2/orphan.parquet"
    client("s3").put_object(Bucket=I.BUCKET, Key=key, Body=orphan.getvalue())
    code, found = cli(capsys, "verify", history.old_only, "--config", config)
    assert code == 1 and any(p["object"].endswith("orphan.parquet") for p in found["remaining"])
    client("s3").delete_object(Bucket=I.BUCKET, Key=key)

    catalog.load_table(I.TABLE).append(I.rows([history.old_only], "d8", 80))  # a snapshot the index has not seen
    code, found = cli(capsys, "verify", history.old_only, "--config", config)
    assert code == 1 and any("second reader" in p.get("reason", "") for p in found["remaining"])


def test_given_a_metadata_file_event_when_indexed_then_the_index_follows_the_table_and_ignores_its_other_files(
    indexed, capsys
):
    from lakepurge.core.config import load_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.indexer import index_object

    config, catalog, _history = indexed
    settings = load_settings(config)
    catalog.load_table(I.TABLE).append(I.rows(["jane@example.com"], "d9", 90))
    s3 = client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=I.BUCKET, Prefix=I.ROOT)["Contents"]]
    pointer = catalog.load_table(I.TABLE).metadata_location.split("/", 3)[3]
    data = next(k for k in keys if "day=d9/" in k)
    manifest = next(k for k in keys if k.endswith("-m0.avro"))
    store = open_store(settings.index)
    try:
        assert index_object(s3, store, settings, I.BUCKET, data).action == "ignored"  # its snapshot indexes it
        assert index_object(s3, store, settings, I.BUCKET, manifest).action == "ignored"
        assert store.lookup(["jane@example.com"]) == {}
        assert index_object(s3, store, settings, I.BUCKET, pointer).action == "indexed"
        [where] = store.lookup(["jane@example.com"])["jane@example.com"]
        assert where.s3path == f"s3://{I.BUCKET}/{data}" and where.lines == (0,)
        assert index_object(s3, store, settings, I.BUCKET, pointer).action == "unchanged"  # a redelivery
    finally:
        store.close()
    code, status = cli(capsys, "status", "--config", config)
    assert code == 0
    [table] = status["tables"]
    assert table["version_indexed"] == table["newest_version"] and table["problem"] == ""
    assert "write.metadata.metrics.column.user_id = none" in table["warning"]  # the id's bounds are in manifests


def test_given_a_table_when_a_user_asks_for_their_data_then_the_archive_holds_exactly_their_rows_of_its_snapshot(
    indexed, capsys
):
    import zipfile

    from lakepurge.access.export import export_users, unseal
    from lakepurge.core.config import load_settings
    from lakepurge.core.s3uri import S3Uri

    config, catalog, history = indexed
    catalog.load_table(I.TABLE).append(I.rows(["kim@example.com", history.edge], "d10", 100))  # not indexed yet
    s3 = client("s3")
    s3.create_bucket(Bucket="exports")
    key = client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]
    users = [history.edge, history.masked]
    run = export_users(load_settings(config), users, S3Uri("exports", "a/"), kms_key=key, say=print)
    sealed = s3.get_object(Bucket="exports", Key=run.archive.split("/", 3)[3])["Body"].read()
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), client("kms"))))
    exported = []
    for name in archive.namelist():
        if name.endswith(".parquet"):
            exported += pq.read_table(io.BytesIO(archive.read(name))).to_pylist()
    expected = [r for r in I.current_rows(catalog) if r["user_id"] in users]
    key_of = lambda r: (r["day"], r["amount"])  # noqa: E731
    assert sorted(exported, key=key_of) == sorted(expected, key=key_of) and len(expected) == 3
    assert history.masked not in str(exported)  # a row a position delete hides is not the table's


def test_given_spark_when_backfilled_and_purged_then_files_are_read_and_rewritten_on_executors(lake, spark, capsys):
    from lakepurge.core.config import load_settings
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_backfill
    from lakepurge.purge.job import run_purge
    from lakepurge.reports.report import build_report

    config, catalog = lake(index_toml("dynamodb"), "sqlite", versioned=True)
    settings = load_settings(config)
    history = I.make_history_table(catalog)
    result = run_backfill(spark, settings)
    # live data files (d1, d2, three of d3); olga's overwritten file, the two delete files
    assert result.failed == () and result.objects == 5 and result.versions == 3
    before = I.current_rows(catalog)
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    store = open_store(settings.index)
    try:
        report = build_report(store, settings, [history.edge], "req-spark", pseudonymizer)
    finally:
        store.close()

    purged = run_purge(spark, settings, report, HASH_KEY.encode())

    assert purged.verified and purged.tables[0]["rows_erased"] == 2
    assert I.current_rows(catalog) == [r for r in before if r["user_id"] != history.edge]
    assert I.holding(history.edge) == []


def test_given_iceberg_tables_in_glue_when_imported_then_they_become_iceberg_datasets_the_index_reads(
    lake, capsys, tmp_path
):
    config, catalog = lake(index_toml("dynamodb"), "glue")
    I.create_table(catalog).append(I.rows(["alice@example.com", "bob@example.com"], "d1"))
    client("glue").update_table(
        DatabaseName=I.NAMESPACE,
        TableInput={
            **{k: v for k, v in _glue_table().items() if k in ("Name", "StorageDescriptor", "TableType")},
            "Parameters": {**_glue_table()["Parameters"], "lakepurge.id_fields": "user_id"},
        },
    )
    out = tmp_path / "datasets.toml"

    code, imported = cli(capsys, "datasets", "import", "--glue-database", I.NAMESPACE, "--out", str(out))

    assert code == 0
    assert [(i["table"], i["format"]) for i in imported["imported"]] == [("events", "iceberg")]
    written = out.read_text()
    assert f'table = "{I.TABLE}"' in written and 'catalog = "glue"' in written and "[catalogs.glue]" in written
    assert "location" not in written.split("[[datasets]]")[1]  # the catalog knows it
    configured = tmp_path / "imported.toml"
    configured.write_text(Path(config).read_text().split("[[datasets]]")[0] + written)
    assert main(["index", "reconcile", "--config", str(configured)]) == 0
    capsys.readouterr()
    code, found = cli(capsys, "lookup", "alice@example.com", "--config", str(configured))
    assert [e["lines"] for e in found["users"]["alice@example.com"]] == [[0]]
    # and the catalog check compares the table it was imported from, whose location is the catalog's own
    code, checked = cli(capsys, "datasets", "check", "--glue-database", I.NAMESPACE, "--config", str(configured))
    assert (code, checked["drift"], checked["checked"]) == (0, [], ["events"])
    # a table whose Glue entry states no location (the Iceberg metadata does): not "moved", not "no S3 location"
    table = _glue_table()
    storage = {k: v for k, v in table["StorageDescriptor"].items() if k != "Location"}
    client("glue").update_table(
        DatabaseName=I.NAMESPACE,
        TableInput={
            **{k: v for k, v in table.items() if k in ("Name", "TableType", "Parameters")},
            "StorageDescriptor": storage,
        },
    )
    code, checked = cli(capsys, "datasets", "check", "--glue-database", I.NAMESPACE, "--config", str(configured))
    assert (code, checked["drift"]) == (0, []), checked["drift"]
    bare = tmp_path / "bare.toml"  # no dataset: the table is new to it
    bare.write_text(Path(config).read_text().split("[[datasets]]")[0])
    code, unconfigured = cli(capsys, "datasets", "check", "--glue-database", I.NAMESPACE, "--config", str(bare))
    assert [d["detail"] for d in unconfigured["drift"]] == [
        "not configured (an Iceberg table: its catalog holds its location)"
    ]


def _glue_table() -> dict:
    return client("glue").get_table(DatabaseName=I.NAMESPACE, Name="events")["Table"]
