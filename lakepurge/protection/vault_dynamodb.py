"""The vault in DynamoDB: a table of its own (``[vault] table``), partition key ``pk`` only, two kinds of item:

- ``key#<keyed hash>``: a person's ``wrapped_key`` (binary), ``kms_key_id``, ``pseudonym``, ``created_at``;
- ``pseudonym#<pseudonym>``: the ``person`` (keyed hash) a reader resolves the pseudonym to.

Both items of a person are written in one transaction, conditional on neither existing (the first writer wins), and
deleted in one transaction. Reads are strongly consistent. The table's own copies are its point-in-time recovery
window (``RecoveryPeriodInDays``, read from the table), its backups (ListBackups: on-demand ones never expire, AWS
Backup's recovery points expire with their plan, ``[vault] backup_retention_days``) and its global table replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakepurge.core import aws
from lakepurge.index.dynamodb_table import batch_get, parallel
from lakepurge.protection.vault import Backup, KeyEntry, VaultCopies, VaultStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY_PREFIX = "key#"
PSEUDONYM_PREFIX = "pseudonym#"
# Without RecoveryPeriodInDays (tables whose window was set before it existed) the window is DynamoDB's default.
DEFAULT_RECOVERY_DAYS = 35


class VaultSchemaError(RuntimeError):
    """The vault table exists with another key schema than the vault's."""


class DynamoVault(VaultStore):
    def __init__(self, table: str, backup_retention_days: int | None, client: DynamoDBClient | None = None) -> None:
        self.name = table
        self._client: DynamoDBClient = client if client is not None else aws.client("dynamodb")
        self._retention = backup_retention_days

    def ensure_schema(self) -> None:
        try:
            described = self._client.describe_table(TableName=self.name)["Table"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            self._client.create_table(
                TableName=self.name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            )
            self._client.get_waiter("table_exists").wait(TableName=self.name, WaiterConfig={"Delay": 1})
            return
        if described.get("KeySchema") != [{"AttributeName": "pk", "KeyType": "HASH"}]:
            raise VaultSchemaError(f"vault table {self.name}: its key must be 'pk' (HASH) alone; is it another table?")

    def _get(self, keys: list[str]) -> list[dict[str, Any]]:
        return batch_get(self._client, self.name, [{"pk": {"S": key}} for key in dict.fromkeys(keys)])

    @staticmethod
    def _entry(item: dict[str, Any]) -> KeyEntry:
        return KeyEntry(
            person=item["pk"]["S"].removeprefix(KEY_PREFIX),
            wrapped_key=bytes(item["wrapped_key"]["B"]),
            kms_key_id=item["kms_key_id"]["S"],
            pseudonym=item["pseudonym"]["S"],
            created_at=item["created_at"]["S"],
        )

    def entries(self, persons: Sequence[str]) -> dict[str, KeyEntry]:
        items = self._get([KEY_PREFIX + person for person in persons])
        return {entry.person: entry for entry in map(self._entry, items)}

    def add(self, entries: Sequence[KeyEntry]) -> dict[str, KeyEntry]:
        def put(entry: KeyEntry) -> KeyEntry | None:
            new = "attribute_not_exists(pk)"
            try:
                self._client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self.name,
                                "Item": {
                                    "pk": {"S": KEY_PREFIX + entry.person},
                                    "wrapped_key": {"B": entry.wrapped_key},
                                    "kms_key_id": {"S": entry.kms_key_id},
                                    "pseudonym": {"S": entry.pseudonym},
                                    "created_at": {"S": entry.created_at},
                                },
                                "ConditionExpression": new,
                            }
                        },
                        {
                            "Put": {
                                "TableName": self.name,
                                "Item": {
                                    "pk": {"S": PSEUDONYM_PREFIX + entry.pseudonym},
                                    "person": {"S": entry.person},
                                    "created_at": {"S": entry.created_at},
                                },
                                "ConditionExpression": new,
                            }
                        },
                    ]
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                return None  # the person has an entry already: another writer's
            return entry

        written = [entry for entry in parallel(put, list(entries)) if entry is not None]
        stored = {entry.person: entry for entry in written}
        return stored | self.entries([e.person for e in entries if e.person not in stored])

    def persons_of(self, pseudonyms: Sequence[str]) -> dict[str, str]:
        items = self._get([PSEUDONYM_PREFIX + pseudonym for pseudonym in pseudonyms])
        return {item["pk"]["S"].removeprefix(PSEUDONYM_PREFIX): item["person"]["S"] for item in items}

    def destroy(self, persons: Sequence[str]) -> list[str]:
        def delete(entry: KeyEntry) -> str:
            self._client.transact_write_items(
                TransactItems=[
                    {"Delete": {"TableName": self.name, "Key": {"pk": {"S": PSEUDONYM_PREFIX + entry.pseudonym}}}},
                    {"Delete": {"TableName": self.name, "Key": {"pk": {"S": KEY_PREFIX + entry.person}}}},
                ]
            )
            return entry.person

        return parallel(delete, list(self.entries(persons).values()))

    def copies(self) -> VaultCopies:
        recovery = self._client.describe_continuous_backups(TableName=self.name)["ContinuousBackupsDescription"]
        pitr = recovery.get("PointInTimeRecoveryDescription", {})
        days = (
            int(pitr.get("RecoveryPeriodInDays", DEFAULT_RECOVERY_DAYS))
            if pitr.get("PointInTimeRecoveryStatus") == "ENABLED"
            else 0
        )
        backups = []
        for page in self._paged_backups():
            for summary in page:
                created: datetime = summary["BackupCreationDateTime"]
                expires: datetime | None = summary.get("BackupExpiryDateTime")
                if expires is None and summary.get("BackupType") == "AWS_BACKUP" and self._retention is not None:
                    expires = created + timedelta(days=self._retention)
                backups.append(Backup(summary.get("BackupName", summary["BackupArn"]), created, expires))
        table = self._client.describe_table(TableName=self.name)["Table"]
        replicas = tuple(r["RegionName"] for r in table.get("Replicas", []))
        return VaultCopies(recovery_days=days, backups=tuple(backups), replicas=replicas)

    def _paged_backups(self) -> list[list[Any]]:
        pages: list[list[Any]] = []
        start: dict[str, Any] = {}
        while True:
            # ALL: without it ListBackups lists on-demand (USER) backups only, not AWS Backup's recovery points
            answer = self._client.list_backups(TableName=self.name, BackupType="ALL", **start)
            pages.append(list(answer.get("BackupSummaries", [])))
            if not answer.get("LastEvaluatedBackupArn"):
                return pages
            start = {"ExclusiveStartBackupArn": answer["LastEvaluatedBackupArn"]}

    def close(self) -> None:
        """Nothing to close: the process's client is shared."""
