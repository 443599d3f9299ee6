"""infra/package.py packages only a Python the cluster's PySpark runs (the Spark of the template's EMR release)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("package", ROOT / "infra" / "package.py")
assert _spec and _spec.loader
package = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package)


def test_the_template_release_has_a_known_spark_and_this_python_runs_on_it() -> None:
    release = package.template_emr_release()
    assert release == "emr-7.9.0"  # Spark 3.5.5: a move to another line must say which Spark it runs
    package.check_cluster_python("3.11", release)


@pytest.mark.parametrize("python", ["3.12", "3.13", "3.7"])
def test_given_a_python_spark_3_5_does_not_support_when_packaging_then_it_is_refused_naming_the_fix(python) -> None:
    with pytest.raises(SystemExit, match=rf"Python {python}: emr-7.9.0's Spark 3.5 runs PySpark on Python 3.8 to 3.11"):
        package.check_cluster_python(python, "emr-7.9.0")


def test_given_a_release_whose_spark_is_unknown_when_packaging_then_nothing_is_built(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "infra" / "package.py"), "spark", "--emr-release", "emr-6.15.0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "emr-6.15.0: which Spark it runs is not known" in result.stderr
