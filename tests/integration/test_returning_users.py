"""Erased users found again (a restored backup): `lakepurge status` names each object, the user's keyed hash and the
request that erased them, with the one command that purges them again by hash; never a raw id."""

from __future__ import annotations

import json
import shlex

import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index import open_store
from lakepurge.indexing.indexer import index_object
from tests.support.purging import HASH_KEY, index_lake

pytestmark = pytest.mark.integration


def cli(capsys, *args: str) -> tuple[int, dict, str]:
    """Exit code, the --json document, and everything printed (stdout and stderr)."""
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.out + captured.err


def test_given_an_erased_user_restored_from_a_backup_when_asking_status_then_the_printed_command_purges_them_again(
    lake_factory, index_backend, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    case = lake_factory(index_backend, objects=8, users=12)
    store = open_store(case.settings.index)
    try:
        index_lake(store, case.settings, case.lake)
    finally:
        store.close()
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    user = case.lake.users[0]
    user_hash = Pseudonymizer(HASH_KEY.encode())(user)
    holding = sorted({path for owner, path, _ in case.lake.truth if owner == user and user not in path})
    assert holding, "the sample lake puts the user in some object"
    backup = next(o for o in case.lake.objects if f"s3://{case.lake.bucket}/{o.key}" == holding[0])

    code, erased, _ = cli(capsys, "purge", user, "--yes", "--force", "--engine", "inline", "--config", str(config))
    assert code == 0 and erased["lines_erased"] > 0
    code, clean, _ = cli(capsys, "status", "--config", str(config))
    assert code == 0 and clean["returning"] == [] and clean["returning_command"] is None

    # The backup of one object is restored, and indexed as its S3 event would have it.
    s3 = aws.client("s3")
    s3.put_object(Bucket=case.lake.bucket, Key=backup.key, Body=backup.body)
    store = open_store(case.settings.index)
    try:
        outcome = index_object(
            s3, store, case.settings, case.lake.bucket, backup.key, pseudonymizer=Pseudonymizer(HASH_KEY.encode())
        )
    finally:
        store.close()
    assert outcome.returning_users == 1

    code, status, printed = cli(capsys, "status", "--config", str(config))
    assert code == 0
    assert status["index"]["objects_with_returning_users"] == 1
    assert [(r["s3path"], r["user_hash"], r["request_id"]) for r in status["returning"]] == [
        (holding[0], user_hash, erased["request_id"])
    ]
    assert status["returning"][0]["lines"]
    command = status["returning_command"]
    assert shlex.split(command) == [
        "lakepurge", "purge", "--user-hash", user_hash, "--yes", "--config", str(config)
    ]  # fmt: skip
    assert command in printed and user_hash[:16] in printed and erased["request_id"] in printed
    assert user not in printed

    # A hash that names no returning user is refused, named, and nothing is erased.
    stranger = Pseudonymizer(HASH_KEY.encode())("nobody-at-all")
    code, refused, printed = cli(capsys, "purge", "--user-hash", stranger, "--yes", "--config", str(config))
    assert code == 2 and refused["code"] == "unknown_user_hash" and stranger in refused["error"]
    code, refused, printed = cli(capsys, "purge", "--user-hash", user, "--yes", "--config", str(config))
    assert code == 2 and refused["code"] == "bad_user_hash" and user not in printed

    code, again, printed = cli(capsys, *shlex.split(command)[1:])
    assert code == 0, printed
    assert again["lines_erased"] > 0 and again["verified"] is True
    assert user not in printed

    code, after, printed = cli(capsys, "status", "--config", str(config))
    assert code == 0
    assert after["returning"] == [] and after["returning_command"] is None
    assert after["index"]["objects_with_returning_users"] == 0
    assert user not in printed


def test_given_a_returning_users_hash_when_the_operator_path_purges_it_then_one_index_connection_erases_and_unflags(
    lake_factory, pg_dsn, monkeypatch
):
    from lakepurge.indexing.returning import UnknownHashes
    from lakepurge.ops import manual_purge
    from tests.support.lakes import index_toml

    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    case = lake_factory(index_toml("postgres", pg_dsn), objects=8, users=12)
    pseudonymizer = Pseudonymizer(HASH_KEY.encode())
    user = case.lake.users[0]
    holding = sorted({path for owner, path, _ in case.lake.truth if owner == user and user not in path})
    s3 = aws.client("s3")
    store = open_store(case.settings.index)
    try:
        index_lake(store, case.settings, case.lake)
        store.record_erased([pseudonymizer(user)], "req-earlier")  # erased before; a restored backup brought them back
        for path in holding:
            key = path.removeprefix(f"s3://{case.lake.bucket}/")
            index_object(s3, store, case.settings, case.lake.bucket, key, force=True, pseudonymizer=pseudonymizer)
        assert store.returning_user_objects() == holding
    finally:
        store.close()
    opened = []
    open_existing = manual_purge.open_existing  # the purge opens the index as it is (it never creates one)
    monkeypatch.setattr(manual_purge, "open_existing", lambda config: opened.append(config) or open_existing(config))

    with pytest.raises(UnknownHashes):
        manual_purge.purge_users(case.settings, [], dry_run=False, force=True, returning=[pseudonymizer("nobody")])
    said: list[str] = []
    run = manual_purge.purge_users(
        case.settings,
        [],
        dry_run=False,
        force=True,
        engine="inline",
        say=said.append,
        returning=[pseudonymizer(user)],
    )

    assert run.result is not None and run.result.verified and run.result.lines_erased > 0
    assert "1 returning user(s) found by hash" in said and not any(user in line for line in said)
    assert len(opened) == 2, "one index connection per purge_users call"
    store = open_store(case.settings.index)
    try:
        assert store.lookup([user]) == {}
        assert store.returning_user_objects() == [], "the erased user's objects are still flagged as holding them"
    finally:
        store.close()
