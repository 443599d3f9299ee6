"""boto3 clients. boto3 itself honours AWS_ENDPOINT_URL and AWS_REGION/AWS_DEFAULT_REGION, so nothing here
overrides them: the same code talks to AWS, a moto server or any S3-compatible endpoint."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3
from botocore.config import Config

# Adaptive retries absorb S3 503 SlowDown and DynamoDB throttling without hand-written loops.
_CLIENT_CONFIG = Config(retries={"max_attempts": 10, "mode": "adaptive"}, max_pool_connections=32)


@cache
def client(service: str) -> Any:
    """One client per service and process (clients are thread-safe; sessions are not)."""
    return boto3.session.Session().client(service, config=_CLIENT_CONFIG)  # type: ignore[call-overload]
