"""Build what infra/template.yaml and EMR Serverless deploy, into build/ (`make package` runs both parts).

    python infra/package.py lambda [--arch x86_64|arm64]     build/lambda/code  (lakepurge + lakepurge_lambdas: CodeUri)
                                                              build/lambda/layer (dependencies: ContentUri)
    python infra/package.py spark [--python python3.11]      build/spark/lakepurge-env.tar.gz + entry points

Lambda: the runtime dependencies of pyproject.toml, as pinned with hashes in requirements/runtime.lock (never the
dev, spark, local or tables extras: no moto, no pyspark, no deltalake), as manylinux wheels for CPython 3.12 on the
chosen architecture, whatever this machine runs; pyarrow's parts lakepurge does not use (Flight, Substrait, headers,
tests) are dropped to stay well under Lambda's 250 MB. The Spark archive installs requirements/spark.lock (the same
pins plus the tables extra: deltalake ~130 MB, DuckDB with its delta, iceberg, avro and httpfs extensions ~220 MB,
pyiceberg with SQLAlchemy, psycopg2 and their dependencies ~90 MB, which the layer cannot hold beside pyarrow: a
report that changes a Delta or Iceberg table is purged on Spark), then lakepurge itself (--no-deps).

Spark: EMR Serverless unpacks the archive as ./environment and runs ./environment/bin/python (lakepurge.purge.launch).
Its image has no Python 3.11+, so the archive is a relocatable Python: the interpreter, its standard library and
libpython, with lakepurge and its dependencies in site-packages (pyspark comes from EMR). It runs on hosts whose
glibc is as new as the build host's: for EMR, build it on Amazon Linux 2023 of the application's architecture
(docs/DEPLOY.md). Built here it is only smoke-tested with this machine's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
LAMBDA_PYTHON = "3.12"
PLATFORMS = {
    "x86_64": ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"],
    "arm64": ["manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64"],
}
# pyarrow parts lakepurge never imports (it reads and writes Parquet and CSV, and talks to S3 through boto3).
PYARROW_UNUSED = ("include", "tests", "src", "*flight*", "*substrait*", "*.pxd", "*.pyx", "*.pxi")
STDLIB_UNUSED = ("site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip")
# every lakepurge_jobs script: the purge (workflow), and what `--on emr-serverless` starts from the CLI
SPARK_ENTRY_POINTS = ("purge.py", "build_index.py", "reconcile.py", "verify.py", "vacuum.py", "pseudonymise.py")
# pyproject.toml's runtime dependencies, pinned with hashes (`make lock`; docs/DEPLOY.md, Reproducible builds)
RUNTIME_LOCK = ROOT / "requirements" / "runtime.lock"
SPARK_LOCK = ROOT / "requirements" / "spark.lock"  # runtime + the tables extra


def run(*command: str | Path, **kwargs: object) -> None:
    print("+", " ".join(str(c) for c in command), file=sys.stderr)
    subprocess.run([str(c) for c in command], check=True, **kwargs)  # type: ignore[call-overload]


def runtime_lock(lock: Path = RUNTIME_LOCK) -> list[str]:
    """pip arguments installing exactly a lock (requirements/runtime.lock by default), every file checked against
    its hashes."""
    return ["--require-hashes", "--requirement", str(lock)]


def copy_sources(target: Path, packages: tuple[str, ...]) -> None:
    for package in packages:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def remove_matching(directory: Path, patterns: tuple[str, ...]) -> None:
    for pattern in patterns:
        for path in directory.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def directory_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def build_lambda(arch: str) -> None:
    out = BUILD / "lambda"
    shutil.rmtree(out, ignore_errors=True)
    code, site = out / "code", out / "layer" / "python"
    code.mkdir(parents=True)
    copy_sources(code, ("lakepurge", "lakepurge_lambdas"))
    platforms = [arg for platform in PLATFORMS[arch] for arg in ("--platform", platform)]
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts"]
    wheels = ["--implementation", "cp", "--python-version", LAMBDA_PYTHON, "--only-binary=:all:", *platforms]
    run(*pip, "--target", site, *wheels, *runtime_lock())
    remove_matching(site / "pyarrow", PYARROW_UNUSED)
    remove_matching(site, ("bin",))
    total = directory_size(code) + directory_size(out / "layer")
    print(f"build/lambda: code + layer {total / 2**20:.0f} MiB unzipped (Lambda allows 250 MiB)", file=sys.stderr)
    if total >= 250 * 2**20:
        raise SystemExit("build/lambda is over Lambda's 250 MiB limit")


# The cluster's PySpark runs the archive's interpreter: each EMR release line's Spark, and the Pythons its PySpark
# supports (Spark 3.5: 3.8 to 3.11; 3.12 came with Spark 4.0). An archive of another Python is refused here, not
# at the first job on the cluster.
EMR_SPARK = {"emr-7": "3.5"}
PYSPARK_PYTHONS = {"3.5": ((3, 8), (3, 11))}


def template_emr_release() -> str:
    """The EMR release infra/template.yaml deploys by default (its EmrReleaseLabel parameter)."""
    text = (ROOT / "infra" / "template.yaml").read_text(encoding="utf-8")
    match = re.search(r"^  EmrReleaseLabel:\n(?:    .*\n)*?    Default: (emr-[0-9.]+)$", text, re.M)
    if not match:
        raise SystemExit("infra/template.yaml: no EmrReleaseLabel default found")
    return match.group(1)


def check_cluster_python(version: str, release: str) -> None:
    """Refuse a Python the Spark of this EMR release cannot run (or a release whose Spark is not known here)."""
    spark = EMR_SPARK.get(release.rsplit(".", 2)[0])
    if spark is None:
        raise SystemExit(f"{release}: which Spark it runs is not known to infra/package.py (EMR_SPARK): add it")
    low, high = PYSPARK_PYTHONS[spark]
    if not low <= tuple(int(part) for part in version.split(".")) <= high:
        supported = f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"
        raise SystemExit(
            f"Python {version}: {release}'s Spark {spark} runs PySpark on Python {supported} only: package with"
            f" --python python{high[0]}.{high[1]} (or move EmrReleaseLabel to a release whose Spark supports it)"
        )


def interpreter_layout(python: str) -> dict[str, str]:
    probe = (
        "import json, os, sys, sysconfig\n"
        "v = sysconfig.get_config_vars()\n"
        "exe = getattr(sys, '_base_executable', sys.executable)\n"
        "b = sys.base_prefix\n"
        "at = dict(base=b, platbase=b, installed_base=b, installed_platbase=b)\n"
        "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'base': b,"
        " 'executable': os.path.realpath(exe), 'stdlib': sysconfig.get_path('stdlib', vars=at),"
        " 'platstdlib': sysconfig.get_path('platstdlib', vars=at), 'purelib': sysconfig.get_path('purelib', vars=at),"
        " 'libdir': v.get('LIBDIR') or '', 'ldlibrary': v.get('LDLIBRARY') or '',"
        " 'shared': str(v.get('Py_ENABLE_SHARED') or 0)}))\n"
    )
    output = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True).stdout
    layout: dict[str, str] = json.loads(output)
    if tuple(int(p) for p in layout["version"].split(".")) < (3, 11):
        raise SystemExit(f"{python} is Python {layout['version']}: lakepurge needs 3.11 or newer")
    return layout


def build_spark(python: str, release: str) -> None:
    layout = interpreter_layout(python)
    base, version = Path(layout["base"]), layout["version"]
    check_cluster_python(version, release)
    out = BUILD / "spark"
    shutil.rmtree(out, ignore_errors=True)
    env = out / "environment"

    # the interpreter, its standard library (same layout relative to the prefix, which Python finds from the
    # executable's location) and libpython
    (env / "bin").mkdir(parents=True)
    shutil.copy2(layout["executable"], env / "bin" / f"python{version}")
    for alias in ("python", "python3"):
        (env / "bin" / alias).symlink_to(f"python{version}")
    for key in ("stdlib", "platstdlib"):
        source = Path(layout[key])
        target = env / source.relative_to(base)
        if not target.exists():
            shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(*STDLIB_UNUSED, "__pycache__"))
    if layout["shared"] == "1" and layout["ldlibrary"]:
        (env / "lib").mkdir(exist_ok=True)
        library = Path(layout["libdir"]) / layout["ldlibrary"]
        for candidate in sorted(library.parent.glob(layout["ldlibrary"] + "*")):
            shutil.copy2(candidate.resolve(), env / "lib" / candidate.name)

    # lakepurge's runtime dependencies from the lock (pyspark is EMR's), then lakepurge itself
    site = env / Path(layout["purelib"]).relative_to(base)
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts"]
    run(*pip, "--target", site, *runtime_lock(SPARK_LOCK))
    remove_matching(site, ("bin",))
    run(*pip, "--target", site, "--no-deps", ROOT)
    remove_matching(site, ("bin",))
    remove_matching(BUILD, ("lib", "bdist.*"))  # setuptools' leftovers from building lakepurge's wheel

    # the relocated interpreter must find its prefix and import the job's modules without this machine's paths
    clean = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(env / "lib"), "HOME": str(out)}
    check = "import sys, lakepurge.purge.job, lakepurge.indexing.backfill, pyarrow.parquet, psycopg, orjson"
    check += ", deltalake, duckdb"
    check += ", pyiceberg, sqlalchemy, psycopg2"
    check += "; print(sys.prefix)"
    prefix = subprocess.run(
        [env / "bin" / "python", "-c", check], check=True, capture_output=True, text=True, env=clean, cwd=out
    ).stdout.strip()
    if Path(prefix).resolve() != env.resolve():
        raise SystemExit(f"the packaged Python took {prefix} as its prefix, not {env}: it is not relocatable")

    archive = out / "lakepurge-env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(env.iterdir()):
            tar.add(path, arcname=path.name)
    for name in SPARK_ENTRY_POINTS:
        shutil.copy2(ROOT / "lakepurge_jobs" / name, out / name)
    shutil.rmtree(env)
    print(f"{archive.relative_to(ROOT)}: {archive.stat().st_size / 2**20:.0f} MiB (Python {version})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    lam = sub.add_parser("lambda", help="build/lambda: function code and dependencies layer")
    lam.add_argument("--arch", choices=sorted(PLATFORMS), default=os.environ.get("LAMBDA_ARCH", "x86_64"))
    spark = sub.add_parser("spark", help="build/spark: the EMR Serverless environment archive and entry points")
    spark.add_argument("--python", default=sys.executable, help="the interpreter to package (3.11+)")
    spark.add_argument(
        "--emr-release", help="the EMR release the archive runs on (default: infra/template.yaml's EmrReleaseLabel)"
    )
    args = parser.parse_args(argv)
    if args.part == "lambda":
        build_lambda(args.arch)
    else:
        build_spark(args.python, args.emr_release or template_emr_release())
    return 0


if __name__ == "__main__":
    sys.exit(main())
