#!/bin/sh
# Upload what the EMR Serverless jobs need to the stack's artifacts bucket (run after `make package` and
# `sam deploy`, and again after each change of the stack's parameters or of lakepurge):
#   spark/lakepurge-env.tar.gz, spark/{purge,build_index,reconcile,verify,vacuum}.py   from build/spark/
#   config/lakepurge.toml (the stack's ConfigUri)   the configuration every function and job reads, published by
#   infra/publish_config.sh from DATASETS_FILE and the stack's settings (it names the hash-key and DSN secrets by
#   ARN and holds no secret: the jobs read them at run time)
# Usage: infra/publish_spark.sh STACK_NAME DATASETS_FILE
set -eu
STACK=${1:?usage: infra/publish_spark.sh STACK_NAME DATASETS_FILE}
DATASETS=${2:?usage: infra/publish_spark.sh STACK_NAME DATASETS_FILE}

output() {
    aws cloudformation describe-stacks --stack-name "$STACK" \
        --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}

BUCKET=$(output ArtifactsBucketName)

for file in lakepurge-env.tar.gz purge.py build_index.py reconcile.py verify.py vacuum.py pseudonymise.py; do
    aws s3 cp "build/spark/$file" "s3://$BUCKET/spark/$file"
done
echo "published to s3://$BUCKET/spark/"
"$(dirname "$0")/publish_config.sh" "$STACK" "$DATASETS"
