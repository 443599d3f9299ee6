"""What tests read from an index that lakepurge itself never asks: every noncurrent version it remembers."""

from __future__ import annotations

from lakepurge.index.base import IndexStore


def dump_noncurrent(store: IndexStore) -> set[tuple[str, str, str]]:
    """Every (user, s3path, version id) the index keeps of noncurrent versions, read from the backend's own
    storage (lakepurge asks only by user: IndexStore.noncurrent_of)."""
    from lakepurge.index.dynamodb import DynamoIndexStore
    from lakepurge.index.dynamodb_items import NONCURRENT_PREFIX
    from lakepurge.index.in_memory import MemoryIndexStore
    from lakepurge.index.postgres import PostgresIndexStore

    if isinstance(store, PostgresIndexStore):
        with store._conn.cursor() as cur:
            cur.execute("SELECT userid, s3path, version_id FROM noncurrent_versions")
            return {(user, path, version) for user, path, version in cur.fetchall()}
    if isinstance(store, DynamoIndexStore):
        items = store._scan(
            FilterExpression="#k = :noncurrent",
            ProjectionExpression="#u, #o, #v",
            ExpressionAttributeNames={"#k": "kind", "#u": "userid", "#o": "object_s3path", "#v": "version_id"},
            ExpressionAttributeValues={":noncurrent": {"S": "noncurrent"}},
        )
        return {
            (item["userid"]["S"].removeprefix(NONCURRENT_PREFIX), item["object_s3path"]["S"], item["version_id"]["S"])
            for item in items
        }
    assert isinstance(store, MemoryIndexStore), f"no dump_noncurrent for {type(store).__name__}"
    with store._lock:
        return {
            (user, s3path, version_id)
            for (s3path, version_id), (_, users) in store._noncurrent.items()
            for user in users
        }
