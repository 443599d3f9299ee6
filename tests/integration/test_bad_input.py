"""Bad objects in one indexer batch: each problem is reported with object and line, every other line is
indexed, and nothing crashes the batch; `lakepurge status` shows the unindexable lines."""

from __future__ import annotations

import gzip

import orjson
import pytest

from lakepurge import runtime
from lakepurge.cli import main
from lakepurge.core import aws
from lakepurge_lambdas import indexer as indexer_lambda
from tests.support.events import LambdaContext, s3_notification, s3_record, sqs_event

pytestmark = pytest.mark.integration

GOOD = orjson.dumps({"user_id": "good-user", "text": "fine"})
FIFTY_MB_LINE = b'{"user_id":"huge-user","pad":"' + b"x" * (50 * 1024 * 1024) + b'"}'

BAD_OBJECTS = {
    "reviews/bad/invalid-json.jsonl": (GOOD + b"\n" + b'{"user_id": "u1", oops\n' + GOOD + b"\n", 1, "invalid JSON"),
    "reviews/bad/invalid-utf8.jsonl": (GOOD + b'\n{"user_id": "caf\xe9"}\n' + GOOD + b"\n", 1, "invalid UTF-8"),
    "reviews/bad/missing-id.jsonl": (GOOD + b'\n{"name": "x"}\n' + GOOD + b"\n", 1, "id field 'user_id' missing"),
    "reviews/bad/crlf.jsonl": (GOOD + b"\r\n{}\r\n" + GOOD + b"\r\n", None, None),
    "reviews/bad/no-trailing-newline.jsonl": (GOOD + b"\n" + GOOD, None, None),
    "reviews/bad/empty.jsonl": (b"", None, None),
    "reviews/bad/huge-line.jsonl": (GOOD + b"\n" + FIFTY_MB_LINE + b"\n" + GOOD + b"\n", 1, "max_record_bytes"),
}


def expected_good_lines(body: bytes) -> list[int]:
    return [n for n, line in enumerate(body.split(b"\n")) if line.rstrip(b"\r") == GOOD]


@pytest.fixture
def bad_lake(lake_factory, pg_dsn):
    from tests.support.lakes import index_toml

    case = lake_factory(index_toml("postgres", pg_dsn), objects=20, users=10)
    s3 = aws.client("s3")
    for key, (body, _, _) in BAD_OBJECTS.items():
        s3.put_object(Bucket="lake", Key=key, Body=body)
    whole = b"".join(b'{"user_id":"g%d","pad":"%s"}\n' % (n, b"y" * 40) for n in range(3000))
    s3.put_object(Bucket="lake", Key="reviews/bad/truncated.jsonl.gz", Body=gzip.compress(whole)[:-2000])
    return case


def test_given_bad_objects_in_one_batch_when_indexed_then_each_problem_names_object_and_line(
    bad_lake, capsys, tmp_path
):
    keys = [*BAD_OBJECTS, "reviews/bad/truncated.jsonl.gz"]
    response = indexer_lambda.handler(
        sqs_event(*(s3_notification(s3_record("lake", k)) for k in keys)), LambdaContext()
    )
    assert response["batchItemFailures"] == []

    store = runtime.index_store()
    reported = {(path, u.line): u.reason for path, u in store.unindexable(limit=1000)}
    for key, (body, bad_line, reason) in BAD_OBJECTS.items():
        path = f"s3://lake/{key}"
        assert {line for _, p, line in store.dump() if p == path} == set(expected_good_lines(body)), key
        problems = {line: text for (p, line), text in reported.items() if p == path}
        if bad_line is None:
            assert problems == {}, key
        else:
            assert list(problems) == [bad_line], key
            assert reason in problems[bad_line]

    truncated = {line: text for (p, line), text in reported.items() if p.endswith("truncated.jsonl.gz")}
    [(break_line, text)] = truncated.items()
    assert "truncated gzip" in text
    indexed = sorted(line for _, p, line in store.dump() if p.endswith("truncated.jsonl.gz"))
    assert indexed == list(range(break_line))
    assert break_line > 0

    status = store.status()
    assert status.unindexable_lines == 5
    assert status.objects_with_unindexable == 5

    capsys.readouterr()
    config = tmp_path / "lakepurge.toml"
    config.write_text(bad_lake.toml)
    assert main(["status", "--config", str(config), "--json"]) == 0
    out, err = capsys.readouterr()
    document = orjson.loads(out)
    assert document["index"]["unindexable_lines"] == 5
    assert "s3://lake/reviews/bad/invalid-utf8.jsonl line 1: invalid UTF-8" in err
    assert "huge-user" not in err and "good-user" not in err
