"""Pseudonymised data without AWS: the ciphers of a person's key, a vault's copies against the retention rule,
the configuration of protected datasets, and what the plan and the approval page say of a crypto-shred."""

from __future__ import annotations

import base64
import pickle
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from lakepurge.core.config import ConfigError, parse_settings
from lakepurge.protection.aead import NotCiphertext, NotDecryptable, PersonKey
from lakepurge.protection.shred import ShredPlan, _copies_gone_by, plan_lines
from lakepurge.protection.vault import Backup, VaultCopies

pytestmark = pytest.mark.unit

ALICE = PersonKey(bytes(range(32)))
BOB = PersonKey(bytes(range(1, 33)))
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    "value", ["alice@example.com", 42, 3.5, True, ["a", 1], {"street": "Main", "no": 7}, "", "é€😀"]
)
def test_given_a_personal_value_when_sealed_and_opened_with_the_persons_key_then_it_comes_back_as_it_was(value):
    for deterministic in (False, True):
        token = ALICE.seal("email", value, deterministic)
        assert isinstance(token, str) and token.startswith("lp1")
        assert ALICE.open("email", token) == value


def test_given_a_null_when_sealed_then_it_stays_null():
    assert ALICE.seal("email", None) is None
    assert ALICE.open("email", None) is None


def test_given_one_value_when_sealed_twice_then_randomised_differs_and_deterministic_is_equal():
    assert ALICE.seal("email", "a@x") != ALICE.seal("email", "a@x")
    assert ALICE.seal("email", "a@x", True) == ALICE.seal("email", "a@x", True)
    # deterministic under the person's key only: another person's equal value does not join
    assert ALICE.seal("email", "a@x", True) != BOB.seal("email", "a@x", True)


@pytest.mark.parametrize("deterministic", [False, True])
def test_given_a_ciphertext_when_opened_with_another_key_or_field_or_changed_then_it_does_not_decrypt(deterministic):
    token = ALICE.seal("email", "alice@example.com", deterministic)
    assert token is not None
    with pytest.raises(NotDecryptable, match="'email'"):
        BOB.open("email", token)
    with pytest.raises(NotDecryptable):
        ALICE.open("name", token)  # a value moved to another column
    raw = bytearray(base64.urlsafe_b64decode(token[5:] + "=" * (-len(token[5:]) % 4)))
    raw[-1] ^= 1
    changed = token[:5] + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(NotDecryptable) as refused:
        ALICE.open("email", changed)
    assert "alice" not in str(refused.value)


def test_given_plaintext_in_a_personal_field_when_opened_then_it_is_refused_without_quoting_it():
    with pytest.raises(NotCiphertext) as refused:
        ALICE.open("email", "alice@example.com")
    assert "alice" not in str(refused.value)


def test_given_a_persons_key_when_shown_or_pickled_then_its_bytes_never_come_out():
    material = bytes(range(32))
    key = PersonKey(material)
    assert repr(key) == "PersonKey(***)" and material.hex() not in str(key)
    with pytest.raises(TypeError):
        pickle.dumps(key)


def test_given_one_identifier_when_pseudonymised_then_stable_per_key_and_unlinkable_across_keys():
    assert ALICE.pseudonym("alice") == PersonKey(bytes(range(32))).pseudonym("alice")
    assert ALICE.pseudonym("alice") != BOB.pseudonym("alice")
    assert ALICE.pseudonym("alice").startswith("ps-") and "alice" not in ALICE.pseudonym("alice")


