"""Logging through Powertools: structured JSON, one service name, child loggers in library modules.

Nothing that identifies a person is logged: user ids go through :func:`user_ref`, and keys of one-user-per-object
datasets (whose key names the user) through :func:`object_ref`.
"""

from __future__ import annotations

import hashlib
import re

from aws_lambda_powertools import Logger

SERVICE = "lakepurge"


def get_logger(module: str) -> Logger:
    """A child logger for a library module; the process's entry point creates the parent."""
    return Logger(service=SERVICE, child=True)


def root_logger(level: str = "INFO") -> Logger:
    return Logger(service=SERVICE, level=level)


def user_ref(user_id: str) -> str:
    """A short, stable, non-reversible stand-in for a user id in logs."""
    return "u:" + hashlib.sha256(user_id.encode()).hexdigest()[:12]


def object_ref(s3path: str, id_from_key: str | None = None) -> str:
    """The object's path, with the user id masked when the key itself names the user."""
    if id_from_key is None:
        return s3path
    match = re.search(id_from_key, s3path)
    if match is None:
        return s3path
    start, end = match.span("id")
    return s3path[:start] + "***" + s3path[end:]
