"""Delta Lake tables (format = "delta") through the operator's commands, on the moto server: the index follows the
table, the erasure goes through the table's own commit, its history and log are erased, a second reader (DuckDB's
delta extension) and a scan of every object version verify it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from tests.support import delta as D
from tests.support.cli import cli
from tests.support.shipping import record_shipped

pytestmark = pytest.mark.integration

HASH_KEY = "delta-tests-hash-key-0123456789abcdef"
LIMITS = "[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n\n[[datasets]]"


@pytest.fixture
def lake(aws, monkeypatch, tmp_path):
    """Empty buckets and the configuration's file; the index backend comes from the test."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    s3 = aws_client()
    s3.create_bucket(Bucket=D.BUCKET)
    s3.create_bucket(Bucket="lake-reports")

    def configure(index: str, versioned: bool = False) -> str:
        if versioned:
            s3.put_bucket_versioning(Bucket=D.BUCKET, VersioningConfiguration={"Status": "Enabled"})
        path = tmp_path / "lakepurge.toml"
        path.write_text(D.config_toml(index).replace("[[datasets]]", LIMITS))
        return str(path)

    return configure


def aws_client():
    return aws.client("s3")


def row_of(s3path: str, row: int) -> dict:
    bucket, key = s3path.removeprefix("s3://").split("/", 1)
    body = aws_client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body)).slice(row, 1).to_pylist()[0]


