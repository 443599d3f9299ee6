"""Each command's --help ends with examples that work, and the shell completion completes what the parser takes."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from lakepurge.cli import _version, build_parser
from lakepurge.cli.examples import EXAMPLES, bash_completion, command_tree

pytestmark = pytest.mark.unit


def leaf_commands() -> list[str]:
    tree = command_tree(build_parser())
    return [path for path, words in tree.items() if path and not any(f"{path} {w}" in tree for w in words)]


def test_every_command_has_examples_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(EXAMPLES) == sorted(leaf_commands())  # no command without, no example of a command gone
    for path in EXAMPLES:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*path.split(), "--help"])
        help_text = capsys.readouterr().out
        assert "examples:" in help_text
        for command, what in EXAMPLES[path]:
            assert command in help_text and what in help_text


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_every_example_parses_as_that_command(path: str) -> None:
    for command, _ in EXAMPLES[path]:
        words = shlex.split(command.split(" > ")[0])
        if words[0] == "eval":  # eval "$(lakepurge completion bash)"
            words = shlex.split(words[1].removeprefix("$(").removesuffix(")"))
        assert words[0] == "lakepurge"
        args = build_parser().parse_args(words[1:])
        assert args.run.__name__.startswith("cmd_")
        assert " ".join(words[1 : 1 + len(path.split())]) == path


def complete(script: str, line: str) -> list[str]:
    """What bash offers on Tab after ``line`` (the cursor at its end) with the script loaded."""
    words = line.split(" ")
    probe = (
        f"{script}\nCOMP_WORDS=({' '.join(shlex.quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        '_lakepurge; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True, timeout=30)
    return result.stdout.split()


def test_the_bash_completion_completes_commands_subcommands_and_their_options() -> None:
    script = bash_completion(build_parser(), _version())
    assert complete(script, "lakepurge ind") == ["index"]
    assert complete(script, "lakepurge index re") == ["reconcile"]
    assert complete(script, "lakepurge --config x.toml purge user-42 --y") == ["--yes"]
    assert "--engine" in complete(script, "lakepurge verify user-42 --")
    assert complete(script, "lakepurge completion b") == ["bash"]
