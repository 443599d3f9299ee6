"""Reading what a Delta log holds without deltalake: deletion vectors (Z85, the RoaringBitmapArray in its portable
serialization, with array and run containers), and finding the users' ids in log entries by their keyed hashes."""

from __future__ import annotations

import struct

import pytest

from lakepurge.core.privacy import HashedUsers, Pseudonymizer
from lakepurge.tables.delta import decode_bitmap_array, deletion_vector_key, z85_decode
from lakepurge.tables.scan import json_names, object_names

pytestmark = pytest.mark.unit

MAGIC = 1681511377


def roaring_array_containers(containers: dict[int, list[int]]) -> bytes:
    """A 32-bit roaring bitmap without run containers (cookie 12346), array containers only."""
    keys = sorted(containers)
    out = struct.pack("<II", 12346, len(keys))
    for key in keys:
        out += struct.pack("<HH", key, len(containers[key]) - 1)
    offset = len(out) + 4 * len(keys)
    for key in keys:
        out += struct.pack("<I", offset)
        offset += 2 * len(containers[key])
    for key in keys:
        out += struct.pack(f"<{len(containers[key])}H", *containers[key])
    return out


def roaring_runs(key: int, runs: list[tuple[int, int]]) -> bytes:
    """One run container (cookie 12347 with one container: no offsets below four containers)."""
    cardinality = sum(length for _, length in runs)
    out = struct.pack("<I", 12347 | (0 << 16)) + bytes([1])  # one container, flagged as runs
    out += struct.pack("<HH", key, cardinality - 1)
    out += struct.pack("<H", len(runs))
    for start, length in runs:
        out += struct.pack("<HH", start, length - 1)
    return out


def test_given_a_deletion_vector_with_array_and_run_containers_when_decoded_then_every_position_is_found():
    low = roaring_array_containers({0: [1, 7, 65535], 2: [3]})  # 1, 7, 65535, 2*65536+3
    high = roaring_runs(0, [(10, 3)])  # 10, 11, 12 in the high half 1: 2**32 + 10 ...
    data = struct.pack("<iq", MAGIC, 2) + struct.pack("<I", 0) + low + struct.pack("<I", 1) + high

    rows = decode_bitmap_array(data)

    assert rows == {1, 7, 65535, 2 * 65536 + 3, 2**32 + 10, 2**32 + 11, 2**32 + 12}


def test_given_z85_text_when_decoded_then_it_is_the_specs_bytes_and_a_uuid_names_its_vector_file():
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    encoded = "HelloWorldHelloWorld"  # 20 characters: a UUID's 16 bytes
    key = deletion_vector_key("t/", {"storageType": "u", "pathOrInlineDv": "ab" + encoded})
    assert key == "t/ab/deletion_vector_864fd26f-b559-f75b-864f-d26fb559f75b.bin"
    assert deletion_vector_key("t/", {"storageType": "i", "pathOrInlineDv": encoded}) is None


@pytest.fixture
def users() -> HashedUsers:
    pseudonymizer = Pseudonymizer(b"k" * 32)
    return HashedUsers(pseudonymizer.many(["alice@example.com", "4242"]), pseudonymizer)


def test_given_log_entries_when_read_for_hashed_users_then_stats_and_predicate_literals_name_them_substrings_do_not(
    users,
):
    stats = '{"numRecords":2,"minValues":{"user_id":"alice@example.com"},"maxValues":{"user_id":"bob@example.com"}}'
    add = b'{"add":{"path":"p.parquet","stats":' + repr(stats).replace("'", '"').encode() + b"}}\n"
    assert json_names(add, users)
    delete = b'{"commitInfo":{"operationParameters":{"predicate":"user_id = \'alice@example.com\'"}}}\n'
    assert json_names(delete, users)
    assert json_names(b'{"add":{"stats":"{\\"minValues\\":{\\"account\\":4242}}"}}\n', users)  # an integer id
    other = b'{"commitInfo":{"operationParameters":{"predicate":"user_id = \'malice@example.com\'"}}}\n'
    assert not json_names(other, users)
    assert not object_names(b"\x01\x02", "t/deletion_vector_x.bin", users, ("user_id",), False, 1 << 20)


@pytest.mark.parametrize(
    "column",
    [
        ["alice", "bob", None, "alice", "", "x\x00y", "é" * 600, "bob"],
        [7, None, -3, 7, 0],
    ],
    ids=["strings", "integers"],
)
@pytest.mark.parametrize("view", [False, True])
def test_given_a_data_file_when_grouped_by_arrow_then_the_answer_is_the_indexers_reader(column, view):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakepurge.records.formats import group_records
    from lakepurge.tables.scan import data_file_users

    values = pa.array(column)
    if view and pa.types.is_string(values.type):
        values = values.cast(pa.string_view())
    out = io.BytesIO()
    pq.write_table(pa.table({"user_id": values, "n": list(range(len(column)))}), out)
    indexer = group_records(io.BytesIO(out.getvalue()), "f.parquet", "parquet", ["user_id"], 1 << 20).lines_by_user
    assert data_file_users(out.getvalue(), "f.parquet", ["user_id"], 1 << 20) == indexer


def test_given_a_concurrent_commit_that_removed_a_file_being_replaced_when_checked_then_it_conflicts():
    from lakepurge.purge.table_commit import CommitConflict, _check_concurrent

    replaced = {"day=d1/part-a.parquet"}
    appended = [{"commitInfo": {"operation": "WRITE"}}, {"add": {"path": "day=d6/part-b.parquet"}}]
    _check_concurrent(appended, replaced, 4)  # stepped over: the erasure commits the next version

    removed = [{"remove": {"path": "day=d1/part-a.parquet", "deletionVector": {"storageType": "u"}}}]
    with pytest.raises(CommitConflict, match="removed a file"):
        _check_concurrent(removed, replaced, 4)
    with pytest.raises(CommitConflict, match="schema or protocol"):
        _check_concurrent([{"metaData": {"id": "t"}}], replaced, 4)
