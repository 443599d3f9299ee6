"""infra/template.yaml: SAM-translated offline, created on moto's CloudFormation, its IAM checked for wildcards.

moto's CloudFormation creates the resource types it models. The others are left out and every reference to them is
replaced by a stand-in value (an id or ARN of the right shape), as listed in EXCLUDED_TYPES:

- AWS::ApiGatewayV2::Api / ::Stage (the approval HTTP API): moto's CloudFormation has no API Gateway v2 model.
- AWS::EMRServerless::Application (the Spark application): no CloudFormation model in moto.
- AWS::SecretsManager::Secret (the hash key): no CloudFormation model. Nothing resolves it into a template value:
  the configuration names it by ARN (``[privacy] hash_key_secret``) and the functions read it at run time.
- AWS::S3::BucketPolicy, AWS::SQS::QueuePolicy, AWS::SNS::TopicPolicy, AWS::SecretsManager::ResourcePolicy
  (resource policies) and AWS::CloudWatch::Alarm (dead-letter and overdue alarms): no CloudFormation models in moto.
- AWS::SES::ConfigurationSet (the approval emails' TLS-required configuration set): no CloudFormation model.

Conditions are resolved first, as CloudFormation does (moto would leave a null for AWS::NoValue in a list): with
the sample parameters the DynamoDB index and a created hash-key secret are in, the EventBridge rule for lake
events (LakeNotifications S3), the VPC policy and the email subscription are out.

Everything the data path and the workflow run on is created: the KMS keys and aliases, the buckets, the SSM
parameter holding the stack's part of the configuration, the DynamoDB index, the queues, the topic, the IAM roles
and policies, the layer, the ten functions with their SQS event source mapping and EventBridge rules, the operations
dashboard, and the state machine, whose definition must be the ASL file with
CloudFormation's DefinitionSubstitutions applied. A second stack with the key vault (VaultBackend dynamodb) is
created too: its published [vault] must open the table and key it made. A third, over three lake buckets with
LakeNotifications EventBridge, must send each bucket's object events to the index queue.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import io
import json
import re
import tomllib
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from lakepurge.core.config import VaultConfig, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.protection.shred import _copies_gone_by
from lakepurge.protection.vault import CONTEXT_KEY, Vault, VaultCopies, open_store
from lakepurge.workflow.deployment import (
    ASL_RESOURCE,
    EXPORT_ASL_RESOURCE,
    FUNCTIONS,
    TOPIC_SUBSTITUTION,
    asl_text,
    definition,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lakepurge_infra_translate", ROOT / "infra" / "translate.py")
assert _spec is not None and _spec.loader is not None
translate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(translate)

STACK = "lakepurge"
ACCOUNT = "123456789012"
REGION = "us-east-1"

EXCLUDED_TYPES = {
    "AWS::ApiGatewayV2::Api",
    "AWS::ApiGatewayV2::Stage",
    "AWS::EMRServerless::Application",
    "AWS::SecretsManager::Secret",
    "AWS::S3::BucketPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::SecretsManager::ResourcePolicy",
    "AWS::CloudWatch::Alarm",
    "AWS::SES::ConfigurationSet",
}

# Stand-ins for the excluded resources' Ref / GetAtt values.
SPARK_APP_ID = "00fexample0123456"
STAND_INS: dict[tuple[str, str | None], str] = {
    ("ApprovalHttpApi", None): "a1b2c3d4e5",
    ("SparkApplication", "ApplicationId"): SPARK_APP_ID,
    ("SparkApplication", "Arn"): f"arn:aws:emr-serverless:{REGION}:{ACCOUNT}:/applications/{SPARK_APP_ID}",
    ("HashKeySecret", None): f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:lakepurge-hash-key-AbCdEf",
}

HANDLERS = {
    "IndexerFunction": "lakepurge_lambdas.indexer.handler",
    "IntakeFunction": "lakepurge_lambdas.intake.handler",
    "ApprovalApiFunction": "lakepurge_lambdas.approval_api.handler",
    "GenerateReportFunction": "lakepurge_lambdas.generate_report.handler",
    "RequestApprovalFunction": "lakepurge_lambdas.request_approval.handler",
    "StartPurgeFunction": "lakepurge_lambdas.start_purge.handler",
    "PurgeStatusFunction": "lakepurge_lambdas.purge_status.handler",
    "VerifyPurgeFunction": "lakepurge_lambdas.verify_purge.handler",
    "NotifyFunction": "lakepurge_lambdas.notify.handler",
    "ExportArchiveFunction": "lakepurge_lambdas.export_archive.handler",
    "RequestMetricsFunction": "lakepurge_lambdas.request_metrics.handler",
}

# The operator's datasets file infra/publish_config.sh puts in front of the stack's settings.
SAMPLE_DATASETS_TOML = (
    'datasets = [{name = "events", location = "s3://example-lake/events/", format = "jsonl", id_fields = ["user_id"]}]'
)

ASL_VARIABLES = set(re.findall(r"\$\{(\w+)\}", asl_text()))


@pytest.fixture(scope="module")
def sam_template() -> dict[str, Any]:
    return translate.load_template()


@pytest.fixture(scope="module")
def localized(sam_template: dict[str, Any]) -> dict[str, Any]:
    localized: dict[str, Any] = translate.localize(sam_template)
    return localized


@pytest.fixture(scope="module")
def translated(localized: dict[str, Any]) -> dict[str, Any]:
    translated: dict[str, Any] = translate.translate(localized)
    return translated


# A deployment with the key vault of crypto-shred datasets (off by default).
VAULT = {"VaultBackend": "dynamodb", "VaultMaxCopyDays": "14"}


@pytest.fixture(scope="module")
def vault_translated(localized: dict[str, Any]) -> dict[str, Any]:
    translated: dict[str, Any] = translate.translate(localized, {**translate.SAMPLE_PARAMETERS, **VAULT})
    return translated


@pytest.fixture(scope="module")
def with_vault(vault_translated: dict[str, Any]) -> dict[str, Any]:
    """The vault deployment as CloudFormation creates it (its conditions resolved)."""
    return _resolve_conditions(vault_translated, VAULT)


# -- SAM by convention: `sam validate --lint`, `sam build` and `sam deploy --guided` at the repository root --------


def test_sam_at_the_repository_root_finds_the_template_and_builds_the_layer_with_the_makefile(
    sam_template: dict[str, Any],
) -> None:
    samconfig = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))["default"]
    assert (ROOT / samconfig["global"]["parameters"]["template_file"]) == ROOT / "infra" / "template.yaml"
    assert samconfig["build"]["parameters"]["build_in_source"] is True  # else sam copies the checkout to build it
    assert samconfig["deploy"]["parameters"]["capabilities"] == "CAPABILITY_IAM"
    # Every resource sam builds with a Makefile has its target in the root Makefile (make build-<LogicalId>), and
    # the code it builds is what the functions' CodeUri names (the layer is built before the functions).
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    built = [name for name, r in sam_template["Resources"].items() if r.get("Metadata", {}).get("BuildMethod")]
    assert built == ["DependenciesLayer"]
    for name in built:
        assert (ROOT / "infra" / sam_template["Resources"][name]["Properties"]["ContentUri"]).resolve() == ROOT
        target = re.search(rf"^build-{name}:.*\n((?:\t.*\n)+)", makefile, re.M)
        assert target and "infra/package.py lambda" in target.group(1) and "$(ARTIFACTS_DIR)" in target.group(1)
    assert sam_template["Globals"]["Function"]["CodeUri"] == "../build/lambda/code/"  # what package.py lambda writes


# -- (c) the ASL's substitutions -----------------------------------------------------------------------------------


def test_every_asl_variable_has_a_definition_substitution(sam_template: dict[str, Any]) -> None:
    machine = sam_template["Resources"]["PurgeStateMachine"]["Properties"]
    assert machine["DefinitionUri"] == "../statemachine/purge.asl.json"  # the package data links to it
    deployed = (Path(translate.HERE) / machine["DefinitionUri"]).resolve()
    assert deployed == (ROOT / "lakepurge" / "workflow" / ASL_RESOURCE).resolve()
    assert deployed.read_text(encoding="utf-8") == asl_text()
    substitutions = set(machine["DefinitionSubstitutions"])
    assert {function.substitution for function in FUNCTIONS.values()} | {TOPIC_SUBSTITUTION} == ASL_VARIABLES
    assert substitutions == ASL_VARIABLES, (
        f"missing {ASL_VARIABLES - substitutions}, extra {substitutions - ASL_VARIABLES}"
    )


def test_the_translated_state_machine_keeps_the_definition_and_substitutions(translated: dict[str, Any]) -> None:
    machine = translated["Resources"]["PurgeStateMachine"]
    assert machine["Type"] == "AWS::StepFunctions::StateMachine"
    assert set(machine["Properties"]["DefinitionSubstitutions"]) == ASL_VARIABLES
    lines = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    assert json.loads("\n".join(lines)) == json.loads(asl_text())


EXPORT_VARIABLES = set(re.findall(r"\$\{(\w+)\}", asl_text(EXPORT_ASL_RESOURCE)))


def test_the_export_state_machine_is_deployed_from_its_asl_with_its_substitutions(
    sam_template: dict[str, Any], translated: dict[str, Any]
) -> None:
    machine = sam_template["Resources"]["ExportStateMachine"]["Properties"]
    assert machine["DefinitionUri"] == "../statemachine/export.asl.json"
    deployed = (Path(translate.HERE) / machine["DefinitionUri"]).resolve()
    assert deployed == (ROOT / "lakepurge" / "workflow" / EXPORT_ASL_RESOURCE).resolve()
    assert set(machine["DefinitionSubstitutions"]) == EXPORT_VARIABLES
    assert machine["DefinitionSubstitutions"]["ExportArchiveFunctionArn"] == {
        "Fn::GetAtt": ["ExportArchiveFunction", "Arn"]
    }
    translated_machine = translated["Resources"]["ExportStateMachine"]
    lines = translated_machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    states = json.loads("\n".join(lines))["States"]
    assert states == json.loads(asl_text(EXPORT_ASL_RESOURCE))["States"]
    for name, state in states.items():
        if state["Type"] == "Task":
            assert state.get("Retry") and any("States.ALL" in c["ErrorEquals"] for c in state["Catch"]), name


def test_the_export_role_only_reads_the_lake_and_writes_only_its_prefixes(translated: dict[str, Any]) -> None:
    statements = _role_statements(translated)["ExportArchiveRole"]
    actions = {a for statement in statements for a in _as_list(statement["Action"])}
    deletes = {a for a in actions if a.startswith("s3:Delete") or a.startswith("s3:PutObjectTagging")}
    assert deletes == {"s3:DeleteObjectVersion"}, actions  # its own archives' versions (failed runs, expired)
    assert _granted_objects(statements, "s3:DeleteObjectVersion") == {("ReportsBucket", "access-exports/*")}
    assert "LakeWritePolicy" not in json.dumps(translated["Resources"]["ExportArchiveRole"]["Properties"])
    assert _granted_objects(statements, "s3:PutObject") == {
        ("ReportsBucket", "access-exports/*"),
        ("ReportsBucket", "exports/*"),
    }
    sealing = [s for s in statements if "SealingKey" in _names(s["Resource"])]
    assert sealing and all(s.get("Condition") == ACCESS_REQUESTS_ONLY for s in sealing)
    assert {a for s in sealing for a in _as_list(s["Action"])} == {"kms:Decrypt"}
    archives = [s for s in statements if "ExportKey" in _names(s["Resource"])]
    assert archives and all(s.get("Condition") == EXPORT_CONTEXT for s in archives)
    assert {a for s in archives for a in _as_list(s["Action"])} == {"kms:GenerateDataKey"}


# -- (b) no wildcard actions ----------------------------------------------------------------------------------------


def _statements(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every policy statement anywhere in the template (IAM, key, bucket, queue and topic policies)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        statement = node.get("Statement")
        if "Version" in node and statement is not None:
            for item in statement if isinstance(statement, list) else [statement]:
                if isinstance(item, dict) and "Fn::If" in item:
                    found += [(path, branch) for branch in item["Fn::If"][1:] if isinstance(branch, dict)]
                elif isinstance(item, dict):
                    found.append((path, item))
        for key, value in node.items():
            found += _statements(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _statements(value, f"{path}[{index}]")
    return found


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_statement_grants_a_wildcard_action(translated: dict[str, Any]) -> None:
    statements = [(p, s) for p, s in _statements(translated) if s.get("Effect", "Allow") == "Allow" and "Action" in s]
    assert len(statements) > 30  # the walk does find the policies
    for path, statement in statements:
        assert "NotAction" not in statement, path
        for action in _as_list(statement["Action"]):
            assert isinstance(action, str), (path, action)
            assert action != "*" and not action.endswith(":*"), f"{path}: {action}"
    for path, statement in _statements(translated):
        assert "NotAction" not in statement, path
        if path == "/Resources/ApprovalSigningKeySecretPolicy/Properties/ResourcePolicy":
            continue  # its one Deny: test_only_the_approval_functions_read_the_signing_key
        if statement.get("Sid") == "OnlyTheDeployRolesWriteConfigurationAndCode":
            continue  # test_only_the_deploy_roles_write_the_configuration_and_code_and_the_configuration_is_pinned
        if statement.get("Effect") == "Deny":  # only the TLS-only bucket policies deny, and only without TLS
            assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}, path


def test_wildcard_resources_only_where_iam_has_no_resource_level_permission(
    translated: dict[str, Any], with_vault: dict[str, Any]
) -> None:
    for path, statement in _statements(translated) + _statements(with_vault):
        if statement.get("Effect", "Allow") != "Allow" or "*" not in _as_list(statement.get("Resource")):
            continue
        keys = ("/Resources/Key/", "/Resources/SealingKey/", "/Resources/ExportKey/", "/Resources/VaultKey/")
        in_key_policy = path.startswith(keys)
        actions = _as_list(statement["Action"])
        describe_only = all(a.startswith("ec2:Describe") for a in actions)
        assert in_key_policy or describe_only or actions == ["dynamodb:ListBackups"], path


def test_every_function_has_its_own_role(translated: dict[str, Any]) -> None:
    functions = {k: r for k, r in translated["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    assert set(functions) == set(HANDLERS)
    roles = [f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()]
    assert len(set(roles)) == len(roles)
    for name, function in functions.items():
        assert function["Properties"]["Handler"] == HANDLERS[name]
        assert function["Properties"]["Runtime"] == "python3.12"
        module, attribute = HANDLERS[name].rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), attribute))


def test_the_report_function_may_count_the_indexer_dead_letters(translated: dict[str, Any]) -> None:
    """No request is certified while the indexer's dead-letter queue holds events: GenerateReport counts them."""
    statements = _statements(translated["Resources"]["GenerateReportRole"])
    granted = [s for _, s in statements if "sqs:GetQueueAttributes" in _as_list(s.get("Action"))]
    assert [s["Resource"] for s in granted] == [{"Fn::GetAtt": ["IndexDeadLetterQueue", "Arn"]}]


