"""Small configurations the CLI and configuration tests start from."""

from __future__ import annotations


def reviews_toml(dsn: str) -> str:
    """A PostgreSQL index at dsn, the reports location and one JSON Lines dataset, `reviews`, keyed by user_id."""
    return f"""\
[index]
backend = "postgres"
dsn = "{dsn}"

[reports]
location = "s3://lake-reports/"

[[datasets]]
name = "reviews"
location = "s3://lake/reviews/"
id_fields = ["user_id"]
"""