@pytest.mark.parametrize(
    ("backend", "versioned"), [("postgres", True), ("dynamodb", False)], ids=["postgres-versioned", "dynamodb-plain"]
)
def test_given_a_table_with_a_history_when_purged_then_no_version_of_any_object_names_the_users_and_other_rows_stay(
    lake, request, capsys, backend, versioned
):
    from tests.support.lakes import index_toml

    index = index_toml(backend, request.getfixturevalue("pg_dsn") if backend == "postgres" else None)
    config = lake(index, versioned)
    history = D.make_history_table()  # olga only in a removed file; dora deleted by deltalake (predicate, CDF)
    erased = [history.edge, history.old_only, history.deleted]
    assert all(D.holding(user) for user in erased)  # the log (stats, predicate), removed files, change data
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    before = D.current_rows()

    code, found = cli(capsys, "lookup", *erased, "--config", config)
    assert code == 0 and found["tables"][0]["version_indexed"] == 3
    live = [e for e in found["users"][history.edge] if "lines" in e]
    assert len(live) == 2  # days d1 and d3, each the data file and the 0-based row in it
    for entry in live:
        assert all(row_of(entry["s3path"], row)["user_id"] == history.edge for row in entry["lines"])
    assert found["users"][history.old_only] and not any("lines" in e for e in found["users"][history.old_only])

    code, purged = cli(capsys, "purge", *erased, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True
    table = purged["tables"][0]
    assert table["status"] == "erased" and table["rows_erased"] == 2 and table["remaining"] == []
    assert D.current_rows() == [r for r in before if r["user_id"] not in erased]
    for user in erased:
        assert D.holding(user) == []  # data, change data, commits, checkpoints: every S3 version
    assert [r for r in D.current_rows() if r["user_id"] == "carol@example.com"]  # in a deleted old file too
    code, after = cli(capsys, "lookup", *erased, "--config", config)
    assert after["users"] == {user: [] for user in erased}
    # Time travel: the erasure's version (checkpointed) reads as the current one does.
    kept = D.open_delta(table["version_committed"]).to_pyarrow_table().to_pylist()
    assert sorted(r["note"] for r in kept) == sorted(r["note"] for r in D.current_rows())
    certificate = json.loads(
        aws_client().get_object(Bucket="lake-reports", Key=purged["certificate"].split("/", 3)[3])["Body"].read()
    )
    assert certificate["tables"][0]["version_committed"] == table["version_committed"]
    assert {d["what"] for d in certificate["tables"][0]["objects_deleted"]} == {"data", "log"}


def test_given_rows_a_deletion_vector_hides_when_purged_then_the_file_and_its_vector_leave_and_no_version_names_them(
    lake, pg_dsn, capsys, monkeypatch
):
    import lakepurge.purge.tables as erasure
    from tests.support.lakes import index_toml

    config = lake(index_toml("postgres", pg_dsn), versioned=True)
    alice, dora = "alice@example.com", "dora@example.com"
    D.write(D.rows([alice, "bob@example.com", dora, "erin@example.com"], "d1"), mode="overwrite")
    D.write(D.rows([alice, "frank@example.com"], "d2", 10))
    D.hide_with_deletion_vector(dora)  # a Spark DELETE on a table with deletion vectors: her bytes stay in the file
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    before = D.current_rows()
    assert dora not in {r["user_id"] for r in before} and D.holding(dora)
    real_commit = erasure.commit_replacement

    def racing_commit(*args, **kwargs):  # another writer takes the version the erasure's commit was to have
        D.write(D.rows(["hugo@example.com"], "d6", 60))
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(erasure, "commit_replacement", racing_commit)
    code, purged = cli(capsys, "purge", alice, dora, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True
    assert purged["tables"][0]["rows_erased"] == 2  # alice's two live rows; dora's hidden row goes with its file
    # the second reader: the file with the vector left the table (a remove without the vector would leave it live,
    # bob's and erin's rows twice), its replacement holds the other rows
    hugo = [r for r in D.current_rows() if r["user_id"] == "hugo@example.com"]
    assert len(hugo) == 1  # the concurrent commit stands: the erasure's commit took the next version
    assert [r for r in D.current_rows() if r != hugo[0]] == [r for r in before if r["user_id"] != alice]
    assert D.holding(alice) == [] and D.holding(dora) == []
    code, after = cli(capsys, "lookup", alice, dora, "--config", config)
    assert after["users"] == {alice: [], dora: []}


@pytest.fixture
def indexed(lake, capsys):
    """The history table, indexed on DynamoDB in an unversioned bucket."""
    from tests.support.lakes import index_toml

    config = lake(index_toml("dynamodb"))
    history = D.make_history_table(change_data=False)
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    return config, history


def test_given_appends_between_the_report_and_the_commit_when_purged_then_they_stay_and_the_user_in_them_goes(
    indexed, capsys, monkeypatch
):
    import lakepurge.purge.tables as erasure

    config, history = indexed
    code, plan = cli(capsys, "purge", history.edge, "--config", config)  # the dry run writes the report
    assert code == 0
    D.write(D.rows(["gina@example.com", history.edge], "d5", 50))  # after the report: the user comes back
    real_commit = erasure.commit_replacement

    def racing_commit(*args, **kwargs):  # another writer commits between the erasure's read and its commit
        D.write(D.rows(["hugo@example.com"], "d6", 60))
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(erasure, "commit_replacement", racing_commit)
    code, purged = cli(
        capsys, "purge", history.edge, "--report", plan["request_id"], "--sha256", plan["report_sha256"], "--yes",
        "--config", config,
    )  # fmt: skip

    assert code == 0 and purged["verified"] is True
    rows = D.current_rows()
    assert {r["user_id"] for r in rows if r["day"] in ("d5", "d6")} == {"gina@example.com", "hugo@example.com"}
    assert history.edge not in {r["user_id"] for r in rows}
    assert D.holding(history.edge) == []


def test_given_a_commit_the_index_never_saw_when_purged_then_it_is_read_first_or_the_request_is_not_certified(
    indexed, capsys, monkeypatch
):
    import lakepurge.tables.plan as planning

    config, _history = indexed
    D.write(D.rows(["ivan@example.com"], "d7", 70))  # no event reaches the index (nothing listens here)
    monkeypatch.setattr(planning, "MAX_CATCHUP_COMMITS", 0)
    code, refused = cli(capsys, "purge", "ivan@example.com", "--yes", "--config", config)
    assert code == 4 and refused["status"] == "INDEX_INCOMPLETE"
    assert "moved on by 1 commits" in refused["datasets"][0]["reason"]
    assert [r for r in D.current_rows() if r["user_id"] == "ivan@example.com"]  # nothing was touched

    monkeypatch.setattr(planning, "MAX_CATCHUP_COMMITS", 1000)
    code, purged = cli(capsys, "purge", "ivan@example.com", "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True and purged["tables"][0]["rows_erased"] == 1
    assert D.holding("ivan@example.com") == []


def test_given_an_erased_user_planted_back_when_verified_then_verify_exits_1_naming_where(indexed, capsys):
    config, history = indexed
    code, purged = cli(capsys, "purge", history.old_only, "--yes", "--config", config)
    assert code == 0 and purged["verified"] is True
    assert cli(capsys, "verify", history.old_only, "--config", config)[0] == 0

    # a file no commit added (a failed writer's), holding the user
    orphan = D.rows([history.old_only], "d2")
    body = io.BytesIO()
    pq.write_table(orphan, body)
    aws_client().put_object(Bucket=D.BUCKET, Key=f"{D.ROOT}day=d2/part-orphan.parquet", Body=body.getvalue())
    code, found = cli(capsys, "verify", history.old_only, "--config", config)
    assert code == 1 and any(p["object"].endswith("part-orphan.parquet") for p in found["remaining"])
    aws_client().delete_object(Bucket=D.BUCKET, Key=f"{D.ROOT}day=d2/part-orphan.parquet")

    # a commit the index has not seen, bringing the user back into the current version
    D.write(D.rows([history.old_only], "d8", 80))
    code, found = cli(capsys, "verify", history.old_only, "--config", config)
    assert code == 1 and any("second reader" in p.get("reason", "") for p in found["remaining"])


def test_given_a_listed_log_when_a_commit_and_its_checkpoint_land_then_a_refresh_lists_only_from_the_newest_version(
    aws,
):
    from lakepurge.core.config import DatasetConfig
    from lakepurge.tables.delta import DeltaLog

    s3 = aws_client()
    s3.create_bucket(Bucket=D.BUCKET)
    D.write(D.rows(["ann@example.com"], "d1"))
    D.write(D.rows(["bob@example.com"], "d2"))
    dataset = DatasetConfig(name="events", location=f"s3://{D.BUCKET}/{D.ROOT}", format="delta", id_fields=("user_id",))
    asked: list[dict] = []

    def record(params: dict, **_: object) -> None:
        asked.append(dict(params))

    s3.meta.events.register("provide-client-params.s3.ListObjectsV2", record)
    try:
        table = DeltaLog(s3, dataset)
        assert table.latest_version() == 1 and set(table.listing().commits) == {0, 1}
        D.write(D.rows(["cid@example.com"], "d3"))
        D.open_delta().create_checkpoint()  # a checkpoint of the newest version, after its commit
        assert table.latest_version() == 2
        assert set(table.listing().commits) == {0, 1, 2} and set(table.listing().checkpoints) == {2}
        assert len(table.state().files) == 3  # its refresh lists from version 2 on
        assert [a.get("StartAfter") for a in asked] == [None, *(f"{D.ROOT}_delta_log/{v:020d}" for v in (1, 2))]
        # A reader that needs only the newest commits (the erasure finding its own) lists only those.
        assert set(DeltaLog(s3, dataset).list_from(2).commits) == {2}
        assert asked[-1]["StartAfter"] == f"{D.ROOT}_delta_log/{2:020d}"

        # Log entries lakepurge deleted: the next refresh lists the whole log, without them.
        s3.delete_object(Bucket=D.BUCKET, Key=f"{D.ROOT}_delta_log/{0:020d}.json")
        table.forget_listing()
        assert set(table.listing(refresh=True).commits) == {1, 2}
        assert asked[-1].get("StartAfter") is None
    finally:
        s3.meta.events.unregister("provide-client-params.s3.ListObjectsV2", record)


def test_given_a_commit_while_the_index_follows_the_table_when_planned_then_the_log_is_listed_once_unless_it_moved(
    indexed, monkeypatch
):
    import lakepurge.tables.plan as planning
    from lakepurge.core.config import load_settings
    from lakepurge.core.privacy import HashedUsers, Pseudonymizer
    from lakepurge.index import open_existing

    config, history = indexed
    settings = load_settings(config)
    dataset = settings.dataset_named("events")
    s3 = aws_client()
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())

    def plan(user: str) -> planning.TablePlan:
        store = open_existing(settings.index)
        try:
            hashed = HashedUsers(pseudonymizer.many([user]), pseudonymizer)
            return planning.plan_table(s3, store, settings, dataset, [user], hashed)
        finally:
            store.close()

    asked: dict[str, list[dict]] = {"ListObjectsV2": [], "ListObjectVersions": []}

    def recorder(name: str):
        def record(params: dict, **_: object) -> None:
            if params.get("Prefix", "").endswith("_delta_log/"):
                asked[name].append(dict(params))

        return record

    hooks = {name: recorder(name) for name in asked}
    for name, hook in hooks.items():
        s3.meta.events.register(f"provide-client-params.s3.{name}", hook)
    try:
        planned = plan(history.edge)
        # One listing of the log's versions; the table's own listing only refreshed from the newest version on.
        assert len(asked["ListObjectVersions"]) == 1
        assert all("StartAfter" in params for params in asked["ListObjectsV2"])
        assert planned.log_entries  # the statistics of the commits name the user

        # A commit naming the user while the index follows the table: the log is listed again, and the commit read.
        real_follow = planning.follow_table

        def racing_follow(*args, **kwargs):
            D.write(D.rows(["jane@example.com"], "d8", 80))
            return real_follow(*args, **kwargs)

        monkeypatch.setattr(planning, "follow_table", racing_follow)
        asked["ListObjectVersions"].clear()
        raced = plan("jane@example.com")
        assert len(asked["ListObjectVersions"]) == 2
        newest = f"{D.ROOT}_delta_log/{raced.version:020d}.json"
        assert any(entry.s3path.endswith(newest) for entry in raced.log_entries)
    finally:
        for name, hook in hooks.items():
            s3.meta.events.unregister(f"provide-client-params.s3.{name}", hook)


def test_given_a_commit_event_when_indexed_then_the_index_follows_the_table_and_ignores_data_file_events(
    indexed, capsys
):
    from lakepurge.core.config import load_settings
    from lakepurge.index import open_store
    from lakepurge.indexing.indexer import index_object

    config, _history = indexed
    settings = load_settings(config)
    D.write(D.rows(["jane@example.com"], "d9", 90))
    s3 = aws_client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=D.BUCKET, Prefix=D.ROOT)["Contents"]]
    commit = max(k for k in keys if k.endswith(".json"))
    data = next(k for k in keys if "day=d9/" in k)
    store = open_store(settings.index)
    try:
        assert index_object(s3, store, settings, D.BUCKET, data).action == "ignored"  # its commit indexes it
        assert store.lookup(["jane@example.com"]) == {}
        assert index_object(s3, store, settings, D.BUCKET, commit).action == "indexed"
        [where] = store.lookup(["jane@example.com"])["jane@example.com"]
        assert where.s3path == f"s3://{D.BUCKET}/{data}" and where.lines == (0,)
        assert index_object(s3, store, settings, D.BUCKET, commit).action == "unchanged"  # a redelivery
    finally:
        store.close()
    code, status = cli(capsys, "status", "--config", config)
    assert code == 0
    assert status["tables"] == [{"dataset": "events", "version_indexed": 4, "newest_version": 4, "problem": ""}]


