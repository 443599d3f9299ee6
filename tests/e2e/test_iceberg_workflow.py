"""One request through the deployed workflow on the local stack erases a user from an Iceberg table (a SQL catalog
on SQLite) and from the sample lake's JSON Lines datasets together: the approval page says what happens to the
table's snapshots before anyone approves, the certificate lists the table's erasure, and nothing of the user is left
in either."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from lakepurge.core import aws
from lakepurge.indexing.backfill import run_reconcile
from tests.support import iceberg as I
from tests.support.invariant import assert_invariant, snapshot
from tests.support.workflow import WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e


def lake_files(s3: object, case: WorkflowCase) -> dict[str, bytes]:
    """The sample lake's objects (the table's are checked by what its readers see)."""
    return {k: v for k, v in snapshot(s3, case.lake.lake.bucket).items() if not k.startswith(I.ROOT)}


def test_an_approved_request_erases_the_user_from_an_iceberg_table_and_json_lines_together(
    workflow_case: Callable[..., WorkflowCase], tmp_path: Path
) -> None:
    catalog_config = I.catalog_config("sqlite", sqlite=str(tmp_path / "catalog.db"))
    table = f"""
[[datasets]]
name = "curated"
format = "iceberg"
table = "{I.TABLE}"
catalog = "{I.CATALOG}"
id_fields = ["user_id"]

{I.catalog_toml(catalog_config)}"""
    case = workflow_case(extra_toml=table)
    s3 = aws.client("s3")
    user = next(u for u, path, _ in sorted(case.lake.lake.truth) if path.endswith(".jsonl"))
    catalog = I.open_catalog(catalog_config)
    I.create_table(catalog).append(I.rows([user, "zoe@example.com", "yan@example.com"], "d1"))
    catalog.load_table(I.TABLE).append(I.rows(["xia@example.com", user], "d2", 10))
    run_reconcile(None, case.settings, ["curated"])  # the table's coverage, as a deployment's reconcile records it
    before_lake = lake_files(s3, case)
    before_table = I.current_rows(catalog)

    request_id = case.file([user], "req-iceberg")
    link = link_in(case.emails(request_id)[0])
    page = call_approval("GET", link)
    assert "iceberg table curated" in page["body"] and "Time travel" in page["body"], page["body"]
    assert call_approval("POST", link, "approve")["statusCode"] == 200
    execution = case.finish(request_id)
    assert execution["status"] == "SUCCEEDED", execution

    stored = s3.get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")
    certificate = orjson.loads(stored["Body"].read())
    assert certificate["verification"]["passed"] is True
    [erased] = certificate["tables"]
    assert erased["status"] == "erased" and erased["rows_erased"] == 2 and erased["verified"] is True
    assert I.current_rows(catalog) == [r for r in before_table if r["user_id"] != user]
    assert I.holding(user) == []
    assert_invariant(case.lake.lake, case.lake.settings, {user}, before_lake, lake_files(s3, case))
    [note] = case.notifications()
    assert "ERASED" in note["subject"]
