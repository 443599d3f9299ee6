"""A mixed lake erased through the deployed workflow: an approved request rewrites the user's raw records and
crypto-shreds the protected dataset (the person's vault key destroyed by the inline purge), and the approval email
and the certificate name both methods."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from lakepurge.core import aws
from lakepurge.core.s3uri import S3Uri
from lakepurge.protection.protect import Protection, protect_records, reveal_records
from lakepurge.protection.vault import Vault
from tests.support.purging import index_keys
from tests.support.workflow import WorkflowCase, call_approval, link_in

pytestmark = pytest.mark.e2e

PROTECTED_PREFIX = "curated/contacts/"
CONTACTS = Protection("user_id", ("email",))


def _contacts_toml(bucket: str, kms_key: str) -> str:
    """A crypto-shred dataset beside the sample lake's raw ones, and its vault (DynamoDB, as the stack makes it)."""
    return f"""
[vault]
backend = "dynamodb"
table = "lakepurge-vault-workflow"
kms_key_id = "{kms_key}"
cache_seconds = 0

[[datasets]]
name = "contacts"
location = "s3://{bucket}/{PROTECTED_PREFIX}"
id_fields = ["user_id"]
protection = "crypto-shred"
personal_fields = ["email"]
"""


def _rewritable_user_and_another(case: WorkflowCase) -> tuple[str, str, set[str]]:
    """Two users of the sample lake, the first without one-user-per-object data, and the datasets it has lines in."""
    per_object = {d.name for d in case.settings.datasets if d.per_object}
    held: dict[str, set[str]] = {}
    for user, s3path, _ in case.lake.lake.truth:
        uri = S3Uri.parse(s3path)
        dataset = case.settings.dataset_for(uri.bucket, uri.key)
        if dataset is not None:
            held.setdefault(user, set()).add(dataset.name)
    candidates = sorted(user for user, datasets in held.items() if datasets and not datasets & per_object)
    assert len(candidates) >= 2, "the sample lake has too few users with only line data"
    return candidates[0], candidates[1], held[candidates[0]]


def test_given_a_mixed_lake_when_an_approved_request_erases_a_user_then_raw_lines_are_rewritten_and_keys_shredded(
    workflow_case: Callable[..., WorkflowCase],
) -> None:
    kms_key = aws.client("kms").create_key(Description="lakepurge vault (workflow test)")["KeyMetadata"]["Arn"]
    bucket = "lake"
    case = workflow_case(extra_toml=_contacts_toml(bucket, kms_key))
    assert case.lake.lake.bucket == bucket
    user, other, raw_datasets = _rewritable_user_and_another(case)

    # The curated zone, written pseudonymised by a pipeline: each user's contact under their own vault key.
    records = [
        {"user_id": who, "email": f"{n}-{who}@example.com", "plan": "pro"} for n, who in enumerate([user, other])
    ]
    s3 = aws.client("s3")
    with Vault.open(case.settings) as vault:
        protected = protect_records(vault, records, CONTACTS)
        pseudonyms = vault.pseudonyms_of([user, other])
    key = f"{PROTECTED_PREFIX}part-0.jsonl"
    s3.put_object(Bucket=bucket, Key=key, Body=b"".join(orjson.dumps(r) + b"\n" for r in protected))
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    index_keys(case.settings, bucket, [key])  # its event, then every dataset reconciled (coverage recorded)

    request_id = case.file([user], "req-mixed-shred")
    emails = case.emails(request_id)
    case.approve_and_finish(request_id)

    [note] = case.notifications()
    assert note["outcome"] == "ERASED", note
    # the approver was told which dataset is shredded and which rewritten before approving
    assert "Crypto-shredded" in emails[0]["body"] and "contacts" in emails[0]["body"]
    certificate = orjson.loads(
        s3.get_object(Bucket="lake-reports", Key=f"certificates/{request_id}.json")["Body"].read()
    )
    assert certificate["verification"]["passed"] is True
    assert certificate["erasure_methods"] == {"crypto-shred": ["contacts"], "rewrite": sorted(raw_datasets)}
    shred = certificate["crypto_shred"]
    assert shred["keys_destroyed"] == 1 and shred["objects_still_holding_ciphertext"] == {"contacts": 1}
    assert shred["verification"]["passed"] and shred["verification"]["vault_entries_remaining"] == 0

    # The protected object was not rewritten; the user's pseudonym resolves no more, the other's record still opens.
    assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == etag
    stored = [orjson.loads(line) for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines()]
    with Vault.open(case.settings) as vault:
        assert vault.store.persons_of([pseudonyms[user]]) == {}
        revealed = {r["user_id"]: r["email"] for r in reveal_records(vault, stored, CONTACTS)}
    assert revealed == {pseudonyms[user]: None, pseudonyms[other]: records[1]["email"]}
    # and the user's raw lines are gone from every object of the datasets that were rewritten
    for s3path in {p for u, p, _ in case.lake.lake.truth if u == user}:
        uri = S3Uri.parse(s3path)
        assert user.encode() not in s3.get_object(Bucket=uri.bucket, Key=uri.key)["Body"].read(), s3path


def test_given_a_purge_that_skipped_the_approved_shred_when_verified_then_the_request_is_not_certified(
    workflow_case: Callable[..., WorkflowCase], monkeypatch
) -> None:
    import lakepurge.purge.job as purge_job

    kms_key = aws.client("kms").create_key(Description="lakepurge vault (workflow test)")["KeyMetadata"]["Arn"]
    case = workflow_case(extra_toml=_contacts_toml("lake", kms_key))
    user, other, _raw = _rewritable_user_and_another(case)
    records = [{"user_id": who, "email": f"{n}@example.com", "plan": "pro"} for n, who in enumerate([user, other])]
    with Vault.open(case.settings) as vault:
        protected = protect_records(vault, records, CONTACTS)
    key = f"{PROTECTED_PREFIX}part-0.jsonl"
    aws.client("s3").put_object(Bucket="lake", Key=key, Body=b"".join(orjson.dumps(r) + b"\n" for r in protected))
    index_keys(case.settings, "lake", [key])
    # a purge that erased the raw lines but never destroyed the key (a bug, a build without the step)
    monkeypatch.setattr(purge_job, "shred_persons", lambda *args, **kwargs: None)

    request_id = case.file([user], "req-shred-skipped")
    decided = call_approval("POST", link_in(case.emails(request_id)[0]), "approve")
    assert decided["statusCode"] == 200
    assert case.finish(request_id)["status"] == "FAILED"

    [note] = case.notifications()
    assert note["outcome"] == "VERIFICATION_FAILED", note
    with Vault.open(case.settings) as vault:
        assert vault.pseudonyms_of([user])  # the key the approver was told would go is still there
