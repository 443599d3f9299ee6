"""Build the wheel, install it into a fresh virtualenv outside the checkout, and run `lakepurge demo --json` there.

Shows that what `pyproject.toml` ships is enough: the state machine (package data), the Lambda handlers and Spark
jobs (``lakepurge_lambdas``, ``lakepurge_jobs``), the local stack. A checkout on ``sys.path`` would hide a missing
file, so everything runs from a temporary directory. Dependencies come from the package index (pip's cache after
the first run). Exit 0 when the demo ends SUCCEEDED.

    python infra/wheel_check.py [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(command: list[str], cwd: Path) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=cwd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (its path is printed)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="lakepurge-wheel-"))
    try:
        wheels = workdir / "wheels"
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels)]
        run([*pip_wheel, str(ROOT)], workdir)
        (wheel,) = wheels.glob("lakepurge-*.whl")
        venv.create(workdir / "venv", with_pip=True)
        python = workdir / "venv" / "bin" / "python"
        # the demo's extras: Spark (the purge job) and the local stack (moto server)
        run([str(python), "-m", "pip", "install", "--quiet", f"{wheel}[spark,local]"], workdir)
        elsewhere = workdir / "elsewhere"
        elsewhere.mkdir()
        print("+ lakepurge demo --json  (in a directory with no checkout)", flush=True)
        done = subprocess.run(
            [str(workdir / "venv" / "bin" / "lakepurge"), "demo", "--json"],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            status = json.loads(done.stdout).get("status")
        except json.JSONDecodeError:
            status = None
        if done.returncode != 0 or status != "SUCCEEDED":
            print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"wheel check FAILED: exit {done.returncode}, status {status}", file=sys.stderr)
            return 1
        installed = subprocess.run(
            [str(python), "-c", "import lakepurge, lakepurge_lambdas; print(lakepurge.__file__)"],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if str(ROOT) in installed:
            print(f"wheel check FAILED: lakepurge imported from the checkout ({installed})", file=sys.stderr)
            return 1
        print(f"wheel check: {wheel.name} installed in a fresh venv; `lakepurge demo --json` ended {status}")
        return 0
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
