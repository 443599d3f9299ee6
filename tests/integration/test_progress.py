"""Progress of long commands as a person sees it: `lakepurge` run in a subprocess, on a terminal (a pty) and with
stderr piped to a file, and Spark's own log kept out of the output."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.lakes import index_toml

pytestmark = pytest.mark.integration

LAKEPURGE = str(Path(sys.executable).parent / "lakepurge")


@pytest.fixture
def unindexed_lake(lake_factory, pg_dsn, tmp_path):
    """A sample lake on the moto server, not indexed yet, and a configuration file for the CLI."""
    case = lake_factory(index_toml("postgres", pg_dsn), objects=24, users=20)
    config = tmp_path / "lakepurge.toml"
    config.write_text(case.toml)
    env = {**os.environ, "LAKEPURGE_HASH_KEY": "progress-test-key-0123456789"}
    env.pop("LAKEPURGE_CONFIG_TOML", None)
    return case, str(config), env


def run_on_a_terminal(command: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    """Run command with stdout and stderr on a pseudo-terminal; return its exit code and everything it wrote."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=10), b"".join(chunks).decode("utf-8", "replace")


def test_given_a_terminal_when_reconcile_indexes_a_lake_then_a_bar_is_redrawn_in_place_up_to_every_object(
    unindexed_lake,
):
    case, config, env = unindexed_lake
    objects = sum(1 for o in case.lake.objects if not o.key.endswith(".meta.json"))

    code, output = run_on_a_terminal([LAKEPURGE, "index", "reconcile", "--config", config], env)

    assert code == 0, output
    bars = [line for line in output.replace("\r\n", "\n").split("\n") if "objects indexed" in line]
    assert bars, output
    final = bars[-1].split("\r")[-1]
    assert "\x1b[2K" in bars[-1], "redrawn in place: carriage return and erase-line before each drawing"
    indexed = int(final.split("]")[1].split("/")[0].strip().replace(",", ""))
    assert indexed > 0 and f"{indexed}/{indexed}" in final
    assert indexed <= objects
    assert " s" in final  # elapsed time


def test_given_stderr_is_not_a_terminal_when_backfilling_on_spark_then_one_summary_line_and_no_spark_log_lines(
    unindexed_lake, tmp_path
):
    case, config, env = unindexed_lake
    stderr_file = tmp_path / "stderr.txt"
    with stderr_file.open("w") as stderr:
        done = subprocess.run(
            [LAKEPURGE, "index", "backfill", "--config", config],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            timeout=300,
            check=False,
        )
    output = stderr_file.read_text()

    assert done.returncode == 0, output
    assert "\r" not in output and "\x1b" not in output, "no redrawing where nobody watches"
    bars = [line for line in output.splitlines() if line.startswith("objects indexed")]
    assert len(bars) == 1, output
    assert " WARN " not in output and "log4j" not in output.lower(), "Spark's log goes to its own file"
    assert len(case.lake.objects) > 0
