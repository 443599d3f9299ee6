"""Pseudonymised data without AWS: the ciphers of a person's key, how identifying clear columns are (the check's
measure), a vault's copies against the retention rule, the configuration of protected datasets, and what the plan
and the approval page say of a crypto-shred."""

from __future__ import annotations

import base64
import pickle
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from lakepurge.core.config import ConfigError, parse_settings
from lakepurge.protection.aead import NotCiphertext, NotDecryptable, PersonKey
from lakepurge.protection.quasi import Reservoir, analyse, merge
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


def census(rows: int, seed: int = 7) -> pa.Table:
    """A census-like table: no column singles anyone out alone, zip + birth year + gender does."""
    chance = random.Random(seed)
    return pa.table(
        {
            "zip": [f"{chance.randrange(40):05d}" for _ in range(rows)],
            "birth_year": [str(1950 + chance.randrange(50)) for _ in range(rows)],
            "gender": [chance.choice("FM") for _ in range(rows)],
            "plan": [chance.choice(["basic", "pro"]) for _ in range(rows)],
        }
    )


def test_given_a_census_like_table_when_checked_then_the_combination_is_flagged_and_no_single_column_is():
    report = analyse(census(3000), max_columns=3, max_unique_share=0.05)
    flagged = {frozenset(s.columns) for s in report.flagged}
    assert {"zip", "birth_year"} <= set().union(*flagged)
    assert all(len(columns) > 1 for columns in flagged)
    singles = {s.columns[0]: s for s in report.sets if len(s.columns) == 1}
    assert all(s.unique_share == 0 and s.k > 10 for s in singles.values())
    assert frozenset({"zip", "birth_year", "gender"}) not in {frozenset(s.columns) for s in report.sets}  # pruned


def test_given_coarse_columns_only_when_checked_then_nothing_is_flagged():
    report = analyse(census(3000).select(["gender", "plan"]), max_unique_share=0.01)
    assert not report.flagged
    assert min(s.k for s in report.sets) > 100


def test_given_a_small_table_when_measured_then_unique_share_and_k_are_exact():
    table = pa.table({"zip": ["1", "1", "2", "3", "3", "3"]})
    (measured,) = analyse(table, max_unique_share=0.5).sets
    assert (measured.groups, measured.k, measured.unique_share, measured.flagged) == (3, 1, 1 / 6, False)
    (measured,) = analyse(table, min_k=2).sets
    assert measured.flagged  # a k of 1 is below k = 2


def test_given_tasks_that_saw_unequal_rows_when_merging_their_samples_then_each_counts_by_what_it_saw():
    chance = random.Random(1)
    big, small = Reservoir(100), Reservoir(100)
    for n in range(9000):
        big.add(("big", n), chance)
    for n in range(1000):
        small.add(("small", n), chance)
    rows, seen = merge([big, small], 100, chance)
    assert seen == 10_000 and len(rows) == 100
    assert sum(1 for r in rows if r[0] == "big") == 90


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
