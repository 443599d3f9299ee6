"""The examples at the end of each command's ``--help``, and the shell completion (``lakepurge completion bash``).

Every example parses with the real parser (tests/unit/test_cli_help.py), so an option renamed or removed fails a
test instead of leaving an example that no longer works.
"""

from __future__ import annotations

import argparse
import shlex

# command path -> (example, what it does). Ids and buckets are the README's (user-42, s3://my-lake/).
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "init": (
        ("lakepurge init", "one example dataset to edit"),
        (
            "lakepurge init --dataset reviews=s3://my-lake/reviews/ --id-field user_id --reports s3://my-reports/",
            "a configuration for this dataset",
        ),
    ),
    "demo": (
        ("lakepurge demo", "the whole pipeline on a local stack, approving by itself"),
        ("lakepurge demo --keep", "then keep the stack running to try the other commands on it"),
    ),
    "index backfill": (
        ("lakepurge index backfill", "index every object of every dataset (Spark when large)"),
        ("lakepurge index backfill --dataset reviews --on emr-serverless", "one dataset, on the cluster"),
    ),
    "index reconcile": (
        ("lakepurge index reconcile", "index what differs between the lake and the index; record coverage"),
        ("lakepurge index reconcile --dataset reviews --report-only", "only say what differs"),
    ),
    "index object": (("lakepurge index object s3://my-lake/reviews/part-0.jsonl", "re-index one object now"),),
    "lookup": (
        ("lakepurge lookup user-42", "every object and line of user-42"),
        ("lakepurge lookup --users-file ids.txt --json", "many users, one id a line; as JSON"),
    ),
    "request": (("lakepurge request user-42 --request-id ticket-1234", "file a deletion request (the workflow)"),),
    "requests": (
        ("lakepurge requests", "the history: state, deadline, lines erased, certificate"),
        ("lakepurge requests --all", "dry runs (plans) too"),
    ),
    "purge": (
        ("lakepurge purge user-42", "a dry run: the plan, and the command that executes exactly it"),
        ("lakepurge purge user-42 --yes", "erase, verify, certify"),
        ("lakepurge purge --users-file ids.txt --yes --engine spark", "many users, on local Spark"),
    ),
    "export": (
        ("lakepurge export user-42 --to s3://my-exports/", "a copy of user-42's records (GDPR Art. 15)"),
        ("lakepurge export --open s3://my-exports/req-1.zip.enc --out ./req-1", "open a delivered archive"),
    ),
    "verify": (
        ("lakepurge verify user-42", "read the lake: is anything of user-42 left? (exit 0: nothing)"),
        ("lakepurge verify --users-file ids.txt --engine inline", "many users, in this process whatever the size"),
    ),
    "vacuum": (
        ("lakepurge vacuum", "a dry run: the placeholders and old versions it would remove"),
        ("lakepurge vacuum --dataset reviews --yes", "remove them in one dataset"),
    ),
    "status": (
        ("lakepurge status", "objects, users, unindexable lines, coverage, open requests"),
        ("lakepurge status --json", "the same as one JSON document"),
    ),
    "datasets import": (
        ("lakepurge datasets import --glue-database lake --out datasets.toml", "[[datasets]] from Glue tables"),
        (
            "lakepurge datasets import --hive-metastore thrift://emr-primary:9083 --database lake",
            "[[datasets]] from a Hive metastore's tables",
        ),
    ),
    "datasets check": (
        ("lakepurge datasets check --glue-database lake", "the drift from the catalog (exit 1)"),
        ("lakepurge datasets check --hive-metastore thrift://emr-primary:9083 --database lake", "the same, Hive"),
    ),
    "pseudonymise": (
        ("lakepurge pseudonymise --check orders --personal email,name", "how identifying the clear columns are"),
        (
            "lakepurge pseudonymise --dataset orders --to s3://my-lake/orders-protected/ --personal email,name",
            "a protected copy, erased by destroying each person's key",
        ),
    ),
    "completion": (
        ("lakepurge completion bash > ~/.local/share/bash-completion/completions/lakepurge", "install for bash"),
        ('eval "$(lakepurge completion bash)"', "or in this shell (zsh: autoload bashcompinit; bashcompinit first)"),
    ),
}


def epilog(path: str) -> str | None:
    """The ``examples:`` block of ``lakepurge PATH --help``."""
    examples = EXAMPLES.get(path)
    if not examples:
        return None
    width = max(len(command) for command, _ in examples)
    if width + max(len(what) for _, what in examples) > 100:
        return "examples:\n" + "\n".join(f"  {command}\n      {what}" for command, what in examples)
    return "examples:\n" + "\n".join(f"  {command.ljust(width)}   {what}" for command, what in examples)


def command_tree(parser: argparse.ArgumentParser, path: str = "") -> dict[str, list[str]]:
    """path -> the words that may follow it: its subcommands and options ("" is ``lakepurge`` itself)."""
    words: list[str] = []
    tree: dict[str, list[str]] = {path: words}
    for action in parser._actions:  # argparse has no public walk of its parsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                tree |= command_tree(sub, f"{path} {name}".strip())
        else:
            words.extend(option for option in action.option_strings if option.startswith("--"))
            if not action.option_strings and action.choices:  # a positional of a few words (completion's shell)
                words.extend(str(choice) for choice in action.choices)
    return tree


_BASH = """\
# bash completion for lakepurge, written by `lakepurge completion bash` (lakepurge {version}).
declare -gA _lakepurge_words=(
{table}
)
_lakepurge() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} path=lakepurge word
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        [[ $word == -* ]] && continue
        [[ -n ${{_lakepurge_words["$path $word"]+set}} ]] && path="$path $word"
    done
    COMPREPLY=($(compgen -W "${{_lakepurge_words[$path]}}" -- "$cur"))
}}
complete -o default -F _lakepurge lakepurge
"""


def bash_completion(parser: argparse.ArgumentParser, version: str) -> str:
    """A bash (and zsh, through bashcompinit) completion script of the commands and their options."""
    table = "\n".join(
        f"    [{shlex.quote(f'lakepurge {path}'.strip())}]={shlex.quote(' '.join(words))}"
        for path, words in command_tree(parser).items()
    )
    return _BASH.format(version=version, table=table)