def test_given_a_table_when_a_user_asks_for_their_data_then_the_archive_holds_exactly_their_rows_of_its_version(
    indexed, capsys
):
    import zipfile

    from lakepurge.access.export import export_users
    from lakepurge.access.sealing import unseal
    from lakepurge.core.config import load_settings
    from lakepurge.core.s3uri import S3Uri

    config, history = indexed
    D.write(D.rows(["kim@example.com", history.edge], "d10", 100))  # a commit the index has not seen yet
    s3 = aws_client()
    s3.create_bucket(Bucket="exports")
    key = aws.client("kms").create_key(Description="exports")["KeyMetadata"]["KeyId"]
    run = export_users(load_settings(config), [history.edge], S3Uri("exports", "a/"), kms_key=key, say=print)
    sealed = s3.get_object(Bucket="exports", Key=run.archive.split("/", 3)[3])["Body"].read()
    archive = zipfile.ZipFile(io.BytesIO(unseal(io.BytesIO(sealed), aws.client("kms"))))
    exported = []
    for name in archive.namelist():
        if name.endswith(".parquet"):
            exported += pq.read_table(io.BytesIO(archive.read(name))).to_pylist()
    expected = [r for r in D.current_rows() if r["user_id"] == history.edge]
    key_of = lambda r: (r["day"], r["amount"])  # noqa: E731
    assert sorted(exported, key=key_of) == sorted(expected, key=key_of) and len(expected) == 3
    assert "olga" not in str(exported) and history.deleted not in str(exported)  # history is not the table's


