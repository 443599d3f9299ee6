"""The dry run's plan as an operator uses it: the command it prints is pasted as it is (the ids in a file it wrote,
never printed), `--json` lists every object and noncurrent version, the noncurrent versions are explained the same
way in the plan and in the result, and a reviewed report that went stale (too old, or an object changed since) is
refused unless --force."""

from __future__ import annotations

import json
import shlex
import stat
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.config import load_settings
from lakepurge.core.privacy import OBJECT_REFERENCE, Pseudonymizer
from lakepurge.index import open_store
from lakepurge.reports.layout import write_report
from lakepurge.reports.report import build_report
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_lake_in_its_index

pytestmark = pytest.mark.integration

LIMITS = "\n[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n"


@pytest.fixture
def lake(lake_factory, tmp_path, monkeypatch):
    """A versioned sample lake, indexed, in which one object of the user was overwritten (its old version, still
    holding the user, is a noncurrent version the index names)."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    case = lake_factory(index_toml("dynamodb"), versioned=True, objects=10, users=6)
    user = next(u for u, path, _ in sorted(case.lake.truth) if "/reviews/" in path)
    held = {path for owner, path, _ in case.lake.truth if owner == user}
    overwritten = next(o for o in case.lake.objects if f"s3://lake/{o.key}" in held)
    aws.client("s3").put_object(Bucket="lake", Key=overwritten.key, Body=overwritten.body)  # a second version
    index_lake_in_its_index(case.settings, case.lake)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml + LIMITS)
    return case, user, str(config)


def _run(capsys, *words: str) -> tuple[int, dict, str]:
    code = main([*words, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _printed_command(err: str) -> list[str]:
    line = next(line.strip() for line in err.splitlines() if line.strip().startswith("lakepurge purge "))
    return shlex.split(line)


def test_given_a_dry_run_when_its_printed_command_is_pasted_then_exactly_that_plan_is_erased_and_explained(
    lake, capsys
):
    case, user, config = lake
    code, plan, err = _run(capsys, "purge", user, "--engine", "inline", "--config", config)
    assert code == 0 and plan["dry_run"] is True

    # --json lists the whole plan: every object with its lines, every noncurrent version
    expected = {}
    for owner, path, line in case.lake.truth:
        if owner == user:
            expected.setdefault(path, []).append(line)
    listed = {o["object"]: o["lines"] for o in plan["objects"] if not o["object"].startswith(OBJECT_REFERENCE)}
    assert listed == {p: sorted(lines) for p, lines in expected.items() if p in listed}
    assert len(plan["objects"]) == plan["plan"]["objects"]
    versions = aws.client("s3").list_object_versions(Bucket="lake")["Versions"]
    old = {f"s3://lake/{v['Key']}": v["VersionId"] for v in versions if not v["IsLatest"]}
    assert [(v["object"], v["version_ids"]) for v in plan["noncurrent_versions"]] == [
        (path, [version]) for path, version in old.items()
    ]
    explained = plan["plan"]["noncurrent_versions_explained"]
    assert explained == {"named_by_index": 1, "replaced_by_rewrite": plan["plan"]["objects"]}
    assert "noncurrent versions: 1 named by the index as holding the users; in a versioned bucket" in err

    # the hint is a command to paste: the ids in a file of the operator's own, never on the screen
    command = _printed_command(err)
    assert user not in err and "USER" not in command
    users_file = Path(command[command.index("--users-file") + 1])
    assert users_file.read_text() == f"{user}\n"
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    assert plan["execute"] == shlex.join(command)

    code, done, err = _run(capsys, *command[1:])
    assert code == 0 and done["verified"] is True and done["request_id"] == plan["request_id"]
    causes = done["noncurrent_versions_deleted_by_cause"]
    replaced = explained["replaced_by_rewrite"]
    assert causes == {"replaced_by_rewrite": replaced, "named_by_index": 1, "found_holding_users": 0}
    assert sum(causes.values()) == done["noncurrent_versions_deleted"]
    assert f"{causes['replaced_by_rewrite']} replaced by the rewrites, 1 named by the index" in err
    assert not users_file.exists(), "the ids file goes once its command ran"


def test_given_a_reviewed_report_whose_object_changed_when_executed_then_it_is_refused_unless_forced(
    lake, capsys, tmp_path
):
    _, user, config = lake
    ids = tmp_path / "ids.txt"
    ids.write_text(f"{user}\n")
    code, plan, err = _run(capsys, "purge", "--users-file", str(ids), "--engine", "inline", "--config", config)
    assert code == 0
    command = _printed_command(err)
    assert command[command.index("--users-file") + 1] == str(ids)  # the operator's own file, as given

    # meanwhile the user's records in one planned object were changed by someone else
    changed = next(o["object"] for o in plan["objects"] if o["object"].endswith(".jsonl"))
    key = changed.removeprefix("s3://lake/")
    body = aws.client("s3").get_object(Bucket="lake", Key=key)["Body"].read()
    aws.client("s3").put_object(Bucket="lake", Key=key, Body=body + b'{"user_id": "someone-new"}\n')

    code, refused, err = _run(capsys, *command[1:])
    assert code == 3 and refused["status"] == "REFUSED"
    named = len(plan["objects"]) - _references(plan)
    assert f"1 of the {named} object(s) of report {plan['request_id']} changed" in err
    assert "add --force" in err
    assert aws.client("s3").get_object(Bucket="lake", Key=key)["Body"].read().count(user.encode()) > 0, "nothing erased"
    assert ids.exists(), "the operator's own file is never removed"

    code, forced, _ = _run(capsys, *command[1:], "--force")
    assert code == 0 and forced["verified"] is True


def _references(plan: dict) -> int:
    return sum(o["object"].startswith(OBJECT_REFERENCE) for o in plan["objects"])


def test_given_a_reviewed_report_older_than_the_limit_when_executed_then_it_is_refused_with_its_age(lake, capsys):
    _, user, config = lake
    settings = load_settings(config)
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    store = open_store(settings.index)
    try:
        report = build_report(store, settings, [user], "op-old-plan", pseudonymizer, force=False)
    finally:
        store.close()
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat(timespec="seconds")
    _, digest = write_report(aws.client("s3"), settings, replace(report, created_at=two_hours_ago))

    args = ("purge", user, "--report", "op-old-plan", "--sha256", digest, "--yes", "--engine", "inline")
    code, refused, err = _run(capsys, *args, "--config", config)
    assert code == 3 and refused["status"] == "REFUSED"
    assert "report op-old-plan was made 120 minute(s) ago, more than [purge] max_report_age_minutes = 60" in err

    code, done, _ = _run(capsys, *args, "--force", "--config", config)
    assert code == 0 and done["verified"] is True
