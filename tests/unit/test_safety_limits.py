"""The report's safety limits and sentinel ids: a wrong id must not wipe an object or a dataset."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lakepurge.core.config import Settings, parse_settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.index.base import WHOLE_OBJECT, ObjectIndex
from lakepurge.index.in_memory import MemoryIndexStore
from lakepurge.reports.report import Report, SafetyLimitExceeded, build_report, check_sentinels, object_reference

pytestmark = pytest.mark.unit

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PSEUDONYMIZER = Pseudonymizer(b"unit-test-hash-key-0123456789")


def settings(**purge: Any) -> Settings:
    """Two line datasets and one one-user-per-object dataset; no [[relational]] (counting it needs PostgreSQL)."""
    return parse_settings(
        {
            "index": {"backend": "postgres", "dsn": "postgresql://never-connected/"},
            "reports": {"location": "s3://lake-reports/"},
            "datasets": [
                {"name": "reviews", "location": "s3://lake/reviews/", "id_fields": ["user_id"]},
                {"name": "profiles", "location": "s3://lake/profiles/", "format": "csv", "id_fields": ["id"]},
                {
                    "name": "clicks",
                    "location": "s3://lake/clicks/",
                    "id_from_key": r"(?P<id>[^/]+)\.csv$",
                    "erase": "delete-object",
                },
            ],
            "purge": purge,
        }
    )


def obj(
    path: str, dataset: str, users: dict[str, list[int]], records: int, version_id: str | None = None
) -> ObjectIndex:
    return ObjectIndex(path, dataset, f'"{path[-6:]}"', version_id, T0, users, records=records)


def lake() -> MemoryIndexStore:
    """reviews: 200 records in 2 big objects and a small one (alice has 2 records, the crowd 1 each); clicks: 40
    one-user objects."""
    store = MemoryIndexStore()
    crowd = {f"user-{n}": [n] for n in range(10)}
    store.replace_objects(
        [
            obj("s3://lake/reviews/part-0.jsonl", "reviews", {"alice": [40], **crowd}, 100),
            obj("s3://lake/reviews/part-1.jsonl", "reviews", {"alice": [7], "bob": list(range(60, 90))}, 96),
            obj("s3://lake/reviews/tiny.jsonl", "reviews", {"dora": [0, 1, 2]}, 4),
            obj("s3://lake/clicks/erin.csv", "clicks", {"erin": [WHOLE_OBJECT]}, 1),
            *(obj(f"s3://lake/clicks/c{n:02d}.csv", "clicks", {f"c{n:02d}": [WHOLE_OBJECT]}, 1) for n in range(39)),
        ]
    )
    return store


def report(users: list[str], force: bool = False, **purge: Any) -> Report:
    return build_report(lake(), settings(**purge), users, "req-1", PSEUDONYMIZER, force=force)


def test_given_a_user_in_two_objects_when_reporting_then_exactly_their_lines_are_planned_under_hashes_only() -> None:
    planned = report(["alice", "stranger"])
    assert [(o.s3path, o.dataset, o.format, o.erase, o.lines) for o in planned.objects] == [
        ("s3://lake/reviews/part-0.jsonl", "reviews", "jsonl", "blank", (40,)),
        ("s3://lake/reviews/part-1.jsonl", "reviews", "jsonl", "blank", (7,)),
    ]
    assert planned.users_found == 1
    assert planned.lines == 2
    assert planned.datasets == {"reviews": {"objects": 2, "records": 2}}
    assert planned.user_hashes == tuple(sorted([PSEUDONYMIZER("alice"), PSEUDONYMIZER("stranger")]))
    assert b"alice" not in planned.to_bytes() and b"stranger" not in planned.to_bytes()
    assert Report.from_bytes(planned.to_bytes()) == planned


def test_given_a_report_when_serialised_then_its_bytes_are_the_sorted_indented_json_of_all_its_fields() -> None:
    # An approver approves these bytes by their hash: the serialisation must stay exactly what it was (asdict's).
    from dataclasses import asdict, replace

    import orjson

    from lakepurge.reports.report import ReportTable, ReportVersions

    planned = replace(
        report(["alice"]),
        relational=(ReportTable("crm", "public.contacts", "user_id", 2, 90),),
        versions=(ReportVersions("s3://lake/reviews/part-0.jsonl", "reviews", ("v2", "v1")),),
        coverage=({"dataset": "reviews", "state": "complete", "objects": {"indexed": 2}},),
    )
    expected = orjson.dumps(asdict(planned), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    assert planned.to_bytes() == expected
    assert Report.from_bytes(planned.to_bytes()) == planned


def test_given_users_holding_more_than_5_percent_of_a_dataset_when_reporting_then_it_is_refused_unless_forced() -> None:
    crowd = [f"user-{n}" for n in range(10)]  # 10 of 200 records: exactly 5 %, allowed
    assert report(crowd).datasets == {"reviews": {"objects": 1, "records": 10}}
    with pytest.raises(SafetyLimitExceeded, match=r"dataset reviews: 12 of 200 records \(max_dataset_fraction 0.05\)"):
        report([*crowd, "alice"])
    forced = report([*crowd, "alice"], force=True)
    assert forced.forced is True
    assert forced.lines == 12
    assert report([*crowd, "alice"], max_dataset_fraction=0.1).forced is False


def test_given_a_user_holding_most_of_a_big_object_when_reporting_then_the_object_limit_refuses_it() -> None:
    # bob: 30 of part-1's 96 records (31 %) passes 0.5 but not 0.25; and 30 of 200 breaks the dataset limit too.
    with pytest.raises(SafetyLimitExceeded) as refused:
        report(["bob"], max_object_fraction=0.25, max_dataset_fraction=1.0)
    assert str(refused.value) == ("s3://lake/reviews/part-1.jsonl: 30 of 96 records (max_object_fraction 0.25)")
    assert report(["bob"], max_dataset_fraction=1.0).lines == 30
    # An object fraction of 1 turns the object limit off.
    assert report(["bob"], max_object_fraction=1.0, max_dataset_fraction=1.0).lines == 30


def test_given_a_small_object_when_one_user_holds_most_of_it_then_the_object_limit_does_not_apply() -> None:
    # dora holds 3 of tiny's 4 records: below min_records_for_object_fraction (20) a person is a large share.
    assert report(["dora"]).lines == 3
    with pytest.raises(SafetyLimitExceeded, match=r"tiny\.jsonl: 3 of 4 records"):
        report(["dora"], min_records_for_object_fraction=4)


def test_given_a_one_user_object_when_reporting_then_it_counts_as_one_record_of_its_dataset() -> None:
    planned = report(["erin"])
    # named by its keyed reference, not its key (which names erin)
    reference = object_reference("s3://lake/clicks/erin.csv", PSEUDONYMIZER)
    assert [(o.s3path, o.erase, o.lines) for o in planned.objects] == [(reference, "delete-object", (WHOLE_OBJECT,))]
    assert planned.lines == 0  # no line is blanked: the object is deleted
    assert planned.datasets == {"clicks": {"objects": 1, "records": 1}}  # 1 of 40: 2.5 %
    # A one-user object is its owner's whole object, and a dataset of few owners is protected once it is big enough.
    with pytest.raises(SafetyLimitExceeded, match=r"dataset clicks: 3 of 40 records"):
        report(["erin", "c00", "c01"], min_records_for_dataset_fraction=40)


def test_given_a_small_dataset_when_ordinary_users_hold_more_than_5_percent_then_the_dataset_limit_does_not_apply() -> (
    None
):
    # 3 of clicks' 40 records (7.5 %): below min_records_for_dataset_fraction (100) a person is a large share
    assert report(["erin", "c00", "c01"]).datasets == {"clicks": {"objects": 3, "records": 3}}
    # reviews has 200 records: there the fraction still decides (12 of 200 is refused above)


@pytest.mark.parametrize("sentinel", ["", "   ", "0", "NULL", "None", " n/a ", "Anonymous", "undefined"])
def test_given_a_placeholder_or_empty_id_when_reporting_then_it_is_refused_before_any_lookup(sentinel: str) -> None:
    problems = check_sentinels(settings(), ["alice", sentinel])
    assert len(problems) == 1
    with pytest.raises(SafetyLimitExceeded):
        report(["alice", sentinel])
    assert report(["alice", sentinel], force=True).forced is True


def test_given_ids_that_only_resemble_sentinels_when_checking_then_nothing_is_refused() -> None:
    assert check_sentinels(settings(), ["nullable", "0x1", "nil-0", "anonymous2", "alice"]) == []
    assert check_sentinels(settings(sentinel_ids=["guest"]), ["null", "0"]) == []
    assert check_sentinels(settings(sentinel_ids=["guest"]), ["GUEST"]) == [
        "the request names placeholder id(s) 'GUEST' ([purge] sentinel_ids)"
    ]


def test_given_empty_and_sentinel_ids_together_when_checking_then_both_problems_are_named() -> None:
    assert check_sentinels(settings(), ["", "null", "NULL", "0"]) == [
        "the request names an empty (or blank) id",
        "the request names placeholder id(s) '0', 'NULL', 'null' ([purge] sentinel_ids)",
    ]


def test_given_old_versions_holding_the_user_when_reporting_then_the_report_names_them_to_delete() -> None:
    store = lake()
    newer = obj("s3://lake/reviews/v.jsonl", "reviews", {"alice": [0]}, 100, version_id="v1")
    store.replace_objects([newer])
    store.replace_objects(
        [ObjectIndex(newer.s3path, "reviews", '"v2"', "v2", T0 + timedelta(seconds=1), {"zed": [0]}, records=100)]
    )
    planned = build_report(store, settings(), ["alice"], "req-2", PSEUDONYMIZER)
    assert [(v.s3path, v.dataset, v.version_ids) for v in planned.versions] == [
        ("s3://lake/reviews/v.jsonl", "reviews", ("v1",))
    ]
    assert planned.version_count == 1
    assert not planned.empty
