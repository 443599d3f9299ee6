"""Translate infra/template.yaml offline, the way `sam build` + `sam deploy` hand it to CloudFormation.

`sam deploy` uploads the local CodeUri/ContentUri directories and replaces them by S3 locations, and the SAM
transform turns AWS::Serverless::* into plain CloudFormation. Without AWS: local paths become placeholder S3
locations and the state machine's DefinitionUri file is inlined (`Definition`), then aws-sam-translator runs here.

    python infra/translate.py --out build/lint/template.json

writes the translated template with the state machine's definition as an object (`Definition`), so that cfn-lint
validates the ASL itself, which it cannot reach through DefinitionUri (make lint runs cfn-lint on both files).
tests/integration/test_template.py uses the same functions.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "template.yaml"
PLACEHOLDER_BUCKET = "lakepurge-placeholder-artifacts"

# Values for the parameters without defaults (what `sam deploy --guided` asks for), to translate and test with.
SAMPLE_PARAMETERS = {
    "LakeBucketName": "example-lake",
    "LakeDatasetPrefixes": "events/",
    "SenderEmail": "privacy-bot@example.com",
    "ApproverEmails": "dpo@example.com,legal@example.com",
    "DeployRoleArns": "arn:aws:iam::123456789012:role/lakepurge-deploy",
}


class _NoManagedPolicies:
    """SAM asks IAM for AWS managed policy ARNs only when a function's Policies name one; none here do."""

    def load(self) -> dict[str, str]:
        return {}


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    document: dict[str, Any] = yaml_parse(path.read_text(encoding="utf-8"))
    return document


def _placeholder(prefix: str, name: str) -> dict[str, str]:
    return {"Bucket": PLACEHOLDER_BUCKET, "Key": f"{prefix}/{name}.zip"}


def localize(template: dict[str, Any], base: Path = HERE) -> dict[str, Any]:
    """Replace local code paths by placeholder S3 locations and inline the state machine definition files."""
    template = copy.deepcopy(template)
    function_globals = template.get("Globals", {}).get("Function", {})
    if isinstance(function_globals.get("CodeUri"), str):
        function_globals["CodeUri"] = _placeholder("code", "functions")
    for logical_id, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::Serverless::Function" and isinstance(properties.get("CodeUri"), str):
            properties["CodeUri"] = _placeholder("code", logical_id)
        elif kind == "AWS::Serverless::LayerVersion" and isinstance(properties.get("ContentUri"), str):
            properties["ContentUri"] = _placeholder("layers", logical_id)
        elif kind == "AWS::Serverless::StateMachine" and isinstance(properties.get("DefinitionUri"), str):
            path = (base / properties.pop("DefinitionUri")).resolve()
            properties["Definition"] = json.loads(path.read_text(encoding="utf-8"))
    return template


def translate(template: dict[str, Any], parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The SAM transform of a localized template (needs a region: AWS_REGION / AWS_DEFAULT_REGION)."""
    from samtranslator.translator.transform import transform

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    values = dict(SAMPLE_PARAMETERS if parameters is None else parameters)
    translated: dict[str, Any] = transform(copy.deepcopy(template), values, _NoManagedPolicies())
    return translated


def with_inline_definitions(translated: dict[str, Any], localized: dict[str, Any]) -> dict[str, Any]:
    """The translated template with each state machine's DefinitionString (a Fn::Join of lines) replaced by the
    definition object, which cfn-lint validates against the ASL schema."""
    result = copy.deepcopy(translated)
    for logical_id, resource in localized["Resources"].items():
        definition = resource.get("Properties", {}).get("Definition")
        if resource["Type"] == "AWS::Serverless::StateMachine" and definition is not None:
            properties = result["Resources"][logical_id]["Properties"]
            properties.pop("DefinitionString", None)
            properties["Definition"] = definition
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", type=Path, default=TEMPLATE)
    parser.add_argument("--out", type=Path, required=True, help="where to write the translated template (JSON)")
    args = parser.parse_args(argv)
    localized = localize(load_template(args.template), args.template.resolve().parent)
    translated = with_inline_definitions(translate(localized), localized)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(translated, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
