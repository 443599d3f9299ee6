"""The purge's crypto-shred step (lakepurge.protection.shred): run on the driver by every purge (the operator path,
the workflow's inline purge, the Spark job), after the objects and tables, before the certificate.

Before destroying anything it records which of the request's persons the vault holds
(``results/<request id>/crypto-shred.json``, written once): a rerun of the purge (a retried Task, a restarted job)
destroys again (nothing is left to destroy) and still counts what this request destroyed. Then the persons' keys
and vault entries are destroyed and the vault's copies checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from lakepurge.core.config import Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3uri import S3Uri
from lakepurge.protection.shred import METHOD_SHRED, ShredPlan, statement, verify_shred
from lakepurge.protection.vault import Vault
from lakepurge.reports import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

RECORD = "crypto-shred.json"


def shred_persons(
    s3: S3Client,
    settings: Settings,
    plan: ShredPlan,
    user_hashes: Sequence[str],
    results: S3Uri,
    rewritten: Sequence[str],
) -> dict[str, Any]:
    """Destroy the persons' keys and vault entries, verify, and return the certificate's ``crypto_shred`` section.
    ``results``: the request's results folder; ``rewritten``: the datasets this request erased by rewriting."""
    record_uri = S3Uri(results.bucket, results.key + RECORD)
    with Vault.open(settings) as vault:
        held = vault.store.entries(list(user_hashes))
        pseudonyms = [entry.pseudonym for entry in held.values()]
        record = {"persons": sorted(held), "started_at": datetime.now(UTC).isoformat(timespec="seconds")}
        try:
            layout.write_once(s3, record_uri, orjson.dumps(record))
        except layout.AlreadyWritten:
            stored = layout.read_or_none(s3, record_uri)
            assert stored is not None
            record = orjson.loads(stored.body)  # an earlier run of this request: what it destroyed counts
        persons = sorted(set(record["persons"]) | set(held))
        vault.destroy(persons)
        verification = verify_shred(vault, persons, pseudonyms, datetime.now(UTC))
    log.info("crypto-shred verified" if verification["passed"] else "crypto-shred NOT verified",
             extra={"persons": len(persons)})  # fmt: skip
    return {
        "method": METHOD_SHRED,
        "datasets": list(plan.datasets),
        "rewritten_datasets": sorted(set(rewritten)),
        "persons_requested": len(user_hashes),
        "keys_destroyed": len(persons),
        "objects_still_holding_ciphertext": dict(plan.objects),
        "records_still_holding_ciphertext": dict(plan.records),
        "vault": plan.vault,
        "kms_key_id": vault.config.kms_key_id,
        "shredded_at": record["started_at"],
        "statement": statement(plan, verification, rewritten),
        "verification": verification,
    }