def test_given_spark_when_backfilled_and_purged_then_files_are_read_and_rewritten_on_executors(
    lake, spark, capsys, monkeypatch
):
    from lakepurge.core.config import load_settings
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.index import open_store
    from lakepurge.indexing.backfill import run_backfill
    from lakepurge.purge.job import run_purge
    from lakepurge.purge.launch import write_sealed_ids
    from lakepurge.reports.report import build_report
    from tests.support.lakes import index_toml

    settings = load_settings(lake(index_toml("dynamodb"), versioned=True))
    history = D.make_history_table(change_data=False)
    result = run_backfill(spark, settings)
    assert result.failed == () and result.objects == 3 and result.versions == 2  # live files; olga's, dora's
    before = D.current_rows()
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    store = open_store(settings.index)
    try:
        report = build_report(store, settings, [history.edge], "req-spark", pseudonymizer)
    finally:
        store.close()

    # The caller holds the raw id (the operator's CLI may run the purge on Spark): only its own process uses it, and
    # it seals the ids for the executors, as the CLI does, and the driver deletes them when they are done.
    sealed = write_sealed_ids(aws.client("s3"), settings, report, [history.edge])
    assert sealed is not None
    shipped = record_shipped(monkeypatch)
    purged = run_purge(spark, settings, report, HASH_KEY.encode(), requested=[history.edge])

    assert purged.verified and purged.tables[0]["rows_erased"] == 2
    assert shipped["closures"]
    assert not any(history.edge.encode() in pickled for pickled in [*shipped["closures"], *shipped["items"]])
    assert D.current_rows() == [r for r in before if r["user_id"] != history.edge]
    assert D.holding(history.edge) == []
    assert aws.client("s3").list_object_versions(Bucket=sealed.bucket, Prefix=sealed.key).get("Versions", []) == []


