"""What a failing Task handler lets reach the state machine: transient faults become TransientAwsError (the ASL
retries it), anything else TaskFailed naming only the error's type (no personal data in the execution history)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from urllib3.exceptions import ProtocolError

from lakepurge.workflow.errors import TaskFailed, TransientAwsError, sanitized_errors

pytestmark = pytest.mark.unit


def _failing(exc: BaseException) -> object:
    @sanitized_errors
    def handler() -> None:
        raise exc

    return handler


@pytest.mark.parametrize(
    "exc",
    [
        ProtocolError("Connection broken: IncompleteRead(10 bytes read, 90 more expected)"),
        ReadTimeoutError(endpoint_url="https://s3.amazonaws.com"),
        ClientError({"Error": {"Code": "SlowDown", "Message": "slow down"}}, "GetObject"),
    ],
    ids=["answer-cut-short", "read-timeout", "throttled"],
)
def test_given_a_transient_fault_when_a_task_fails_then_the_state_machine_may_retry_it(exc: BaseException) -> None:
    with pytest.raises(TransientAwsError):
        _failing(exc)()  # type: ignore[operator]


def test_given_an_error_holding_a_user_id_when_a_task_fails_then_only_its_type_reaches_the_history() -> None:
    with pytest.raises(TaskFailed) as failed:
        _failing(ValueError("alice@example.com is not a valid id"))()  # type: ignore[operator]
    assert "alice" not in str(failed.value) and "ValueError" in str(failed.value)
