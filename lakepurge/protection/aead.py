"""The ciphers of pseudonymised data. Each person has one random 256-bit key (KMS generates it; the vault keeps it
wrapped). HKDF-SHA256 derives three keys from it, so that one key serves three purposes without reuse:

- **Personal values: AES-256-GCM** (NIST SP 800-38D), a random 96-bit nonce per value, the field's name as associated
  data (a value moved to another column does not decrypt). The standard AEAD, in every platform's library (a Java or
  Scala reader decrypts it with javax.crypto), hardware-accelerated. Its one weakness, a repeated nonce under one key,
  does not arise here: a key encrypts one person's values only, and at a million values per person the chance of two
  random nonces meeting is below 2^-57.
- **Values equality joins need: AES-SIV** (RFC 5297, deterministic authenticated encryption; Tink's DeterministicAead),
  512-bit key, the field's name as associated data. The same value of the same person in the same field gives the
  same ciphertext, in every dataset and run: a join or GROUP BY on the column works without decrypting. It reveals
  equal values within one person's records and nothing across persons (their keys differ). Used only for the
  fields named deterministic: randomised is the default.
- **Pseudonyms: HMAC-SHA256** of the identifier under the person's pseudonym key, 128 bits in hex. Stable for as long
  as the key lives (joins across datasets on the pseudonym work); once the key is destroyed nobody, holding the
  identifier and every other key of the deployment, can compute it again.

Values are encoded as JSON before encryption, so strings, numbers, booleans, lists and objects decrypt to what they
were; a null stays null (not encrypted). Ciphertext is text: ``lp1r.`` (randomised) or ``lp1d.`` (deterministic), then
URL-safe base64 without padding of the nonce, ciphertext and tag (GCM) or of the synthetic IV and ciphertext (SIV).

A :class:`PersonKey` never shows its bytes: no repr, no pickling (a key cannot travel in a Spark closure or a log).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Any, NoReturn

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

RANDOMISED = "lp1r."
DETERMINISTIC = "lp1d."
PSEUDONYM_PREFIX = "ps-"
KEY_BYTES = 32
_NONCE_BYTES = 12


class NotDecryptable(ValueError):
    """A ciphertext does not decrypt with the key given: another person's, a destroyed one, or changed bytes. The
    message names the field, never a value."""


class NotCiphertext(ValueError):
    """A value of a personal field is not lakepurge ciphertext (plaintext in a protected dataset)."""


def _derive(material: bytes, purpose: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=b"lakepurge vault v1 " + purpose).derive(
        material
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PersonKey:
    """One person's key, as its three derived keys."""

    __slots__ = ("_gcm", "_pseudonym_key", "_siv")

    def __init__(self, material: bytes) -> None:
        if len(material) != KEY_BYTES:
            raise ValueError(f"a person's key is {KEY_BYTES} bytes")
        self._gcm = AESGCM(_derive(material, b"aes-256-gcm", 32))
        self._siv = AESSIV(_derive(material, b"aes-siv", 64))
        self._pseudonym_key = _derive(material, b"pseudonym", 32)

    def __repr__(self) -> str:
        return "PersonKey(***)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a person's key is never serialised")

    def pseudonym(self, identifier: str) -> str:
        digest = hmac.new(self._pseudonym_key, identifier.encode(), hashlib.sha256).hexdigest()
        return PSEUDONYM_PREFIX + digest[:32]

    def seal(self, field: str, value: Any, deterministic: bool = False) -> str | None:
        """The ciphertext of one value of a field (None stays None)."""
        if value is None:
            return None
        plain = orjson.dumps(value)
        if deterministic:
            return DETERMINISTIC + _b64(self._siv.encrypt(plain, [field.encode()]))
        nonce = os.urandom(_NONCE_BYTES)
        return RANDOMISED + _b64(nonce + self._gcm.encrypt(nonce, plain, field.encode()))

    def open(self, field: str, token: Any) -> Any:
        """The value a ciphertext of this field holds (None stays None). NotCiphertext for a value that is not
        lakepurge ciphertext, NotDecryptable when this key does not open it."""
        if token is None:
            return None
        if not isinstance(token, str) or not token.startswith((RANDOMISED, DETERMINISTIC)):
            raise NotCiphertext(f"field {field!r} holds a value that is not lakepurge ciphertext")
        try:
            data = _unb64(token[len(RANDOMISED) :])
            if token.startswith(DETERMINISTIC):
                plain = self._siv.decrypt(data, [field.encode()])
            else:
                plain = self._gcm.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], field.encode())
        except (InvalidTag, ValueError):
            raise NotDecryptable(f"field {field!r}: the ciphertext does not decrypt with this person's key") from None
        return orjson.loads(plain)


def is_ciphertext(value: Any) -> bool:
    return isinstance(value, str) and value.startswith((RANDOMISED, DETERMINISTIC))
