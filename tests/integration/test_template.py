"""infra/template.yaml: SAM-translated offline, created on moto's CloudFormation, its IAM checked for wildcards.

moto's CloudFormation creates the resource types it models. The others are left out and every reference to them is
replaced by a stand-in value (an id or ARN of the right shape), as listed in EXCLUDED_TYPES:

- AWS::ApiGatewayV2::Api / ::Stage (the approval HTTP API): moto's CloudFormation has no API Gateway v2 model.
- AWS::EMRServerless::Application (the Spark application): no CloudFormation model in moto.
- AWS::SecretsManager::Secret (the hash key): no CloudFormation model; the functions' dynamic reference
  ``{{resolve:secretsmanager:...}}`` stays unresolved text here (CloudFormation resolves it on AWS).
- AWS::S3::BucketPolicy, AWS::SQS::QueuePolicy, AWS::SNS::TopicPolicy (resource policies) and
  AWS::CloudWatch::Alarm (dead-letter alarms): no CloudFormation models in moto.

Conditions are resolved first, as CloudFormation does (moto would leave a null for AWS::NoValue in a list): with
the sample parameters the DynamoDB index and a created hash-key secret are in, the EventBridge rule for lake
events (LakeNotifications S3), the VPC policy and the email subscription are out.

Everything the data path and the workflow run on is created: the KMS key and alias, both buckets, the DynamoDB
index, the queues, the topic, the IAM roles and policies, the layer, the nine functions with their SQS event
source mapping and EventBridge rule, and the state machine, whose definition must be the ASL file with
CloudFormation's DefinitionSubstitutions applied.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import io
import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from lakepurge.config import parse_settings
from lakepurge.workflow.deployment import ASL_RESOURCE, FUNCTIONS, TOPIC_SUBSTITUTION, asl_text, definition

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
    "AWS::CloudWatch::Alarm",
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
}

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
        if statement.get("Effect") == "Deny":  # only the TLS-only bucket policies deny, and only without TLS
            assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}, path


def test_wildcard_resources_only_where_iam_has_no_resource_level_permission(translated: dict[str, Any]) -> None:
    for path, statement in _statements(translated):
        if statement.get("Effect", "Allow") != "Allow" or "*" not in _as_list(statement.get("Resource")):
            continue
        in_key_policy = path.startswith("/Resources/Key/")  # a key policy's "*" is the key itself
        describe_only = all(a.startswith("ec2:Describe") for a in _as_list(statement["Action"]))
        assert in_key_policy or describe_only, path


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


def _parameter_values(template: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, spec in template["Parameters"].items():
        value = translate.SAMPLE_PARAMETERS.get(name, spec.get("Default"))
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
        if function == "Fn::Join":
            return argument[0].join(_evaluate(argument[1], parameters, conditions))
        raise AssertionError(f"unexpected function in a condition: {function}")
    return node


def _resolve_conditions(template: dict[str, Any]) -> dict[str, Any]:
    """What CloudFormation does with Conditions: resources and outputs under a false condition are not created,
    Fn::If picks its branch and AWS::NoValue removes the property or list item (moto would leave a null there)."""
    parameters = _parameter_values(template)
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


def _creatable_subset(translated: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The template without the resource types moto cannot create; returns it and the excluded ids -> types."""
    from moto.cloudformation.parsing import get_model_map

    supported = set(get_model_map())
    template = _resolve_conditions(translated)
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


def test_stack_creates_on_moto(aws: object, translated: dict[str, Any]) -> None:
    # moto's CloudFormation creates state machines in its plain Step Functions backend, which the server only
    # answers from while execution is off (the workflow tests turn it on).
    requests.post(
        f"{aws.endpoint}/moto-api/config", json={"stepfunctions": {"execute_state_machine": False}}, timeout=30
    )
    template, excluded = _creatable_subset(translated)
    assert set(excluded.values()) == EXCLUDED_TYPES, "moto's CloudFormation coverage changed: update the docstring"

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=translate.PLACEHOLDER_BUCKET)
    locations = _code_locations(template)
    assert len(locations) == 2  # the functions' code and the dependencies layer
    for bucket, key in locations:
        s3.put_object(Bucket=bucket, Key=key, Body=_zip())

    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in translate.SAMPLE_PARAMETERS.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    stack = cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName=STACK)["StackResourceSummaries"]
    }
    assert set(physical) == set(template["Resources"])

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
    assert json.loads(rule["EventPattern"]) == {"source": ["lakepurge"], "detail-type": ["DeletionRequested"]}
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
    for bucket in (physical["ReportsBucket"], physical["ArtifactsBucket"]):
        s3.head_bucket(Bucket=bucket)
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    # (moto's CloudFormation does not apply VersioningConfiguration, PublicAccessBlockConfiguration or lifecycle
    # rules: test_reports_bucket_properties checks them in the template)

    # every function's configuration is valid lakepurge configuration naming these resources, within Lambda's
    # 4 KB environment limit
    for name, config in configs.items():
        variables = config["Environment"]["Variables"]
        assert len(json.dumps(variables)) < 4096, name
        assert variables["LAKEPURGE_HASH_KEY"].startswith("{{resolve:secretsmanager:")
        settings = parse_settings(tomllib.loads(variables["LAKEPURGE_CONFIG_TOML"]), name)
        assert settings.index.backend == "dynamodb"
        assert settings.index.table == physical["IndexTable"]
        assert settings.reports.location == f"s3://{physical['ReportsBucket']}/"
        assert [d.name for d in settings.datasets] == ["events"]
        assert settings.indexing.dead_letter_queue_url == physical["IndexDeadLetterQueue"]
        workflow = settings.workflow
        assert workflow is not None
        assert workflow.state_machine_arn == machine_arn
        assert workflow.topic_arn == topic_arn
        assert workflow.approvers == ("dpo@example.com", "legal@example.com")
        assert settings.privacy.hash_key_env == "LAKEPURGE_HASH_KEY"
        if name == "ApprovalApiFunction":
            continue  # its page posts to itself; it has no launcher and no approval URL of its own
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


FUNCTIONS_BY_VARIABLE = {
    "GenerateReportFunctionArn": "GenerateReportFunction",
    "RequestApprovalFunctionArn": "RequestApprovalFunction",
    "StartPurgeFunctionArn": "StartPurgeFunction",
    "PurgeStatusFunctionArn": "PurgeStatusFunction",
    "VerifyPurgeFunctionArn": "VerifyPurgeFunction",
    "NotifyFunctionArn": "NotifyFunction",
}
