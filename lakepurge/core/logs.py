"""Logging through Powertools: structured JSON, one service name, child loggers in library modules.

Nothing that identifies a person is logged: user ids only as the keyed pseudonym of lakepurge.core.privacy (HMAC-SHA256,
never a plain hash, which a dictionary of emails or numeric ids reverses), and keys of one-user-per-object datasets
(whose key names the user) through :func:`object_ref`, by the same keyed hash.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

if TYPE_CHECKING:
    from lakepurge.core.config import DatasetConfig
    from lakepurge.core.privacy import Pseudonymizer

SERVICE = "lakepurge"


def get_logger() -> Logger:
    """The library's child logger, one for all its modules (Powertools names a child after its caller, which is
    this function). Its level is left to the parent, which the process's entry point sets: Powertools would fix a
    child's level from the environment at import, so a library imported after a command changed that environment
    would keep the command's level for the life of the process."""
    logger = Logger(service=SERVICE, child=True)
    logging.getLogger(logger.name).setLevel(logging.NOTSET)
    return logger


def root_logger(level: str = "INFO", stream: IO[str] | None = None) -> Logger:
    """The parent logger of a process; the CLI passes :data:`STDERR` so stdout carries only its JSON result."""
    logger = Logger(service=SERVICE, level=level, stream=stream)
    logger.setLevel(level)  # Powertools configures a service once per process; a second entry point sets its level
    return logger


# What every Powertools record carries: the human form prints only the level, the message and the record's own keys.
_STANDARD_KEYS = frozenset(
    {
        "level",
        "location",
        "message",
        "timestamp",
        "service",
        "sampling_rate",
        "xray_trace_id",
        "cold_start",
        "function_name",
        "function_memory_size",
        "function_arn",
        "function_request_id",
        "correlation_id",
        "exception",
        "exception_notes",
        "stack_trace",
    }
)


class HumanFormatter(LambdaPowertoolsFormatter):
    """The command line's form of a record: ``lakepurge: warning: message (key=value, ...)`` on one line, among the
    command's own human output (Powertools' JSON is for CloudWatch). Same keys, same masking: only the form changes."""

    def serialize(self, log: dict[str, Any]) -> str:  # type: ignore[override]
        extra = ", ".join(f"{key}={value}" for key, value in log.items() if key not in _STANDARD_KEYS)
        text = f"lakepurge: {str(log.get('level', '')).lower()}: {log.get('message', '')}"
        return text + (f" ({extra})" if extra else "")


def human_logs(logger: Logger) -> Callable[[], None]:
    """Print the service's records in the human form (:class:`HumanFormatter`) on stderr; returns what puts the
    handler back as it was, for the CLI to call when it returns (main() runs more than once in a test process).
    Powertools configures a service's handler once per process: one a Lambda handler run in this process configured
    first writes to stdout, where the command's JSON document goes."""
    handler = logger.registered_handler
    previous = handler.formatter
    handler.setFormatter(HumanFormatter())
    previous_stream = None
    if isinstance(handler, logging.StreamHandler):
        previous_stream = handler.setStream(STDERR)

    def restore() -> None:
        handler.setFormatter(previous)
        if previous_stream is not None and isinstance(handler, logging.StreamHandler):
            handler.setStream(previous_stream)

    return restore


class _CurrentStderr:
    """Writes to whatever sys.stderr is when a record is logged: the handler outlives the stream it was created
    with when main() runs more than once in a process (tests capture and then close each run's stderr)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


STDERR: IO[str] = _CurrentStderr()  # type: ignore[assignment]


def object_ref(s3path: str, dataset: DatasetConfig, pseudonymizer: Pseudonymizer | None = None) -> str:
    """The object's name in logs, messages, certificates, export records and `status`. In one-user-per-object
    datasets the key may name its user: with the hash key at hand it is the object's keyed reference
    (privacy.object_reference, as reports name it: linkable by whoever holds the key, irreversible for anyone
    else); without it the id group of id_from_key is masked, and any other key is reduced to its dataset's
    location. Never a plain hash of the key: hashing a few candidate ids would recover it."""
    from lakepurge.core.privacy import OBJECT_REFERENCE, object_reference

    if not dataset.per_object or s3path.startswith(OBJECT_REFERENCE):
        return s3path
    if pseudonymizer is not None:
        return object_reference(s3path, pseudonymizer)
    if dataset.id_from_key is not None:
        match = re.search(dataset.id_from_key, s3path)
        if match is not None:
            start, end = match.span("id")
            return s3path[:start] + "***" + s3path[end:]
    return f"{dataset.location}***"
