"""The invariant every purge is held to (DESIGN.md): after erasing users U, each touched object has the same number
of lines; the lines of U are blank; every other line is byte-identical; no object outside the report changed; the
sidecar of an erased one-user object is gone with it.
Checked against the generator's ground truth, never against lakepurge's own reading of the data."""

from __future__ import annotations

import csv
import gzip
import io
from typing import Any

from lakepurge.core.config import Settings
from lakepurge.local.samples import SampleLake


def snapshot(s3: Any, bucket: str) -> dict[str, bytes]:
    objects = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            objects[item["Key"]] = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return objects


def _text(key: str, body: bytes) -> bytes:
    return gzip.decompress(body) if key.endswith(".gz") else body


def erased_lines(lake: SampleLake, users: set[str]) -> dict[str, set[int]]:
    lines: dict[str, set[int]] = {}
    for user, path, line in lake.truth:
        if user in users:
            lines.setdefault(path, set()).add(line)
    return lines


def assert_invariant(
    lake: SampleLake,
    settings: Settings,
    users: set[str],
    before: dict[str, bytes],
    after: dict[str, bytes],
    partial: bool = False,
) -> dict[str, int]:
    """Returns the records erased in each object of the report (s3path -> count). partial: the purge may have stopped
    part-way (a fault): an object of the report may still be as it was, but one that changed must be exactly erased,
    and nothing else may have changed."""
    import pyarrow.parquet as pq

    targets = erased_lines(lake, users)
    erased: dict[str, int] = {}
    for key, old in before.items():
        path = f"s3://{lake.bucket}/{key}"
        dataset = settings.dataset_for(lake.bucket, key)
        if dataset is not None and dataset.is_sidecar(key):
            if f"s3://{lake.bucket}/{dataset.data_key(key)}" in targets:
                assert key not in after or (partial and after[key] == old), f"{key} names an erased user and exists"
            else:
                assert after.get(key) == old, f"{key} changed but names none of the erased users"
            continue
        if path not in targets or dataset is None:
            assert after.get(key) == old, f"{key} changed but holds none of the erased users"
            continue
        if partial and after.get(key) == old:
            erased[path] = 0  # not reached (or not written) before the run stopped
            continue
        if dataset.erase == "delete-object":
            assert key not in after, f"{key} belongs to an erased user and still exists"
            erased[path] = 1
            continue
        new = after[key]
        erased[path] = len(targets[path])
        if dataset.format == "parquet":
            old_table = pq.read_table(io.BytesIO(old))
            new_table = pq.read_table(io.BytesIO(new))
            assert new_table.schema == old_table.schema
            kept = [row for n, row in enumerate(old_table.to_pylist()) if n not in targets[path]]
            assert new_table.to_pylist() == kept, key
            continue
        old_lines = _text(key, old).split(b"\n")
        new_lines = _text(key, new).split(b"\n")
        assert len(new_lines) == len(old_lines), f"{key}: line count changed"
        if key.endswith(".gz"):
            assert new[:2] == b"\x1f\x8b", f"{key}: gzip written back uncompressed"
        spans = record_spans(_text(key, old)) if dataset.format == "csv" else {}
        continuation = {line for start in targets[path] for line in range(start + 1, start + spans.get(start, 1))}
        for number, (was, now) in enumerate(zip(old_lines, new_lines, strict=True)):
            if number in targets[path]:
                carriage = b"\r" if was.endswith(b"\r") else b""
                # CSV: as many empty fields as the header has columns (the generator writes no quoted header).
                blank = b"{}" if dataset.format == "jsonl" else b"," * old_lines[0].count(b",")
                assert now == blank + carriage, f"{key}:{number} not blanked"
            elif number in continuation:
                assert now == b"", f"{key}:{number} is a continuation line of an erased record and not emptied"
            else:
                assert now == was, f"{key}:{number} changed but is not the erased users'"
    return erased


def record_spans(text: bytes) -> dict[int, int]:
    """CSV record start line -> its physical lines, by the standard library's reader (the ground truth grammar)."""
    lines = iter(text.decode().splitlines(keepends=True))
    reader = csv.reader(lines)
    spans: dict[int, int] = {}
    start = 0
    for _ in reader:
        spans[start] = reader.line_num - start
        start = reader.line_num
    return spans


def assert_vacuumed(
    lake: SampleLake, settings: Settings, users: set[str], before: dict[str, bytes], after: dict[str, bytes]
) -> None:
    """After purge and vacuum: each line-based object is the original without exactly the erased users' records
    (all their physical lines); everything else is byte-identical."""
    targets = erased_lines(lake, users)
    for key, old in before.items():
        path = f"s3://{lake.bucket}/{key}"
        dataset = settings.dataset_for(lake.bucket, key)
        if dataset is None or dataset.format == "parquet" or dataset.per_object or path not in targets:
            continue
        text = _text(key, old)
        spans = record_spans(text) if dataset.format == "csv" else {}
        gone = {line for start in targets[path] for line in range(start, start + spans.get(start, 1))}
        lines = text.split(b"\n")
        kept = [line for number, line in enumerate(lines) if number not in gone]
        if lines[-1] == b"" and kept and kept[-1] != b"":
            kept.append(b"")  # the final newline stays
        assert _text(key, after[key]) == b"\n".join(kept), f"{key}: not exactly the erased records removed"


def versions_holding(s3: Any, lake: SampleLake, settings: Settings, users: set[str]) -> list[str]:
    """Every version, current or noncurrent, of the lake's objects that still holds a record of the users, decided
    from the generator's truth (never from lakepurge's reading): a version of a one-user object or of its sidecar as
    uploaded, a Parquet version with one of their rows, a line-based version with one of their lines as uploaded.
    "key@version" of each."""
    import pyarrow.parquet as pq

    targets = erased_lines(lake, users)
    originals = {obj.key: obj.body for obj in lake.objects}
    holding = []
    for key, original in originals.items():
        dataset = settings.dataset_for(lake.bucket, key)
        if dataset is None:
            continue
        data_key = dataset.data_key(key) if dataset.is_sidecar(key) else key
        path = f"s3://{lake.bucket}/{data_key}"
        if path not in targets:
            continue
        page = s3.list_object_versions(Bucket=lake.bucket, Prefix=key)
        for version in page.get("Versions", []):
            if version["Key"] != key:
                continue
            body = s3.get_object(Bucket=lake.bucket, Key=key, VersionId=version["VersionId"])["Body"].read()
            if dataset.is_sidecar(key):
                held = body == original
            elif dataset.erase == "delete-object":
                held = True  # the object is theirs
            elif dataset.format == "parquet":
                held = any(row in users for row in pq.read_table(io.BytesIO(body)).column("user_id").to_pylist())
            else:
                old_lines, new_lines = _text(key, original).split(b"\n"), _text(key, body).split(b"\n")
                held = any(n < len(new_lines) and new_lines[n] == old_lines[n] for n in targets[path])
            if held:
                holding.append(f"{key}@{version['VersionId']}")
    return holding
