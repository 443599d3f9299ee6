"""README.md's "Your own lake in ten commands", run as printed: a new user pastes the block into a shell.

The block runs in bash, line by line as a person pastes it, against a lake of the user's own on a local S3 (the
session's moto server, which answers DynamoDB as LocalStack does): nothing is rewritten for the test but the
endpoint the block's comment tells a local user to export.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakepurge.core.aws import client

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
USER = "user-42"  # the id the block looks up, purges and verifies


def readme_block() -> str:
    """The bash block under "## Your own lake in ten commands"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Your own lake in ten commands", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README.md: no bash block under 'Your own lake in ten commands'"
    return match.group(1)


def upload_reviews() -> dict[str, bytes]:
    """my-lake/reviews/: 3 JSON Lines objects of 50 records (150), user-42 in two of them; other prefixes too."""
    s3 = client("s3")
    s3.create_bucket(Bucket="my-lake")
    objects = {}
    for part in range(3):
        lines = []
        for row in range(50):
            user = USER if (part, row) in ((0, 7), (2, 31)) else f"user-{part * 50 + row + 100}"
            lines.append(f'{{"user_id": "{user}", "rating": {row % 5 + 1}, "text": "review {part}-{row}"}}')
        key = f"reviews/dt=2026-0{part + 1}/part-0.jsonl"
        objects[key] = ("\n".join(lines) + "\n").encode()
        s3.put_object(Bucket="my-lake", Key=key, Body=objects[key])
    s3.put_object(Bucket="my-lake", Key="orders/2026/part-0.csv", Body=b"user_id,total\nuser-42,10\n")
    return objects


def test_given_a_fresh_shell_when_the_readme_block_is_pasted_then_every_command_works_and_the_user_is_erased(
    tmp_path: Path, aws: object
) -> None:
    objects = upload_reviews()
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    block = readme_block()
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    lakepurge_commands = [line for line in commands if line.startswith("lakepurge ")]
    assert len(commands) == 10 and len(lakepurge_commands) == 8, block

    # A shell of the user's: the venv's bin on PATH (". .venv/bin/activate"), their credentials, a local S3.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEPURGE_", "AWS_"))}
    env |= {"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "HOME": str(tmp_path)}
    env |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": endpoint}
    script = "set -e\n" + "".join(f"echo '>>> {n}' >&2\n{line}\n" for n, line in enumerate(commands))
    result = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )

    assert result.returncode == 0, result.stderr[-4000:]
    steps = dict(re.findall(r">>> (\d+)\n(.*?)(?=>>> \d+\n|\Z)", result.stderr, re.S))  # what each line printed
    assert len(steps) == len(commands)
    s3 = client("s3")
    for key, body in objects.items():
        after = s3.get_object(Bucket="my-lake", Key=key)["Body"].read()
        assert USER.encode() not in after  # erased ...
        assert after.count(b"\n") == body.count(b"\n")  # ... line for line
        assert [a for a, b in zip(after.split(b"\n"), body.split(b"\n"), strict=True) if a != b] == (
            [b"{}"] if USER.encode() in body else []
        )  # every other line identical
    assert s3.get_object(Bucket="my-lake", Key="orders/2026/part-0.csv")["Body"].read().startswith(b"user_id")

    def printed(command: str) -> str:  # what the block's line starting with this command printed
        return next(steps[str(n)] for n, line in enumerate(commands) if line.split("#")[0].strip() == command)

    assert "reviews: objects indexed" in printed("lakepurge index reconcile")  # its progress names the dataset
    assert "reviews: covered" in printed("lakepurge status")
    dry_run = printed(f"lakepurge purge {USER}")
    assert "dry run: nothing erased" in dry_run and "lakepurge purge --users-file " in dry_run  # a command to paste
    assert "0 still hold the users" in printed(f"lakepurge verify {USER}")
    assert " ERASED " in printed("lakepurge requests")
