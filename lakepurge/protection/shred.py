"""Crypto-shredding: a dataset declared ``protection = "crypto-shred"`` is erased by destroying the person's key and
vault entries. No object of it is rewritten: its records keep the person's pseudonym, which no longer resolves, and
their personal fields as ciphertext under a key that no longer exists, in every copy (backups, replicas, exports
lakepurge does not know).

- :func:`plan_shred` (the report): the requested persons the vault holds and, per protected dataset, how many objects
  and records hold their ciphertext (the index, asked for their pseudonyms). The report names persons only by keyed
  hash and counts, never a pseudonym.
- the purge's step (lakepurge.purge.shredding, on the driver: the operator path, the workflow's inline purge and the
  Spark job alike) destroys the persons' vault entries and verifies them gone with :func:`verify_shred`;
- :func:`verify_shred`: no vault copy can produce the key. The table answers no entry of the persons (a strongly
  consistent read) and none of their pseudonyms resolves; the vault's other copies are bounded: its point-in-time
  recovery window and backups (each listed; one that never expires fails verification, naming it), no replica left
  unchecked, every copy gone within ``[vault] max_copy_days`` of the shred (the retention rule). The certificate
  states the date the last copy goes, and that processes that had the key cached drop it within ``cache_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lakepurge.core.config import Settings
from lakepurge.core.logs import get_logger
from lakepurge.core.s3uri import S3Uri
from lakepurge.index.base import WHOLE_OBJECT, IndexStore
from lakepurge.protection.vault import Vault, VaultCopies, vault_config

log = get_logger()

METHOD_SHRED = "crypto-shred"
METHOD_REWRITE = "rewrite"


@dataclass(frozen=True)
class ShredPlan:
    """What crypto-shredding a request destroys, as the report states it (counts, never a pseudonym)."""

    datasets: tuple[str, ...]  # the crypto-shred datasets of the configuration
    vault: str  # backend and table
    persons: int  # requested persons whose key the vault holds
    objects: dict[str, int] = field(default_factory=dict)  # per protected dataset: objects holding their ciphertext
    records: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ShredPlan:
        return cls(**{**document, "datasets": tuple(document["datasets"])})

    def summary(self, rewritten: Iterable[str]) -> dict[str, Any]:
        """The approver's view: which datasets are shredded, which rewritten, and what stays in the lake."""
        return {
            "crypto_shredded": list(self.datasets),
            "rewritten": sorted(set(rewritten)),
            "persons_with_keys": self.persons,
            "objects_with_ciphertext": dict(self.objects),
            "records_with_ciphertext": dict(self.records),
        }


def protected_datasets(settings: Settings) -> tuple[str, ...]:
    return tuple(d.name for d in settings.datasets if d.protection == METHOD_SHRED)


def plan_shred(store: IndexStore, settings: Settings, users: Sequence[str]) -> ShredPlan | None:
    """The report's crypto-shred plan, or None when no dataset is protected."""
    datasets = protected_datasets(settings)
    if not datasets:
        return None
    config = vault_config(settings)
    with Vault.open(settings) as vault:
        pseudonyms = vault.pseudonyms_of(users)
    objects: dict[str, int] = dict.fromkeys(datasets, 0)
    records: dict[str, int] = dict.fromkeys(datasets, 0)
    if pseudonyms:
        hits = store.lookup_objects(sorted(set(pseudonyms.values())))
        for s3path, hit in hits.objects.items():
            uri = S3Uri.parse(s3path)
            dataset = settings.dataset_for(uri.bucket, uri.key)
            if dataset is not None and dataset.name in objects:
                objects[dataset.name] += 1
                records[dataset.name] += 1 if hit.lines == (WHOLE_OBJECT,) else len(hit.lines)
    return ShredPlan(
        datasets, f"{config.backend}:{config.table or 'lakepurge_vault'}", len(pseudonyms), objects, records
    )


def plan_lines(summary: dict[str, Any] | None) -> list[str]:
    """The shred plan in words, for the operator's plan, the approval email and page."""
    if not summary:
        return []
    held = ", ".join(f"{name} {n}" for name, n in sorted(summary["objects_with_ciphertext"].items())) or "none"
    lines = [
        f"Crypto-shredded (the person's key and vault entries destroyed; no object rewritten):"
        f" {', '.join(summary['crypto_shredded'])}; {summary['persons_with_keys']} person(s) with a key in the vault",
        f"  objects that keep the person's ciphertext, unreadable once the key is destroyed: {held}",
        f"Rewritten (records erased from the objects): {', '.join(summary['rewritten']) or 'none'}",
    ]
    return lines