def test_given_delta_tables_in_glue_when_imported_then_they_become_delta_datasets_the_index_reads(
    lake, capsys, tmp_path
):
    from tests.support.lakes import index_toml

    config = lake(index_toml("dynamodb"))
    D.make_history_table(change_data=False)
    glue = aws.client("glue")
    glue.create_database(DatabaseInput={"Name": "curated"})
    spark_registered = {  # as Spark's saveAsTable leaves a Delta table: a placeholder location, the root in `path`
        "Name": "events",
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {"spark.sql.sources.provider": "delta", "lakepurge.id_fields": "user_id"},
        "StorageDescriptor": {
            "Location": "s3://lake/curated/events-__PLACEHOLDER__",
            "Columns": [{"Name": "col", "Type": "array<string>"}],
            "SerdeInfo": {"Parameters": {"path": D.URI}},
        },
    }
    athena = {  # as Athena registers one: table_type DELTA, the root as Location
        "Name": "events_athena",
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {"table_type": "DELTA", "lakepurge.id_fields": "user_id"},
        "StorageDescriptor": {"Location": D.URI, "Columns": []},
    }
    for table in (spark_registered, athena):
        glue.create_table(DatabaseName="curated", TableInput=table)
    out = tmp_path / "datasets.toml"

    code, imported = cli(
        capsys, "datasets", "import", "--glue-database", "curated", "--table", "events", "--out", str(out)
    )

    assert code == 0
    assert [(i["table"], i["format"], i["location"]) for i in imported["imported"]] == [
        ("events", "delta", f"s3://{D.BUCKET}/{D.ROOT}")
    ]
    assert 'format = "delta"' in out.read_text() and 'erase = "drop"' in out.read_text()
    configured = tmp_path / "imported.toml"
    configured.write_text(Path(config).read_text().split("[[datasets]]")[0] + out.read_text())
    assert main(["index", "reconcile", "--config", str(configured)]) == 0
    code, found = cli(capsys, "lookup", "alice@example.com", "--config", str(configured))
    assert len([e for e in found["users"]["alice@example.com"] if "lines" in e]) == 2
    code, athena_import = cli(capsys, "datasets", "import", "--glue-database", "curated", "--table", "events_athena")
    assert athena_import["imported"][0]["format"] == "delta"


