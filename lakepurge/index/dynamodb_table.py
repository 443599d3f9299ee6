"""The DynamoDB index's table as DynamoDB sees it: its schema (created on first use, checked), paged Query and Scan,
BatchWriteItem and BatchGetItem in calls DynamoDB accepts, on several threads, retrying what it leaves unprocessed,
and the reads of items by kind that the store builds on (a user's rows, an object's rows through the GSI and an
object version's rows once the GSI holds them all, meta items, noncurrent pointers, unindexable markers).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.core.logs import get_logger
from lakepurge.index.base import IndexMissing
from lakepurge.index.dynamodb_items import (
    GSI_NAME,
    NONCURRENT_PREFIX,
    NONCURRENT_SORT_PREFIX,
    PROBLEM_PARTITION,
    RESERVED_SORT_KEYS,
    SEPARATOR,
    Item,
    ObjectMeta,
    RowItem,
    RowKey,
    is_row,
    item_key,
    meta_key,
    parse_meta,
    parse_row,
    problem_prefix,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = get_logger()

BATCH_WRITE_ITEMS = 25
BATCH_GET_KEYS = 100
THREADS = 16
# Unprocessed batch items are retried with exponential _backoff and jitter, this many times at most.
BATCH_ATTEMPTS = 12
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 5.0
# How many times a read waits for the GSI to hold an object version's rows (and lookup re-reads users whose rows
# changed under it).
READ_ROUNDS = 5

T = TypeVar("T")
R = TypeVar("R")


class DynamoBatchError(RuntimeError):
    """DynamoDB kept returning unprocessed items or keys after every retry."""


class IndexSchemaError(RuntimeError):
    """The table exists but does not have the layout this adapter needs."""


def _backoff(attempt: int) -> None:
    delay = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt)
    time.sleep(delay * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not cryptography


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """fn over items on up to THREADS threads (inline for a single item); results in order."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(THREADS, len(items)), thread_name_prefix="lakepurge-dynamodb") as pool:
        return list(pool.map(fn, items))


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def batch_get(client: DynamoDBClient, table: str, keys: Sequence[Item], **options: Any) -> list[Item]:
    """Consistent BatchGetItem in calls of 100 keys on parallel threads, retrying unprocessed keys with _backoff."""

    def fetch(batch: Sequence[Item]) -> list[Item]:
        found: list[Item] = []
        request: Any = {"Keys": list(batch), "ConsistentRead": True, **options}
        for attempt in range(BATCH_ATTEMPTS):
            response = client.batch_get_item(RequestItems={table: request})
            found.extend(response.get("Responses", {}).get(table, []))
            request = response.get("UnprocessedKeys", {}).get(table)
            if not request or not request.get("Keys"):
                return found
            _backoff(attempt)
        raise DynamoBatchError(f"keys still unprocessed after {BATCH_ATTEMPTS} BatchGetItem calls")

    return [item for batch in parallel(fetch, _chunks(keys, BATCH_GET_KEYS)) for item in batch]


