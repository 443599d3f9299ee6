"""Shared fixtures: one moto server, one PostgreSQL cluster and one Spark session per test session (each of the two
pytest-xdist workers `make test` runs is one; see addopts in pyproject.toml)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from lakepurge import runtime
from lakepurge.local.moto import DUMMY_CREDENTIALS
from tests.support.lakes import LakeCase, index_toml, make_lake

# No test may ever reach a real AWS account, whatever the developer's environment holds.
os.environ.update(DUMMY_CREDENTIALS)
for leaked in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
    os.environ.pop(leaked, None)


# `make spark35`: the tests that run Spark, again on the Spark of the template's EMR release (PYTHONPATH puts
# pyspark 3.5 first): those using the session's Spark, and those marked spark_job (spark-submit of a job script).
SPARK_ONLY = os.environ.get("LAKEPURGE_SPARK_ONLY") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SPARK_ONLY:
        return
    import pyspark

    if not pyspark.__version__.startswith("3.5."):  # else the step would pass on the locked Spark, proving nothing
        raise pytest.UsageError(f"LAKEPURGE_SPARK_ONLY=1 runs on pyspark 3.5, not {pyspark.__version__}")
    kept = [i for i in items if "spark" in getattr(i, "fixturenames", ()) or i.get_closest_marker("spark_job")]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept


@pytest.fixture(scope="session")
def moto_server() -> Iterator[object]:
    from lakepurge.local.moto import start_moto

    server = start_moto()
    yield server
    server.stop()


@pytest.fixture
def aws(moto_server: object) -> Iterator[object]:
    """A moto server with empty state for each test."""
    from lakepurge.tables import detect as tableformats

    yield moto_server
    moto_server.reset()  # type: ignore[attr-defined]
    tableformats.clear_cache()  # a detection is cached per process; the next test's lake is another


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    from lakepurge.local.postgres import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(postgres_server: object) -> Iterator[str]:
    """The shared cluster, with the index tables emptied before each test."""
    import psycopg

    dsn: str = postgres_server.dsn  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "DO $$ BEGIN IF to_regclass('user_rows') IS NOT NULL THEN"
            " TRUNCATE user_rows, indexed_objects, unindexable_lines, erased_users; END IF;"
            " IF to_regclass('noncurrent_versions') IS NOT NULL THEN"
            " TRUNCATE noncurrent_versions, dataset_coverage; END IF;"
            " IF to_regclass('record_maps') IS NOT NULL THEN TRUNCATE record_maps; END IF; END $$"
        )
    yield dsn


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from lakepurge.core.sparkutil import local_session

    session = local_session("lakepurge-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def hive_metastore_server() -> Iterator[object]:
    """A real Hive metastore (tests/support/hive_metastore.py), started once and only where a test asks for it:
    every such test is in tests/integration/test_hive_metastore.py, which --dist loadfile keeps on one worker."""
    from tests.support.hive_metastore import start_metastore

    server = start_metastore(["lake", "lake-v2", "archive"])
    yield server
    server.stop()


@pytest.fixture(params=["postgres", "dynamodb"])
def index_backend(request: pytest.FixtureRequest, aws: object) -> str:
    """The [index] body for each backend (PostgreSQL cluster or DynamoDB on the moto server)."""
    if request.param == "postgres":
        return index_toml("postgres", request.getfixturevalue("pg_dsn"))
    return index_toml("dynamodb")


@pytest.fixture
def lake_factory(aws: object) -> Iterator[Callable[..., LakeCase]]:
    """Creates a sample lake and makes it the configuration of in-process Lambda handlers."""

    def create(index: str, **kwargs: int) -> LakeCase:
        case = make_lake(index, **kwargs)
        os.environ["LAKEPURGE_CONFIG_TOML"] = case.toml
        runtime.reset()
        return case

    yield create
    os.environ.pop("LAKEPURGE_CONFIG_TOML", None)
    runtime.reset()
