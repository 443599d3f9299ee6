"""The Spark backfill over a mixed lake yields exactly the generator's ground truth, on both backends."""

from __future__ import annotations

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.index.base import WHOLE_OBJECT
from lakepurge.indexing.backfill import run_backfill

pytestmark = pytest.mark.integration


def test_given_a_mixed_lake_of_120_objects_when_backfilled_on_spark_then_index_equals_ground_truth(
    spark, lake_factory, index_backend
):
    case = lake_factory(index_backend, objects=120, users=60)  # every format and dataset, several tasks per core
    keys = [o.key for o in case.lake.objects]
    for kind in (".jsonl", ".jsonl.gz", ".csv", ".parquet", ".meta.json", ".png"):
        assert any(k.endswith(kind) for k in keys), kind
    assert any(k.startswith("orders/") for k in keys)  # nested and multiple id fields, ids in arrays
    assert any(k.startswith("clicks/") for k in keys)  # one user per object, id in the key

    result = run_backfill(spark, case.settings)

    assert result.failed == ()
    assert result.unindexable == 0
    store = runtime.index_store()
    assert store.dump() == case.lake.truth
    assert store.status().objects == result.objects


def test_given_an_indexed_lake_when_backfilled_again_then_nothing_changes(spark, lake_factory, pg_dsn):
    from tests.support.lakes import index_toml

    case = lake_factory(index_toml("postgres", pg_dsn), objects=30)
    run_backfill(spark, case.settings)
    before = runtime.index_store().dump()
    run_backfill(spark, case.settings)
    assert runtime.index_store().dump() == before == case.lake.truth


def test_given_an_unreadable_object_when_backfilled_then_it_is_reported_failed_and_others_indexed(
    spark, lake_factory, pg_dsn, tmp_path, capsys
):
    from tests.support.lakes import index_toml

    case = lake_factory(index_toml("postgres", pg_dsn), objects=30)
    aws.client("s3").put_object(Bucket="lake", Key="events/corrupt.parquet", Body=b"PAR1 this is not parquet")
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)

    exit_code = main(["index", "backfill", "--config", str(config), "--json"])

    assert exit_code == 1
    document = orjson.loads(capsys.readouterr().out)
    [(path, reason)] = document["failed"]
    assert path == "s3://lake/events/corrupt.parquet"
    assert reason.startswith("object could not be indexed: ArrowInvalid: ")
    assert runtime.index_store().dump() == case.lake.truth
    listed = [(p, u.line, u.reason) for p, u in runtime.index_store().unindexable()]
    assert listed == [(path, WHOLE_OBJECT, reason)]
