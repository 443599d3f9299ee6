"""The process's boto3 clients: responses' timestamps parsed with the standard library where botocore's dateutil
parser cost ~0.1 s per 1,000 keys listed (the same datetimes either way), and botocore's JSON (endpoints, service
models) read once per process, not once per client (~0.1 s each)."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp

from lakepurge.core import aws

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "answered",
    [
        "2026-11-27T00:31:58.123Z",  # a listed object's LastModified
        "2026-11-27T00:31:58Z",
        "2026-11-27T00:31:58.123456789Z",  # more digits than a datetime holds
        "2026-11-27T00:31:58+02:00",
        "Fri, 27 Nov 2026 00:31:58 GMT",  # a HEAD's Last-Modified header
        1700000000,  # epoch seconds (JSON protocols)
        "1700000000.5",
    ],
)
def test_given_a_timestamp_a_service_answers_when_the_clients_parse_it_then_it_is_the_datetime_botocore_gives(answered):
    parsed = aws._timestamp(answered)

    assert parsed == parse_timestamp(answered)
    assert parsed.utcoffset() == parse_timestamp(answered).utcoffset()


def test_given_the_processs_s3_client_when_it_parses_a_timestamp_then_it_uses_the_standard_librarys_parser():
    aws.client.cache_clear()
    try:
        parser = aws.client("s3")._endpoint._response_parser_factory._defaults.get("timestamp_parser")
    finally:
        aws.client.cache_clear()

    assert parser is aws._timestamp


def test_given_a_client_made_when_clients_are_made_again_then_botocores_json_is_not_read_again(monkeypatch):
    import botocore.loaders

    aws.client.cache_clear()
    aws.client("s3")
    aws.client.cache_clear()
    read: list[str] = []
    original = botocore.loaders.JSONFileLoader.load_file

    def counted(self, file_path):
        read.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counted)
    try:
        aws.client("s3")
    finally:
        aws.client.cache_clear()

    assert read == []
