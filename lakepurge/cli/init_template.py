"""The commented starting configuration `lakepurge init` writes."""

from __future__ import annotations

from collections.abc import Sequence

from lakepurge.cli.errors import site

_HEADER = """\
# lakepurge configuration, written by `lakepurge init`. Check it with `lakepurge status`.
# Every key is described in docs/CONFIGURATION.md; examples/lakepurge.toml shows all of them.
#
# AWS: {where}
# lakepurge reads boto3's usual settings (AWS_ENDPOINT_URL, AWS_REGION, credentials): they are not repeated here.

# The index: user id -> (object, line). PostgreSQL (dsn) or a DynamoDB table (table).
[index]
{index}

# Reports, certificates and deletion requests are written under this prefix (best: a bucket of its own).
[reports]
location = "{reports}"
"""
_INDEX_POSTGRES = """\
backend = "postgres"
dsn = "postgresql://postgres@127.0.0.1:5432/lakepurge"
# backend = "dynamodb"
# table = "lakepurge-index\""""
_INDEX_DYNAMODB = """\
backend = "dynamodb"
table = "lakepurge-index"              # `lakepurge index reconcile` (or backfill) creates it
# backend = "postgres"
# dsn = "postgresql://lakepurge@db.example.internal:5432/lakepurge\""""
_BODY = """
# One [[datasets]] table per dataset: every object under a prefix, one format, one place for the user id.
{datasets}

# One user per object, the id taken from the key (or id_sidecar, id_tag: see docs/CONFIGURATION.md):
# [[datasets]]
# name = "exports"
# location = "s3://my-lake/exports/"
# id_from_key = '(?P<id>[^/]+)/[^/]+$'
# erase = "delete-object"

# Safety limits: a request erasing more than these shares is refused unless --force.
[purge]
max_object_fraction = 0.5
max_dataset_fraction = 0.05            # in datasets of 100 records or more
delete_noncurrent_versions = true      # old S3 versions hold the erased data too

# The key of the keyed hashes that stand for user ids in reports and certificates (keep it stable and secret).
[privacy]
hash_key_env = "LAKEPURGE_HASH_KEY"
"""


_DATASET = """\
[[datasets]]
name = "{name}"
location = "{location}"{location_note}
format = "{format}"{format_note}
id_fields = [{id_fields}]{id_note}
# erase = "blank"                      # blank | drop | delete-object (default: drop for parquet, else blank)
# skip = ["manifests/*"]               # more keys that are not data (globs relative to location)
"""
_EXAMPLE = ("reviews", "s3://my-lake/reviews/")
_NOTES = {  # the example's comments (datasets given on the command line are written without them)
    "location": "     # a prefix ending in '/'",
    "format": "                       # jsonl | csv | parquet; objects ending in .gz are gzip",
    "id_fields": '                # dotted paths reach nested fields ("buyer.id"); several are allowed',
}


def init_text(
    endpoint: str | None,
    region: str | None,
    dynamodb: bool | None = None,
    datasets: Sequence[tuple[str, str]] = (),
    format: str = "jsonl",
    id_fields: Sequence[str] = ("user_id",),
    reports: str = "s3://lakepurge-reports/",
) -> str:
    """The commented starting configuration `lakepurge init` writes, for this endpoint. dynamodb: whether the index
    is a DynamoDB table (the default on AWS, and at an endpoint that answers DynamoDB), else PostgreSQL. datasets:
    (name, s3://bucket/prefix/) pairs, all of one format and id fields; none: one example to edit."""
    if endpoint:
        where = f"the endpoint {site(endpoint)} (AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    else:
        where = f"AWS itself (no AWS_ENDPOINT_URL), region {region or 'unset: export AWS_REGION'}"
    use_dynamodb = dynamodb if dynamodb is not None else not endpoint
    if endpoint and use_dynamodb:
        where += "; it answers DynamoDB, so the index is a table there"
    index = _INDEX_DYNAMODB if use_dynamodb else _INDEX_POSTGRES
    given = bool(datasets)
    tables = "\n".join(
        _DATASET.format(
            name=name,
            location=location,
            location_note="" if given else _NOTES["location"],
            format=format,
            format_note="" if given else _NOTES["format"],
            id_fields=", ".join(f'"{field}"' for field in id_fields),
            id_note="" if given else _NOTES["id_fields"],
        )
        for name, location in (datasets or [_EXAMPLE])
    )
    return _HEADER.format(where=where, index=index, reports=reports) + _BODY.format(datasets=tables.rstrip("\n"))