def test_the_report_function_may_read_the_lake_and_follow_a_table_in_the_index(translated: dict[str, Any]) -> None:
    """A Delta table's report reads the table's log (and the files of commits the index has not seen) and the
    index follows the table first: GenerateReport reads the lake and may write the index."""
    policies = translated["Resources"]["GenerateReportRole"]["Properties"]["ManagedPolicyArns"]
    assert {"Ref": "LakeReadPolicy"} in policies
    assert {"Fn::If": ["UseDynamoDB", {"Ref": "IndexWritePolicy"}, {"Ref": "AWS::NoValue"}]} in policies


def test_reports_bucket_properties(translated: dict[str, Any]) -> None:
    bucket = translated["Resources"]["ReportsBucket"]
    properties = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Retain"
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(properties["PublicAccessBlockConfiguration"].values())
    assert properties["LifecycleConfiguration"]["Rules"]
    default = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert default == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": {"Fn::GetAtt": ["Key", "Arn"]}}
    policy = translated["Resources"]["ReportsBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert [s["Condition"] for s in policy if s["Effect"] == "Deny"] == [{"Bool": {"aws:SecureTransport": "false"}}]


def test_reports_bucket_keeps_no_document_beyond_need(translated: dict[str, Any]) -> None:
    """Issue 14: request documents, purge results and placeholder records expire after configurable days; the
    certificates (the evidence) are in the Object Lock bucket, never expired here."""
    rules = {
        r["Id"]: r for r in translated["Resources"]["ReportsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    expiring = {
        rule.get("Prefix"): rule["ExpirationInDays"]
        for rule in rules.values()
        if rule["Status"] == "Enabled" and "ExpirationInDays" in rule
    }
    assert expiring == {
        "requests/": {"Ref": "RequestRetentionDays"},
        "results/": {"Ref": "ResultRetentionDays"},
        "placeholders/": {"Ref": "PlaceholderRetentionDays"},
        "access-exports/": {"Ref": "ExportRetentionDays"},  # test_access_export_archives_expire_with_every_version
    }
    assert rules["expire-overwritten-versions"]["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": {"Ref": "ReportNoncurrentVersionDays"}
    }
    assert rules["remove-expired-delete-markers"]["ExpiredObjectDeleteMarker"] is True
    # the operations page's view, rewritten hourly, keeps no day of old versions
    assert rules["expire-old-operations-views"]["Prefix"] == "operations/"
    assert rules["expire-old-operations-views"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    parameters = translated["Parameters"]
    # a request's documents outlive any running request (deadline at most 90 days, approval wait at most 30)
    assert parameters["RequestRetentionDays"]["MinValue"] >= 90 + 30
    for name in ("RequestRetentionDays", "ResultRetentionDays", "PlaceholderRetentionDays"):
        assert parameters[name]["Type"] == "Number" and parameters[name]["MinValue"] >= 1, name


def test_access_export_archives_expire_with_every_version(translated: dict[str, Any]) -> None:
    """An archive is a full copy of a person's data: it expires ExportRetentionDays (30 by default) after it was
    written, and its noncurrent versions (a replaced or expired one, in the versioned bucket) a day later, not after
    the bucket-wide ReportNoncurrentVersionDays. The workflow's exports_location is under that prefix."""
    rules = translated["Resources"]["ReportsBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    [rule] = [r for r in rules if r.get("Prefix") == "access-exports/"]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] == {"Ref": "ExportRetentionDays"}
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    parameter = translated["Parameters"]["ExportRetentionDays"]
    assert (parameter["Default"], parameter["MinValue"]) == (30, 1)
    [toml] = _config_tomls(translated)
    assert 'exports_location = "s3://${ReportsBucket}/access-exports/"' in toml
    assert "export_retention_days = ${ExportRetentionDays}" in toml


def test_intake_dead_letters_are_kept_briefly_and_only_this_accounts_events_file_requests(
    translated: dict[str, Any],
) -> None:
    resources = translated["Resources"]
    queue = resources["IntakeDeadLetterQueue"]["Properties"]
    assert queue["MessageRetentionPeriod"] == {"Ref": "IntakeDeadLetterRetentionSeconds"}
    retention = translated["Parameters"]["IntakeDeadLetterRetentionSeconds"]
    assert retention["Default"] <= 4 * 86400 and retention["MaxValue"] <= 1209600
    [rule] = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::Events::Rule" and "DeletionRequested" in json.dumps(r["Properties"].get("EventPattern"))
    ]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["account"] == [{"Ref": "AWS::AccountId"}]
    assert pattern["source"] == ["lakepurge"]
    assert pattern["detail-type"] == ["DeletionRequested", "AccessRequested"]  # the same source restrictions


def test_the_lake_object_events_the_index_follows_include_tag_changes(translated: dict[str, Any]) -> None:
    """A tag-owned dataset's owner is an object tag, and tagging keeps the ETag: without the tagging events an object
    tagged (or re-tagged) after upload is never indexed under its owner. Both forms deliver them to the index queue:
    the stack's EventBridge rule, and the bucket notification docs/DEPLOY.md has the operator add (CloudFormation
    cannot add notifications to a bucket it does not own)."""
    rule = translated["Resources"]["LakeObjectEventsRule"]
    assert rule["Condition"] == "UseEventBridgeNotifications"
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.s3"]
    assert set(pattern["detail-type"]) == {
        "Object Created",
        "Object Deleted",
        "Object Tags Added",
        "Object Tags Deleted",
    }
    assert rule["Properties"]["Targets"] == [{"Id": "index-queue", "Arn": {"Fn::GetAtt": ["IndexQueue", "Arn"]}}]
    deploy = (Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md").read_text()
    [events] = re.findall(r'\\"Events\\": \[([^\]]*)\]', deploy)
    assert {e.strip(' \\"') for e in events.split(",")} == {
        "s3:ObjectCreated:*",
        "s3:ObjectRemoved:*",
        "s3:ObjectTagging:*",
    }


# -- (d) issue 14: keys, evidence, least-privilege writes ------------------------------------------------------------

# The functions that hash user ids (privacy.hash_key_secret); the others may not read the hash key.
HASH_KEY_FUNCTIONS = {
    "IndexerFunction",
    "IntakeFunction",
    "GenerateReportFunction",
    "StartPurgeFunction",
    "NotifyFunction",
    "ExportArchiveFunction",
}
# The roles that may open sealed request ids (the report's lookup, the relational DELETEs), and the one that seals.
SEALING_DECRYPT_ROLES = {"GenerateReportRole", "StartPurgeRole", "ExportArchiveRole"}
SEALING_ENCRYPT_ROLES = {"IntakeRole"}  # the request's ids (an access export's archive has the ExportKey)
REQUEST_ID_CONTEXT = {"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "request_id"}}
# ExportArchive opens the ids of access requests only (RequestStore seals {"request_id", "kind"})
ACCESS_REQUESTS_ONLY = {**REQUEST_ID_CONTEXT, "StringEquals": {"kms:EncryptionContext:kind": "access"}}
EXPORT_CONTEXT = {"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": "export_request_id"}}

LAKE = "lake"  # LakeWritePolicy's dataset prefixes, checked by test_lake_writes_stay_in_the_dataset_prefixes
# What each role may write (s3:PutObject): (bucket logical id, key pattern).
PUTS: dict[str, set[tuple[str, str]]] = {
    "IndexerRole": set(),
    "IntakeRole": {("ReportsBucket", "requests/*/request.json"), ("ReportsBucket", "requests/*/state.json")},
    "ApprovalApiRole": {("ReportsBucket", "requests/*/decision.json"), ("ReportsBucket", "requests/*/state.json")},
    "GenerateReportRole": {("ReportsBucket", "reports/*"), ("ReportsBucket", "requests/*/state.json")},
    "RequestApprovalRole": {("ReportsBucket", "requests/*/approval.json"), ("ReportsBucket", "requests/*/state.json")},
    "StartPurgeRole": {
        ("ReportsBucket", "requests/*/relational.json"),
        ("ReportsBucket", "requests/*/state.json"),
        ("ReportsBucket", "requests/*/purge-start.json"),  # the claim that makes a repeated StartPurge start nothing
        ("ReportsBucket", "results/*"),
        ("ReportsBucket", "placeholders/*"),
        ("EvidenceBucket", "certificates/*"),
        (LAKE, LAKE),
    },
    "PurgeStatusRole": set(),
    "VerifyPurgeRole": set(),
    # the final state, and request.json rewritten without its sealed ids (crypto-shredding)
    "NotifyRole": {("ReportsBucket", "requests/*/state.json"), ("ReportsBucket", "requests/*/request.json")},
    # access requests: the encrypted archive and its record, never the lake (test_the_export_role_only_reads_the_lake)
    "ExportArchiveRole": {("ReportsBucket", "access-exports/*"), ("ReportsBucket", "exports/*")},
    "SparkJobRole": {
        ("ArtifactsBucket", "emr-logs/*"),
        ("ReportsBucket", "results/*"),
        ("ReportsBucket", "placeholders/*"),
        ("ReportsBucket", "vacuum/*"),
        ("ReportsBucket", "verifications/*/result.json"),  # lakepurge_jobs/verify.py (the operator writes hashes)
        ("EvidenceBucket", "certificates/*"),
        (LAKE, LAKE),
    },
    "StateMachineRole": set(),
    # publishes metrics through its logs (EMF), and stores the operations page's view
    "RequestMetricsRole": {("ReportsBucket", "operations/view.json")},
}
DELETES: dict[str, set[tuple[str, str]]] = {
    "StartPurgeRole": {(LAKE, LAKE), ("ReportsBucket", "requests/*/purge-start.json")},  # a failed start's claim
    "SparkJobRole": {("ReportsBucket", "placeholders/*"), (LAKE, LAKE)},  # the vacuum forgets the records it cleared
}
# Object versions deleted outside the lake: only the earlier versions of a shredded request.json (they hold its
# sealed ids), by Notify.
VERSION_DELETES: dict[str, set[tuple[str, str]]] = {
    "NotifyRole": {("ReportsBucket", "requests/*/request.json"), ("ReportsBucket", "results/*/executor-ids.sealed")},
    "ExportArchiveRole": {("ReportsBucket", "access-exports/*")},  # a failed run's archive, an expired one
    "SparkJobRole": {("ReportsBucket", "results/*/executor-ids.sealed")},  # the executors' sealed ids, when done
}


def _ref_id(value: Any) -> str | None:
    """The logical id a managed-policy entry names (through a Fn::If of the sample parameters' conditions)."""
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    if isinstance(value, dict) and "Fn::If" in value:
        return _ref_id(value["Fn::If"][1])
    return None


def _role_statements(translated: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every Allow statement each role gets: its inline policies, its managed policies, AWS::IAM::Policy's."""
    resources = translated["Resources"]
    roles = {k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role"}
    granted: dict[str, list[dict[str, Any]]] = {role: [] for role in roles}

    def allow(document: dict[str, Any]) -> list[dict[str, Any]]:
        # (a Fn::If's AWS::NoValue branch is no statement)
        return [s for _, s in _statements(document) if s.get("Effect", "Allow") == "Allow" and "Action" in s]

    for role in roles:
        properties = resources[role]["Properties"]
        for policy in properties.get("Policies", []):
            granted[role] += allow(policy["PolicyDocument"])
        for entry in properties.get("ManagedPolicyArns", []):
            name = _ref_id(entry)
            if name is not None and name != "AWS::NoValue":
                granted[role] += allow(resources[name]["Properties"]["PolicyDocument"])
    for resource in resources.values():
        if resource["Type"] == "AWS::IAM::Policy":
            for role in resource["Properties"]["Roles"]:
                granted[role["Ref"]] += allow(resource["Properties"]["PolicyDocument"])
    return granted


def _names(resource: Any) -> set[str]:
    """The logical ids a Resource value refers to (GetAtt, Ref, ${X.Arn} in a Sub)."""
    text = json.dumps(resource)
    return (
        set(re.findall(r'"Fn::GetAtt": \["(\w+)"', text))
        | set(re.findall(r"\$\{(\w+)(?:\.\w+)?\}", text))
        | set(re.findall(r'"Ref": "(\w+)"', text))
    )


def _objects(resource: Any) -> tuple[str, str]:
    """(bucket logical id, key pattern) of an object ARN written as ${Bucket.Arn}/pattern; LAKE for the lake's."""
    if isinstance(resource, dict) and isinstance(resource.get("Fn::Sub"), str):
        match = re.fullmatch(r"\$\{(\w+)\.Arn\}/(.+)", resource["Fn::Sub"])
        assert match, resource
        return match.group(1), match.group(2)
    assert re.search(r"LakeBucketName|OtherLakeBucketNames|LakeDatasetLocations", json.dumps(resource)), resource
    return LAKE, LAKE


def _granted_objects(statements: list[dict[str, Any]], action: str) -> set[tuple[str, str]]:
    return {
        _objects(resource)
        for statement in statements
        if action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    }


def test_each_role_writes_only_its_own_prefixes(translated: dict[str, Any]) -> None:
    granted = _role_statements(translated)
    assert set(granted) == set(PUTS)
    for role, statements in granted.items():
        assert _granted_objects(statements, "s3:PutObject") == PUTS[role], role
        assert _granted_objects(statements, "s3:DeleteObject") == DELETES.get(role, set()), role
        version_deletes = _granted_objects(statements, "s3:DeleteObjectVersion") - {(LAKE, LAKE)}
        assert version_deletes == VERSION_DELETES.get(role, set()), role
        for statement in statements:  # other object writes (tags, versions, uploads) only in the lake's datasets
            actions = {a for a in _as_list(statement["Action"]) if a.startswith("s3:")}
            allowed_version_deletes = VERSION_DELETES.get(role, set())
            if "s3:DeleteObjectVersion" in actions and allowed_version_deletes:
                resources = {_objects(r) for r in _as_list(statement["Resource"])}
                actions -= {"s3:DeleteObjectVersion"} if resources <= allowed_version_deletes else set()
            if (
                actions
                - {"s3:PutObject", "s3:DeleteObject"}
                - {a for a in actions if a.startswith(("s3:Get", "s3:List"))}
            ):
                assert {_objects(r) for r in _as_list(statement["Resource"])} == {(LAKE, LAKE)}, (role, actions)
    # the certificates (the evidence) are written to the Object Lock bucket only, never to the reports bucket
    assert not any(("ReportsBucket", "certificates/*") in puts for puts in PUTS.values())


def test_only_the_tasks_that_need_raw_ids_may_open_them(translated: dict[str, Any]) -> None:
    granted = _role_statements(translated)
    decrypting, sealing = set(), set()
    for role, statements in granted.items():
        for statement in statements:
            if "SealingKey" not in _names(statement["Resource"]):
                continue
            actions = set(_as_list(statement["Action"]))
            assert actions <= {"kms:Decrypt", "kms:GenerateDataKey"}, (role, actions)
            expected = ACCESS_REQUESTS_ONLY if role == "ExportArchiveRole" else REQUEST_ID_CONTEXT
            assert statement.get("Condition") == expected, role  # the request names the ciphertext
            if "kms:Decrypt" in actions:
                decrypting.add(role)
            if "kms:GenerateDataKey" in actions:
                sealing.add(role)
    assert decrypting == SEALING_DECRYPT_ROLES
    assert sealing == SEALING_ENCRYPT_ROLES
    # the approval page cannot open anything: no statement of its role names the sealing key
    assert not any("SealingKey" in _names(s["Resource"]) for s in granted["ApprovalApiRole"])
    # the key policy says the same: Decrypt only for these roles, and only with the request in the context
    key = translated["Resources"]["SealingKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    decrypting_principals = set()
    for statement in key["KeyPolicy"]["Statement"]:
        assert "Fn::If" not in statement, "the privacy team opens archives with the ExportKey, never requests"
        actions = set(_as_list(statement["Action"]))
        if actions & {"kms:Decrypt", "kms:ReEncryptFrom", "kms:CreateGrant", "kms:Encrypt"}:
            assert actions == {"kms:Decrypt"}, statement
            principals = {p["Fn::GetAtt"][0] for p in _as_list(statement["Principal"]["AWS"])}
            decrypting_principals |= principals
            expected = ACCESS_REQUESTS_ONLY if principals == {"ExportArchiveRole"} else REQUEST_ID_CONTEXT
            assert statement["Condition"] == expected, principals
        if "kms:GenerateDataKey" in actions:
            assert statement["Condition"] == REQUEST_ID_CONTEXT
    assert decrypting_principals == SEALING_DECRYPT_ROLES
    # the sealing key is the workflow's kms_key_id, apart from the storage key of buckets, topic and environments
    [stack_toml] = _config_tomls(translated)
    assert "${SealingKey.Arn}" in stack_toml and "${Key.Arn}" not in stack_toml


def _context_holds(condition: dict[str, Any], context: dict[str, str]) -> bool:
    """A statement's Condition against a KMS request's encryption context: the two forms the template uses are
    evaluated as KMS does; any other fails the test (it would not be evaluated)."""
    for operator, tests in condition.items():
        for name, expected in tests.items():
            wanted = set(_as_list(expected))
            if operator == "ForAnyValue:StringEquals" and name == "kms:EncryptionContextKeys":
                holds = bool(wanted & set(context))
            elif operator == "StringEquals" and name.startswith("kms:EncryptionContext:"):
                holds = context.get(name.removeprefix("kms:EncryptionContext:")) in wanted
            else:
                raise AssertionError(f"condition {operator} {name} is not evaluated here")
            if not holds:
                return False
    return True


def _kms_allows(translated: dict[str, Any], principal: str, key: str, action: str, context: dict[str, str]) -> bool:
    """Whether KMS lets ``principal`` (a role's logical id, or the ExportReaderArns parameter) call ``action`` on
    ``key`` with that encryption context: its key policy names the principal, or lets the account's IAM policies
    decide (the root principal) and the principal's IAM policies allow it (unknown for ExportReaderArns: taken as
    allowed)."""
    policy = translated["Resources"][key]["Properties"]["KeyPolicy"]["Statement"]
    statements = [b for s in policy for b in (s["Fn::If"][1:2] if "Fn::If" in s else [s])]  # HasExportReaders on
    root, direct = False, False
    for statement in statements:
        if statement.get("Effect") != "Allow" or action not in _as_list(statement["Action"]):
            continue
        if not _context_holds(statement.get("Condition", {}), context):
            continue
        named = _names(statement["Principal"]["AWS"])
        direct |= principal in named
        root |= ":root" in json.dumps(statement["Principal"])
    if direct or not root:
        return direct
    if principal == "ExportReaderArns":
        return True
    return any(
        action in _as_list(s["Action"])
        and key in _names(s["Resource"])
        and _context_holds(s.get("Condition", {}), context)
        for s in _role_statements(translated)[principal]
    )


def test_export_archives_have_their_own_key_and_only_access_requests_open_to_the_exporter(
    translated: dict[str, Any],
) -> None:
    """ExportArchive and the privacy team (ExportReaderArns) cannot decrypt an erasure request's sealed ids: the
    archives have a key of their own (ExportKey, context export_request_id), ExportArchive opens only requests
    sealed with kind "access", and the readers open archives only."""
    erasure = {"request_id": "r-1", "kind": "erasure"}
    for context in (erasure, {"request_id": "r-0"}):  # (a request sealed before the kind was in the context)
        assert not _kms_allows(translated, "ExportArchiveRole", "SealingKey", "kms:Decrypt", context)
        assert not _kms_allows(translated, "ExportReaderArns", "SealingKey", "kms:Decrypt", context)
    access = {"request_id": "r-2", "kind": "access"}
    assert _kms_allows(translated, "ExportArchiveRole", "SealingKey", "kms:Decrypt", access)
    assert not _kms_allows(translated, "ExportReaderArns", "SealingKey", "kms:Decrypt", access)
    archive = {"export_request_id": "r-2"}
    assert _kms_allows(translated, "ExportArchiveRole", "ExportKey", "kms:GenerateDataKey", archive)
    assert _kms_allows(translated, "ExportReaderArns", "ExportKey", "kms:Decrypt", archive)
    assert not _kms_allows(translated, "ExportArchiveRole", "ExportKey", "kms:Decrypt", archive)  # seals, never reads
    for role in ("GenerateReportRole", "StartPurgeRole"):  # the tasks that need an erasure's ids still open them
        assert _kms_allows(translated, role, "SealingKey", "kms:Decrypt", erasure)
        assert not _kms_allows(translated, role, "ExportKey", "kms:Decrypt", archive)
    [stack_toml] = _config_tomls(translated)
    assert 'export_kms_key_id = "${ExportKey.Arn}"' in stack_toml


# The roles that open the index: with a PostgreSQL index they read its DSN secret ([index] dsn_secret).
INDEX_ROLES = {
    "IndexerRole",
    "GenerateReportRole",
    "StartPurgeRole",
    "VerifyPurgeRole",
    "ExportArchiveRole",
    "SparkJobRole",
    "RequestMetricsRole",  # the operations page's view: the index's counts and coverage, hourly
}


def _role_of(function: dict[str, Any]) -> str:
    return str(function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_no_secret_is_resolved_into_the_template(sam_template: dict[str, Any], translated: dict[str, Any]) -> None:
    """Secrets are read at run time: none is resolved at deploy time into a function's environment (readable with
    GetFunctionConfiguration), the Spark application's configuration (GetApplication) or the job configuration."""
    assert "resolve:secretsmanager" not in (ROOT / "infra" / "template.yaml").read_text(encoding="utf-8")
    assert "resolve:secretsmanager" not in json.dumps(sam_template)
    for name, resource in translated["Resources"].items():
        properties = resource.get("Properties", {})
        for part in ("Environment", "RuntimeConfiguration"):
            text = json.dumps(properties.get(part, {}))
            assert "resolve:" not in text and "LAKEPURGE_HASH_KEY" not in text, (name, part)
    spark = translated["Resources"]["SparkApplication"]["Properties"]["RuntimeConfiguration"]
    assert not any("HASH_KEY" in p for c in spark for p in c.get("Properties", {})), spark
    # the configuration names the secrets by ARN
    [toml] = _config_tomls(translated)
    assert 'hash_key_secret = "${HashKeySecretRef}"' in toml
    assert 'dsn_secret = \\"${PostgresSecretArn}\\"' in json.dumps(sam_template["Resources"]["StackSettingsParameter"])


def test_only_the_roles_that_hash_ids_or_open_the_index_read_secrets(translated: dict[str, Any]) -> None:
    functions = {k: r for k, r in translated["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    hashing_roles = {_role_of(functions[name]) for name in HASH_KEY_FUNCTIONS} | {"SparkJobRole"}
    reading: dict[str, set[str]] = {}
    for role, statements in _role_statements(translated).items():
        for statement in statements:
            actions = set(_as_list(statement["Action"]))
            if any(a.startswith("secretsmanager:") for a in actions):
                assert actions == {"secretsmanager:GetSecretValue"}, (role, actions)
                assert "*" not in json.dumps(statement["Resource"]), role
                if _names(statement["Resource"]) == {"ApprovalSigningKeySecret"}:
                    continue  # test_only_the_approval_functions_read_the_approval_signing_key
                reading.setdefault(role, set()).update(_names(statement["Resource"]))
    # (_role_statements follows a conditional policy's attached branch: the PostgreSQL DSN secret is listed too)
    assert {r for r, names in reading.items() if "HashKeySecret" in names} == hashing_roles
    assert {r for r, names in reading.items() if "PostgresSecretArn" in names} == INDEX_ROLES
    assert {r for r, names in reading.items() if "HashKeySecretArn" in names} == hashing_roles  # (an existing one)
    # the KMS key of existing secrets only through Secrets Manager
    for _, statement in _statements(translated["Resources"]["HashKeyReadPolicy"]):
        if "SecretsKmsKeyArn" in _names(statement.get("Resource")):
            assert _as_list(statement["Action"]) == ["kms:Decrypt"]
            assert "kms:ViaService" in statement["Condition"]["StringEquals"]


def test_only_the_role_that_deletes_relational_rows_reads_their_deleting_dsns(translated: dict[str, Any]) -> None:
    """[[relational]] dsn_secret (DELETE rights on CRM tables): StartPurge alone reads it; the read-only DSNs
    (read_dsn_secret) go to the report's count and the access export."""
    reading: dict[str, set[str]] = {}
    for role, statements in _role_statements(translated).items():
        for statement in statements:
            if "secretsmanager:GetSecretValue" in _as_list(statement["Action"]):
                reading.setdefault(role, set()).update(_names(statement["Resource"]))
    assert {r for r, names in reading.items() if "RelationalDsnSecretArns" in names} == {"StartPurgeRole"}
    readers = {r for r, names in reading.items() if "RelationalReadDsnSecretArns" in names}
    assert readers == {"GenerateReportRole", "ExportArchiveRole"}
    # without such secrets (the default) neither policy exists: nothing is granted on an empty ARN
    for policy in ("RelationalDeleteDsnReadPolicy", "RelationalReadDsnReadPolicy"):
        assert translated["Resources"][policy]["Condition"].startswith("HasRelational"), policy


def test_given_iceberg_tables_in_glue_then_only_the_table_readers_get_their_entries_and_only_the_job_moves_them(
    translated: dict[str, Any],
) -> None:
    """An Iceberg table in a Glue catalog: the indexer, the report, StartPurge and the export read its pointer
    (glue:GetTable), the Spark job also commits the erasure (glue:UpdateTable), on the catalog and the ARNs given in
    IcebergGlueArns only; no other role gets any Glue action, and without tables no policy exists."""
    glue: dict[str, set[str]] = {}
    for role, statements in _role_statements(translated).items():
        for statement in statements:
            actions = {a for a in _as_list(statement["Action"]) if a.startswith("glue:")}
            if actions:
                glue.setdefault(role, set()).update(actions)
                resources = json.dumps(statement["Resource"])
                assert _names(statement["Resource"]) == {"IcebergGlueArns"}, (role, resources)
                assert ":catalog" in resources and "*" not in resources
    readers = {"IndexerRole", "GenerateReportRole", "StartPurgeRole", "ExportArchiveRole"}
    assert glue == {
        **{role: {"glue:GetTable"} for role in readers},
        "SparkJobRole": {"glue:GetTable", "glue:UpdateTable"},
    }
    for policy in ("IcebergGlueCatalogReadPolicy", "IcebergGlueCatalogCommitPolicy"):
        assert translated["Resources"][policy]["Condition"] == "HasIcebergGlueTables", policy


APPROVAL_SIGNING_ROLES = {"RequestApprovalRole", "ApprovalApiRole"}


def test_only_the_approval_functions_read_the_approval_signing_key(translated: dict[str, Any]) -> None:
    """approval.json and decision.json are signed with a key only RequestApproval and the approval page may read:
    no other role is granted it, and the secret's own policy denies everyone else, administrators included."""
    resources = translated["Resources"]
    secret = resources["ApprovalSigningKeySecret"]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    assert secret["Properties"]["KmsKeyId"] == {"Ref": "Key"}
    assert "GenerateSecretString" in secret["Properties"], "the key is generated, never a parameter"
    granted = _role_statements(translated)
    readers = set()
    for role, statements in granted.items():
        for statement in statements:
            if "ApprovalSigningKeySecret" in _names(statement["Resource"]):
                assert _as_list(statement["Action"]) == ["secretsmanager:GetSecretValue"], role
                assert _names(statement["Resource"]) == {"ApprovalSigningKeySecret"}, role
                readers.add(role)
    assert readers == APPROVAL_SIGNING_ROLES
    for role in APPROVAL_SIGNING_ROLES:  # the secret is encrypted with the storage key: they may decrypt with it
        assert any("kms:Decrypt" in _as_list(s["Action"]) and "Key" in _names(s["Resource"]) for s in granted[role]), (
            role
        )
    functions = {k: r for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    assert {_role_of(functions[name]) for name in ("RequestApprovalFunction", "ApprovalApiFunction")} == (
        APPROVAL_SIGNING_ROLES
    )
    [deny] = resources["ApprovalSigningKeySecretPolicy"]["Properties"]["ResourcePolicy"]["Statement"]
    assert resources["ApprovalSigningKeySecretPolicy"]["Properties"]["SecretId"] == {"Ref": "ApprovalSigningKeySecret"}
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*"
    assert _as_list(deny["Action"]) == ["secretsmanager:GetSecretValue"]
    allowed = {p["Fn::GetAtt"][0] for p in deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]}
    assert allowed == APPROVAL_SIGNING_ROLES
    # the configuration names the secret by ARN; its value is in no environment
    for toml in _config_tomls(translated):
        assert 'approval_signing_key_secret = "${ApprovalSigningKeySecret}"' in toml
    for name, function in functions.items():
        assert "LAKEPURGE_APPROVAL_KEY" not in json.dumps(function["Properties"]["Environment"]), name


# Step Functions actions that answer a task token.
TOKEN_ACTIONS = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"}
STATES_ARN = "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}"  # as the template writes them
TOKEN_CALLS = {"send_task_success", "send_task_failure", "send_task_heartbeat"}  # the same, as boto3 methods


def _waits_for_a_token(states: dict[str, Any]) -> bool:
    for state in states.values():
        if str(state.get("Resource", "")).endswith(".waitForTaskToken"):
            return True
        branches = [*state.get("Branches", []), *[state[k] for k in ("Iterator", "ItemProcessor") if k in state]]
        if any(_waits_for_a_token(branch["States"]) for branch in branches):
            return True
    return False


def _machines_waiting_for_a_token(sam_template: dict[str, Any]) -> set[str]:
    """The names (as the template writes them: ${AWS::StackName}-purge) of the state machines whose ASL file has a
    state with a .waitForTaskToken resource."""
    waiting = set()
    for resource in sam_template["Resources"].values():
        if resource["Type"] != "AWS::Serverless::StateMachine":
            continue
        asl = json.loads((Path(translate.HERE) / resource["Properties"]["DefinitionUri"]).read_text(encoding="utf-8"))
        if _waits_for_a_token(asl["States"]):
            waiting.add(resource["Properties"]["Name"]["Fn::Sub"])
    return waiting


def _calls(node: ast.AST) -> set[str]:
    """The names a piece of code calls (``f(...)`` and ``x.f(...)``)."""
    called = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            if isinstance(call.func, ast.Name):
                called.add(call.func.id)
            elif isinstance(call.func, ast.Attribute):
                called.add(call.func.attr)
    return called


def _functions_answering_tokens() -> set[str]:
    """The template's functions whose handler answers task tokens: the library's functions that call SendTaskSuccess
    / SendTaskFailure / SendTaskHeartbeat, with the functions of their module that call those, and then the handler
    modules that import and call one of them."""
    answering: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "lakepurge").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {f.name: _calls(f) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        reach = {name for name, calls in defined.items() if calls & TOKEN_CALLS}
        while grown := {name for name, calls in defined.items() if calls & reach} - reach:
            reach |= grown
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        answering |= {(module, name) for name in reach}
    assert answering, "no library function answers a task token: the search is broken"
    handlers = set()
    for path in sorted((ROOT / "lakepurge_lambdas").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if (node.module, alias.name) in answering
        }
        if imported & _calls(tree):
            handlers.add(f"lakepurge_lambdas.{path.stem}.handler")
    return {name for name, handler in HANDLERS.items() if handler in handlers}


def _state_machine_names(resource: Any, kind: str) -> set[str]:
    """The machine names a statement's Resource names, for ARNs of that kind (stateMachine, execution): the part
    after ``:stateMachine:`` (or before the execution name's ``:*``)."""
    names = set()
    for item in _as_list(resource):
        arn = item["Fn::Sub"] if isinstance(item, dict) else item
        assert isinstance(arn, str), item
        match = re.fullmatch(re.escape(f"{STATES_ARN}:{kind}:") + r"(.+?)(:\*)?", arn)
        assert match, f"{arn}: not a {kind} ARN of this stack"
        names.add(match.group(1))
    return names


def test_given_the_asl_files_then_every_states_statement_matches_the_machines_that_wait_for_a_token(
    sam_template: dict[str, Any], translated: dict[str, Any]
) -> None:
    """Every state machine with a .waitForTaskToken state must be answerable by every function that answers tokens
    (the approval page: erasure and access requests alike), and by no other role; a machine added later with a
    waiting state fails this until its ARN is in the statement."""
    waiting = _machines_waiting_for_a_token(sam_template)
    assert waiting == {"${AWS::StackName}-purge", "${AWS::StackName}-export"}  # the search finds today's two
    answering = _functions_answering_tokens()
    assert answering == {"ApprovalApiFunction"}
    functions = {k: r for k, r in translated["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    answering_roles = {_role_of(functions[name]) for name in answering}
    machines = {
        r["Properties"]["StateMachineName"]["Fn::Sub"]
        for r in translated["Resources"].values()
        if r["Type"] == "AWS::StepFunctions::StateMachine"
    }
    answered: dict[str, set[str]] = {}
    history: dict[str, set[str]] = {}
    for role, statements in _role_statements(translated).items():
        for statement in statements:
            actions = {a for a in _as_list(statement["Action"]) if a.startswith("states:")}
            if not actions:
                continue
            if actions & TOKEN_ACTIONS:
                assert role in answering_roles, f"{role} may answer task tokens but its function never does"
                assert actions <= TOKEN_ACTIONS, (role, actions)
                answered.setdefault(role, set()).update(actions)
                assert _state_machine_names(statement["Resource"], "stateMachine") == waiting, (role, statement)
            elif actions == {"states:GetExecutionHistory"}:
                history.setdefault(role, set()).update(_state_machine_names(statement["Resource"], "execution"))
            else:  # starting executions (the intake): only this stack's machines
                assert _state_machine_names(statement["Resource"], "stateMachine") <= machines, (role, statement)
    for role in answering_roles:
        assert answered.get(role, set()) >= {"states:SendTaskSuccess", "states:SendTaskFailure"}, role
        assert history.get(role) == waiting, f"{role} must read the history of every machine it answers"
    assert set(history) <= answering_roles


def test_given_the_template_then_the_internet_facing_approval_page_cannot_read_the_index_and_guards_ops(
    translated: dict[str, Any],
) -> None:
    """The approval page serves the operations view RequestMetrics stores: it may not read the index (raw ids), the
    certificates or the queues; it reads the operations password, which only it is granted."""
    granted = _role_statements(translated)
    page = granted["ApprovalApiRole"]
    actions = {a for statement in page for a in _as_list(statement["Action"])}
    assert not {a for a in actions if a.startswith(("dynamodb:", "sqs:"))}, actions
    named = set().union(*(_names(statement["Resource"]) for statement in page))
    assert not named & {"IndexTable", "PostgresSecretArn", "EvidenceBucket", "IndexDeadLetterQueue"}, named
    managed = {_ref_id(p) for p in translated["Resources"]["ApprovalApiRole"]["Properties"]["ManagedPolicyArns"]}
    assert not managed & {"IndexReadPolicy", "IndexSecretReadPolicy", "EvidenceReadPolicy"}, managed
    readers = {
        role
        for role, statements in granted.items()
        for statement in statements
        if "OperationsPasswordSecret" in _names(statement["Resource"])
    }
    assert readers == {"ApprovalApiRole"}
    secret = translated["Resources"]["OperationsPasswordSecret"]["Properties"]
    assert "GenerateSecretString" in secret and secret["KmsKeyId"] == {"Ref": "Key"}
    for toml in _config_tomls(translated):
        assert 'operations_password_secret = "${OperationsPasswordSecret}"' in toml


def _approval_api_body(translated: dict[str, Any], overrides: dict[str, str] | None = None) -> dict[str, Any]:
    resolved = _resolve_conditions(translated, overrides)
    body: dict[str, Any] = resolved["Resources"]["ApprovalHttpApi"]["Properties"]["Body"]
    return body


def test_the_jwt_authorizer_of_the_decision_post_is_off_by_default(translated: dict[str, Any]) -> None:
    body = _approval_api_body(translated)
    assert set(body["paths"]["/approval"]) == {"get", "post"}
    assert all("security" not in route for route in body["paths"]["/approval"].values())
    assert not body.get("components", {}).get("securitySchemes")
    assert translated["Parameters"]["ApprovalJwtIssuer"]["Default"] == ""


def test_with_an_issuer_and_audience_the_decision_post_needs_their_jwt_and_the_page_stays_open(
    localized: dict[str, Any],
) -> None:
    issuer = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"
    overrides = {"ApprovalJwtIssuer": issuer, "ApprovalJwtAudience": "approvers-app-client"}
    translated = translate.translate(localized, {**translate.SAMPLE_PARAMETERS, **overrides})

    body = _approval_api_body(translated, overrides)

    routes = body["paths"]["/approval"]
    assert routes["post"]["security"] == [{"ApproverJwt": []}]
    assert "security" not in routes["get"], "the confirmation page (GET) needs no token"
    assert routes["post"]["x-amazon-apigateway-integration"]["payloadFormatVersion"] == "2.0"
    authorizer = body["components"]["securitySchemes"]["ApproverJwt"]["x-amazon-apigateway-authorizer"]
    assert authorizer == {
        "type": "jwt",
        "identitySource": "$request.header.Authorization",
        "jwtConfiguration": {"issuer": {"Ref": "ApprovalJwtIssuer"}, "audience": [{"Ref": "ApprovalJwtAudience"}]},
    }
    # an issuer without an audience is refused before anything is created
    rule = translated["Rules"]["JwtAuthorizerNeedsAudience"]
    assert rule["RuleCondition"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "ApprovalJwtIssuer"}, ""]}]}
    assert _parameter_values(translated, overrides)["ApprovalJwtAudience"] == "approvers-app-client"


def test_given_no_issuer_when_translated_then_the_ops_route_has_no_gateway_authorizer_and_its_function_asks_a_password(
    translated: dict[str, Any],
) -> None:
    body = _approval_api_body(translated)
    assert set(body["paths"]["/ops"]) == {"get"}
    assert "security" not in body["paths"]["/ops"]["get"]
    assert body["paths"]["/ops"]["get"]["x-amazon-apigateway-integration"]["payloadFormatVersion"] == "2.0"
    # the function asks for the password instead (tests/integration/test_operations_page.py): the deployed
    # configuration names the generated secret
    [toml] = _config_tomls(translated)
    assert 'operations_password_secret = "${OperationsPasswordSecret}"' in toml


def test_given_an_issuer_when_translated_then_the_operations_page_takes_the_decisions_jwt(
    localized: dict[str, Any],
) -> None:
    overrides = {
        "ApprovalJwtIssuer": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
        "ApprovalJwtAudience": "approvers-app-client",
    }
    translated = translate.translate(localized, {**translate.SAMPLE_PARAMETERS, **overrides})

    body = _approval_api_body(translated, overrides)

    ops = body["paths"]["/ops"]["get"]
    assert ops["security"] == body["paths"]["/approval"]["post"]["security"] == [{"ApproverJwt": []}]
    assert ops["x-amazon-apigateway-integration"]["payloadFormatVersion"] == "2.0"
    assert "security" not in body["paths"]["/approval"]["get"]


def test_given_the_template_then_an_overdue_request_alarms_the_outcomes_topic(translated: dict[str, Any]) -> None:
    alarm = translated["Resources"]["RequestsOverdueAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("lakepurge", "RequestsOverdue")
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "lakepurge"}]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["AlarmActions"] == [{"Ref": "OutcomesTopic"}]
    # the counts are published on a schedule: a request becomes overdue by the clock alone
    function = translated["Resources"]["RequestMetricsFunction"]["Properties"]
    assert function["Handler"] == "lakepurge_lambdas.request_metrics.handler"
    rules = [r for r in translated["Resources"].values() if r["Type"] == "AWS::Events::Rule"]
    assert any(r["Properties"].get("ScheduleExpression") == "rate(1 hour)" for r in rules)


def test_given_the_template_then_the_dashboard_shows_every_operations_metric(translated: dict[str, Any]) -> None:
    dashboard = translated["Resources"]["OperationsDashboard"]
    assert dashboard["Type"] == "AWS::CloudWatch::Dashboard"
    text, values = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    body = json.loads(re.sub(r"\$\{[^}]+\}", "x", text))
    shown = {m[1] for w in body["widgets"] if w["type"] == "metric" for m in w["properties"]["metrics"]}
    assert shown >= {"RequestsOpen", "RequestsOverdue", "LinesErased", "UnindexableLines", "ReturningUsers"}
    assert {"Fn::GetAtt": ["RequestsOverdueAlarm", "Arn"]} in values.values()


def test_certificates_go_to_an_object_lock_bucket(translated: dict[str, Any]) -> None:
    bucket = translated["Resources"]["EvidenceBucket"]
    properties = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Retain"
    assert properties["ObjectLockEnabled"] is True
    assert properties["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": {"Ref": "EvidenceRetentionDays"}}},
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(properties["PublicAccessBlockConfiguration"].values())
    policy = translated["Resources"]["EvidenceBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert [s["Condition"] for s in policy if s["Effect"] == "Deny"] == [{"Bool": {"aws:SecureTransport": "false"}}]
    # where the code that writes and reads the certificate finds it: [reports] evidence_location, in the one
    # configuration every function reads and infra/publish_spark.sh hands the Spark jobs
    for toml in _config_tomls(translated):
        assert 'evidence_location = "s3://${EvidenceBucket}/"' in toml


def _config_tomls(translated: dict[str, Any]) -> list[str]:
    """The configuration texts the template writes: the stack's part of lakepurge.toml, in the SSM parameter that
    infra/publish_config.sh appends to the operator's datasets and uploads (no function carries TOML any more)."""
    for resource in translated["Resources"].values():
        variables = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        assert "LAKEPURGE_CONFIG_TOML" not in variables
    value = translated["Resources"]["StackSettingsParameter"]["Properties"]["Value"]["Fn::Sub"]
    return [value[0] if isinstance(value, list) else value]


CONFIG_URI = {"Fn::Sub": "s3://${ArtifactsBucket}/${ConfigObjectKey}"}


def test_every_function_and_job_reads_the_one_configuration_object(translated: dict[str, Any]) -> None:
    """The functions read LAKEPURGE_CONFIG_URI, the Spark jobs launcher.config_uri: the same object, which every
    role that runs them may read (exactly that object, nothing else of config/), and none may write."""
    resources = translated["Resources"]
    functions = {k: r for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    assert set(functions) == set(HANDLERS)
    for name, function in functions.items():
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["LAKEPURGE_CONFIG_URI"] == CONFIG_URI, name
        assert variables["LAKEPURGE_CONFIG_MAX_AGE"] == {"Ref": "ConfigMaxAgeSeconds"}, name
    [toml] = _config_tomls(translated)
    assert 'config_uri = "s3://${ArtifactsBucket}/${ConfigObjectKey}"' in toml
    parameter = resources["StackSettingsParameter"]["Properties"]
    assert parameter["Type"] == "String" and parameter["Tier"] == "Standard"
    readers = {_role_of(f) for f in functions.values()} | {"SparkJobRole"}
    for role in readers:
        managed = resources[role]["Properties"]["ManagedPolicyArns"]
        assert {"Ref": "ConfigReadPolicy"} in managed, role
    statements = resources["ConfigReadPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    gets = [s for s in statements if "s3:GetObject" in _as_list(s["Action"])]
    assert [s["Resource"] for s in gets] == [{"Fn::Sub": "${ArtifactsBucket.Arn}/${ConfigObjectKey}"}]
    [listing] = [s for s in statements if "s3:ListBucket" in _as_list(s["Action"])]
    assert listing["Condition"] == {"StringEquals": {"s3:prefix": {"Ref": "ConfigObjectKey"}}}
    [decrypt] = [s for s in statements if "kms:Decrypt" in _as_list(s["Action"])]
    assert decrypt["Resource"] == {"Fn::GetAtt": ["Key", "Arn"]} and "kms:ViaService" in json.dumps(decrypt)
    for role, granted in _role_statements(translated).items():  # nobody in the stack writes the configuration
        for statement in granted:
            named = json.dumps(statement.get("Resource"))
            if "ConfigObjectKey" in named or "/config/" in named:
                assert set(_as_list(statement["Action"])) <= {"s3:GetObject", "s3:ListBucket"}, role


def test_only_the_deploy_roles_write_the_configuration_and_code_and_the_configuration_is_pinned(
    translated: dict[str, Any],
) -> None:
    """Whoever writes config/ steers the purge and whoever writes spark/ runs code as the lake-writing role: the
    artifacts bucket denies those writes (and the deletes that would roll an object back) to every principal but
    DeployRoleArns, and every function and Spark driver accepts only the configuration ConfigSha256 pins."""
    resources = translated["Resources"]
    statements = resources["ArtifactsBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    [deny] = [s for s in statements if s.get("Sid") == "OnlyTheDeployRolesWriteConfigurationAndCode"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*"
    assert set(_as_list(deny["Action"])) == {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"}
    assert {_objects(r) for r in _as_list(deny["Resource"])} == {
        ("ArtifactsBucket", "config/*"),
        ("ArtifactsBucket", "spark/*"),
    }
    assert deny["Condition"] == {"ArnNotLike": {"aws:PrincipalArn": {"Ref": "DeployRoleArns"}}}
    assert "Default" not in translated["Parameters"]["DeployRoleArns"]  # a deployment names its deploy roles
    assert translated["Parameters"]["ConfigObjectKey"]["AllowedPattern"].startswith("^config/")  # under the deny
    pin = translated["Parameters"]["ConfigSha256"]
    assert pin["Default"] == "" and pin["AllowedPattern"] == "^$|^[0-9a-f]{64}$"
    for name, function in resources.items():
        if function["Type"] == "AWS::Lambda::Function":
            variables = function["Properties"]["Environment"]["Variables"]
            assert variables["LAKEPURGE_CONFIG_SHA256"] == {"Ref": "ConfigSha256"}, name
    [defaults] = resources["SparkApplication"]["Properties"]["RuntimeConfiguration"]
    assert defaults["Properties"]["spark.emr-serverless.driverEnv.LAKEPURGE_CONFIG_SHA256"] == {
        "Fn::If": ["HasConfigPin", {"Ref": "ConfigSha256"}, {"Ref": "AWS::NoValue"}]
    }


def test_storage_hardening(translated: dict[str, Any]) -> None:
    resources = translated["Resources"]
    table = resources["IndexTable"]["Properties"]["SSESpecification"]
    assert table == {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]}}
    assert resources["ArtifactsBucket"]["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    for name, resource in resources.items():
        if resource["Type"] == "AWS::SQS::Queue":
            assert resource["Properties"]["KmsMasterKeyId"] == {"Ref": "Key"}, name
        if resource["Type"] == "AWS::Logs::LogGroup":
            assert resource["Properties"]["KmsKeyId"] == {"Fn::GetAtt": ["Key", "Arn"]}, name


def test_the_approval_api_logs_access_without_query_strings(translated: dict[str, Any]) -> None:
    stages = [r for r in translated["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Stage"]
    assert len(stages) == 1
    settings = stages[0]["Properties"]["AccessLogSettings"]
    assert settings["DestinationArn"] == {"Fn::GetAtt": ["ApprovalApiAccessLogGroup", "Arn"]}
    fields = json.loads(settings["Format"])
    assert {"requestId", "ip", "routeKey", "status"} <= set(fields)
    variables = set(re.findall(r"\$(?:context|input)\.[\w.]+", settings["Format"]))
    # the approver's secret is in the link's query string: no path, query string, body or header is logged
    assert not any(re.search(r"path|querystring|body|header|input", v, re.IGNORECASE) for v in variables), variables


def test_approval_emails_require_tls(translated: dict[str, Any]) -> None:
    resources = translated["Resources"]
    configuration_set = resources["ApprovalEmailConfigurationSet"]
    assert configuration_set["Type"] == "AWS::SES::ConfigurationSet"
    assert configuration_set["Properties"]["DeliveryOptions"] == {"TlsPolicy": "REQUIRE"}
    for toml in _config_tomls(translated):
        assert 'ses_configuration_set = "${ApprovalEmailConfigurationSet}"' in toml
    sends = [s for s in _role_statements(translated)["RequestApprovalRole"] if "ses:SendEmail" in _as_list(s["Action"])]
    assert len(sends) == 1 and "ApprovalEmailConfigurationSet" in _names(sends[0]["Resource"])


def _sub_value(node: Any, values: dict[str, Any]) -> Any:
    """The few intrinsic functions LakeWritePolicy's resources use, evaluated with the sample parameters."""
    if isinstance(node, str):
        return node
    (function, argument), *_ = node.items()
    if function == "Ref":
        return values[argument]
    if function == "Fn::Join":
        return argument[0].join(_sub_value(argument[1], values))
    if function == "Fn::Split":
        return _sub_value(argument[1], values).split(argument[0])
    if function == "Fn::Select":
        return _sub_value(argument[1], values)[argument[0]]
    if function == "Fn::Sub":
        text, variables = argument if isinstance(argument, list) else (argument, {})
        scope = {**values, **{k: _sub_value(v, values) for k, v in variables.items()}}
        return re.sub(r"\$\{([\w:]+)\}", lambda m: str(scope[m.group(1)]), text)
    raise AssertionError(f"unexpected function {function}")


@pytest.mark.parametrize("prefixes", ["events/", "events/,exports/,year=2026/month=11/"])
def test_lake_writes_stay_in_the_dataset_prefixes(sam_template: dict[str, Any], prefixes: str) -> None:
    policy = sam_template["Resources"]["LakeWritePolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    assert "s3:PutObject" in policy["Action"] and "s3:DeleteObjectVersion" in policy["Action"]
    values = {
        "AWS::Partition": "aws",
        "LakeBucketName": "example-lake",
        "LakeDatasetPrefixes": prefixes.split(","),
    }
    arns = {_sub_value(resource, values) for resource in policy["Resource"]}
    expected = {f"arn:aws:s3:::example-lake/{prefix}*" for prefix in prefixes.split(",")}
    # the unused slots name the empty key (no object), never the whole bucket
    assert arns - expected == {"arn:aws:s3:::example-lake/"}
    assert expected <= arns
    assert "arn:aws:s3:::example-lake/*" not in arns


# -- a lake over several buckets ------------------------------------------------------------------------------------

# Three buckets, datasets in each (lake-a's through LakeDatasetPrefixes and LakeDatasetLocations), a key per bucket.
LAKE_KEYS = [f"arn:aws:kms:{REGION}:{ACCOUNT}:key/lake-{name}" for name in ("a", "b")]
SEVERAL_BUCKETS = {
    "LakeBucketName": "lake-a",
    "LakeDatasetPrefixes": "events/,exports/",
    "OtherLakeBucketNames": "lake-b,lake-c",
    "LakeDatasetLocations": "lake-b/clicks/,lake-b/orders/year=2026/,lake-c/raw/,lake-a/more/",
    "LakeKmsKeyArn": ",".join(LAKE_KEYS),
}
LAKE_READERS = {
    "IndexerRole",
    "GenerateReportRole",
    "StartPurgeRole",
    "ExportArchiveRole",
    "NotifyRole",
    "SparkJobRole",
}
LAKE_WRITERS = {"StartPurgeRole", "SparkJobRole"}
OBJECT_READS = ("s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectTagging", "s3:GetObjectVersionTagging")
BUCKET_READS = ("s3:ListBucket", "s3:ListBucketVersions", "s3:GetBucketVersioning")
OBJECT_WRITES = ("s3:PutObject", "s3:PutObjectTagging", "s3:DeleteObject", "s3:DeleteObjectVersion")
LAKE_PARAMETERS = re.compile(r"LakeBucketName|OtherLakeBucketNames|LakeDatasetLocations|LakeKmsKeyArn")


def _value(node: Any, values: dict[str, Any]) -> list[str]:
    """A resource or condition value as CloudFormation resolves it, as a list of strings."""
    if isinstance(node, list):
        return [item for element in node for item in _value(element, values)]
    resolved = _sub_value(node, values)
    return resolved if isinstance(resolved, list) else [resolved]


def _deployed(localized: dict[str, Any], overrides: dict[str, str], partition: str) -> tuple[Any, dict[str, Any]]:
    """The stack as CloudFormation creates it from these parameters in that partition, and the values it used."""
    parameters = {**translate.SAMPLE_PARAMETERS, **overrides}
    deployed = _resolve_conditions(translate.translate(localized, parameters), overrides, partition)
    return deployed, _parameter_values(deployed, overrides, partition)


def _lake_grants(deployed: dict[str, Any], values: dict[str, Any]) -> dict[str, dict[str, set[str]]]:
    """role -> action -> the lake ARNs (buckets, objects, keys) it is granted on, resolved."""
    grants: dict[str, dict[str, set[str]]] = {}
    for role, statements in _role_statements(deployed).items():
        for statement in statements:
            for resource in _as_list(statement["Resource"]):
                if not LAKE_PARAMETERS.search(json.dumps(resource)):
                    continue
                for action in _as_list(statement["Action"]):
                    grants.setdefault(role, {}).setdefault(action, set()).update(_value(resource, values))
    return grants


def _expected_lake_grants(
    partition: str, buckets: list[str], locations: list[str], keys: list[str]
) -> dict[str, dict[str, set[str]]]:
    objects = {f"arn:{partition}:s3:::{bucket}/*" for bucket in buckets}
    reads = {action: objects for action in OBJECT_READS} | {
        action: {f"arn:{partition}:s3:::{bucket}" for bucket in buckets} for action in BUCKET_READS
    }
    # (LakeDatasetPrefixes' unused slots name the first bucket's empty key, which no object has)
    written = {f"arn:{partition}:s3:::{location}*" for location in locations} | {f"arn:{partition}:s3:::{buckets[0]}/"}
    writes = {action: written for action in (*OBJECT_WRITES, "s3:AbortMultipartUpload")}
    expected: dict[str, dict[str, set[str]]] = {}
    for role in LAKE_READERS:
        expected[role] = dict(reads) | ({"kms:Decrypt": set(keys)} if keys else {})
        if role in LAKE_WRITERS:
            expected[role] |= writes | ({"kms:GenerateDataKey": set(keys)} if keys else {})
    return expected


def _lake_events(deployed: dict[str, Any], values: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The buckets whose S3 notifications the index queue accepts, and those whose EventBridge events the rule
    forwards to it."""
    policy = deployed["Resources"]["IndexQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    notifications = [s for s in policy if s.get("Sid") == "LakeBucketNotifications"]  # with LakeNotifications=S3
    source_arns = [a for s in notifications for a in _value(s["Condition"]["ArnEquals"]["aws:SourceArn"], values)]
    rule = deployed["Resources"].get("LakeObjectEventsRule")
    names = _value(rule["Properties"]["EventPattern"]["detail"]["bucket"]["name"], values) if rule else []
    return source_arns, names


@pytest.mark.parametrize("partition", ["aws", "aws-cn", "aws-us-gov"])
def test_given_a_lake_over_several_buckets_then_each_lake_role_gets_exactly_their_arns_and_events_of_each(
    localized: dict[str, Any], partition: str
) -> None:
    buckets = ["lake-a", "lake-b", "lake-c"]
    locations = ["lake-a/events/", "lake-a/exports/", "lake-a/more/", "lake-b/clicks/"]
    locations += ["lake-b/orders/year=2026/", "lake-c/raw/"]
    deployed, values = _deployed(localized, SEVERAL_BUCKETS, partition)
    grants = _lake_grants(deployed, values)
    assert grants == _expected_lake_grants(partition, buckets, locations, LAKE_KEYS)
    for arn in {arn for actions in grants.values() for arns in actions.values() for arn in arns}:
        if ":s3:::" in arn:  # no wildcard bucket, no bucket outside the lake
            assert arn.split(":::")[1].split("/")[0] in buckets, arn
    source_arns, _ = _lake_events(deployed, values)
    assert source_arns == [f"arn:{partition}:s3:::{bucket}" for bucket in buckets]
    with_rule, rule_values = _deployed(localized, {**SEVERAL_BUCKETS, "LakeNotifications": "EventBridge"}, partition)
    assert _lake_events(with_rule, rule_values)[1] == buckets


def test_given_more_datasets_than_the_ten_prefixes_then_each_is_written_and_nothing_else(
    localized: dict[str, Any],
) -> None:
    locations = [f"example-lake/dataset-{n:02}/" for n in range(25)] + ["lake-b/clicks/"]
    overrides = {"OtherLakeBucketNames": "lake-b", "LakeDatasetLocations": ",".join(locations)}
    deployed, values = _deployed(localized, overrides, "aws")
    grants = _lake_grants(deployed, values)
    everything = ["example-lake/events/", *locations]
    assert grants == _expected_lake_grants("aws", ["example-lake", "lake-b"], everything, [])


def test_given_one_bucket_then_the_lake_grants_and_events_are_what_they_were(localized: dict[str, Any]) -> None:
    """A stack deployed before several buckets were possible keeps its parameters and its permissions."""
    deployed, values = _deployed(localized, {}, "aws")
    expected = _expected_lake_grants("aws", ["example-lake"], ["example-lake/events/"], [])
    assert _lake_grants(deployed, values) == expected
    assert _lake_events(deployed, values) == (["arn:aws:s3:::example-lake"], [])
    key = {"LakeKmsKeyArn": LAKE_KEYS[0]}
    with_key, key_values = _deployed(localized, {**key, "LakeNotifications": "EventBridge"}, "aws")
    grants = _lake_grants(with_key, key_values)
    assert {role: actions.get("kms:Decrypt") for role, actions in grants.items()} == {
        role: {LAKE_KEYS[0]} for role in LAKE_READERS
    }
    assert _lake_events(with_key, key_values) == ([], ["example-lake"])


def test_given_a_stack_over_several_buckets_on_moto_then_object_events_of_each_reach_the_index_queue(
    aws: object, localized: dict[str, Any]
) -> None:
    """LakeNotifications=EventBridge: moto's S3 sends each bucket's events to EventBridge, whose rules deliver them;
    the stack's rule sends the lake's buckets' events to the queue the indexer consumes, and no other bucket's."""
    overrides = {**SEVERAL_BUCKETS, "LakeNotifications": "EventBridge"}
    translated = translate.translate(localized, {**translate.SAMPLE_PARAMETERS, **overrides})
    physical, _ = _create_on_moto(aws, translated, "lakepurge-buckets", overrides)
    sqs, lam = boto3.client("sqs"), boto3.client("lambda")
    queue_arn = sqs.get_queue_attributes(QueueUrl=physical["IndexQueue"], AttributeNames=["QueueArn"])["Attributes"]
    [mapping] = lam.list_event_source_mappings(FunctionName=physical["IndexerFunction"])["EventSourceMappings"]
    assert mapping["EventSourceArn"] == queue_arn["QueueArn"]  # the indexer consumes that queue
    # (paused, so that moto leaves the messages here instead of running the function, which needs Docker)
    lam.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    s3 = boto3.client("s3")
    for bucket in ("lake-a", "lake-b", "lake-c", "not-the-lake"):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_notification_configuration(
            Bucket=bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
    for key in ("lake-a/events/1.jsonl", "lake-b/clicks/1.jsonl", "lake-c/raw/1.jsonl", "not-the-lake/events/1.jsonl"):
        bucket, _, name = key.partition("/")
        s3.put_object(Bucket=bucket, Key=name, Body=b"{}\n")
    received = sqs.receive_message(QueueUrl=physical["IndexQueue"], MaxNumberOfMessages=10, WaitTimeSeconds=1)
    events = [json.loads(m["Body"]) for m in received.get("Messages", [])]
    # (moto's S3 follows each Object Created with an Object Tags Added)
    assert {(e["detail-type"], e["detail"]["bucket"]["name"], e["detail"]["object"]["key"]) for e in events} == {
        (kind, bucket, key)
        for kind in ("Object Created", "Object Tags Added")
        for bucket, key in (("lake-a", "events/1.jsonl"), ("lake-b", "clicks/1.jsonl"), ("lake-c", "raw/1.jsonl"))
    }


def _rule_holds(node: Any, values: dict[str, Any]) -> Any:
    """The rule functions the template's Rules use, evaluated as CloudFormation does before it creates anything."""
    if not isinstance(node, dict):
        return node
    (function, argument), *_ = node.items()
    if function == "Ref":
        return values[argument]
    arguments = [_rule_holds(item, values) for item in _as_list(argument)]
    if function == "Fn::Not":
        return not arguments[0]
    if function == "Fn::Or":
        return any(arguments)
    if function == "Fn::Equals":
        return arguments[0] == arguments[1]
    if function == "Fn::Contains":
        return arguments[1] in arguments[0]
    if function == "Fn::EachMemberEquals":
        return all(member == arguments[1] for member in arguments[0])
    raise AssertionError(f"unexpected rule function {function}")


def _refused_by(template: dict[str, Any], overrides: dict[str, str]) -> list[str]:
    """The AssertDescriptions of the Rules these parameter values fail, and the parameters whose AllowedPattern
    one of their values does not match."""
    values = _parameter_values(template, overrides)
    refused = []
    for rule in template["Rules"].values():
        if _rule_holds(rule.get("RuleCondition", True), values):
            refused += [a["AssertDescription"] for a in rule["Assertions"] if not _rule_holds(a["Assert"], values)]
    for name, spec in template["Parameters"].items():
        given = values[name] if isinstance(values[name], list) else [values[name]]
        if "AllowedPattern" in spec and any(not re.fullmatch(spec["AllowedPattern"], str(v)) for v in given):
            refused.append(name)
    return refused


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LakeDatasetLocations", "lake-b/clicks/,,lake-c/raw/"),  # arn:aws:s3:::* between the two
        ("LakeDatasetLocations", "lake-b/clicks/,"),
        ("LakeDatasetLocations", "lake-b/*"),
        ("LakeDatasetLocations", "lake-b/"),  # the whole bucket
        ("LakeDatasetLocations", "lake-b"),
        ("LakeDatasetLocations", "*/clicks/"),
        ("OtherLakeBucketNames", "lake-b,,lake-c"),
        ("OtherLakeBucketNames", "lake-*"),
    ],
)
def test_given_a_location_or_bucket_that_names_more_than_a_dataset_then_the_stack_refuses_it(
    sam_template: dict[str, Any], name: str, value: str
) -> None:
    assert _refused_by(sam_template, SEVERAL_BUCKETS) == []
    assert _refused_by(sam_template, {**SEVERAL_BUCKETS, name: value})


def test_every_checkov_skip_says_why() -> None:
    lines = (ROOT / "infra" / "checkov-skips.yaml").read_text(encoding="utf-8").splitlines()
    start = lines.index("skip-check:")
    skips = [line for line in lines[start + 1 :] if line.strip()]
    assert skips, "no skips: drop the skip-check key"
    for line in skips:
        match = re.fullmatch(r"  - (CKV\w+)\s+# (.{20,})", line)
        assert match, f"a skip needs its check id and a reason on the same line: {line!r}"


# -- (a) the stack on moto's CloudFormation -------------------------------------------------------------------------


def _resolve_join(value: Any) -> str:
    delimiter, parts = value["Fn::Join"]
    assert all(isinstance(p, str) for p in parts)
    return str(delimiter.join(parts))


def _apply_definition_substitutions(template: dict[str, Any]) -> None:
    """What CloudFormation does with DefinitionSubstitutions, written as a Fn::Join of the ASL's text around the
    substituted values (moto ignores DefinitionSubstitutions, and its Fn::Sub would unescape the ASL's ``$$``)."""
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        properties = resource["Properties"]
        text = _resolve_join(properties["DefinitionString"])
        substitutions = properties.pop("DefinitionSubstitutions")
        parts: list[Any] = []
        for piece in re.split(r"(\$\{\w+\})", text):
            match = re.fullmatch(r"\$\{(\w+)\}", piece)
            parts.append(substitutions[match.group(1)] if match else piece)
        properties["DefinitionString"] = {"Fn::Join": ["", parts]}


def _stand_in(logical_id: str, attribute: str | None) -> str:
    return STAND_INS.get((logical_id, attribute)) or f"stand-in-{logical_id}" + (f"-{attribute}" if attribute else "")


def _replace_references(node: Any, excluded: set[str]) -> Any:
    if isinstance(node, dict):
        if set(node) == {"Ref"} and node["Ref"] in excluded:
            return _stand_in(node["Ref"], None)
        if set(node) == {"Fn::GetAtt"}:
            target = node["Fn::GetAtt"]
            logical_id, attribute = target if isinstance(target, list) else target.split(".", 1)
            if logical_id in excluded:
                return _stand_in(logical_id, attribute)
        if set(node) == {"Fn::Sub"}:
            sub = node["Fn::Sub"]
            text, variables = (sub[0], sub[1]) if isinstance(sub, list) else (sub, {})

            def swap(match: re.Match[str]) -> str:
                name, _, attribute = match.group(1).partition(".")
                if name in excluded and name not in variables:
                    return _stand_in(name, attribute or None)
                return match.group(0)

            text = re.sub(r"\$\{([\w.:]+)\}", swap, text)
            variables = _replace_references(variables, excluded)
            return {"Fn::Sub": [text, variables] if variables else text}
        return {key: _replace_references(value, excluded) for key, value in node.items()}
    if isinstance(node, list):
        return [_replace_references(value, excluded) for value in node]
    return node


_NO_VALUE = object()


def _parameter_values(
    template: dict[str, Any], overrides: dict[str, str] | None = None, partition: str = "aws"
) -> dict[str, Any]:
    values: dict[str, Any] = {"AWS::Partition": partition}
    given = {**translate.SAMPLE_PARAMETERS, **(overrides or {})}
    for name, spec in template["Parameters"].items():
        value = given.get(name, spec.get("Default"))
        values[name] = value.split(",") if spec["Type"] == "CommaDelimitedList" else value
    return values


def _evaluate(node: Any, parameters: dict[str, Any], conditions: dict[str, Any]) -> Any:
    """The few intrinsic functions the template's Conditions use."""
    if isinstance(node, dict):
        (function, argument), *_ = node.items()
        if function == "Ref":
            return parameters[argument]
        if function == "Condition":
            return _evaluate(conditions[argument], parameters, conditions)
        if function == "Fn::Equals":
            return _evaluate(argument[0], parameters, conditions) == _evaluate(argument[1], parameters, conditions)
        if function == "Fn::Not":
            return not _evaluate(argument[0], parameters, conditions)
        if function == "Fn::And":
            return all(_evaluate(item, parameters, conditions) for item in argument)
        if function == "Fn::Join":
            return argument[0].join(_evaluate(argument[1], parameters, conditions))
        raise AssertionError(f"unexpected function in a condition: {function}")
    return node


def _resolve_conditions(
    template: dict[str, Any], overrides: dict[str, str] | None = None, partition: str = "aws"
) -> dict[str, Any]:
    """What CloudFormation does with Conditions: resources and outputs under a false condition are not created,
    Fn::If picks its branch and AWS::NoValue removes the property or list item (moto would leave a null there).
    ``overrides``: parameter values other than the sample ones; ``partition``: the AWS::Partition deployed to."""
    parameters = _parameter_values(template, overrides, partition)
    raw = template.get("Conditions", {})
    truth = {name: bool(_evaluate(body, parameters, raw)) for name, body in raw.items()}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Fn::If"}:
                condition, when_true, when_false = node["Fn::If"]
                return walk(when_true if truth[condition] else when_false)
            if node == {"Ref": "AWS::NoValue"}:
                return _NO_VALUE
            items = {key: walk(value) for key, value in node.items()}
            return {key: value for key, value in items.items() if value is not _NO_VALUE}
        if isinstance(node, list):
            return [item for item in (walk(value) for value in node) if item is not _NO_VALUE]
        return node

    result = copy.deepcopy(template)
    for section in ("Resources", "Outputs"):
        result[section] = {
            key: walk({k: v for k, v in entry.items() if k != "Condition"})
            for key, entry in result.get(section, {}).items()
            if truth.get(entry.get("Condition", ""), True)
        }
    result.pop("Conditions", None)
    return result


def _creatable_subset(
    translated: dict[str, Any], overrides: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The template without the resource types moto cannot create; returns it and the excluded ids -> types."""
    from moto.cloudformation.parsing import get_model_map

    supported = set(get_model_map())
    template = _resolve_conditions(translated, overrides)
    excluded = {k: r["Type"] for k, r in template["Resources"].items() if r["Type"] not in supported}
    for logical_id in excluded:
        del template["Resources"][logical_id]
    template = _replace_references(template, set(excluded))
    for resource in template["Resources"].values():
        if "DependsOn" in resource:
            resource["DependsOn"] = [d for d in _as_list(resource["DependsOn"]) if d not in excluded]
    template["Outputs"] = {
        key: output
        for key, output in template.get("Outputs", {}).items()
        if not any(f"stand-in-{name}" in json.dumps(output) for name in excluded)
    }
    _apply_definition_substitutions(template)
    return template, excluded


def _code_locations(node: Any) -> set[tuple[str, str]]:
    if isinstance(node, dict):
        found = set()
        if node.get("S3Bucket") == translate.PLACEHOLDER_BUCKET:
            found.add((node["S3Bucket"], node["S3Key"]))
        for value in node.values():
            found |= _code_locations(value)
        return found
    if isinstance(node, list):
        return set().union(*(_code_locations(v) for v in node)) if node else set()
    return set()


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("lakepurge_lambdas/__init__.py", "")
    return buffer.getvalue()


def _create_on_moto(
    aws: Any, translated: dict[str, Any], name: str, overrides: dict[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Create the stack on moto's CloudFormation; returns its resources' physical ids and its outputs."""
    # moto's CloudFormation creates state machines in its plain Step Functions backend, which the server only
    # answers from while execution is off (the workflow tests turn it on).
    requests.post(
        f"{aws.endpoint}/moto-api/config", json={"stepfunctions": {"execute_state_machine": False}}, timeout=30
    )
    template, excluded = _creatable_subset(translated, overrides)
    assert set(excluded.values()) == EXCLUDED_TYPES, "moto's CloudFormation coverage changed: update the docstring"

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=translate.PLACEHOLDER_BUCKET)
    locations = _code_locations(template)
    assert len(locations) == 2  # the functions' code and the dependencies layer
    for bucket, key in locations:
        s3.put_object(Bucket=bucket, Key=key, Body=_zip())

    cloudformation = boto3.client("cloudformation")
    parameters = {**translate.SAMPLE_PARAMETERS, **(overrides or {})}
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName=name)["StackResourceSummaries"]
    }
    assert set(physical) == set(template["Resources"])
    return physical, {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_stack_creates_on_moto(aws: object, translated: dict[str, Any]) -> None:
    physical, outputs = _create_on_moto(aws, translated, STACK)
    s3 = boto3.client("s3")

    # functions: one per handler, each with its own role
    lam = boto3.client("lambda")
    configs = {name: lam.get_function(FunctionName=physical[name])["Configuration"] for name in HANDLERS}
    for name, config in configs.items():
        assert config["Handler"] == HANDLERS[name]
        assert config["Runtime"] == "python3.12"
    assert len({c["Role"] for c in configs.values()}) == len(configs)
    arns = {name: config["FunctionArn"] for name, config in configs.items()}

    # the topic
    topic_arn = physical["OutcomesTopic"]
    sns_attributes = boto3.client("sns").get_topic_attributes(TopicArn=topic_arn)["Attributes"]
    assert sns_attributes["KmsMasterKeyId"]

    # the state machine: the ASL with the substitutions applied, under the name the functions' config builds
    sfn = boto3.client("stepfunctions")
    machine_arn = physical["PurgeStateMachine"]
    assert machine_arn == f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STACK}-purge"
    machine = sfn.describe_state_machine(stateMachineArn=machine_arn)
    substitutions = {FUNCTIONS_BY_VARIABLE[v]: arns[FUNCTIONS_BY_VARIABLE[v]] for v in FUNCTIONS_BY_VARIABLE}
    expected = definition({var: substitutions[logical] for var, logical in FUNCTIONS_BY_VARIABLE.items()})
    expected = expected.replace("${TopicArn}", topic_arn)
    assert json.loads(machine["definition"]) == json.loads(expected)  # SAM re-indents the file's JSON
    assert "${" not in machine["definition"]

    # the index queue, its dead-letter queue and the indexer's event source mapping
    sqs = boto3.client("sqs")
    queue_url = physical["IndexQueue"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=physical["IndexDeadLetterQueue"], AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq_arn
    assert int(redrive["maxReceiveCount"]) == 5
    assert int(attributes["VisibilityTimeout"]) >= 6 * configs["IndexerFunction"]["Timeout"]
    mappings = lam.list_event_source_mappings(FunctionName=physical["IndexerFunction"])["EventSourceMappings"]
    assert [m["EventSourceArn"] for m in mappings] == [attributes["QueueArn"]]
    assert mappings[0]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]

    # the intake rule
    events = boto3.client("events")
    rule = events.describe_rule(Name=f"{STACK}-deletion-requested")
    assert json.loads(rule["EventPattern"]) == {
        "account": [ACCOUNT],
        "source": ["lakepurge"],
        "detail-type": ["DeletionRequested", "AccessRequested"],
    }
    targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
    assert [t["Arn"] for t in targets] == [arns["IntakeFunction"]]

    # the index table
    table = boto3.client("dynamodb").describe_table(TableName=physical["IndexTable"])["Table"]
    assert {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]} == {
        ("userid", "HASH"),
        ("location", "RANGE"),
    }
    assert [g["IndexName"] for g in table["GlobalSecondaryIndexes"]] == ["by_object"]

    # the buckets
    for bucket in (physical["ReportsBucket"], physical["ArtifactsBucket"], physical["EvidenceBucket"]):
        s3.head_bucket(Bucket=bucket)
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    # (moto's CloudFormation does not apply VersioningConfiguration, PublicAccessBlockConfiguration or lifecycle
    # rules: test_reports_bucket_properties checks them in the template)

    # every function reads the configuration object infra/publish_config.sh writes: the operator's datasets
    # followed by the stack's settings (the SSM parameter), valid lakepurge configuration naming these resources
    stack_settings = boto3.client("ssm").get_parameter(Name=physical["StackSettingsParameter"])["Parameter"]["Value"]
    assert (
        physical["StackSettingsParameter"]
        == outputs["StackSettingsParameter"]
        == f"/{STACK}/lakepurge/stack-settings.toml"
    )
    assert len(stack_settings.encode()) < 4096  # a standard SSM parameter, whatever the number of datasets
    published = SAMPLE_DATASETS_TOML + "\n" + stack_settings
    config_uri = f"s3://{physical['ArtifactsBucket']}/config/lakepurge.toml"
    assert outputs["ConfigUri"] == config_uri
    for name, config in configs.items():
        variables = config["Environment"]["Variables"]
        assert len(json.dumps(variables)) < 4096, name
        assert "LAKEPURGE_HASH_KEY" not in variables, name
        assert "resolve:secretsmanager" not in json.dumps(variables), name
        assert variables["LAKEPURGE_CONFIG_URI"] == config_uri, name
        assert str(variables["LAKEPURGE_CONFIG_MAX_AGE"]) == "300", name  # (moto keeps the number)
        settings = parse_settings(tomllib.loads(published), name)
        assert settings.index.backend == "dynamodb"
        assert settings.index.table == physical["IndexTable"]
        assert settings.reports.location == f"s3://{physical['ReportsBucket']}/"
        assert [d.name for d in settings.datasets] == ["events"]
        assert settings.indexing.dead_letter_queue_url == physical["IndexDeadLetterQueue"]
        workflow = settings.workflow
        assert workflow is not None
        assert workflow.state_machine_arn == machine_arn
        # requests are sealed with the sealing key, not the storage key of the buckets and environments
        assert workflow.kms_key_id == outputs["SealingKeyArn"] != outputs["KeyArn"]
        assert workflow.topic_arn == topic_arn
        assert workflow.approvers == ("dpo@example.com", "legal@example.com")
        assert settings.privacy.hash_key_secret == STAND_INS[("HashKeySecret", None)]
        assert settings.privacy.hash_key_env is None
        assert (
            workflow.approval_url
            == f"https://{STAND_INS[('ApprovalHttpApi', None)]}.execute-api.{REGION}.amazonaws.com/approval"
        )
        launcher = workflow.launcher
        assert launcher.kind == "emr-serverless"
        assert launcher.application_id == SPARK_APP_ID
        assert (
            launcher.execution_role_arn
            == boto3.client("iam").get_role(RoleName=physical["SparkJobRole"])["Role"]["Arn"]
        )
        assert launcher.archive == f"s3://{physical['ArtifactsBucket']}/spark/lakepurge-env.tar.gz"
        assert launcher.config_uri == config_uri  # the jobs read the functions' configuration


FUNCTIONS_BY_VARIABLE = {
    "GenerateReportFunctionArn": "GenerateReportFunction",
    "RequestApprovalFunctionArn": "RequestApprovalFunction",
    "StartPurgeFunctionArn": "StartPurgeFunction",
    "PurgeStatusFunctionArn": "PurgeStatusFunction",
    "VerifyPurgeFunctionArn": "VerifyPurgeFunction",
    "NotifyFunctionArn": "NotifyFunction",
}


# -- the key vault of crypto-shred datasets (VaultBackend dynamodb) ------------------------------------------------

PERSON_CONTEXT = {CONTEXT_KEY: "keyed-hash-of-a-person"}
VAULT_READ = {"dynamodb:DescribeTable", "dynamodb:BatchGetItem"}
VAULT_DESTROY = {"dynamodb:DeleteItem", "dynamodb:DescribeContinuousBackups", "dynamodb:ListBackups"}
# What each role's code does with the vault: GenerateReport plans the shred (which persons have an entry), the
# inline purge (StartPurge) and the Spark purge destroy entries and check the vault's copies, ExportArchive unwraps
# keys to decrypt, the Spark pseudonymise job creates keys. No other role: VerifyPurge reads the certificate only.
VAULT_GRANTS = {
    "GenerateReportRole": VAULT_READ,
    "StartPurgeRole": VAULT_READ | VAULT_DESTROY,
    "ExportArchiveRole": VAULT_READ | {"kms:Decrypt"},
    "SparkJobRole": VAULT_READ | VAULT_DESTROY | {"dynamodb:PutItem", "kms:GenerateDataKey", "kms:Decrypt"},
}


def _vault_grants(template: dict[str, Any]) -> dict[str, set[str]]:
    """role -> the actions it is granted on the vault's table and key (ListBackups names no table)."""
    granted: dict[str, set[str]] = {}
    for role, statements in _role_statements(template).items():
        for statement in statements:
            actions = set(_as_list(statement["Action"]))
            if _names(statement["Resource"]) & {"VaultTable", "VaultKey"} or "dynamodb:ListBackups" in actions:
                granted.setdefault(role, set()).update(actions)
    return granted


def _vault_section(template: dict[str, Any]) -> Any:
    """What the stack's settings put where ${VaultSettings} stands: a Fn::Sub of the [vault] section, or ""."""
    text, variables = template["Resources"]["StackSettingsParameter"]["Properties"]["Value"]["Fn::Sub"]
    assert "${VaultSettings}" in text
    return variables["VaultSettings"]


def test_given_the_default_parameters_then_no_vault_is_created_granted_or_configured(
    translated: dict[str, Any],
) -> None:
    """Existing deployments do not change: without VaultBackend, no table, key, grant or [vault] section."""
    assert translated["Parameters"]["VaultBackend"]["Default"] == "none"
    deployed = _resolve_conditions(translated)
    resources = deployed["Resources"]
    assert {k for k, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"} == {"IndexTable"}
    assert {k for k, r in resources.items() if r["Type"] == "AWS::KMS::Key"} == {"Key", "SealingKey", "ExportKey"}
    assert _vault_grants(deployed) == {}
    assert _vault_section(deployed) == ""
    # the stack's settings are the text they were (a republished configuration keeps its pinned SHA-256)
    text = deployed["Resources"]["StackSettingsParameter"]["Properties"]["Value"]["Fn::Sub"][0]
    assert text.replace("${VaultSettings}", "").endswith('log_uri = "s3://${ArtifactsBucket}/emr-logs/"\n')
    assert not {"VaultTableArn", "VaultKeyArn"} & set(deployed["Outputs"])


def test_given_a_vault_then_its_table_is_encrypted_retained_and_its_recovery_window_meets_max_copy_days(
    with_vault: dict[str, Any],
) -> None:
    """The purge verifies a shred only when every copy of the vault is gone within [vault] max_copy_days: the
    table's point-in-time recovery window is the deployed max_copy_days, so a shred on this stack verifies."""
    table = with_vault["Resources"]["VaultTable"]
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"
    properties = table["Properties"]
    assert properties["DeletionProtectionEnabled"] is True
    assert properties["SSESpecification"] == {
        "SSEEnabled": True,
        "SSEType": "KMS",
        "KMSMasterKeyId": {"Fn::GetAtt": ["Key", "Arn"]},
    }
    recovery = properties["PointInTimeRecoverySpecification"]
    assert recovery["PointInTimeRecoveryEnabled"] is True
    parameters = _parameter_values(with_vault, VAULT)
    window = int(parameters[recovery["RecoveryPeriodInDays"]["Ref"]])
    assert window == 14
    section = _vault_section(with_vault)["Fn::Sub"]
    stand_ins = {"VaultTable": "vault-table", "VaultKey.Arn": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/vault"}
    rendered = re.sub(r"\$\{([\w.]+)\}", lambda m: str(stand_ins.get(m.group(1), parameters.get(m.group(1)))), section)
    config = VaultConfig.model_validate(tomllib.loads(rendered)["vault"])
    assert (config.backend, config.table, config.max_copy_days) == ("dynamodb", "vault-table", window)
    shredded_at = datetime(2026, 1, 1, tzinfo=UTC)
    gone_by, problems = _copies_gone_by(VaultCopies(recovery_days=window), shredded_at, config.max_copy_days)
    assert problems == [] and gone_by == shredded_at + timedelta(days=window)
    # DynamoDB keeps 1 to 35 days: the parameter cannot ask for a window the rule could not bound
    assert with_vault["Parameters"]["VaultMaxCopyDays"]["MaxValue"] == 35


def test_given_a_vault_then_only_the_roles_whose_code_uses_it_get_what_it_does_and_kms_only_for_a_person(
    with_vault: dict[str, Any],
) -> None:
    assert _vault_grants(with_vault) == VAULT_GRANTS
    roles = {k for k, r in with_vault["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    for role in roles:
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            # the key policy and the role's policies agree, and only with a person's key in the context
            expected = action in VAULT_GRANTS.get(role, set())
            assert _kms_allows(with_vault, role, "VaultKey", action, PERSON_CONTEXT) == expected, (role, action)
            assert not _kms_allows(with_vault, role, "VaultKey", action, {"request_id": "r-1"}), (role, action)
            in_roles = any(
                action in _as_list(s["Action"])
                and "VaultKey" in _names(s["Resource"])
                and _context_holds(s.get("Condition", {}), PERSON_CONTEXT)
                and not _context_holds(s.get("Condition", {}), {"request_id": "r-1"})
                for s in _role_statements(with_vault)[role]
            )
            assert in_roles == expected, (role, action)
    key = with_vault["Resources"]["VaultKey"]
    assert key["DeletionPolicy"] == "Retain" and key["Properties"]["EnableKeyRotation"] is True
    section = _vault_section(with_vault)["Fn::Sub"]
    assert 'kms_key_id = "${VaultKey.Arn}"' in section and 'table = "${VaultTable}"' in section


def test_given_a_vault_stack_on_moto_then_its_published_configuration_creates_and_destroys_a_persons_key(
    aws: object, vault_translated: dict[str, Any]
) -> None:
    """The stack's [vault] opens the table it created (the key schema the vault code checks) and the key it
    created wraps a person's key; destroying the person leaves no entry and no resolving pseudonym."""
    physical, outputs = _create_on_moto(aws, vault_translated, f"{STACK}-vault", VAULT)
    stack_settings = boto3.client("ssm").get_parameter(Name=physical["StackSettingsParameter"])["Parameter"]["Value"]
    assert len(stack_settings.encode()) < 4096
    settings = parse_settings(tomllib.loads(SAMPLE_DATASETS_TOML + "\n" + stack_settings), "published")
    config = settings.vault
    assert config is not None
    assert (config.backend, config.table) == ("dynamodb", physical["VaultTable"])
    assert config.kms_key_id == outputs["VaultKeyArn"] and config.max_copy_days == 14
    with Vault(open_store(config), config, Pseudonymizer(b"synthetic-hash-key-of-32-bytes!!")) as vault:
        [(_, pseudonym)] = vault.keys_for(["alice"], create=True).values()
        person = vault.person_of("alice")
        assert vault.store.entries([person])[person].kms_key_id == outputs["VaultKeyArn"]
        assert vault.destroy([person]) == [person]
        assert vault.store.entries([person]) == {} and vault.store.persons_of([pseudonym]) == {}


def test_given_pipeline_roles_then_the_vault_key_lets_them_create_and_unwrap_person_keys_only(
    localized: dict[str, Any], with_vault: dict[str, Any]
) -> None:
    """VaultKeyUserArns (ingestion pipelines using lakepurge.protection) may create and unwrap a person's key, with
    the person in the encryption context only; without the parameter the key names no principal outside the stack."""
    assert not _kms_allows(with_vault, "VaultKeyUserArns", "VaultKey", "kms:Decrypt", PERSON_CONTEXT)
    pipelines = {**VAULT, "VaultKeyUserArns": f"arn:aws:iam::{ACCOUNT}:role/ingest"}
    translated = translate.translate(localized, {**translate.SAMPLE_PARAMETERS, **pipelines})
    deployed = _resolve_conditions(translated, pipelines)
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        assert _kms_allows(deployed, "VaultKeyUserArns", "VaultKey", action, PERSON_CONTEXT), action
        assert not _kms_allows(deployed, "VaultKeyUserArns", "VaultKey", action, {"request_id": "r-1"}), action
    assert _vault_grants(deployed) == VAULT_GRANTS  # the stack's roles get nothing more for it
