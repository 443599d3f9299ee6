"""Avro object container files, read: Iceberg's manifest lists and manifests.

Enough of the Avro specification for them (and any file of the same kind): the header (magic, metadata, sync
marker), blocks compressed with the null, deflate or zstandard codec, and every type (records, enums, arrays, maps,
unions, fixed, named types) decoded by the writer's schema, which the file holds. Logical types are left as their
underlying values (Iceberg's bounds are bytes anyway). Written here rather than taken from a library so that the
Lambda functions, which have neither pyiceberg nor fastavro, read Iceberg tables too.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

from lakepurge.tables.base import TableError

MAGIC = b"Obj\x01"

Decoder = Callable[["_Reader"], Any]


class _Reader:
    __slots__ = ("data", "position")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def long(self) -> int:
        data, position = self.data, self.position
        byte = data[position]
        position += 1
        value = byte & 0x7F
        shift = 7
        while byte & 0x80:
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
        self.position = position
        return (value >> 1) ^ -(value & 1)

    def raw(self, size: int) -> bytes:
        start = self.position
        end = start + size
        if end > len(self.data):
            raise TableError("an Avro file ends in the middle of a value")
        self.position = end
        return self.data[start:end]

    def bytes_(self) -> bytes:
        return self.raw(self.long())


_PRIMITIVES: dict[str, Decoder] = {
    "null": lambda r: None,
    "boolean": lambda r: r.raw(1) != b"\x00",
    "int": _Reader.long,
    "long": _Reader.long,
    "float": lambda r: struct.unpack("<f", r.raw(4))[0],
    "double": lambda r: struct.unpack("<d", r.raw(8))[0],
    "bytes": _Reader.bytes_,
    "string": lambda r: r.bytes_().decode("utf-8"),
}


def _compile(schema: Any, names: dict[str, Decoder]) -> Decoder:
    """A decoder for a schema: a closure per node, so a record's fields are not looked up again for every record."""
    if isinstance(schema, list):
        branches = [_compile(branch, names) for branch in schema]
        return lambda r: branches[r.long()](r)
    if isinstance(schema, dict) and schema.get("type") in _COMPLEX:
        return _COMPLEX[schema["type"]](schema, names)
    kind = schema.get("type") if isinstance(schema, dict) else schema  # {"type": "long", "logicalType": ...}
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind in names:
        return lambda r: names[kind](r)  # noqa: PLW0108 (late-bound: a recursive type is still being defined)
    raise TableError(f"unknown Avro type {kind!r}")


def _record(schema: dict[str, Any], names: dict[str, Decoder]) -> Decoder:
    fields: list[tuple[str, Decoder]] = []

    def decode(reader: _Reader) -> dict[str, Any]:
        return {name: field(reader) for name, field in fields}

    names[schema["name"]] = decode
    fields.extend((field["name"], _compile(field["type"], names)) for field in schema["fields"])
    return decode


def _enum(schema: dict[str, Any], names: dict[str, Decoder]) -> Decoder:
    symbols = schema["symbols"]
    names[schema["name"]] = decode = lambda r: symbols[r.long()]
    return decode


def _fixed(schema: dict[str, Any], names: dict[str, Decoder]) -> Decoder:
    size = int(schema["size"])
    names[schema["name"]] = decode = lambda r: r.raw(size)
    return decode


def _array_of(schema: dict[str, Any], names: dict[str, Decoder]) -> Decoder:
    item = _compile(schema["items"], names)
    return lambda r: _array(r, item)


def _map_of(schema: dict[str, Any], names: dict[str, Decoder]) -> Decoder:
    value = _compile(schema["values"], names)
    return lambda r: dict(_array(r, lambda r: (_string(r), value(r))))


_COMPLEX: dict[str, Callable[[dict[str, Any], dict[str, Decoder]], Decoder]] = {
    "record": _record,
    "error": _record,
    "enum": _enum,
    "fixed": _fixed,
    "array": _array_of,
    "map": _map_of,
}


def _string(reader: _Reader) -> str:
    return reader.bytes_().decode("utf-8")


def _array(reader: _Reader, item: Decoder) -> list[Any]:
    """An array's (or a map's) items, block by block until a block of 0 items; a negative count is followed by the
    block's size in bytes."""
    items: list[Any] = []
    while True:
        count = reader.long()
        if count == 0:
            return items
        if count < 0:
            count = -count
            reader.long()
        for _ in range(count):
            items.append(item(reader))


def read_container(body: bytes) -> tuple[dict[str, bytes], list[Any]]:
    """The file's metadata (``avro.schema``, ``avro.codec``, and the writer's own keys) and every record."""
    if body[:4] != MAGIC:
        raise TableError("not an Avro object container file")
    reader = _Reader(body)
    reader.position = 4
    metadata: dict[str, bytes] = dict(_array(reader, lambda r: (_string(r), r.bytes_())))
    sync = reader.raw(16)
    try:
        schema = json.loads(metadata["avro.schema"])
    except (KeyError, ValueError) as exc:
        raise TableError("an Avro file without a readable schema") from exc
    decode = _compile(schema, {})
    codec = metadata.get("avro.codec", b"null").decode()
    records: list[Any] = []
    while reader.position < len(body):
        count = reader.long()
        block = _inflate(codec, reader.bytes_())
        if reader.raw(16) != sync:
            raise TableError("an Avro file's block is not followed by its sync marker (a damaged file)")
        inner = _Reader(block)
        records.extend(decode(inner) for _ in range(count))
    return metadata, records


def _inflate(codec: str, block: bytes) -> bytes:
    if codec == "null":
        return block
    if codec == "deflate":
        return zlib.decompress(block, -15)
    if codec == "zstandard":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(block)
    raise TableError(f"an Avro file compressed with {codec!r}: lakepurge reads null, deflate and zstandard")
