"""The hash-pinned locks of requirements/ cover pyproject.toml (and infra/requirements-tools.txt) as they are now.

`make install` builds .venv from requirements/dev.lock and `make package` the Lambda layer and the Spark archive
from requirements/runtime.lock, both with `pip --require-hashes` (`make lock` regenerates the locks): a dependency
declared in pyproject.toml but missing from a lock, or pinned without a hash, would fail those installs (or
silently not be what was tested).
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements"
RERUN = "its inputs changed since it was compiled: run `make lock` and commit requirements/*.lock"


def lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lakepurge_lock_script", REQUIREMENTS / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of each `name==version \\ --hash=sha256:...` entry."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", block)
        if match:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
            entries[canonicalize_name(match.group(1))] = (match.group(2), hashes)
    return entries


def declared(lock: str) -> list[Requirement]:
    """What a lock must pin: pyproject.toml's runtime requirements (dev.lock: the dev extras too), or the tools'."""
    if lock == "tools.lock":
        return [Requirement(line) for line in lock_script().tool_requirements()]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    if lock == "dev.lock":
        for extra in lock_script().dev_extras(project):
            lines += project["optional-dependencies"][extra]
    if lock == "spark.lock":
        lines += project["optional-dependencies"]["tables"]
    return [r for r in map(Requirement, lines) if canonicalize_name(r.name) != "lakepurge"]


@pytest.mark.parametrize("lock", ["runtime.lock", "spark.lock", "dev.lock", "tools.lock"])
def test_every_declared_dependency_is_pinned_with_hashes_in_the_lock(lock: str) -> None:
    # GIVEN the lock and the requirements pyproject.toml declares for it
    entries = parse_lock((REQUIREMENTS / lock).read_text(encoding="utf-8"))
    # WHEN each declared requirement is looked up in the lock
    for requirement in declared(lock):
        name = canonicalize_name(requirement.name)
        # THEN it is pinned `==` to a version pyproject.toml allows, with at least one sha256 hash
        assert name in entries, f"{requirement} is not in requirements/{lock}: run `make lock`"
        version, hashes = entries[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements/{lock} pins {name}=={version}, which `{requirement}` does not allow: run `make lock`"
        )
        assert hashes, f"{name}=={version} has no --hash=sha256: in requirements/{lock}: run `make lock`"


@pytest.mark.parametrize("lock", ["runtime.lock", "spark.lock", "dev.lock", "tools.lock", "uv-tool.lock"])
def test_every_pin_of_a_lock_carries_a_hash_so_pip_require_hashes_accepts_it(lock: str) -> None:
    # GIVEN a lock file
    entries = parse_lock((REQUIREMENTS / lock).read_text(encoding="utf-8"))
    # WHEN its entries are read
    # THEN there are some, and none lacks a sha256 hash (pip --require-hashes refuses the whole file otherwise)
    assert entries
    assert [name for name, (_, hashes) in entries.items() if not hashes] == []


@pytest.mark.parametrize("lock", ["runtime.lock", "spark.lock", "dev.lock", "tools.lock"])
def test_a_lock_records_the_digest_of_the_current_pyproject_dependencies(lock: str) -> None:
    # GIVEN the digest the lock's header records, and the digest of pyproject.toml's lines the lock is compiled from
    script = lock_script()
    recorded = script.recorded_digest((REQUIREMENTS / lock).read_text(encoding="utf-8"))
    # WHEN they are compared
    # THEN they are equal: a dependency added or changed in pyproject.toml without re-locking fails here
    assert recorded is not None, f"requirements/{lock} has no `# inputs-sha256:` line: run `make lock`"
    assert recorded == script.input_digest(lock), f"requirements/{lock}: {RERUN}"


def test_the_lambda_layer_and_spark_archive_ship_the_versions_the_tests_ran_with() -> None:
    # GIVEN the runtime and Spark locks (infra/package.py) and the dev lock (.venv, where the tests run)
    runtime = parse_lock((REQUIREMENTS / "runtime.lock").read_text(encoding="utf-8"))
    runtime |= parse_lock((REQUIREMENTS / "spark.lock").read_text(encoding="utf-8"))
    dev = parse_lock((REQUIREMENTS / "dev.lock").read_text(encoding="utf-8"))
    # WHEN their pins are compared
    differing = {name: (version, dev.get(name, ("missing", []))[0]) for name, (version, _) in runtime.items()}
    # THEN every runtime pin is in the dev lock at the same version
    assert {name: pair for name, pair in differing.items() if pair[0] != pair[1]} == {}, "run `make lock`"


def test_a_dependency_added_to_pyproject_without_relocking_changes_the_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the lock script's view of pyproject.toml, with one more runtime dependency than the lock was made from
    script = lock_script()
    before = script.input_digest("runtime.lock")
    real = script.pyproject

    def with_extra_dependency() -> dict[str, object]:
        data = real()
        data["project"]["dependencies"] = [*data["project"]["dependencies"], "requests>=2"]
        return data

    monkeypatch.setattr(script, "pyproject", with_extra_dependency)
    # WHEN the digest is computed again
    # THEN it differs from the recorded one, so test_a_lock_records_the_digest_... asks for `make lock`
    assert script.input_digest("runtime.lock") != before
