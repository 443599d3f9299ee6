#!/bin/sh
# Upload what the EMR Serverless jobs need to the stack's artifacts bucket (run after `make package` and
# `sam deploy`, and again after each change of the stack's parameters or of lakepurge):
#   spark/lakepurge-env.tar.gz, spark/{purge,build_index,reconcile,verify,vacuum}.py   from build/spark/
#   config/lakepurge.toml   the functions' configuration: every job reads it (--config s3://..., launcher.config_uri)
#   (it names the hash-key and DSN secrets by ARN and holds no secret: the jobs read them at run time)
# Usage: infra/publish_spark.sh STACK_NAME
set -eu
STACK=${1:?usage: infra/publish_spark.sh STACK_NAME}

output() {
    aws cloudformation describe-stacks --stack-name "$STACK" \
        --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}

BUCKET=$(output ArtifactsBucketName)
FUNCTION=$(output GenerateReportFunctionName)

for file in lakepurge-env.tar.gz purge.py build_index.py reconcile.py verify.py vacuum.py; do
    aws s3 cp "build/spark/$file" "s3://$BUCKET/spark/$file"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
aws lambda get-function-configuration --function-name "$FUNCTION" --output json \
    --query 'Environment.Variables.LAKEPURGE_CONFIG_TOML' \
    | python3 -c 'import json, sys; sys.stdout.write(json.load(sys.stdin))' >"$work/lakepurge.toml"
aws s3 cp "$work/lakepurge.toml" "s3://$BUCKET/config/lakepurge.toml"
echo "published to s3://$BUCKET/spark/ and s3://$BUCKET/config/"
