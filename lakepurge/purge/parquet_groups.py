"""Server-side splice of a Parquet file by row group: the row groups holding target rows are rewritten, every other
row group is copied inside S3, and a new footer points at where each one now is.

A Parquet file is `PAR1`, its row groups' column chunks, then the footer (FileMetaData, Thrift compact) and `PAR1`;
the footer holds every page's absolute offset. Here:

- the footer is read with two small ranged GETs and decoded field by field (lakepurge.purge.thrift_compact), unknown
  fields kept;
- a row group with target rows is fetched and rewritten by the whole-file rewriter (lakepurge.purge.rewrite.
  rewrite_parquet: each named row checked to be the users', the schema, physical types and each column's codec kept,
  statistics written anew), run on a one-group Parquet file made of that group's bytes and a footer naming only it;
  its new column chunks replace the old ones, provided they have exactly the file's schema (else the file is
  rewritten whole, as before);
- every other row group keeps its bytes, statistics, encodings and codecs; its offsets move by where it now starts;
- page indexes and bloom filters are not carried (as in a whole rewrite): their offsets are dropped from the footer.

The new file is the source's magic and row groups in their order (copied, or rewritten), then the new footer.
"""

from __future__ import annotations

import io
import itertools
import struct
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakepurge.core.config import DatasetConfig
from lakepurge.core.s3io import ObjectChanged, ObjectHead, open_range
from lakepurge.purge.rewrite import rewrite_parquet
from lakepurge.purge.spliced_write import Fresh, Kept, NotWorthSplicing, Segment
from lakepurge.purge.streams import Staged
from lakepurge.purge.thrift_compact import (
    I16,
    I64,
    LIST,
    List,
    Struct,
    ThriftError,
    drop,
    get,
    put,
    read_struct,
    write_struct,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MAGIC = b"PAR1"
_TAIL_GUESS = 64 * 1024  # the footer's last bytes, read first: most footers fit

# FileMetaData, RowGroup, ColumnChunk and ColumnMetaData field ids (parquet.thrift).
_FILE_SCHEMA, _FILE_ROWS, _FILE_GROUPS, _FILE_ENCRYPTION, _FILE_SIGNING_KEY = 2, 3, 4, 8, 9
_GROUP_COLUMNS, _GROUP_ROWS, _GROUP_OFFSET, _GROUP_ORDINAL = 1, 3, 5, 7
_CHUNK_OFFSET, _CHUNK_META = 2, 3
_CHUNK_PAGE_INDEX = (4, 5, 6, 7)  # offset index offset/length, column index offset/length
_CHUNK_ENCRYPTED = (8, 9)
_META_COMPRESSED, _META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE = 7, 9, 10, 11
_META_BLOOM = (14, 15)
# SchemaElement fields that decide how column chunks are laid out and read: type, type length, repetition, name,
# children, converted type, scale, precision, logical type.
_SCHEMA_SHAPE = (1, 2, 3, 4, 5, 6, 7, 8, 10)

Holding = Callable[[Staged, str], list[int]]


@dataclass(slots=True)
class ParquetSpliced:
    segments: list[Segment]
    erased: list[int] = field(default_factory=list)  # rows of the file read (0-based, across its row groups)
    holding: list[int] = field(default_factory=list)  # rows of rewritten groups that still hold a user
    windows: int = 0  # row groups rewritten
    read_bytes: int = 0

    def close(self) -> None:
        for segment in self.segments:
            if isinstance(segment, Fresh):
                segment.staged.close()


def splice_parquet(
    s3: S3Client,
    head: ObjectHead,
    dataset: DatasetConfig,
    rows: list[int],
    users: Container[str],
    holding: Holding,
) -> ParquetSpliced:
    """The spliced file's segments (see the module docstring); NotWorthSplicing when the file cannot be spliced
    (encrypted, row groups out of order, a rewritten group that would not match the schema)."""
    metadata, footer_start, read = _footer(s3, head)
    if get(metadata, _FILE_ENCRYPTION) is not None or get(metadata, _FILE_SIGNING_KEY) is not None:
        raise NotWorthSplicing("an encrypted Parquet footer")
    groups: list[Struct] = get(metadata, _FILE_GROUPS, List(12, [])).values
    spans = [_span(group) for group in groups]
    if not spans or any(a[1] > b[0] for a, b in itertools.pairwise(spans)) or spans[-1][1] > footer_start:
        raise NotWorthSplicing("row groups not laid out in order")
    if spans[0][0] < len(MAGIC):
        raise NotWorthSplicing("a row group overlaps the magic")
    firsts, total = [], 0
    for group in groups:
        firsts.append(total)
        total += get(group, _GROUP_ROWS)
    targets = sorted(set(rows))
    spliced = ParquetSpliced(segments=[], read_bytes=read)
    replacements: list[_Replacement | None] = []  # per row group: None (copied) or what replaces it
    try:
        for index, group in enumerate(groups):
            first, count = firsts[index], get(group, _GROUP_ROWS)
            mine = [t - first for t in targets if first <= t < first + count]
            if not mine:
                replacements.append(None)
                continue
            staged, erased = _rewrite_group(s3, head, dataset, metadata, group, spans[index], mine, users)
            spliced.read_bytes += spans[index][1] - spans[index][0]
            spliced.erased.extend(first + row for row in erased)
            spliced.holding.extend(first + row for row in holding(staged, head.key))
            spliced.windows += 1
            output = staged.reader().read()
            staged.close()
            out_meta = _parse_footer(output)
            if not _same_schema(get(metadata, _FILE_SCHEMA).values, get(out_meta, _FILE_SCHEMA).values):
                raise NotWorthSplicing("a rewritten row group would not have the file's schema")
            out_groups = get(out_meta, _FILE_GROUPS, List(12, [])).values
            if not out_groups:  # every row of the group erased: the group goes
                replacements.append(_Replacement(None, 0, None))
                continue
            (out_group,) = out_groups
            start, end = _span(out_group)
            replacement = _Replacement(out_group, start, Fresh(Staged.of([output[start:end]])))
            replacements.append(replacement)
        spliced.segments, footer = _layout(metadata, groups, spans, replacements)
        spliced.segments.append(Fresh(Staged.of([footer, struct.pack("<I", len(footer)), MAGIC])))
    except BaseException:
        for replaced in replacements:
            if replaced is not None and replaced.body is not None:
                replaced.body.staged.close()
        spliced.close()
        raise
    return spliced


@dataclass(slots=True)
class _Replacement:
    """A rewritten row group: its footer entry, where its bytes started in the file it was written to, its bytes (None
    when no row is left)."""

    group: Struct | None
    start: int
    body: Fresh | None


def _layout(
    metadata: Struct, groups: list[Struct], spans: list[tuple[int, int]], replacements: list[_Replacement | None]
) -> tuple[list[Segment], bytes]:
    """The new file's segments up to the footer, and the footer: each group copied (with the bytes between two
    copied groups, so that they stay one range) or rewritten, in order, its offsets moved to where it now is."""
    segments: list[Segment] = [Kept(0, spans[0][0])]
    footer_groups: list[Struct] = []
    position = spans[0][0]  # where the next group starts in the new file
    rows = 0
    for index, (group, span) in enumerate(zip(groups, spans, strict=True)):
        replacement = replacements[index]
        if replacement is None:
            following_copied = index + 1 < len(groups) and replacements[index + 1] is None
            copied_until = spans[index + 1][0] if following_copied else span[1]
            _shift(group, position - span[0])
            footer_groups.append(group)
            rows += get(group, _GROUP_ROWS)
            _append_kept(segments, Kept(span[0], copied_until))
            position += copied_until - span[0]
        elif replacement.group is not None and replacement.body is not None:
            _shift(replacement.group, position - replacement.start)
            footer_groups.append(replacement.group)
            rows += get(replacement.group, _GROUP_ROWS)
            segments.append(replacement.body)
            position += replacement.body.size
    for ordinal, group in enumerate(footer_groups):
        if get(group, _GROUP_ORDINAL) is not None:
            put(group, _GROUP_ORDINAL, I16, ordinal)
    put(metadata, _FILE_GROUPS, LIST, List(12, footer_groups))
    put(metadata, _FILE_ROWS, I64, rows)
    return segments, write_struct(metadata)


def _append_kept(segments: list[Segment], kept: Kept) -> None:
    last = segments[-1] if segments else None
    if isinstance(last, Kept) and last.end == kept.start:
        segments[-1] = Kept(last.start, kept.end)
    else:
        segments.append(kept)


def _span(group: Struct) -> tuple[int, int]:
    """The bytes [start, end) of a row group's column chunks."""
    start, end = None, 0
    for chunk in get(group, _GROUP_COLUMNS).values:
        meta = get(chunk, _CHUNK_META)
        if meta is None:
            raise NotWorthSplicing("a column chunk without its metadata")
        first = get(meta, _META_DATA_PAGE)
        dictionary = get(meta, _META_DICTIONARY_PAGE)
        if dictionary is not None and 0 < dictionary < first:
            first = dictionary
        start = first if start is None else min(start, first)
        end = max(end, first + get(meta, _META_COMPRESSED))
    if start is None:
        raise NotWorthSplicing("a row group without columns")
    return start, end


def _shift(group: Struct, delta: int) -> None:
    """Move a row group's offsets by delta; drop what points outside its column chunks (page indexes, blooms)."""
    offset = get(group, _GROUP_OFFSET)
    if offset is not None:
        put(group, _GROUP_OFFSET, I64, offset + delta)
    for chunk in get(group, _GROUP_COLUMNS).values:
        if any(get(chunk, i) is not None for i in _CHUNK_ENCRYPTED):
            raise NotWorthSplicing("an encrypted column chunk")
        drop(chunk, *_CHUNK_PAGE_INDEX)
        offset = get(chunk, _CHUNK_OFFSET)
        if offset:
            put(chunk, _CHUNK_OFFSET, I64, offset + delta)
        meta = get(chunk, _CHUNK_META)
        drop(meta, *_META_BLOOM)
        for field_id in (_META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE):
            value = get(meta, field_id)
            if value:
                put(meta, field_id, I64, value + delta)


def _same_schema(source: list[Struct], rewritten: list[Struct]) -> bool:
    """Whether two schemas lay column chunks out alike (the root's name and repetition aside: writers differ). A field
    set on one side only (a logical type one writer adds beside the converted type) does not count."""
    if len(source) != len(rewritten) or not source or get(source[0], 5) != get(rewritten[0], 5):
        return False
    for a, b in zip(source[1:], rewritten[1:], strict=True):  # the root: only its children count
        for field_id in _SCHEMA_SHAPE:
            mine, theirs = get(a, field_id), get(b, field_id)
            if mine is not None and theirs is not None and mine != theirs:
                return False
            if field_id in (1, 3, 5) and (mine is None) != (theirs is None):
                return False
    return True


def _rewrite_group(
    s3: S3Client,
    head: ObjectHead,
    dataset: DatasetConfig,
    metadata: Struct,
    group: Struct,
    span: tuple[int, int],
    rows: list[int],
    users: Container[str],
) -> tuple[Staged, list[int]]:
    """One row group rewritten by rewrite_parquet, run on a file of that group alone: its bytes, behind the magic,
    and a footer naming only it (its offsets moved there)."""
    data = _ranged(s3, head, span[0], span[1])
    alone = [f for f in metadata if f.id not in (_FILE_GROUPS, _FILE_ROWS)]
    single = _copy(group)
    _shift(single, len(MAGIC) - span[0])
    put(alone, _FILE_ROWS, I64, get(group, _GROUP_ROWS))
    put(alone, _FILE_GROUPS, LIST, List(12, [single]))
    footer = write_struct(alone)
    virtual = b"".join((MAGIC, data, footer, struct.pack("<I", len(footer)), MAGIC))
    return rewrite_parquet(io.BytesIO(virtual), rows, users, dataset)


def _copy(value: Any) -> Any:
    """A deep copy of a decoded struct (fields are edited in place)."""
    fields, _ = read_struct(write_struct(value))
    return fields


def _parse_footer(data: bytes) -> Struct:
    if data[-4:] != MAGIC:
        raise NotWorthSplicing("not a Parquet file (or an encrypted footer)")
    length = struct.unpack("<I", data[-8:-4])[0]
    try:
        metadata, _ = read_struct(data[-8 - length : -8])
    except ThriftError as exc:
        raise NotWorthSplicing(f"the footer could not be read: {exc}") from None
    return metadata


def _footer(s3: S3Client, head: ObjectHead) -> tuple[Struct, int, int]:
    """The file's footer (decoded), where it starts, and the bytes read to get it."""
    size = head.size
    tail = _ranged(s3, head, max(0, size - _TAIL_GUESS), size)
    read = len(tail)
    if tail[-4:] != MAGIC:
        raise NotWorthSplicing("not a Parquet file (or an encrypted footer)")
    length = struct.unpack("<I", tail[-8:-4])[0]
    start = size - 8 - length
    if start < len(MAGIC):
        raise NotWorthSplicing("a damaged footer")
    if length + 8 > len(tail):
        tail = _ranged(s3, head, start, size)
        read += len(tail)
    return _parse_footer(tail[-(length + 8) :] if length + 8 <= len(tail) else tail), start, read


def _ranged(s3: S3Client, head: ObjectHead, start: int, end: int) -> bytes:
    body = open_range(s3, head, start, end)
    try:
        data = body.read()
    finally:
        body.close()
    if len(data) != end - start:
        raise ObjectChanged(head.s3path)  # cut short: read again
    return data
