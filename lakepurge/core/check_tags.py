"""Check tags: a short keyed tag of each requested id, computed by whoever holds the raw ids when a purge starts, so
that a Spark executor, which holds the users only as keyed hashes, computes the HMAC of only those ids it reads whose
tag is one of the requested ones, instead of every id (the check before each write reads every id of an object).

The tag of an id (its UTF-8 bytes ``x``, ``L = len(x)``), under a request's tag key:

    h = b + a_len * L + sum(a_j * c_j(x), j < 8) + (a_8 * t_0(x) + a_9 * t_1(x) if L > 32 else 0)   (mod 2**64)
    tag = h >> (64 - TAG_BITS)

``c_j`` is the j-th 4 bytes of ``x`` padded with zeros to 32 bytes, ``t_0, t_1`` the two 4-byte halves of its last 8
bytes, each read as a little-endian unsigned 32-bit integer; the 64-bit factors ``a`` and ``b`` come from the tag key
(SHAKE-256), which is HMAC-SHA256(hash key, "lakepurge check tag v1|" + request id): tags of different requests are
unrelated, and nobody without the hash key can compute one. This is the multilinear hash of 32-bit characters in
64-bit arithmetic, its top bits kept (Thorup, "High speed hashing for integers and strings", 2015; Lemire and Kaser,
"Strongly universal string hashing is fast", 2014): strongly universal, so for two ids that differ in their first 32
bytes, in length or (longer than 32 bytes) in their last 8, the chance over the key that their tags are equal is
2**-TAG_BITS. Ids that differ only elsewhere always share a tag: each then costs an HMAC.

A tag is a prefilter, never an answer: the same id always gets the same tag, so a requested id is never skipped; an
id whose tag is a requested one is confirmed by its HMAC, so a tag shared by another id costs one HMAC and never
finds a user who is not there. It is computed in one vectorised pass over an Arrow binary array (:meth:`TagKey.tags`:
a few Arrow kernels, no Python step per id), and per id in Python (:meth:`TagKey.tag`) for the launcher's few ids; the
two agree bit for bit (tests/unit/test_check_tags.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
from botocore.exceptions import ClientError

from lakepurge.core.s3io import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from lakepurge.core.s3uri import S3Uri

TAG_BITS = 24  # the width shipped: 2**24 values, so a lookup is one bit of a 2 MiB table
HEAD_BYTES = 32  # an id's first bytes, read as 32-bit characters
TAIL_BYTES = 8  # and a longer id's last bytes
_HEAD = HEAD_BYTES // 4  # characters
_NARROWER = (8, 16)  # row widths (bytes) for arrays of short ids only
_TAIL = TAIL_BYTES // 4
_LABEL = b"lakepurge check tag v1|"
_MASK = (1 << 64) - 1
DOCUMENT_VERSION = 1

# The vectorised form reads 64-bit words in the machine's order; the definition is little-endian (x86-64, Graviton).
VECTORISED = sys.byteorder == "little"


def tag_key(hash_key: bytes, request_id: str) -> bytes:
    """The key of one request's tags, derived from the hash key of the keyed hashes."""
    return hmac.new(hash_key, _LABEL + request_id.encode(), hashlib.sha256).digest()


def covering(hashes: Iterable[str]) -> str:
    """What a set of tags stands for: a digest of the users' keyed hashes (a HashedUsers with other hashes than the
    ids tagged, e.g. a report's users and more, must not use them)."""
    return hashlib.sha256("\n".join(sorted(set(hashes))).encode()).hexdigest()


