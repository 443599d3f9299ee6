"""Errors that say what to do: `lakepurge` run as a person runs it (a subprocess with a controlled environment).

Each fault of the environment ends with exit 2 and one line on stderr naming the cause and the fix, no traceback;
with --json one JSON document {"error", "code"} on stdout; --debug adds the traceback. No message repeats a user id.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import orjson
import pytest

from lakepurge.core.config import load_settings
from lakepurge.local.postgres import free_port
from tests.support.configs import reviews_toml, workflow_toml

pytestmark = pytest.mark.integration

LAKEPURGE = str(Path(sys.executable).parent / "lakepurge")
SECRET_USER = "user-4711-secret"
CLICKS = """
[[datasets]]
name = "clicks"
location = "s3://lake/clicks/"
id_from_key = '(?P<id>[^/]+)\\.csv$'
erase = "delete-object"
"""


def config_toml(port: int) -> str:
    """Two datasets and a PostgreSQL index on a port where nothing listens."""
    return reviews_toml(f"postgresql://postgres@127.0.0.1:{port}/lakepurge?connect_timeout=2") + CLICKS


CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REGION = {"AWS_REGION": "us-east-1"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory holding lakepurge.toml whose PostgreSQL port is closed; HOME too (no ~/.aws of the developer)."""
    (tmp_path / "lakepurge.toml").write_text(config_toml(free_port()))
    return tmp_path


