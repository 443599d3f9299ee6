"""Small jobs without a JVM: `index backfill`, `verify` and `vacuum` run in this process when their work is within
[jobs] in_process_max_objects and in_process_max_bytes, and on local Spark above either (as `purge` chooses between
inline and Spark). Run as a person runs them (a subprocess) with a JAVA_HOME that holds no Java: a command that
needs no JVM succeeds, one that needs Spark ends with lakepurge's one line and nothing from the shell or the JVM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from lakepurge.core import aws
from lakepurge.index import open_store
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY

pytestmark = pytest.mark.integration

LAKEPURGE = str(Path(sys.executable).parent / "lakepurge")
NO_JAVA = "/nonexistent/jdk-17"
LIMITS = "\n[purge]\nmax_dataset_fraction = 1.0\nmax_object_fraction = 1.0\n"


@pytest.fixture
def small_lake(lake_factory, moto_server, tmp_path):
    case = lake_factory(index_toml("dynamodb"), objects=12, users=6)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml + LIMITS)
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_ENDPOINT_URL": moto_server.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "LAKEPURGE_HASH_KEY": HASH_KEY,
        "JAVA_HOME": NO_JAVA,  # Spark could not start here: whatever succeeds ran without a JVM
    }

    def run(*args: str, config_text: str | None = None) -> tuple[int, dict, str]:
        if config_text is not None:
            config.write_text(config_text)
        result = subprocess.run(
            [LAKEPURGE, *args, "--config", str(config), "--json"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return result.returncode, orjson.loads(result.stdout) if result.stdout else {}, result.stderr

    return case, run, config


def _index_rows(case) -> set[tuple[str, str, int]]:
    store = open_store(case.settings.index)
    try:
        return {(user, path, line) for user, path, line in store.dump()}
    finally:
        store.close()


def test_given_a_small_lake_when_backfill_verify_and_vacuum_run_then_each_runs_in_this_process_without_java(
    small_lake,
):
    case, run, _ = small_lake

    code, backfill, err = run("index", "backfill")
    assert code == 0, err
    assert backfill["engine"] == "in-process" and backfill["objects"] == len(
        [o for o in case.lake.objects if not o.key.endswith(".meta.json")]
    )
    assert "indexed in this process" in err
    assert _index_rows(case) == case.lake.truth  # the in-process backfill indexed exactly the lake
    one = case.settings.datasets[0].name
    code, _, err = run("index", "backfill", "--dataset", one)
    assert code == 0 and f"backfilling 1 dataset(s): {one}" in err  # the datasets it backfills, not all of them

    erased, kept = case.lake.users[0], case.lake.users[1]
    code, purged, err = run("purge", erased, "--yes", "--engine", "inline")
    assert code == 0 and purged["verified"] is True, err

    code, clean, err = run("verify", erased)
    assert code == 0 and clean["verified"] is True and clean["engine"] == "in-process", err
    listed = aws.client("s3").list_objects_v2(Bucket="lake")["Contents"]
    assert clean["objects_checked"] == len([o for o in listed if not o["Key"].endswith(".meta.json")])
    code, found, _ = run("verify", kept)  # it really reads the lake: a user never erased is found
    assert code == 1 and found["remaining"] and found["engine"] == "in-process"

    code, vacuum, err = run("vacuum", "--yes")
    assert code == 0 and vacuum["engine"] == "in-process", err
    # every placeholder the purge wrote (a CSV record spanning lines leaves one per line): none left after
    assert vacuum["lines_removed"] >= _blanked(case, erased) > 0
    code, again, _ = run("vacuum")
    assert code == 0 and again["lines_removed"] == 0


def _blanked(case, user: str) -> int:
    """The user's lines the purge replaced by a placeholder (blank-mode datasets), which the vacuum removes."""
    blank = {d.name for d in case.settings.datasets if d.erase == "blank"}
    datasets = {
        path: case.settings.dataset_for("lake", path.removeprefix("s3://lake/")) for _, path, _ in case.lake.truth
    }
    return sum(1 for owner, path, _ in case.lake.truth if owner == user and datasets[path].name in blank)


@pytest.mark.parametrize(
    "limits",
    ["[jobs]\nin_process_max_objects = 5\n", "[jobs]\nin_process_max_bytes = 1000\n"],
    ids=["more-objects-than-the-threshold", "more-bytes-than-the-threshold"],
)
def test_given_work_above_a_threshold_when_verifying_then_spark_is_chosen_and_a_broken_java_home_is_one_line(
    small_lake, limits
):
    case, run, config = small_lake
    assert run("index", "reconcile")[0] == 0  # indexed in this process: no Java needed
    code, document, err = run("verify", case.lake.users[0], config_text=config.read_text() + "\n" + limits)

    assert code == 2 and document["code"] == "missing_dependency"
    assert err.strip().splitlines()[-1] == (
        f"lakepurge: JAVA_HOME={NO_JAVA} holds no bin/java, and Spark starts Java from there: point JAVA_HOME at a"
        " Java 17 installation, or unset it to use the java on PATH"
    )
    assert "No such file or directory" not in err and "JAVA_GATEWAY" not in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("lakepurge:")] == [err.strip().splitlines()[-1]]


def test_given_engine_spark_when_java_home_is_broken_then_nothing_is_read_before_the_one_line(small_lake):
    _, run, _ = small_lake
    code, document, err = run("index", "backfill", "--engine", "spark")
    assert code == 2 and document["code"] == "missing_dependency"
    assert err.strip().splitlines() == [err.strip().splitlines()[-1]], "one line, nothing before it"
    assert aws.client("dynamodb").list_tables()["TableNames"] == [], "nothing touched"
