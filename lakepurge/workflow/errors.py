"""What a Task handler lets reach the state machine when it fails.

An error's type and message land in the execution history and in notifications, so only errors whose messages
are known to hold no personal data pass through as they are. Transient AWS errors become ``TransientAwsError``
(the ASL retries it); anything else becomes ``TaskFailed`` naming only the original type.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import ClientError, ConnectionError, EndpointConnectionError, HTTPClientError, ReadTimeoutError
from urllib3.exceptions import ProtocolError

from lakepurge.core.logs import get_logger
from lakepurge.indexing.resolution import ExpansionRefused
from lakepurge.reports.kept import ExemptionsChanged
from lakepurge.reports.report import ReportTampered, SafetyLimitExceeded
from lakepurge.workflow.approval import ApprovalRefused
from lakepurge.workflow.steps import NotApproved
from lakepurge.workflow.store import RequestConflict, RequestNotFound, RequestRefused

log = get_logger()

SAFE_ERRORS = (
    ReportTampered,
    SafetyLimitExceeded,
    NotApproved,
    RequestNotFound,
    RequestConflict,
    ApprovalRefused,
    RequestRefused,
    ExpansionRefused,  # kinds, counts, links and a keyed hash: no personal data
    ExemptionsChanged,  # names datasets only
)
_TRANSIENT_CODES = {
    "Throttling",
    "ThrottlingException",
    "SlowDown",
    "RequestTimeout",
    "ServiceUnavailable",
    "InternalError",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
}


class TransientAwsError(Exception):
    pass


class TaskFailed(Exception):
    pass


F = TypeVar("F", bound=Callable[..., Any])


def sanitized_errors(handler: F) -> F:
    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except SAFE_ERRORS:
            raise
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            log.error("task failed on an AWS error", extra={"error_code": code})
            if code in _TRANSIENT_CODES:
                raise TransientAwsError(f"AWS error {code}") from None
            raise TaskFailed(f"AWS error {code} (see the function's log)") from None
        # a connection refused, dropped or timed out; an answer cut short (a non-streamed one escapes botocore's
        # retries as urllib3's ProtocolError, boto/boto3#2902): the same call may well succeed again
        except (EndpointConnectionError, ConnectionError, ReadTimeoutError, HTTPClientError, ProtocolError) as exc:
            log.error("task failed to reach AWS", extra={"error_type": type(exc).__name__})
            raise TransientAwsError(type(exc).__name__) from None
        except Exception as exc:
            log.error("task failed", extra={"error_type": type(exc).__name__})
            raise TaskFailed(f"{type(exc).__name__} (see the function's log)") from None

    return wrapper  # type: ignore[return-value]