def test_given_a_table_when_the_second_reader_reads_it_then_it_finds_a_user_by_keyed_hash_and_counts_each_files_rows(
    aws,
):
    from lakepurge.core.config import DatasetConfig
    from lakepurge.core.privacy import Pseudonymizer
    from lakepurge.purge.table_second_reader import KeyedUsers, live_files, read_files, scan_table

    aws_client().create_bucket(Bucket=D.BUCKET)
    D.write(D.rows(["ann@example.com", "bob@example.com", "ann@example.com"], "d1"))
    D.write(D.rows(["cid@example.com", "émile@example.com"], "d2", 10))
    dataset = DatasetConfig(name="events", location=f"s3://{D.BUCKET}/{D.ROOT}", format="delta", id_fields=("user_id",))
    key = HASH_KEY.encode()

    def users(*ids: str) -> KeyedUsers:
        return KeyedUsers(key, tuple(Pseudonymizer(key).many(ids)))

    files = live_files(dataset, None)
    assert len(files) == 2
    for reading in (lambda u: read_files(dataset, files, ("user_id",), u), lambda u: scan_table(dataset, None, u)):
        assert sorted(reading(users("nobody@example.com")).counts.values()) == [2, 3]
        assert reading(users("nobody@example.com")).users_found is False
        assert reading(users("bob@example.com")).users_found is True
        assert reading(users("nobody@example.com", "émile@example.com")).users_found is True  # UTF-8, as hashed


