"""`lakepurge requests`: every request, as the evidence in the reports location tells it, with no raw id."""

from __future__ import annotations

import json

import pytest

from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge.reports import layout
from tests.support.cli import cli
from tests.support.lakes import index_toml
from tests.support.purging import HASH_KEY, index_lake_in_its_index

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("evidence", [None, "s3://lake-evidence/locked/"])
def test_given_operator_purges_and_a_dry_run_when_listing_requests_then_each_shows_its_state_and_certificate(
    lake_factory, pg_dsn, tmp_path, monkeypatch, capsys, evidence
):
    """With [reports] evidence_location (the deployed stack's Object Lock bucket) certificates are written there."""
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", HASH_KEY)
    case = lake_factory(index_toml("postgres", pg_dsn), objects=8, users=12)
    index_lake_in_its_index(case.settings, case.lake)
    toml = case.toml
    if evidence:
        aws.client("s3").create_bucket(Bucket="lake-evidence")
        toml = toml.replace("[reports]\n", f'[reports]\nevidence_location = "{evidence}"\n', 1)
    config = tmp_path / "lakepurge.toml"
    config.write_text(toml)
    erased, planned = case.lake.users[0], case.lake.users[1]
    args = ("--force", "--engine", "inline", "--config", str(config))

    _, done = cli(capsys, "purge", erased, "--yes", *args)
    _, dry = cli(capsys, "purge", planned, *args)
    # A purge's starter seals the ids for its Spark job's executors first; a job that then never started erased
    # nothing.
    sealed = layout.executor_ids(layout.results_prefix(case.settings, dry["request_id"]))
    aws.client("s3").put_object(Bucket=sealed.bucket, Key=sealed.key, Body=b"\x01sealed")
    _, nothing = cli(capsys, "purge", "nobody-at-all", "--yes", *args)
    code = main(["requests", "--config", str(config)])
    table = capsys.readouterr().err.splitlines()
    assert code == 0
    assert table[1].split()[:3] == ["REQUEST", "KIND", "STATE"], "the table has its header row"
    assert dry["request_id"] not in "\n".join(table), "a dry run is a plan, not a request"
    assert table[-1] == "1 dry run(s) never executed are not listed (plans, nothing erased): --all lists them"
    code, listed = cli(capsys, "requests", "--config", str(config))

    assert code == 0
    by_id = {r["request_id"]: r for r in listed["requests"]}
    assert listed["total"] == 2 == len(by_id) and listed["plans_not_listed"] == 1
    _, everything = cli(capsys, "requests", "--all", "--config", str(config))
    plans = {p["request_id"]: p for p in everything["plans"]}
    assert list(plans) == [dry["request_id"]]
    assert dry["request_id"] not in {r["request_id"] for r in everything["requests"]}
    assert by_id[done["request_id"]]["state"] == "ERASED"
    assert by_id[done["request_id"]]["kind"] == "operator"
    assert by_id[done["request_id"]]["verified"] is True
    assert by_id[done["request_id"]]["lines_erased"] == done["lines_erased"] > 0
    certificate = by_id[done["request_id"]]["certificate"]
    assert certificate == f"{evidence or 's3://lake-reports/'}certificates/{done['request_id']}.json"
    if evidence:
        listed_reports = aws.client("s3").list_objects_v2(Bucket="lake-reports", Prefix="certificates/")
        assert listed_reports.get("KeyCount", 0) == 0, "no certificate in the rewritable reports bucket"
    assert plans[dry["request_id"]]["state"] == "PLANNED"
    assert plans[dry["request_id"]]["certificate"] is None
    assert by_id[nothing["request_id"]]["state"] == "NOTHING_FOUND"
    assert by_id[nothing["request_id"]]["open"] is False
    assert erased not in json.dumps(listed) and planned not in json.dumps(listed)
