"""The purge workflow on the local moto server: the real ASL, executed by moto, calling the real handlers.

moto runs Lambda functions only through Docker. Here its Lambda backend dispatches each invocation to the
handler of that function name (:data:`lakepurge.workflow.deployment.HANDLERS`, imported by module path at run
time), in this process; an exception becomes the error response Lambda gives (``x-amz-function-error: Unhandled``
with ``errorType``), so the ASL's Retry and Catch see what they would see on AWS. moto does not start executions
from EventBridge or call Lambda from API Gateway: locally a request goes straight to StartExecution, and the
approval page is served by :mod:`lakepurge.local.approval_server`.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import secrets
import threading
import traceback
import uuid
import zipfile
from dataclasses import dataclass
from typing import Any

import requests

from lakepurge.core import aws
from lakepurge.core.logs import get_logger
from lakepurge.workflow.deployment import (
    EXPORT_ASL_RESOURCE,
    EXPORT_FUNCTIONS,
    FUNCTIONS,
    HANDLERS,
    TOPIC_SUBSTITUTION,
    definition,
)

log = get_logger()

ROLE_NAME = "lakepurge-local"


@dataclass
class LocalContext:
    """The parts of the Lambda context object that Powertools reads."""

    function_name: str
    aws_request_id: str
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = ""

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def handler(function_name: str) -> Any:
    """The Lambda handler of that function name, its module imported now (the library names entry points, it
    does not import them)."""
    return importlib.import_module(HANDLERS[function_name]).handler


def _invoke_in_process(function: Any, body: str, request_headers: Any, response_headers: Any) -> bytes:
    run = handler(function.function_name)
    event = json.loads(body) if body else {}
    context = LocalContext(function.function_name, str(uuid.uuid4()), invoked_function_arn=function.function_arn)
    try:
        result = run(event, context)
    except Exception as exc:  # reported the way Lambda reports an unhandled error
        response_headers["x-amz-function-error"] = "Unhandled"
        error = {"errorType": type(exc).__name__, "errorMessage": str(exc), "stackTrace": []}
        log.debug("local function raised", extra={"function": function.function_name, "trace": traceback.format_exc()})
        return json.dumps(error).encode()
    return json.dumps(result).encode()


def install_lambda_dispatch() -> None:
    """Make moto's Lambda backend run the functions' handlers in this process (idempotent)."""
    from moto.awslambda.models import LambdaFunction

    LambdaFunction.invoke = _invoke_in_process  # type: ignore[method-assign,assignment]
    LambdaFunction.docker_client = property(lambda self: None)  # type: ignore[method-assign,assignment]


def close_answered_task_tokens() -> None:
    """Make moto answer a task token whose task was already answered as AWS does: TaskTimedOut ("the task
    associated with the token has already been closed"). moto alone accepts the same token again and again, which
    hides what a repeated SendTaskSuccess meets on AWS (idempotent)."""
    from moto.stepfunctions.parser.asl.eval.callback.callback import (
        CallbackConsumerTimeout,
        CallbackNotifyConsumerError,
        CallbackPoolManager,
    )

    if getattr(CallbackPoolManager.notify, "closes_answered_tokens", False):
        return
    answer = CallbackPoolManager.notify
    answering = threading.Lock()

    def notify_once(self: Any, callback_id: str, outcome: Any) -> bool:
        with answering:
            endpoint = self.get(callback_id)
            if endpoint is not None and endpoint.get_outcome() is not None:
                raise CallbackNotifyConsumerError(callback_consumer_error=CallbackConsumerTimeout())
            return bool(answer(self, callback_id, outcome))

    notify_once.closes_answered_tokens = True  # type: ignore[attr-defined]
    CallbackPoolManager.notify = notify_once  # type: ignore[method-assign]


def enable_execution(endpoint: str) -> None:
    """Ask the moto server to execute state machines (it only records them otherwise)."""
    response = requests.post(
        f"{endpoint}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}, timeout=30
    )
    response.raise_for_status()


@dataclass(frozen=True)
class LocalWorkflow:
    state_machine_arn: str
    topic_arn: str
    functions: dict[str, str]
    export_state_machine_arn: str = ""  # access requests (statemachine/export.asl.json)


def _role_arn() -> str:
    iam = aws.client("iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    try:
        return str(iam.get_role(RoleName=ROLE_NAME)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        return str(iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def _placeholder_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "# the local stack runs lakepurge_lambdas/ in-process\n")
    return buffer.getvalue()


def deploy(topic_name: str = "lakepurge-outcomes", state_machine_name: str = "lakepurge-purge") -> LocalWorkflow:
    """Create the functions, the topic and the state machine on the moto server (after install_lambda_dispatch
    and enable_execution)."""
    role = _role_arn()
    lam = aws.client("lambda")
    functions = {}
    for name in FUNCTIONS | EXPORT_FUNCTIONS:
        try:
            arn = lam.get_function(FunctionName=name)["Configuration"]["FunctionArn"]
        except lam.exceptions.ResourceNotFoundException:
            arn = lam.create_function(
                FunctionName=name,
                Runtime="python3.12",
                Role=role,
                Handler="handler.handler",
                Code={"ZipFile": _placeholder_zip()},
                Timeout=900,
            )["FunctionArn"]
        functions[name] = arn
    topic_arn = aws.client("sns").create_topic(Name=topic_name)["TopicArn"]
    substitutions = {(FUNCTIONS | EXPORT_FUNCTIONS)[name].substitution: arn for name, arn in functions.items()}
    substitutions[TOPIC_SUBSTITUTION] = topic_arn
    sfn = aws.client("stepfunctions")
    machine = sfn.create_state_machine(name=state_machine_name, definition=definition(substitutions), roleArn=role)
    exports = sfn.create_state_machine(
        name=f"{state_machine_name}-export",
        definition=definition(substitutions, EXPORT_ASL_RESOURCE),
        roleArn=role,
    )
    return LocalWorkflow(machine["stateMachineArn"], topic_arn, functions, exports["stateMachineArn"])


def prepare(
    sender: str,
    approvers: list[str],
    approval_url: str,
    approval_timeout_seconds: int = 3600,
    inline_max_objects: int = 20,
    poll_seconds: int = 1,
    exports_location: str | None = None,
) -> tuple[LocalWorkflow, str]:
    """Deploy the workflow with its KMS key and verified SES sender; returns it and its [workflow] TOML. The local
    stack signs approvals with a key of its own (LAKEPURGE_APPROVAL_KEY, when not already set): this process runs
    both RequestApproval and the approval page; and the operations page's password is one of its own too
    (LAKEPURGE_OPS_PASSWORD, when not already set)."""
    os.environ.setdefault("LAKEPURGE_APPROVAL_KEY", secrets.token_hex(32))
    os.environ.setdefault("LAKEPURGE_OPS_PASSWORD", secrets.token_urlsafe(18))
    workflow = deploy()
    kms_key_id = aws.client("kms").create_key(Description="lakepurge requests")["KeyMetadata"]["KeyId"]
    aws.client("ses").verify_email_identity(EmailAddress=sender)
    toml = "\n".join(
        [
            "[workflow]",
            f'state_machine_arn = "{workflow.state_machine_arn}"',
            f'kms_key_id = "{kms_key_id}"',
            f'sender = "{sender}"',
            "approvers = [" + ", ".join(f'"{a}"' for a in approvers) + "]",
            f'approval_url = "{approval_url}"',
            f"approval_timeout_seconds = {approval_timeout_seconds}",
            f'topic_arn = "{workflow.topic_arn}"',
            f"inline_max_objects = {inline_max_objects}",
            f"poll_seconds = {poll_seconds}",
            f'export_state_machine_arn = "{workflow.export_state_machine_arn}"',
            *([f'exports_location = "{exports_location}"'] if exports_location else []),
            "",
        ]
    )
    return workflow, toml


METRICS_FUNCTION = "lakepurge-request-metrics"


def refresh_operations_view() -> dict[str, int]:
    """What the hourly schedule does on AWS: run RequestMetrics, which stores the operations page's view."""
    context = LocalContext(METRICS_FUNCTION, str(uuid.uuid4()))
    counts: dict[str, int] = handler(METRICS_FUNCTION)({"source": "aws.events"}, context)
    return counts


def sent_emails() -> list[dict[str, Any]]:
    """The mail moto's SES has sent (this process runs the server)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    backend = ses_backends[DEFAULT_ACCOUNT_ID][aws.client("ses").meta.region_name]
    return [
        {"to": list(m.destinations.get("ToAddresses", [])), "subject": m.subject, "body": m.body}
        for m in backend.sent_messages
    ]
