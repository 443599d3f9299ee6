"""`make lock`: regenerate the hash-pinned lock files of requirements/ from pyproject.toml, with uv.

    python requirements/lock.py --uv .venv-tools/bin/uv [--upgrade]

runtime.lock  [project] dependencies: the Lambda layer (infra/package.py)
spark.lock    runtime + the tables extra (deltalake, pyiceberg, DuckDB's readers): the Spark archive (infra/package.py)
dev.lock      runtime + the dev extra (spark, local, test and lint tools) + the build backend: .venv (`make install`)
tools.lock    infra/requirements-tools.txt (checkov, pip-audit): .venv-tools (`make lint`, `make audit`)

Both are universal resolutions for Python 3.11+ (Linux x86_64 and aarch64 included) and list the hash of every file
of each pinned release, so the manylinux wheels of the Lambda layer (CPython 3.12) check against them too. runtime.lock
takes its versions from dev.lock: the layer ships what the tests ran with. Without --upgrade the current pins are kept
where they still satisfy their inputs. Each lock records the sha256 of the input lines it was compiled from
(`# inputs-sha256:`); tests/unit/test_lock_files.py fails when they changed without `make lock`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"
PYTHON = "3.11"
DIGEST_PREFIX = "# inputs-sha256: "
TOOLS = ROOT / "infra" / "requirements-tools.txt"


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def dev_extras(project: dict[str, object]) -> list[str]:
    """The dev extra and the extras it pulls in through `lakepurge[...]`."""
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})  # type: ignore[assignment]
    found, todo = [], ["dev"]
    while todo:
        extra = todo.pop()
        if extra in found:
            continue
        found.append(extra)
        for requirement in optional[extra]:
            match = re.fullmatch(r"\s*lakepurge\s*\[([^\]]*)\].*", requirement)
            if match:
                todo.extend(name.strip() for name in match.group(1).split(","))
    return sorted(found)


def tool_requirements() -> list[str]:
    lines = (line.split("#")[0].strip() for line in TOOLS.read_text(encoding="utf-8").splitlines())
    return sorted(line for line in lines if line)


def lock_inputs(lock: str) -> dict[str, object]:
    """What a lock is compiled from: its digest is recorded in the lock's header."""
    if lock == "tools.lock":
        return {"requirements": tool_requirements()}
    data = pyproject()
    project: dict[str, object] = data["project"]  # type: ignore[assignment]
    inputs: dict[str, object] = {
        "requires-python": project.get("requires-python"),
        "dependencies": sorted(project["dependencies"]),  # type: ignore[call-overload]
    }
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    if lock == "dev.lock":
        inputs["optional-dependencies"] = {extra: sorted(optional[extra]) for extra in dev_extras(project)}
        inputs["build-system"] = sorted(data["build-system"]["requires"])  # type: ignore[index]
    if lock == "spark.lock":
        inputs["optional-dependencies"] = {"tables": sorted(optional["tables"])}
    return inputs


def input_digest(lock: str) -> str:
    return hashlib.sha256(json.dumps(lock_inputs(lock), sort_keys=True).encode()).hexdigest()


def recorded_digest(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line.removeprefix(DIGEST_PREFIX).split()[0]
    return None


def pins(text: str) -> list[str]:
    """`name==version ; markers` of each pinned requirement, without hashes."""
    return [line.rstrip(" \\") for line in text.splitlines() if re.match(r"[A-Za-z0-9]", line)]


def compile_lock(uv: str, lock: str, sources: list[Path], upgrade: bool, constraints: Path | None = None) -> None:
    out = LOCKS / lock
    command = [uv, "pip", "compile", "--quiet", "--universal", "--python-version", PYTHON, "--generate-hashes"]
    command += ["--custom-compile-command", "make lock", "--output-file", str(out)]
    if lock == "dev.lock":
        command += ["--extra", "dev"]
    if lock == "spark.lock":
        command += ["--extra", "tables"]
    if constraints is not None:
        command += ["--constraints", str(constraints)]
    if upgrade:
        command.append("--upgrade")
    command += [str(source) for source in sources]
    print("+", " ".join(command), file=sys.stderr)
    subprocess.run(command, check=True, cwd=ROOT)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    body = [line for line in lines if not line.startswith(DIGEST_PREFIX)]
    if constraints is not None:  # no temporary paths in the annotations: the lock must not change from run to run
        body = [line.replace(str(constraints.parent) + "/", "") for line in body]
    body = [line.replace(str(sources[-1].parent) + "/", "") for line in body]
    header = f"{DIGEST_PREFIX}{input_digest(lock)}  (of the input lines this lock is compiled from)\n"
    out.write_text(body[0] + body[1] + header + "".join(body[2:]), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uv", required=True, help="the uv executable")
    parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed release")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "build-system.in"
        build.write_text("\n".join(lock_inputs("dev.lock")["build-system"]) + "\n")  # type: ignore[arg-type]
        compile_lock(args.uv, "dev.lock", [ROOT / "pyproject.toml", build], args.upgrade)
        constraints = Path(tmp) / "dev-pins.txt"
        constraints.write_text("\n".join(pins((LOCKS / "dev.lock").read_text(encoding="utf-8"))) + "\n")
        compile_lock(args.uv, "runtime.lock", [ROOT / "pyproject.toml"], args.upgrade, constraints)
        compile_lock(args.uv, "spark.lock", [ROOT / "pyproject.toml"], args.upgrade, constraints)
    compile_lock(args.uv, "tools.lock", [TOOLS], args.upgrade)
    return 0


if __name__ == "__main__":
    sys.exit(main())
