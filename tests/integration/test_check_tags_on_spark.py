"""A purge on Spark whose starter holds the raw ids writes the request's check tags (lakepurge.core.check_tags) and its
executors check with them: a line of a requested user the index missed is still found before the write and erased,
and neither the tags document, nor what Spark ships to the executors, nor the logs hold an id."""

from __future__ import annotations

import base64

import orjson
import pytest

from lakepurge.core.check_tags import tag_key
from lakepurge.index import open_store
from lakepurge.index.base import NewVersion
from lakepurge.indexing.backfill import run_reconcile
from lakepurge.indexing.indexer import index_object
from lakepurge.ops.manual_purge import purge_users
from lakepurge.reports import layout
from tests.support.lakes import events_lake
from tests.support.shipping import record_shipped

pytestmark = pytest.mark.integration

KEY = "check-tags-hash-key-" + "k" * 30
ALICE, BOB = "alice.secret@example.com", "bob.secret@example.com"


def test_given_a_spark_purge_and_an_index_that_missed_a_line_when_checked_with_tags_then_the_line_still_goes(
    aws: object, pg_dsn: str, spark: object, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LAKEPURGE_HASH_KEY", KEY)
    s3, bucket, settings = events_lake(pg_dsn, "tags")
    # An object of 400 lines, as many ids as the check reads at once with tags: Alice's at 10 and 300, Bob's at 20.
    owners = [f"other-{n}@example.org" for n in range(400)]
    owners[10] = owners[300] = ALICE
    owners[20] = BOB
    body = b"".join(orjson.dumps({"user_id": user, "n": n}) + b"\n" for n, user in enumerate(owners))
    s3.put_object(Bucket=bucket, Key="events/big.jsonl", Body=body)
    s3.put_object(Bucket=bucket, Key="events/small.jsonl", Body=b'{"user_id":"carol","n":0}\n')
    store = open_store(settings.index)
    for key in ("events/big.jsonl", "events/small.jsonl"):
        index_object(s3, store, settings, bucket, key)
    run_reconcile(None, settings)
    # The index missed Alice's line 300 in this very version: its row dropped, the version kept.
    held = store.get_object(f"s3://{bucket}/events/big.jsonl")
    assert held is not None
    same = NewVersion(held.etag, held.version_id, held.last_modified)
    assert store.apply_erasure(held.s3path, held.etag, same, [300])
    store.close()
    caplog.set_level("INFO")
    shipped = record_shipped(monkeypatch)

    run = purge_users(settings, [ALICE, BOB], dry_run=False, force=True, engine="spark", say=lambda _line: None)

    assert run.result is not None and run.result.verified
    written = s3.get_object(Bucket=bucket, Key="events/big.jsonl")["Body"].read().splitlines()
    assert [n for n, line in enumerate(written) if line == b"{}"] == [10, 20, 300]  # the missed line went too
    assert [line for n, line in enumerate(written) if n not in (10, 20, 300)] == [
        orjson.dumps({"user_id": user, "n": n}) for n, user in enumerate(owners) if n not in (10, 20, 300)
    ]
    tags = layout.check_tags(layout.results_prefix(settings, run.request_id))
    document = s3.get_object(Bucket=tags.bucket, Key=tags.key)["Body"].read()
    assert len(base64.b64decode(orjson.loads(document)["tags"])) == 8  # two users' 4-byte tags
    assert "check tags read" in caplog.messages  # the driver handed them to the executors, in the task closures
    assert any(tag_key(KEY.encode(), run.request_id) in pickled for pickled in shipped["closures"])
    for user in (ALICE, BOB):
        assert user.encode() not in document
        assert user not in caplog.text
        assert not any(user.encode() in pickled for pickled in [*shipped["closures"], *shipped["items"]])
