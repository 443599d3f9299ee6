"""An in-process moto server on 127.0.0.1: the AWS stand-in for the demo, the tests and the benchmarks."""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass

import requests

from lakepurge.local.postgres import free_port

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass
class LocalMoto:
    endpoint: str
    _server: object

    def reset(self) -> None:
        requests.post(f"{self.endpoint}/moto-api/reset", timeout=30).raise_for_status()

    def stop(self) -> None:
        self._server.stop()  # type: ignore[attr-defined]


def start_moto(port: int | None = None) -> LocalMoto:
    """Start the server and point this process's boto3 at it (through the standard AWS_* variables)."""
    from moto.server import ThreadedMotoServer

    _list_moto_modules_once()
    _atomic_dynamodb_writes()
    # werkzeug logs every request line: noise that would also bury real output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = port or free_port()
    os.environ.update(DUMMY_CREDENTIALS)
    os.environ["MOTO_PORT"] = str(port)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    return LocalMoto(endpoint, server)


def _list_moto_modules_once() -> None:
    """moto's dispatcher lists its own package directory (a stat per module, about 170) on every request to find
    the service; the list cannot change while the server runs, so it is read once. A fifth of the server's time on
    small requests went there."""
    from moto import backends

    if getattr(backends.list_of_moto_modules, "listed_once", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def listed() -> tuple[str, ...]:
        return modules

    listed.listed_once = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = listed


# One lock for every DynamoDB write of this process's moto: DynamoDB applies a conditional write or a transaction
# atomically, moto's threaded server does not (two concurrent `attribute_not_exists` transactions both won, and a
# transaction's deep copy of a table raced another thread's put). Held per request; the backend's reads do not take it.
_DYNAMODB_WRITES = threading.RLock()


def _atomic_dynamodb_writes() -> None:
    """Make the DynamoDB backend's writes (put, update and delete, which batch writes go through, and transactions) one
    at a time, as DynamoDB's own conditional writes and transactions are to each other."""
    from moto.dynamodb.models import DynamoDBBackend

    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        write = getattr(DynamoDBBackend, name)
        if getattr(write, "serialised", False):
            continue

        def serialised(*args: object, _write: object = write, **kwargs: object) -> object:
            with _DYNAMODB_WRITES:
                return _write(*args, **kwargs)  # type: ignore[operator]

        serialised.serialised = True  # type: ignore[attr-defined]
        setattr(DynamoDBBackend, name, functools.wraps(write)(serialised))
