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


def workflow_toml(state_machine_arn: str, kms_key_id: str, **more: int | str) -> str:
    """A [workflow] section with the required keys (approvers, sender, page, topic) and any others given."""
    lines = [f"{name} = {value!r}" if isinstance(value, int) else f'{name} = "{value}"' for name, value in more.items()]
    return "\n".join(
        [
            "[workflow]",
            f'state_machine_arn = "{state_machine_arn}"',
            f'kms_key_id = "{kms_key_id}"',
            'sender = "lakepurge@example.com"',
            'approvers = ["dpo@example.com"]',
            'approval_url = "https://approve.example.com/"',
            'topic_arn = "arn:aws:sns:us-east-1:123456789012:lakepurge"',
            *lines,
            "",
        ]
    )
