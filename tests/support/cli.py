"""Running the command line in a test as an operator does with --json: one JSON document on stdout."""

from __future__ import annotations

from typing import Any

import orjson

from lakepurge.cli import main


def cli(capsys: Any, *args: str) -> tuple[int, dict[str, Any]]:
    """The exit code and the document of `lakepurge ARGS --json` (output captured before it is left out)."""
    capsys.readouterr()
    code = main([*args, "--json"])
    return code, orjson.loads(capsys.readouterr().out)
