#!/bin/sh
# Publish lakepurge's configuration: DATASETS_FILE (your [[datasets]], and any section the stack does not write,
# such as [purge] or [[relational]]) followed by the stack's settings (the SSM parameter StackSettingsParameter:
# [index], [indexing], [reports], [privacy], [workflow], [workflow.launcher], and [vault] with VaultBackend
# dynamodb), validated, then uploaded to the object every function (LAKEPURGE_CONFIG_URI) and Spark job
# (launcher.config_uri) reads: the stack's ConfigUri.
#
# Run it after each `sam deploy` (the stack's settings may have changed) and after each change of DATASETS_FILE.
# Warm functions read the new version within the stack's ConfigMaxAgeSeconds (300 s by default); with the stack's
# ConfigSha256 set they accept only the pinned text: deploy the SHA-256 this prints (docs/DEPLOY.md).
# The artifacts bucket is versioned: a bad change is undone by publishing the previous version again.
# The configuration holds no secret (secrets are named by ARN: [privacy] hash_key_secret, [index] dsn_secret).
#
# Usage: infra/publish_config.sh STACK_NAME DATASETS_FILE
# PYTHON: an interpreter with lakepurge installed, to validate (default .venv/bin/python, else python3).
set -eu
STACK=${1:?usage: infra/publish_config.sh STACK_NAME DATASETS_FILE}
DATASETS=${2:?usage: infra/publish_config.sh STACK_NAME DATASETS_FILE}
[ -r "$DATASETS" ] || { echo "publish_config: cannot read $DATASETS" >&2; exit 2; }

output() {
    aws cloudformation describe-stacks --stack-name "$STACK" \
        --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}

PARAMETER=$(output StackSettingsParameter)
URI=$(output ConfigUri)
case "$URI" in
    s3://*/*) ;;
    *) echo "publish_config: stack $STACK has no ConfigUri output (deploy the current template first)" >&2; exit 2 ;;
esac
BUCKET=${URI#s3://}
KEY=${BUCKET#*/}
BUCKET=${BUCKET%%/*}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    cat "$DATASETS"
    printf '\n\n# -- the stack %s (SSM %s) --\n\n' "$STACK" "$PARAMETER"
    aws ssm get-parameter --name "$PARAMETER" --query Parameter.Value --output text
} >"$work/lakepurge.toml"

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
"$PYTHON" -c 'import lakepurge' 2>/dev/null || {
    echo "publish_config: $PYTHON cannot import lakepurge to validate the configuration (set PYTHON)" >&2
    exit 2
}
# the same validation the functions do when they read it; a bad file is not published
"$PYTHON" -c '
import sys
from lakepurge.core.config import ConfigError, load_settings
try:
    settings = load_settings(sys.argv[1])
except ConfigError as exc:
    sys.exit(f"publish_config: not published: {exc}")
print(f"publish_config: valid: {len(settings.datasets)} dataset(s)")
' "$work/lakepurge.toml"

version=$(aws s3api put-object --bucket "$BUCKET" --key "$KEY" --body "$work/lakepurge.toml" \
    --content-type "application/toml" --query VersionId --output text)
sha256=$("$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
    "$work/lakepurge.toml")
echo "published $URI (version $version, $(wc -c <"$work/lakepurge.toml") bytes, sha256 $sha256)"
# The functions and jobs accept only the configuration the stack pins (ConfigSha256): pin this one.
pinned=$(aws cloudformation describe-stacks --stack-name "$STACK" \
    --query "Stacks[0].Parameters[?ParameterKey=='ConfigSha256'].ParameterValue" --output text)
if [ "$pinned" != "$sha256" ]; then
    echo "publish_config: the stack pins ${pinned:-no configuration}; the functions refuse this one until you deploy" >&2
    echo "  sam deploy ... --parameter-overrides ConfigSha256=$sha256   (with your other parameters)" >&2
fi
