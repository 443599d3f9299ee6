"""The command line's own arguments, in-process and without a network: a wrong one is one line naming it, exit 2."""

from __future__ import annotations

import orjson
import pytest

from lakepurge.cli import main
from lakepurge.cli.errors import EXIT_USAGE

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--objects", "0"], "--objects and --users must be at least 1"),
        (["--users", "0"], "--objects and --users must be at least 1"),
        (["--port", "70000"], "--port must be between 0 (any free port) and 65535"),
    ],
)
def test_given_a_wrong_demo_argument_when_running_the_demo_then_one_line_names_it_and_it_exits_2(
    arguments, message, capsys
):
    """`demo --users N` is a count of sample users, not user ids: the error boundary must not take it for ids."""
    assert main(["demo", *arguments, "--json"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.err == f"lakepurge: configuration error: {message}\n"
    assert orjson.loads(captured.out) == {"error": f"configuration error: {message}", "code": "config"}
