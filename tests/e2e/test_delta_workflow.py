"""One request through the deployed workflow on the local stack erases a user from a Delta table and from the
sample lake's JSON Lines datasets together: the approval page says what happens to the table's history before
anyone approves, the certificate lists the table's erasure, and nothing of the user is left in either."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from lakepurge.core import aws
from lakepurge.indexing.backfill import run_reconcile
from tests.support import delta as D
from tests.support.invariant import assert_invariant, snapshot
from tests.support.workflow import WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

TABLE = f"""
[[datasets]]
name = "curated"
location = "s3://{D.BUCKET}/{D.ROOT}"
format = "delta"
id_fields = ["user_id"]
"""


def lake_files(s3: object, case: WorkflowCase) -> dict[str, bytes]:
    """The sample lake's objects (the table's are checked by what its readers see)."""
    return {k: v for k, v in snapshot(s3, case.lake.lake.bucket).items() if not k.startswith(D.ROOT)}


def test_an_approved_request_erases_the_user_from_a_delta_table_and_json_lines_together(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    case = workflow_case(extra_toml=TABLE)
    s3 = aws.client("s3")
    user = next(u for u, path, _ in sorted(case.lake.lake.truth) if path.endswith(".jsonl"))
    D.write(D.rows([user, "zoe@example.com", "yan@example.com"], "d1"), mode="overwrite")
    D.write(D.rows(["xia@example.com", user], "d2", 10))
    run_reconcile(None, case.settings, ["curated"])  # the table's coverage, as a deployment's reconcile records it
    before_lake = lake_files(s3, case)
    before_table = D.current_rows()

    request_id = case.file([user], "req-delta")
    link = link_in(case.emails(request_id)[0])
    page = call_approval("GET", link)
    assert "delta table curated" in page["body"] and "Time travel" in page["body"], page["body"]
    assert call_approval("POST", link, "approve")["statusCode"] == 200
    execution = case.finish(request_id)
    assert execution["status"] == "SUCCEEDED", execution

    stored = s3.get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")
    certificate = orjson.loads(stored["Body"].read())
    assert certificate["verification"]["passed"] is True
    [table] = certificate["tables"]
    assert table["status"] == "erased" and table["rows_erased"] == 2 and table["verified"] is True
    assert D.current_rows() == [r for r in before_table if r["user_id"] != user]
    assert D.holding(user) == []
    assert_invariant(case.lake.lake, case.lake.settings, {user}, before_lake, lake_files(s3, case))
    [note] = case.notifications()
    assert "ERASED" in note["subject"]