class DynamoTable:
    """The index table: its client and name, its schema, and reads and writes of its items."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self._table = table_name
        self._client: DynamoDBClient = client if client is not None else aws.client("dynamodb")

    # -- schema ---------------------------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        try:
            self._client.describe_table(TableName=self._table)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            self._create_table()
        self._client.get_waiter("table_exists").wait(
            TableName=self._table, WaiterConfig={"Delay": 2, "MaxAttempts": 150}
        )
        self._check_schema()

    def check_schema(self) -> None:
        try:
            self._client.describe_table(TableName=self._table)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            raise IndexMissing(f"the DynamoDB index table {self._table} does not exist") from None
        self._check_schema()

    def _create_table(self) -> None:
        try:
            self._client.create_table(
                TableName=self._table,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "userid", "AttributeType": "S"},
                    {"AttributeName": "location", "AttributeType": "S"},
                    {"AttributeName": "s3path", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "userid", "KeyType": "HASH"},
                    {"AttributeName": "location", "KeyType": "RANGE"},
                ],
                GlobalSecondaryIndexes=[
                    {
                        "IndexName": GSI_NAME,
                        "KeySchema": [{"AttributeName": "s3path", "KeyType": "HASH"}],
                        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["etag", "written_at"]},
                    }
                ],
            )
            log.info("index table created", extra={"table": self._table})
        except ClientError as exc:
            # Several processes starting at once: one creates, the others wait for it.
            if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise

    def _check_schema(self) -> None:
        for _ in range(150):
            table = self._client.describe_table(TableName=self._table)["Table"]
            keys = {(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])}
            if keys != {("userid", "HASH"), ("location", "RANGE")}:
                raise IndexSchemaError(f"table {self._table}: key schema must be userid (HASH), location (RANGE)")
            indexes = {gsi["IndexName"]: gsi for gsi in table.get("GlobalSecondaryIndexes", [])}
            gsi = indexes.get(GSI_NAME)
            if gsi is None:
                raise IndexSchemaError(f"table {self._table}: global secondary index {GSI_NAME} is missing")
            if gsi.get("IndexStatus", "ACTIVE") == "ACTIVE":
                return
            time.sleep(2)
        raise IndexSchemaError(f"table {self._table}: index {GSI_NAME} did not become ACTIVE")

    # -- items by kind ---------------------------------------------------------------------------------------------

    def _user_rows(self, user: str) -> list[RowItem]:
        items = self._query(
            KeyConditionExpression="#u = :u",
            FilterExpression="attribute_not_exists(#k)",  # rows only (meta and other items have a kind)
            ExpressionAttributeNames={"#u": "userid", "#k": "kind"},
            ExpressionAttributeValues={":u": {"S": user}},
            ConsistentRead=True,
        )
        return [parse_row(item) for item in items if is_row(item)]

    def _object_keys(self, s3path: str) -> list[RowKey]:
        """Every row item of an object, any ETag (through the GSI: eventually consistent)."""
        keys: list[RowKey] = []
        for item in self._by_object(s3path):
            location = item["location"]["S"]
            if location in RESERVED_SORT_KEYS:
                continue
            etag = item["etag"]["S"] if "etag" in item else location.rsplit(SEPARATOR, 2)[1]
            written_at = int(item["written_at"]["N"]) if "written_at" in item else 0
            keys.append(RowKey(item["userid"]["S"], location, etag, written_at))
        return keys

    def _by_object(self, partition: str) -> Iterator[Item]:
        """Every item of one by_object GSI partition (an object's rows, or a noncurrent version's pointers)."""
        return self._query(
            IndexName=GSI_NAME,
            KeyConditionExpression="#p = :p",
            ExpressionAttributeNames={"#p": "s3path"},
            ExpressionAttributeValues={":p": {"S": partition}},
        )

    def _noncurrent_pointers(self, user: str) -> list[Item]:
        """A user's noncurrent pointer items (their own partition: reading a user's rows never reads them)."""
        return list(
            self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                FilterExpression="#k = :noncurrent",
                ProjectionExpression="#o, #v",
                ExpressionAttributeNames={
                    "#u": "userid",
                    "#l": "location",
                    "#k": "kind",
                    "#o": "object_s3path",
                    "#v": "version_id",
                },
                ExpressionAttributeValues={
                    ":u": {"S": NONCURRENT_PREFIX + user},
                    ":prefix": {"S": NONCURRENT_SORT_PREFIX},
                    ":noncurrent": {"S": "noncurrent"},
                },
                ConsistentRead=True,
            )
        )

    def _get_meta(self, s3path: str) -> ObjectMeta | None:
        item = self._client.get_item(TableName=self._table, Key=meta_key(s3path), ConsistentRead=True).get("Item")
        return parse_meta(item) if item else None

    def _get_metas(self, paths: Sequence[str]) -> dict[str, ObjectMeta]:
        unique = list(dict.fromkeys(paths))
        items = self._batch_get(
            [meta_key(path) for path in unique],
            ProjectionExpression="#p, #e, #m, #r, #v, #d",
            ExpressionAttributeNames={
                "#p": "s3path",
                "#e": "etag",
                "#m": "last_modified",
                "#r": "row_items",
                "#v": "version_id",
                "#d": "dataset",
            },
        )
        return {meta.s3path: meta for meta in map(parse_meta, items)}

    def _metas(self) -> list[ObjectMeta]:
        items = self._scan(
            FilterExpression="#k = :object",
            ProjectionExpression="#p, #e, #m",
            ExpressionAttributeNames={"#k": "kind", "#p": "s3path", "#e": "etag", "#m": "last_modified"},
            ExpressionAttributeValues={":object": {"S": "object"}},
        )
        return [parse_meta(item) for item in items]

    def _object_markers(self, s3path: str, datasets: set[str]) -> list[Item]:
        found: list[Item] = []
        for dataset in sorted(d for d in datasets if d):
            found += self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                ExpressionAttributeNames={"#u": "userid", "#l": "location"},
                ExpressionAttributeValues={
                    ":u": {"S": PROBLEM_PARTITION},
                    ":prefix": {"S": problem_prefix(dataset, s3path)},
                },
                ConsistentRead=True,
            )
        return [item for item in found if item.get("object_s3path", {}).get("S") == s3path]

    def _current_rows(self, meta: ObjectMeta) -> dict[str, list[int]]:
        """The rows of the version a meta item names (user id -> sorted lines)."""
        keys = self._version_keys(meta)
        items = self._batch_get([item_key(key.userid, key.location) for key in keys])
        lines: dict[str, list[int]] = defaultdict(list)
        for row in map(parse_row, items):
            if row.etag == meta.etag:
                lines[row.userid].extend(row.lines)
        return {user: sorted(values) for user, values in lines.items()}

    def _version_keys(self, meta: ObjectMeta) -> list[RowKey]:
        """The row keys of the version a meta item names, waiting for the GSI to hold all of them."""
        keys: list[RowKey] = []
        for attempt in range(READ_ROUNDS):
            keys = [key for key in self._object_keys(meta.s3path) if key.etag == meta.etag]
            if len(keys) >= meta.row_items:
                return keys
            _backoff(attempt)  # the GSI is eventually consistent: the newest rows may not be in it yet
        log.warning("index rows of an object missing from the GSI", extra={"missing": meta.row_items - len(keys)})
        return keys

    def _current_markers(self, prefix: str) -> list[tuple[Item, Item]]:
        """The unindexable markers under a sort key prefix that count (their ETag is the object's current one), each
        with its object's meta item."""
        markers = list(
            self._query(
                KeyConditionExpression="#u = :u AND begins_with(#l, :prefix)",
                ExpressionAttributeNames={"#u": "userid", "#l": "location"},
                ExpressionAttributeValues={":u": {"S": PROBLEM_PARTITION}, ":prefix": {"S": prefix}},
                ConsistentRead=True,
            )
        )
        metas = {
            item["s3path"]["S"]: item
            for item in self._batch_get(
                [meta_key(path) for path in dict.fromkeys(m["object_s3path"]["S"] for m in markers)],
                ProjectionExpression="#p, #e, #v, #m, #x",
                ExpressionAttributeNames={
                    "#p": "s3path",
                    "#e": "etag",
                    "#v": "version_id",
                    "#m": "last_modified",
                    "#x": "unindexable_lines",
                },
            )
        }
        counted = []
        for marker in markers:
            meta = metas.get(marker["object_s3path"]["S"])
            if meta is not None and meta["etag"]["S"] == marker["etag"]["S"]:
                counted.append((marker, meta))
        return counted

    def _scan(self, **kwargs: Any) -> Iterator[Item]:
        return self._pages(self._client.scan, ConsistentRead=True, **kwargs)

    def _query(self, **kwargs: Any) -> Iterator[Item]:
        return self._pages(self._client.query, **kwargs)

    def _pages(self, operation: Callable[..., Any], **kwargs: Any) -> Iterator[Item]:
        """Every item of a Query or Scan, following LastEvaluatedKey page by page."""
        start: Item | None = None
        while True:
            extra: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
            page = operation(TableName=self._table, **kwargs, **extra)
            yield from page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def _batch_write(self, requests: Sequence[Item]) -> None:
        """BatchWriteItem in calls of 25, on several threads, retrying unprocessed items with _backoff."""

        def send(batch: Sequence[Item]) -> None:
            pending: list[Any] = list(batch)
            for attempt in range(BATCH_ATTEMPTS):
                response = self._client.batch_write_item(RequestItems={self._table: pending})
                pending = list(response.get("UnprocessedItems", {}).get(self._table, []))
                if not pending:
                    return
                _backoff(attempt)
            raise DynamoBatchError(
                f"{len(pending)} items still unprocessed after {BATCH_ATTEMPTS} BatchWriteItem calls"
            )

        parallel(send, _chunks(requests, BATCH_WRITE_ITEMS))

    def _batch_get(self, keys: Sequence[Item], **options: Any) -> list[Item]:
        """Consistent BatchGetItem in calls of 100 keys, retrying unprocessed keys with _backoff."""
        return batch_get(self._client, self._table, keys, **options)
