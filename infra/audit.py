"""`make audit`: pip-audit over the project's installed dependencies (.venv), run from the tool venv (.venv-tools).

    python infra/audit.py --pip-audit .venv-tools/bin/pip-audit --requirements build/audit/requirements.txt

Exit 1 when a dependency has a known vulnerability. When the vulnerability database cannot be reached (no
network, or a registry mirror that does not serve PyPI's JSON API, where pip-audit reports every dependency as
"not found on PyPI" and still says "No known vulnerabilities found"), print one WARNING line saying so and exit 0:
nothing was audited, and that must not read as a clean result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

UNREACHABLE = ("ConnectionError", "NameResolutionError", "Max retries exceeded", "timed out", "ServiceError")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pip-audit", required=True, help="the pip-audit executable")
    parser.add_argument("--requirements", type=Path, required=True, help="pinned requirements (pip freeze)")
    args = parser.parse_args(argv)
    command = [
        args.pip_audit,
        "--requirement",
        str(args.requirements),
        "--no-deps",
        "--disable-pip",
        "--progress-spinner",
        "off",
        "--format",
        "json",
    ]
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        if any(marker in run.stderr for marker in UNREACHABLE):
            last = run.stderr.strip().splitlines()[-1][:200] if run.stderr.strip() else ""
            print(f"WARNING: audit skipped, the vulnerability database is unreachable ({last})")
            return 0
        sys.stderr.write(run.stderr)
        return run.returncode or 1
    dependencies = report.get("dependencies", [])
    vulnerable = [d for d in dependencies if d.get("vulns")]
    skipped = [d for d in dependencies if d.get("skip_reason")]
    for dependency in vulnerable:
        ids = ", ".join(v["id"] for v in dependency["vulns"])
        print(f"VULNERABLE {dependency['name']} {dependency.get('version', '')}: {ids}")
    if vulnerable:
        print(f"{len(vulnerable)} of {len(dependencies)} dependencies have known vulnerabilities")
        return 1
    if dependencies and len(skipped) == len(dependencies):
        print(
            f"WARNING: audit skipped, the vulnerability database is unreachable: none of the {len(dependencies)}"
            " dependencies could be looked up (no known vulnerabilities is NOT established)"
        )
        return 0
    if skipped:
        names = ", ".join(d["name"] for d in skipped)
        print(f"WARNING: {len(skipped)} of {len(dependencies)} dependencies could not be audited: {names}")
    print(f"audit: no known vulnerabilities in {len(dependencies) - len(skipped)} dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