class TagKey:
    """The tag function of one tag key: :meth:`tag` for one id, :meth:`tags` for an Arrow array of them."""

    def __init__(self, key: bytes) -> None:
        count = _HEAD + _TAIL + 2
        factors = struct.unpack(f"<{count}Q", hashlib.shake_256(key).digest(8 * count))
        self.head_factors = factors[:_HEAD]
        self.tail_factors = factors[_HEAD : _HEAD + _TAIL]
        self.length_factor, self.offset = factors[-2:]
        self._tiled: dict[int, Any] = {}  # per row width: its factors repeated for the longest array seen
        self._row_ends: dict[int, Any] = {}
        self._scalars: dict[Any, dict[Any, Any]] = {}

    def tag(self, user_id: bytes) -> int:
        """The tag of one id (its UTF-8 bytes)."""
        characters = struct.unpack(f"<{_HEAD}I", user_id[:HEAD_BYTES].ljust(HEAD_BYTES, b"\0"))
        total = self.offset + self.length_factor * len(user_id)
        total += sum(factor * c for factor, c in zip(self.head_factors, characters, strict=True))
        if len(user_id) > HEAD_BYTES:
            last = struct.unpack(f"<{_TAIL}I", user_id[-TAIL_BYTES:])
            total += sum(factor * c for factor, c in zip(self.tail_factors, last, strict=True))
        return (total & _MASK) >> (64 - TAG_BITS)

    def tags(self, ids: Any, bits: int = TAG_BITS) -> Any:
        """The tag of each id of an Arrow binary array without nulls (binary or large_binary), as a uint64 array (or
        its first ``bits`` bits). Every id becomes one fixed-size row of its first 32 bytes padded with zeros (8 or 16
        when no id is longer; and, when some id is longer than 32, its last 8 bytes, zeros for the ids that are
        not); the rows' 32-bit characters times
        their factors are summed per row (a running sum, differenced at the rows' ends; uint64 arithmetic wraps).
        Few kernels, no aggregate (which may wait for Arrow's thread pool): the check calls this once an object."""
        import pyarrow as pa
        import pyarrow.compute as pc

        count = len(ids)
        if not count:
            return pa.array([], pa.uint64())
        kind = ids.type
        constants = self._constants(kind)
        lengths = pc.binary_length(ids).cast(pa.uint64())
        longer = pc.greater(lengths, constants[HEAD_BYTES])
        empty = constants["empty"]
        if longer.true_count:
            width = HEAD_BYTES + TAIL_BYTES
            head = pc.binary_slice(
                pc.binary_join_element_wise(ids, constants["zeros"][HEAD_BYTES], empty), 0, HEAD_BYTES
            )
            zeros = constants["zeros"][TAIL_BYTES]
            last = pc.binary_slice(pc.binary_join_element_wise(zeros, ids, empty), -TAIL_BYTES)
            rows = pc.binary_join_element_wise(head, pc.if_else(longer, last, zeros), empty)
        else:
            # The characters past an id's end are zeros, which add nothing: rows as wide as the longest id needs.
            width = next((w for w in _NARROWER if not pc.greater(lengths, constants[w]).true_count), HEAD_BYTES)
            padded = pc.binary_join_element_wise(ids, constants["zeros"][width], empty)
            rows = pc.binary_slice(padded, 0, width)
        fixed = rows.cast(pa.binary(width))
        characters = pa.Array.from_buffers(
            pa.uint32(), count * width // 4, [None, fixed.buffers()[1]], offset=fixed.offset * width // 4
        )
        sums = pc.cumulative_sum(pc.multiply(characters.cast(pa.uint64()), self._factors(width, count)))
        ends = pc.take(sums, self._ends(width, count))
        before = pa.concat_arrays([constants["zero"], ends.slice(0, count - 1)])
        by_length = pc.multiply(lengths, constants["length_factor"])
        total = pc.add(pc.subtract(ends, before), pc.add(by_length, constants["offset"]))
        return pc.shift_right(total, pa.scalar(64 - bits, pa.uint64()))

    def _constants(self, kind: Any) -> dict[Any, Any]:
        """The Arrow scalars tags() uses, made once per id type."""
        import pyarrow as pa

        made = self._scalars.get(kind)
        if made is None:
            made = self._scalars[kind] = {
                "empty": pa.scalar(b"", kind),
                "zeros": {width: pa.scalar(b"\0" * width, kind) for width in (*_NARROWER, HEAD_BYTES, TAIL_BYTES)},
                **{width: pa.scalar(width, pa.uint64()) for width in (*_NARROWER, HEAD_BYTES)},
                "zero": pa.array([0], pa.uint64()),
                "length_factor": pa.scalar(self.length_factor, pa.uint64()),
                "offset": pa.scalar(self.offset, pa.uint64()),
            }
        return made

    def _factors(self, width: int, count: int) -> Any:
        """The factors of a row of ``width`` bytes, repeated ``count`` times (made for a power of two rows and kept
        for longer arrays)."""
        import pyarrow as pa

        per_row = width // 4
        tiled = self._tiled.get(width)
        if tiled is None or len(tiled) < count * per_row:
            rows = _room_for(count)
            factors = struct.pack(f"<{per_row}Q", *(self.head_factors + self.tail_factors)[:per_row])
            tiled = pa.Array.from_buffers(pa.uint64(), rows * per_row, [None, pa.py_buffer(factors * rows)])
            self._tiled[width] = tiled
        return tiled.slice(0, count * per_row)

    def _ends(self, width: int, count: int) -> Any:
        """Where each row's last character is in the running sum."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ends = self._row_ends.get(width)
        if ends is None or len(ends) < count:
            steps = pc.cumulative_sum(pa.repeat(pa.scalar(width // 4, pa.int64()), _room_for(count)))
            ends = self._row_ends[width] = pc.subtract(steps, pa.scalar(1, pa.int64()))
        return ends.slice(0, count)


def _room_for(count: int) -> int:
    return max(1024, 1 << (count - 1).bit_length())


class CheckTags:
    """One request's tags, as an executor gets them: the tag key and the requested ids' tags, and which users' hashes
    they stand for (:func:`covering`). Holds no id. Pickled into Spark task closures (the lookup table is rebuilt
    where it is used, not shipped)."""

    def __init__(self, key: bytes, tags: Iterable[int], covers: str) -> None:
        self.key = key
        self.tags = tuple(sorted(set(tags)))
        self.covers = covers
        self._function: TagKey | None = None
        self._table: Any = None

    def __repr__(self) -> str:
        return f"CheckTags({len(self.tags)} tags)"

    def __getstate__(self) -> dict[str, Any]:
        return {"key": self.key, "tags": self.tags, "covers": self.covers}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["key"], state["tags"], state["covers"])  # type: ignore[misc]

    @classmethod
    def for_request(
        cls,
        hash_key: bytes,
        request_id: str,
        users: Iterable[str],
        hashes: Iterable[str],
        hash_of: Callable[[str], str],
    ) -> CheckTags | None:
        """The tags of a request's users, from their raw ids; None when the ids do not stand for every one of the
        hashes (a request whose resolution found more identifiers than it named: those are known by hash only)."""
        wanted = frozenset(hashes)
        tagged: dict[str, bytes] = {}
        for user in dict.fromkeys(users):
            try:
                encoded = user.encode()
            except UnicodeEncodeError:
                continue
            hashed = hash_of(user)
            if hashed in wanted:
                tagged[hashed] = encoded
        if not wanted or set(tagged) != wanted:
            return None
        key = tag_key(hash_key, request_id)
        function = TagKey(key)
        return cls(key, (function.tag(user) for user in tagged.values()), covering(wanted))

    def document(self) -> bytes:
        """The stored form (the tag key is not in it: the reader derives it from the hash key and the request id),
        sealed by an HMAC under the tag key: a document changed by anyone without the hash key (a tag taken away
        would let the check skip that user's ids) is not used."""
        packed = struct.pack(f"<{len(self.tags)}I", *self.tags)
        return orjson.dumps(
            {
                "version": DOCUMENT_VERSION,
                "tag_bits": TAG_BITS,
                "covers": self.covers,
                "tags": base64.b64encode(packed).decode(),
                "seal": _seal(self.key, self.covers, packed),
            }
        )

    @classmethod
    def from_document(cls, body: bytes, hash_key: bytes, request_id: str) -> CheckTags | None:
        """The tags a launcher stored, or None if they were written by another version of this definition or cannot
        be read (the purge then hashes every id: slower, never wrong)."""
        key = tag_key(hash_key, request_id)
        try:
            stored = orjson.loads(body)
            if stored.get("version") != DOCUMENT_VERSION or stored.get("tag_bits") != TAG_BITS:
                return None
            packed = base64.b64decode(stored["tags"], validate=True)
            covers = str(stored["covers"])
            if not hmac.compare_digest(str(stored["seal"]), _seal(key, covers, packed)):
                return None  # changed since it was written, or for another request or key
            return cls(key, struct.unpack(f"<{len(packed) // 4}I", packed), covers)
        except (ValueError, KeyError, TypeError, AttributeError, struct.error):
            return None

    @property
    def function(self) -> TagKey:
        if self._function is None:
            self._function = TagKey(self.key)
        return self._function

    def flagged(self, ids: Any) -> Any:
        """A boolean Arrow array: whether each id (ids: an Arrow binary array without nulls) may be a requested one,
        by the first bits of its tag, looked up in a table of 2**bits bits: as many bits as hold one requested tag in
        about 128 entries (a table small enough to stay in the cache while the objects pass through it), so that about
        one id in 128 or fewer is flagged by its first bits alone (and then hashed)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        bits = min(TAG_BITS, max(10, len(self.tags).bit_length() + 7))
        if self._table is None:
            table = bytearray(1 << (bits - 3))
            for tag in self.tags:
                entry = tag >> (TAG_BITS - bits)
                table[entry >> 3] |= 1 << (entry & 7)
            self._table = pa.Array.from_buffers(pa.bool_(), 1 << bits, [None, pa.py_buffer(table)])
        return pc.take(self._table, self.function.tags(ids, bits))


def _seal(key: bytes, covers: str, packed: bytes) -> str:
    return hmac.new(key, covers.encode() + b"|" + packed, hashlib.sha256).hexdigest()


def write(s3: S3Client, where: S3Uri, tags: CheckTags) -> None:
    """Store a request's tags (written again by a retried start: the same ids, key and request give the same bytes)."""
    s3.put_object(Bucket=where.bucket, Key=where.key, Body=tags.document(), ContentType="application/json")


def read(s3: S3Client, where: S3Uri, hash_key: bytes, request_id: str) -> CheckTags | None:
    """A request's stored tags, or None when none were written (a launcher from before them, a purge whose starter
    held no ids), or they were written by another version of their definition, or changed since."""
    try:
        body = s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise
    return CheckTags.from_document(body, hash_key, request_id)