def test_given_the_vaults_copies_when_bounded_by_the_retention_rule_then_the_date_is_stated_and_beyond_it_refused():
    week = VaultCopies(recovery_days=7, backups=(Backup("aws-backup", T0 - timedelta(days=1), T0 + timedelta(days=5)),))
    assert _copies_gone_by(week, T0, 35) == (T0 + timedelta(days=7), [])
    gone_by, problems = _copies_gone_by(VaultCopies(recovery_days=35), T0, 30)
    assert gone_by == T0 + timedelta(days=35) and "max_copy_days (30)" in problems[0]
    forever = VaultCopies(recovery_days=0, backups=(Backup("manual-2026", T0 - timedelta(days=2), None),))
    assert "backup manual-2026 of the vault never expires" in _copies_gone_by(forever, T0, 35)[1][0]
    later = VaultCopies(recovery_days=0, backups=(Backup("after", T0 + timedelta(hours=1), None),))
    assert _copies_gone_by(later, T0, 35) == (T0, [])  # taken after the shred: holds no destroyed key
    assert _copies_gone_by(VaultCopies(recovery_days=None), T0, 35)[0] is None
    assert "replicas" in _copies_gone_by(VaultCopies(recovery_days=1, replicas=("eu-west-1",)), T0, 35)[1][0]


BASE = {"index": {"backend": "dynamodb", "table": "i"}, "reports": {"location": "s3://r/"}}
PROTECTED = {
    "name": "orders",
    "location": "s3://lake/orders/",
    "id_fields": ["user_id"],
    "protection": "crypto-shred",
    "personal_fields": ["email"],
}


def test_given_a_protected_dataset_when_configured_then_it_needs_a_vault_and_one_top_level_id():
    with pytest.raises(ConfigError, match="configure their \\[vault\\]"):
        parse_settings({**BASE, "datasets": [PROTECTED]})
    vault = {"backend": "dynamodb", "table": "v", "kms_key_id": "alias/vault"}
    settings = parse_settings({**BASE, "vault": vault, "datasets": [PROTECTED]})
    assert settings.datasets[0].personal_fields == ("email",)
    with pytest.raises(ConfigError, match="one top-level id field"):
        parse_settings({**BASE, "vault": vault, "datasets": [{**PROTECTED, "id_fields": ["user.id"]}]})
    with pytest.raises(ConfigError, match="personal_fields are the encrypted fields"):
        parse_settings({**BASE, "datasets": [{**PROTECTED, "protection": "none"}]})
    with pytest.raises(ConfigError, match="backup_retention_days"):
        parse_settings({**BASE, "vault": {"backend": "postgres", "dsn": "postgresql://x", "kms_key_id": "k"}})


def test_given_a_mixed_report_when_planned_then_the_plan_names_both_methods_and_what_keeps_ciphertext():
    plan = ShredPlan(("orders_protected",), "dynamodb:v", 1, {"orders_protected": 3}, {"orders_protected": 5})
    lines = plan_lines(plan.summary(["reviews", "clicks"]))
    assert "Crypto-shredded" in lines[0] and "orders_protected" in lines[0] and "no object rewritten" in lines[0]
    assert "orders_protected 3" in lines[1]
    assert lines[2] == "Rewritten (records erased from the objects): clicks, reviews"


def test_given_a_report_with_a_crypto_shred_when_the_approval_page_is_shown_then_it_names_both_methods():
    from lakepurge.workflow.pages import _plan_lines

    summary = {
        "users_requested": 1,
        "users_found": 1,
        "objects": 2,
        "lines": 2,
        "datasets": {"reviews": {"objects": 2, "records": 2}},
        "relational_rows": {},
        "crypto_shred": ShredPlan(("orders_protected",), "dynamodb:v", 1, {"orders_protected": 3}).summary(["reviews"]),
    }
    erasure = "\n".join(_plan_lines(summary))
    assert "Crypto-shredded" in erasure and "Rewritten (records erased from the objects): reviews" in erasure
    assert "Crypto-shredded" not in "\n".join(_plan_lines(summary, "access"))


def test_given_values_json_cannot_hold_when_sealed_then_they_travel_as_text():
    from lakepurge.protection.protect import _seal

    assert ALICE.open("amount", _seal(ALICE, "amount", Decimal("12.50"), False)) == "12.50"
    assert ALICE.open("born", _seal(ALICE, "born", date(1990, 5, 17), True)) == "1990-05-17"
