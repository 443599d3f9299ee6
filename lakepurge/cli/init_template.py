"""The commented starting configuration `lakepurge init` writes."""

from __future__ import annotations

from lakepurge.cli.errors import site

_HEADER = """\
# lakepurge configuration, written by `lakepurge init`. Check it with `lakepurge status`.
# Every key is described in README.md (Configuration); examples/lakepurge.toml shows all of them.
#
# AWS: {where}
# lakepurge reads boto3's usual settings (AWS_ENDPOINT_URL, AWS_REGION, credentials): they are not repeated here.

# The index: user id -> (object, line). PostgreSQL (dsn) or a DynamoDB table (table).
[index]
{index}

# Reports, certificates and deletion requests are written under this prefix (best: a bucket of its own).
[reports]
location = "s3://lakepurge-reports/"
"""
_INDEX_LOCAL = """\
backend = "postgres"
dsn = "postgresql://postgres@127.0.0.1:5432/lakepurge"
# backend = "dynamodb"
# table = "lakepurge-index\""""
_INDEX_AWS = """\
backend = "dynamodb"
table = "lakepurge-index"
# backend = "postgres"
# dsn = "postgresql://lakepurge@db.example.internal:5432/lakepurge\""""
_BODY = """
# One [[datasets]] table per dataset: every object under a prefix, one format, one place for the user id.
[[datasets]]
name = "reviews"
location = "s3://my-lake/reviews/"     # a prefix ending in '/'
format = "jsonl"                       # jsonl | csv | parquet; objects ending in .gz are gzip
id_fields = ["user_id"]                # dotted paths reach nested fields ("buyer.id"); several are allowed
# erase = "blank"                      # blank | drop | delete-object (default: drop for parquet, else blank)
# skip = ["manifests/*"]               # more keys that are not data (globs relative to location)

# One user per object, the id taken from the key (or id_sidecar, id_tag: see README.md):
# [[datasets]]
# name = "exports"
# location = "s3://my-lake/exports/"
# id_from_key = '(?P<id>[^/]+)/[^/]+$'
# erase = "delete-object"

# Safety limits: a request erasing more than these shares is refused unless --force.
[purge]
max_object_fraction = 0.5
max_dataset_fraction = 0.05
delete_noncurrent_versions = true      # old S3 versions hold the erased data too

# The key of the keyed hashes that stand for user ids in reports and certificates (keep it stable and secret).
[privacy]
hash_key_env = "LAKEPURGE_HASH_KEY"
"""


def init_text(endpoint: str | None, region: str | None) -> str:
    """The commented starting configuration `lakepurge init` writes, for this endpoint."""
    if endpoint:
        where = f"the endpoint {site(endpoint)} (AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    else:
        where = f"AWS itself (no AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    index = _INDEX_LOCAL if endpoint else _INDEX_AWS
    return _HEADER.format(where=where, index=index) + _BODY
