"""Logging through Powertools: structured JSON, one service name, child loggers in library modules.

Nothing that identifies a person is logged: user ids only as the keyed pseudonym of lakepurge.privacy (HMAC-SHA256,
never a plain hash, which a dictionary of emails or numeric ids reverses), and keys of one-user-per-object datasets
(whose key names the user) through :func:`object_ref`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
from typing import IO, TYPE_CHECKING

from aws_lambda_powertools import Logger

if TYPE_CHECKING:
    from lakepurge.config import DatasetConfig

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


class _CurrentStderr:
    """Writes to whatever sys.stderr is when a record is logged: the handler outlives the stream it was created
    with when main() runs more than once in a process (tests capture and then close each run's stderr)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


STDERR: IO[str] = _CurrentStderr()  # type: ignore[assignment]


def object_ref(s3path: str, dataset: DatasetConfig) -> str:
    """The object's path for logs. In one-user-per-object datasets the key may name its user: the id group of
    id_from_key is masked, and a key that cannot be masked that way is replaced by a hash under the prefix."""
    if not dataset.per_object:
        return s3path
    if dataset.id_from_key is not None:
        match = re.search(dataset.id_from_key, s3path)
        if match is not None:
            start, end = match.span("id")
            return s3path[:start] + "***" + s3path[end:]
    return f"{dataset.location}#{hashlib.sha256(s3path.encode()).hexdigest()[:12]}"
