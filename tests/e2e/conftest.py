"""The deployed workflow on the local stack, for the e2e tests that drive requests through it."""

from __future__ import annotations

import importlib
import logging
import tomllib
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import Any

import pytest

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.core.config import parse_settings
from lakepurge.core.logs import SERVICE
from lakepurge.local.samples import SampleObject
from lakepurge.local.workflow import EXPORT_FUNCTIONS, FUNCTIONS
from tests.support.lakes import LakeCase, index_toml
from tests.support.purging import HASH_KEY
from tests.support.workflow import RecordList, WorkflowCase, deploy_case


@pytest.fixture
def workflow_case(
    lake_factory: Callable[..., LakeCase], pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., WorkflowCase]]:
    """Creates a sample lake indexed in PostgreSQL and deploys the workflow for it; its configuration becomes the
    in-process Lambda handlers' (LAKEPURGE_CONFIG_TOML)."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)

    def create(
        unindexed: Callable[[LakeCase], Collection[str]] | None = None,
        versioned: bool = False,
        versioned_reports: bool = False,
        objects: int = 24,
        users: int = 30,
        beside: Collection[tuple[str, bytes]] = (),
        beside_toml: str = "",
        **options: Any,
    ) -> WorkflowCase:
        """``unindexed`` picks, once the lake exists, datasets left out of the index and of its coverage;
        ``versioned_reports`` versions the reports bucket as the template does; ``beside`` are a test's own objects
        (key, body) written to the lake's bucket beside the sample's, of the datasets ``beside_toml`` configures."""
        lake = lake_factory(index_toml("postgres", pg_dsn), objects=objects, users=users, versioned=versioned)
        if versioned_reports:
            aws.client("s3").put_bucket_versioning(Bucket="lake-reports", VersioningConfiguration={"Status": "Enabled"})
        if beside or beside_toml:
            own = [SampleObject(key, body) for key, body in beside]
            for obj in own:
                aws.client("s3").put_object(Bucket=lake.lake.bucket, Key=obj.key, Body=obj.body)
            toml = lake.toml + beside_toml
            lake = LakeCase(
                replace(lake.lake, objects=lake.lake.objects + own), parse_settings(tomllib.loads(toml)), toml
            )
        case = deploy_case(lake, unindexed=unindexed(lake) if unindexed else (), **options)
        monkeypatch.setenv("LAKEPURGE_CONFIG_TOML", case.toml)
        runtime.reset()
        return case

    yield create


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One headless Chromium for every browser test of the e2e tests (each loads its own page; starting it is the
    slow part)."""
    from tests.support.browser import chromium, ensure_chromium

    ensure_chromium()
    with chromium() as session:
        yield session


@pytest.fixture
def service_logs() -> Iterator[RecordList]:
    """Every record the service logs during the test, at DEBUG, from a handler on the service's logger itself (so
    no filter on the root's handlers can hide one)."""
    for module, _ in (FUNCTIONS | EXPORT_FUNCTIONS).values():  # Powertools takes the logger's first handler for its own
        importlib.import_module(module)
    service = logging.getLogger(SERVICE)
    level_before = service.level
    records = RecordList()
    service.setLevel(logging.DEBUG)
    service.addHandler(records)
    yield records
    service.removeHandler(records)
    service.setLevel(level_before)