# -- verifying a shred -----------------------------------------------------------------------------------------


def verify_shred(vault: Vault, persons: Sequence[str], pseudonyms: Sequence[str], at: datetime) -> dict[str, Any]:
    """Whether any copy of the vault can still produce the persons' keys (see the module docstring)."""
    config = vault.config
    problems: list[str] = []
    remaining = vault.store.entries(list(persons))
    resolving = vault.store.persons_of(list(pseudonyms))
    if remaining:
        problems.append(f"{len(remaining)} person(s) still have a key in the vault")
    if resolving:
        problems.append(f"{len(resolving)} pseudonym(s) still resolve")
    copies = vault.store.copies()
    gone_by, copy_problems = _copies_gone_by(copies, at, config.max_copy_days)
    problems += copy_problems
    return {
        "passed": not problems,
        "vault_entries_remaining": len(remaining),
        "pseudonyms_resolving": len(resolving),
        "point_in_time_recovery_days": copies.recovery_days,
        "backups": [
            {
                "backup": b.name,
                "created_at": b.created_at.isoformat(timespec="seconds"),
                "expires_at": b.expires_at.isoformat(timespec="seconds") if b.expires_at else None,
            }
            for b in copies.backups
        ],
        "replicas": list(copies.replicas),
        "copies_gone_by": gone_by.isoformat(timespec="seconds") if gone_by is not None else None,
        "max_copy_days": config.max_copy_days,
        "caches_cleared_by": (at + timedelta(seconds=config.cache_seconds)).isoformat(timespec="seconds"),
        "problems": problems,
    }


def _copies_gone_by(copies: VaultCopies, at: datetime, max_days: int) -> tuple[datetime | None, list[str]]:
    """When the last copy of the vault that holds the keys goes, and what keeps it from being bounded."""
    problems = []
    if copies.recovery_days is None:
        problems.append("the vault's backup retention is not known: declare [vault] backup_retention_days")
        return None, problems
    ends = [at + timedelta(days=copies.recovery_days)]
    for backup in copies.backups:
        if backup.created_at > at:
            continue  # taken after the shred: holds no destroyed key
        if backup.expires_at is None:
            problems.append(f"backup {backup.name} of the vault never expires: delete it (it can restore the keys)")
        else:
            ends.append(backup.expires_at)
    if copies.replicas:
        problems.append(f"the vault has replicas in {', '.join(copies.replicas)}, which this check does not read")
    gone_by = max(ends)
    if gone_by - at > timedelta(days=max_days):
        problems.append(
            f"copies of the vault keep the keys until {gone_by.date()}, beyond [vault] max_copy_days ({max_days})"
        )
    return gone_by, problems


def statement(plan: ShredPlan, verification: dict[str, Any], rewritten: Iterable[str] = ()) -> str:
    """The certificate's words for the crypto-shredded datasets: what was destroyed, what stays, and when the
    erasure is complete (docs/OPERATIONS.md, *Crypto-shredding*, says why it says exactly this)."""
    held = sum(plan.objects.values())
    both = sorted(set(plan.datasets) & set(rewritten))
    also = (
        f" In {', '.join(both)}, records that held the person's identifier in clear were rewritten as well."
        if both
        else ""
    )
    gone_by = verification["copies_gone_by"] or "an unknown date (the vault's backup retention is not declared)"
    return (
        f"Datasets {', '.join(plan.datasets)} were erased by crypto-shredding, not rewritten: the person's key and the"
        " vault entries that link their identifier to their pseudonym were destroyed. The"
        f" {held} object(s) that still hold the person's records hold their personal fields only as AES-256"
        f" ciphertext under that key, and a pseudonym that no longer resolves.{also} Pseudonymised data is personal"
        " data while the additional information that attributes it exists (GDPR Art. 4(5) and Recital 26; EDPB"
        " Guidelines 01/2025 on pseudonymisation): that information no longer exists in the vault, and its last copy"
        f" (the vault's backups and point-in-time recovery) expires by {gone_by}, when this erasure under GDPR"
        " Art. 17 is complete. It does not by itself make the remaining records anonymous: the columns left in"
        " clear must not single the person out (lakepurge pseudonymise --check)."
    )
