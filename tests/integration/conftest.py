from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from lakepurge import runtime
from tests.support.lakes import LakeCase, index_toml, make_lake


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