def test_given_an_inline_purge_holding_the_ids_when_a_table_file_is_rewritten_then_no_other_persons_id_is_hashed(
    lake, pg_dsn, capsys, monkeypatch
):
    import lakepurge.purge.job as job
    from lakepurge.core.privacy import Pseudonymizer
    from tests.support.lakes import index_toml

    config = lake(index_toml("postgres", pg_dsn))
    alice = "alice@example.com"
    others = [f"other-{n:04d}@example.com" for n in range(300)]
    D.write(D.rows([alice, *others[:150], alice, *others[150:]], "d1"), mode="overwrite")
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    hashed: list[bytes] = []
    real_hash, real_erasure = Pseudonymizer.of_utf8, job.purge_tables

    def recording_hash(self, user_id: bytes) -> str:
        hashed.append(user_id)
        return real_hash(self, user_id)

    def recorded_erasure(*args, **kwargs):  # the table's erasure, after the report
        monkeypatch.setattr(Pseudonymizer, "of_utf8", recording_hash)
        return real_erasure(*args, **kwargs)

    monkeypatch.setattr(job, "purge_tables", recorded_erasure)
    code, purged = cli(capsys, "purge", alice, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True and purged["tables"][0]["rows_erased"] == 2
    assert [r["user_id"] for r in D.current_rows()] == others
    # The operator's purge holds alice's id: the rewritten file's 300 other ids are looked up, not hashed.
    assert hashed and {user.decode() for user in hashed} & set(others) == set()


def test_given_a_file_the_index_named_every_row_of_when_rewritten_then_its_rows_move_in_the_index_to_the_new_file(
    lake, pg_dsn, capsys, monkeypatch
):
    from lakepurge.index.postgres import PostgresIndexStore
    from tests.support.lakes import index_toml

    config = lake(index_toml("postgres", pg_dsn))
    alice, dora = "alice@example.com", "dora@example.com"
    others = [f"other-{n}@example.com" for n in range(5)]
    D.write(D.rows([others[0], alice, others[1], dora, others[2], alice, others[3], others[4]], "d1"), mode="overwrite")
    D.hide_with_deletion_vector(dora)  # row 3: not the table's, never indexed as live, dropped by the rewrite too
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    sent: list[str] = []  # the objects whose rows went to the index from this process
    real_replace = PostgresIndexStore.replace_objects

    def recording_replace(self, objects, force=False):
        sent.extend(o.s3path for o in objects if o.lines_by_user)
        return real_replace(self, objects, force)

    monkeypatch.setattr(PostgresIndexStore, "replace_objects", recording_replace)
    code, purged = cli(capsys, "purge", alice, "--yes", "--config", config)

    assert code == 0 and purged["verified"] is True and purged["tables"][0]["rows_erased"] == 2
    (replaced,) = purged["tables"][0]["files_replaced"]
    assert replaced["after"] not in sent  # its rows were moved inside the index, not read, hashed and sent again
    code, found = cli(capsys, "lookup", *others, alice, "--config", config)
    assert found["users"][alice] == []
    for user in others:  # rows 4, 6, 7 moved up by alice's row 1, dora's hidden row 3 and alice's row 5
        (entry,) = found["users"][user]
        assert entry["s3path"] == replaced["after"]
        assert [row_of(entry["s3path"], row)["user_id"] for row in entry["lines"]] == [user]
    assert [r["user_id"] for r in D.current_rows()] == others


def test_given_a_data_file_overwritten_after_the_report_when_purged_then_it_is_not_rewritten_nor_certified(
    lake, pg_dsn, capsys, monkeypatch
):
    import lakepurge.purge.tables as erasure
    from tests.support.lakes import index_toml

    config = lake(index_toml("postgres", pg_dsn))
    alice = "alice@example.com"
    D.write(D.rows([alice, "bob@example.com"], "d1"), mode="overwrite")
    assert main(["index", "reconcile", "--config", config]) == 0
    capsys.readouterr()
    (path,) = D.open_delta().file_uris()
    key = path.split("/", 3)[3]
    real_rewrite = erasure.rewrite_partition

    def rewrite_after_an_overwrite(*args, **kwargs):
        # Someone writes other bytes under the file's name: not the version the table's log (and the plan) names.
        aws_client().put_object(Bucket=D.BUCKET, Key=key, Body=b"PAR1 not the table's file")
        return real_rewrite(*args, **kwargs)

    monkeypatch.setattr(erasure, "rewrite_partition", rewrite_after_an_overwrite)
    code, purged = cli(capsys, "purge", alice, "--yes", "--config", config)

    table = purged["tables"][0]
    assert code != 0 and purged["verified"] is False
    assert table["status"] == "failed" and "ObjectChanged" in table["error"] and table["files_replaced"] == []
    assert aws_client().get_object(Bucket=D.BUCKET, Key=key)["Body"].read() == b"PAR1 not the table's file"
    assert D.open_delta().version() == 0  # no commit
