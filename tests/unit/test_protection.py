"""Pseudonymised data without AWS: the ciphers of a person's key and the configuration of protected datasets."""

from __future__ import annotations

import base64
import pickle
from datetime import date
from decimal import Decimal

import pytest

from lakepurge.core.config import ConfigError, parse_settings
from lakepurge.protection.aead import NotCiphertext, NotDecryptable, PersonKey

pytestmark = pytest.mark.unit

ALICE = PersonKey(bytes(range(32)))
BOB = PersonKey(bytes(range(1, 33)))


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


def test_given_values_json_cannot_hold_when_sealed_then_they_travel_as_text():
    from lakepurge.protection.protect import _seal

    assert ALICE.open("amount", _seal(ALICE, "amount", Decimal("12.50"), False)) == "12.50"
    assert ALICE.open("born", _seal(ALICE, "born", date(1990, 5, 17), True)) == "1990-05-17"
