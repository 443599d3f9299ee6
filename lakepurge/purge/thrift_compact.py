"""Thrift's compact protocol, as Parquet footers are written in it: any struct read into plain Python values and written
back, unknown fields included, so that a footer can be edited field by field (lakepurge.purge.parquet_groups).

A struct is a list of Field (id, wire type, value), in the order read. Values: int (byte, i16, i32, i64), float,
bytes, bool, List (element type, values), dict (a map: (key type, value type) in `types`, items) and structs.
Written back, a struct's fields come out in the order held (Parquet readers accept any order; writers use id order).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

# Wire types of the compact protocol.
TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)


@dataclass(slots=True)
class Field:
    id: int
    type: int
    value: Any


@dataclass(slots=True)
class List:
    element: int
    values: list[Any]


@dataclass(slots=True)
class Map:
    key: int
    value: int
    items: list[tuple[Any, Any]]


Struct = list[Field]


class ThriftError(ValueError):
    """The bytes are not a compact-protocol struct (a damaged or encrypted footer)."""


def get(fields: Struct, field_id: int, default: Any = None) -> Any:
    """The value of a struct's field, or default."""
    for item in fields:
        if item.id == field_id:
            return item.value
    return default


def put(fields: Struct, field_id: int, wire_type: int, value: Any) -> None:
    """Set a field (added where its id puts it when absent)."""
    for item in fields:
        if item.id == field_id:
            item.value = value
            return
    fields.append(Field(field_id, wire_type, value))
    fields.sort(key=lambda f: f.id)


def drop(fields: Struct, *field_ids: int) -> None:
    fields[:] = [item for item in fields if item.id not in field_ids]


class _Reader:
    def __init__(self, data: bytes, position: int = 0) -> None:
        self.data = data
        self.position = position

    def byte(self) -> int:
        if self.position >= len(self.data):
            raise ThriftError("the struct ends early")
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ThriftError("a varint runs too long")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def take(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise ThriftError("a value runs past the struct")
        piece = self.data[self.position : self.position + size]
        self.position += size
        return piece

    def value(self, wire_type: int) -> Any:
        if wire_type in (LIST, SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return List(element, [self.value(element) for _ in range(size)])
        if wire_type == MAP:
            size = self.varint()
            kinds = self.byte() if size else 0
            key, value = kinds >> 4, kinds & 0x0F
            return Map(key, value, [(self.value(key), self.value(value)) for _ in range(size)])
        if wire_type == STRUCT:
            return self.struct()
        return self.scalar(wire_type)

    def scalar(self, wire_type: int) -> Any:
        value: Any
        if wire_type in (TRUE, FALSE):  # inside a container: one byte, 1 is true
            value = self.byte() == TRUE
        elif wire_type == BYTE:
            byte = self.byte()
            value = byte - 256 if byte > 127 else byte
        elif wire_type in (I16, I32, I64):
            value = self.zigzag()
        elif wire_type == DOUBLE:
            value = struct.unpack("<d", self.take(8))[0]
        elif wire_type == BINARY:
            value = self.take(self.varint())
        else:
            raise ThriftError(f"unknown wire type {wire_type}")
        return value

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return fields
            wire_type, delta = header & 0x0F, header >> 4
            field_id = last + delta if delta else self.zigzag()
            if wire_type in (TRUE, FALSE):
                value: Any = wire_type == TRUE
            else:
                value = self.value(wire_type)
            fields.append(Field(field_id, wire_type, value))
            last = field_id


def read_struct(data: bytes, position: int = 0) -> tuple[Struct, int]:
    """The struct starting at `position`, and where it ends."""
    reader = _Reader(data, position)
    return reader.struct(), reader.position


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, value: int) -> None:
        while True:
            if value < 0x80:
                self.out.append(value)
                return
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7

    def zigzag(self, value: int) -> None:
        self.varint((value << 1) ^ (value >> 63))

    def value(self, wire_type: int, value: Any) -> None:
        if wire_type in (TRUE, FALSE):
            self.out.append(TRUE if value else FALSE)
        elif wire_type == BYTE:
            self.out.append(value & 0xFF)
        elif wire_type in (I16, I32, I64):
            self.zigzag(value)
        elif wire_type == DOUBLE:
            self.out += struct.pack("<d", value)
        elif wire_type == BINARY:
            self.varint(len(value))
            self.out += value
        elif wire_type in (LIST, SET):
            size = len(value.values)
            if size < 15:
                self.out.append((size << 4) | value.element)
            else:
                self.out.append(0xF0 | value.element)
                self.varint(size)
            for item in value.values:
                self.value(value.element, item)
        elif wire_type == MAP:
            self.varint(len(value.items))
            if value.items:
                self.out.append((value.key << 4) | value.value)
                for key, item in value.items:
                    self.value(value.key, key)
                    self.value(value.value, item)
        elif wire_type == STRUCT:
            self.struct(value)
        else:
            raise ThriftError(f"unknown wire type {wire_type}")

    def struct(self, fields: Struct) -> None:
        last = 0
        for item in fields:
            wire_type = (TRUE if item.value else FALSE) if item.type in (TRUE, FALSE) else item.type
            delta = item.id - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | wire_type)
            else:
                self.out.append(wire_type)
                self.zigzag(item.id)
            if item.type not in (TRUE, FALSE):
                self.value(item.type, item.value)
            last = item.id
        self.out.append(0)


def write_struct(fields: Struct) -> bytes:
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)
