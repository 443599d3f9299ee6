"""The unit tier needs no network: any attempt to open a connection during a unit test fails loudly.

A test that trips the guard is not a unit test: it belongs in tests/integration (moto server, PostgreSQL, Spark).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


class NetworkInUnitTest(RuntimeError):
    """Raised instead of opening a connection. Not an OSError: no retry loop or fallback may swallow it."""


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        target = next((arg for arg in args if not isinstance(arg, socket.socket)), kwargs.get("address"))
        raise NetworkInUnitTest(
            f"unit tests may not use the network: {what}({target!r}). "
            "A test that needs a server belongs in tests/integration."
        )

    return refuse


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse("socket.connect_ex"))
    monkeypatch.setattr(socket.socket, "sendto", _refuse("socket.sendto"))
    monkeypatch.setattr(socket, "create_connection", _refuse("socket.create_connection"))
    yield