def run(
    workdir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(workdir),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        **(env or {}),
    }
    return subprocess.run(
        [LAKEPURGE, *args], cwd=workdir, env=environment, capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *words: str, code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakepurge: ")
    for word in words:
        assert word in lines[0]
    assert SECRET_USER not in result.stderr + result.stdout
    return lines[0]


def assert_json_error(result: subprocess.CompletedProcess[str], code: str) -> dict[str, str]:
    document = orjson.loads(result.stdout)
    assert document["code"] == code
    assert document["error"] and "\n" not in document["error"]
    assert SECRET_USER not in document["error"]
    return document


OBJECT = ["index", "object", "s3://lake/reviews/a.jsonl"]
SCHEMELESS = {**CREDENTIALS, **REGION, "AWS_ENDPOINT_URL": "localhost:9000"}
CLOSED_PORT = {**REGION, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
# fault: (arguments, environment, words the line must hold, code). Each is a fault a person can fix.
FAULTS = {
    "no region": (OBJECT, CREDENTIALS, ["region", "AWS_REGION"], "no_region"),
    "scheme-less endpoint": (OBJECT, SCHEMELESS, ["AWS_ENDPOINT_URL", "http://localhost:9000"], "bad_endpoint"),
    "no credentials": (["purge", SECRET_USER], CLOSED_PORT, ["credentials", "AWS_ACCESS_KEY_ID"], "no_credentials"),
    "database down": (
        ["lookup", SECRET_USER],
        REGION,
        ["PostgreSQL", "Connection refused", "dsn", "lakepurge.toml"],
        "database_unreachable",
    ),
    "missing config": (["--config", "absent.toml", "status"], REGION, ["absent.toml", "init"], "missing_file"),
    "missing users file": (
        ["lookup", "--users-file", "absent-users.txt"],
        REGION,
        ["absent-users.txt", "no such file"],
        "missing_file",
    ),
    "bad uri": (["index", "object", "not-a-uri"], REGION, ["s3://bucket/key"], "bad_uri"),
    "no user ids": (["verify"], REGION, ["user id", "--users-file"], "no_users"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_given_an_environment_fault_when_running_then_one_line_names_cause_and_fix(workdir, fault):
    args, env, words, code = FAULTS[fault]
    result = run(workdir, *args, "--json", env=env)  # the person's line on stderr, the document on stdout
    assert_one_line(result, *words)
    assert_json_error(result, code)


def test_given_a_fault_without_json_when_running_then_stdout_stays_empty(workdir):
    args, env, words, _ = FAULTS["database down"]
    result = run(workdir, *args, env=env)
    assert_one_line(result, *words)
    assert result.stdout == ""


def test_given_a_scheme_less_uri_when_indexing_then_the_argument_is_not_repeated(workdir):
    line = assert_one_line(run(workdir, "index", "object", f"{SECRET_USER}.csv", env=REGION), "S3URI")
    assert SECRET_USER not in line


def test_given_a_closed_endpoint_port_when_running_then_it_fails_in_seconds(workdir):
    env = {**CREDENTIALS, **REGION, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    started = time.monotonic()
    result = run(workdir, "index", "object", "s3://lake/reviews/a.jsonl", "--json", env=env)
    assert time.monotonic() - started < 10  # no retry storm against a closed port
    assert_one_line(result, "cannot connect", "AWS_ENDPOINT_URL")
    assert_json_error(result, "endpoint_unreachable")


def test_given_a_bucket_that_does_not_exist_when_running_then_the_bucket_is_named(workdir, aws):
    env = {**CREDENTIALS, **REGION, "AWS_ENDPOINT_URL": aws.endpoint}
    result = run(workdir, "index", "object", "s3://lake/reviews/a.jsonl", "--json", env=env)
    assert_one_line(result, "bucket lake does not exist", "datasets.location")
    assert_json_error(result, "no_such_bucket")


def test_given_pyspark_missing_when_backfilling_on_spark_then_the_extra_to_install_is_named(workdir):
    fake = workdir / "no-pyspark" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
    env = {**REGION, "PYTHONPATH": str(fake.parent)}
    result = run(workdir, "index", "backfill", "--engine", "spark", "--json", env=env)
    assert_one_line(result, "pyspark", "pip install 'lakepurge[spark]'")
    assert_json_error(result, "missing_dependency")


@pytest.mark.parametrize(
    "command", [["index", "backfill"], ["index", "reconcile"], ["vacuum"]], ids=["backfill", "reconcile", "vacuum"]
)
def test_given_an_unknown_dataset_when_running_then_the_configured_names_are_listed(workdir, command):
    result = run(workdir, *command, "--dataset", "reviewz", "--json", env=REGION)
    line = assert_one_line(result, "reviewz", "reviews, clicks", "did you mean 'reviews'")
    assert "dataset" in line
    assert_json_error(result, "unknown_dataset")


def test_given_a_config_mistake_when_running_with_json_then_stdout_holds_the_error(workdir):
    config = workdir / "lakepurge.toml"
    config.write_text(config.read_text().replace("id_fields = ", "id_field = ", 1))
    result = run(workdir, "status", "--json", env=REGION)
    line = assert_one_line(result, "datasets[0].id_field", "did you mean `id_fields`?")
    assert "Input should" not in line and "valid tuple" not in line
    assert_json_error(result, "config")


def test_given_a_wrong_argument_when_running_with_json_then_stdout_holds_the_error(workdir):
    result = run(workdir, "lookup", "--no-such-option", "--json", env=REGION)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert_json_error(result, "usage")


def test_given_more_ids_than_the_intake_takes_when_requesting_then_the_limit_is_named_and_no_id_repeated(workdir, aws):
    from lakepurge.core import aws as clients

    clients.client("s3").create_bucket(Bucket="lake")
    config = workdir / "lakepurge.toml"
    machine = "arn:aws:states:us-east-1:123456789012:stateMachine:lakepurge"
    config.write_text(config.read_text() + "\n" + workflow_toml(machine, "alias/lakepurge", max_request_users=1))
    env = {**CREDENTIALS, **REGION, "AWS_ENDPOINT_URL": aws.endpoint, "LAKEPURGE_HASH_KEY": "cli-test-key-0123456789"}
    result = run(workdir, "request", SECRET_USER, "other-user-0815", "--json", env=env)
    assert_one_line(result, "2 user ids", "workflow.max_request_users (1)")
    assert_json_error(result, "request_refused")


def test_given_debug_when_a_fault_happens_then_the_traceback_is_kept(workdir):
    result = run(workdir, "lookup", SECRET_USER, "--debug", env=REGION)
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert "OperationalError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("lakepurge: cannot use the PostgreSQL database")


def test_version_comes_from_the_installed_package(workdir):
    result = run(workdir, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"lakepurge {version('lakepurge')}"


def test_given_no_config_when_init_then_a_loadable_file_is_written_and_never_overwritten(tmp_path):
    env = {**REGION, "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}
    result = run(tmp_path, "init", env=env)
    assert result.returncode == 0, result.stderr
    written = tmp_path / "lakepurge.toml"
    settings = load_settings(written)
    assert settings.index.backend == "postgres"  # a local endpoint: the local index
    assert "http://127.0.0.1:5000" in written.read_text()

    written.write_text(written.read_text() + "# my edits\n")
    refused = run(tmp_path, "init", "--json", env=env)
    assert_one_line(refused, "lakepurge.toml", "--force")
    assert_json_error(refused, "file_exists")
    assert written.read_text().endswith("# my edits\n")

    assert run(tmp_path, "init", "--force", env=env).returncode == 0
    assert not written.read_text().endswith("# my edits\n")

    on_aws = run(tmp_path, "init", "--path", "aws.toml", env=REGION)
    assert on_aws.returncode == 0, on_aws.stderr
    assert load_settings(tmp_path / "aws.toml").index.backend == "dynamodb"


def test_given_a_local_s3_that_answers_dynamodb_when_init_with_datasets_then_the_file_indexes_there_and_names_them(
    tmp_path, aws
):
    env = {**CREDENTIALS, **REGION, "AWS_ENDPOINT_URL": aws.endpoint}
    result = run(
        tmp_path, "init", "--dataset", "reviews=s3://my-lake/reviews/", "--dataset", "orders=s3://my-lake/orders",
        "--format", "csv", "--id-field", "customer_id", "--reports", "s3://my-reports/", env=env,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    settings = load_settings(tmp_path / "lakepurge.toml")
    assert settings.index.backend == "dynamodb"  # moto answers DynamoDB: no PostgreSQL to install
    assert [(d.name, d.location, d.format, d.id_fields) for d in settings.datasets] == [
        ("reviews", "s3://my-lake/reviews/", "csv", ("customer_id",)),
        ("orders", "s3://my-lake/orders/", "csv", ("customer_id",)),
    ]
    assert settings.reports.location == "s3://my-reports/"
    assert "1. check [index]" in result.stderr

    wrong = run(tmp_path, "init", "--force", "--dataset", "reviews", env=env)
    assert_one_line(wrong, "--dataset 'reviews'", "NAME=s3://")
