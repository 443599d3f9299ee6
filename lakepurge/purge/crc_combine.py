"""The CRC64NVME of a concatenation from the CRC64NVMEs of its pieces and their lengths, without their bytes.

A spliced object is its rewritten windows (whose bytes the purge holds) and ranges copied inside S3 (whose bytes it
never reads; S3 answers each copied part's CRC64NVME). Its full-object checksum, which the completion states and S3
checks, is combined from the parts' checksums here.

Why this works: CRC64NVME is a reflected CRC with initial value and final XOR all ones. For such a CRC,
crc(A + B) = crc(A) * x^(8 * len(B)) mod P  XOR  crc(B), where the product is taken in GF(2)[x] on the reflected
register (the all-ones terms cancel, as in zlib's crc32_combine). x^(8n) mod P is built by repeated squaring, so the
cost is logarithmic in the length.
"""

from __future__ import annotations

from collections.abc import Iterable

# CRC-64/NVME's polynomial, reflected (the normal form is 0xAD93D23594C93659).
_POLY = 0x9A6C9329AC4BC9B5
_TOP = 1 << 63  # x^0 in the reflected representation


def _multiply(a: int, b: int) -> int:
    """a * b mod P, both reflected (bit 63 is x^0)."""
    product = 0
    mask = _TOP
    while a:
        if a & mask:
            product ^= b
            a ^= mask
        mask >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers() -> list[int]:
    """x^(2^k) mod P for k = 0..63 (x^1 is bit 62 reflected)."""
    table = [_TOP >> 1]
    for _ in range(63):
        table.append(_multiply(table[-1], table[-1]))
    return table


_X_POW_2K = _powers()


def _x_pow_8n(n: int) -> int:
    """x^(8n) mod P."""
    result = _TOP
    k = 3  # 8n = n * 2^3
    while n:
        if n & 1:
            result = _multiply(_X_POW_2K[k % 64], result)
        n >>= 1
        k += 1
    return result


def crc64nvme_combine(first: int, second: int, second_length: int) -> int:
    """The CRC64NVME of A + B, given crc(A), crc(B) and len(B)."""
    if second_length == 0:
        return first
    return _multiply(_x_pow_8n(second_length), first) ^ second


def crc64nvme_of_parts(parts: Iterable[tuple[int, int]]) -> int:
    """The CRC64NVME of the parts' concatenation, from each part's (CRC64NVME, length)."""
    total = 0  # the CRC of no bytes
    for crc, length in parts:
        total = crc64nvme_combine(total, crc, length)
    return total
