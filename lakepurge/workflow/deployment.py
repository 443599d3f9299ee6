"""The workflow's deployment facts: the state machine (``purge.asl.json``, package data of this package: a symlink to
``statemachine/purge.asl.json``, so there is one file and a wheel carries it) and the
table of Lambda functions, each named with its handler's module path and the ASL substitution that names it.

Handlers are module paths, strings: the library never imports its entry points (``lakepurge_lambdas/``); the local stack
imports them at run time (:func:`lakepurge.local.workflow.handler`). ``infra/template.yaml`` deploys the same ASL
file (``DefinitionUri: ../statemachine/purge.asl.json``); tests check that the two agree.
"""

from __future__ import annotations

from importlib import resources
from typing import NamedTuple

ASL_RESOURCE = "purge.asl.json"
# Access requests (GDPR Art. 15): the same report, approval and notification, then ExportArchive instead of a purge.
EXPORT_ASL_RESOURCE = "export.asl.json"


class TaskFunction(NamedTuple):
    """A function the state machine calls: unpacks as ``(handler, substitution)``."""

    handler: str  # the module whose ``handler`` Lambda runs
    substitution: str  # the ASL's ``${...}`` variable that receives the function's ARN


# The state machine's Task functions: function name -> handler module and ASL substitution.
FUNCTIONS: dict[str, TaskFunction] = {
    "lakepurge-generate-report": TaskFunction("lakepurge_lambdas.generate_report", "GenerateReportFunctionArn"),
    "lakepurge-request-approval": TaskFunction("lakepurge_lambdas.request_approval", "RequestApprovalFunctionArn"),
    "lakepurge-start-purge": TaskFunction("lakepurge_lambdas.start_purge", "StartPurgeFunctionArn"),
    "lakepurge-purge-status": TaskFunction("lakepurge_lambdas.purge_status", "PurgeStatusFunctionArn"),
    "lakepurge-verify-purge": TaskFunction("lakepurge_lambdas.verify_purge", "VerifyPurgeFunctionArn"),
    "lakepurge-notify": TaskFunction("lakepurge_lambdas.notify", "NotifyFunctionArn"),
}

# The functions only the export state machine calls; it also calls GenerateReport, RequestApproval and Notify.
EXPORT_FUNCTIONS: dict[str, TaskFunction] = {
    "lakepurge-export-archive": TaskFunction("lakepurge_lambdas.export_archive", "ExportArchiveFunctionArn"),
}
EXPORT_SHARED = ("lakepurge-generate-report", "lakepurge-request-approval", "lakepurge-notify")

# Every function the local stack can run in-process: function name -> handler module. Besides the Tasks: the
# indexer (S3 events through SQS), the intake (EventBridge), the approval and operations pages (HTTP API) and the
# scheduled request counts (metrics RequestsOpen, RequestsOverdue).
HANDLERS: dict[str, str] = {name: function.handler for name, function in (FUNCTIONS | EXPORT_FUNCTIONS).items()} | {
    "lakepurge-indexer": "lakepurge_lambdas.indexer",
    "lakepurge-intake": "lakepurge_lambdas.intake",
    "lakepurge-approval-api": "lakepurge_lambdas.approval_api",
    "lakepurge-request-metrics": "lakepurge_lambdas.request_metrics",
}

# The substitution the ASL uses for the outcome topic (not a function).
TOPIC_SUBSTITUTION = "TopicArn"


def asl_text(resource: str = ASL_RESOURCE) -> str:
    """A state machine's definition as shipped (the purge's unless named), its ``${...}`` substitutions in place."""
    return resources.files("lakepurge.workflow").joinpath(resource).read_text(encoding="utf-8")


def definition(substitutions: dict[str, str], resource: str = ASL_RESOURCE) -> str:
    """The ASL with ``${Name}`` replaced, as CloudFormation's DefinitionSubstitutions does."""
    text = asl_text(resource)
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", value)
    return text
