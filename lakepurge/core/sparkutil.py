"""Spark plumbing shared by the jobs: a local session, and the AWS settings executors need.

PySpark's wheel has no s3a support, so jobs read and write S3 with boto3 inside partitions; executors get the
driver's endpoint/region through the task closure rather than relying on their environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lakepurge.core.progress import Progress, spark_tasks, track

if TYPE_CHECKING:
    from lakepurge.core.config import Settings

T = TypeVar("T")
R = TypeVar("R")

AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


# Entries of a job environment that are not environment variables (no variable name has a dot).
_HASH_KEY = "lakepurge.hash_key"
_DRIVER_PID = "lakepurge.driver_pid"
_PRIVACY = "lakepurge.core.privacy"


def job_environment(settings: Settings) -> dict[str, str]:
    """What executors need from the driver, carried in the task closure: the driver's AWS settings (on EMR usually
    just the region) and the hash key, read here once from privacy.hash_key_secret (or hash_key_env). Executors
    get the key in memory (:func:`apply_job_environment`), never through an environment variable, a job argument
    or a Spark property, so it is in no run record; they never ask Secrets Manager themselves."""
    from lakepurge.core.privacy import read_hash_key

    env = {name: os.environ[name] for name in AWS_VARIABLES if name in os.environ}
    key = read_hash_key(settings.privacy)
    if key is not None:
        env[_HASH_KEY] = key.decode()
        env[_PRIVACY] = settings.privacy.model_dump_json()
        env[_DRIVER_PID] = str(os.getpid())
    return env


def apply_job_environment(env: dict[str, str]) -> None:
    """On an executor: the driver's AWS settings as defaults of this process's environment, and the driver's hash
    key as this process's key (in memory). The driver itself (spark=None runs the work in-process) keeps reading
    its key from the source, so a rotation is picked up there."""
    for name, value in env.items():
        if not name.startswith("lakepurge."):
            os.environ.setdefault(name, value)
    if _HASH_KEY in env and env.get(_DRIVER_PID) != str(os.getpid()):
        from lakepurge.core.config import PrivacyConfig
        from lakepurge.core.privacy import hand_over_key

        hand_over_key(PrivacyConfig.model_validate_json(env[_PRIVACY]), env[_HASH_KEY].encode())


_log_file: Path | None = None  # where a local session's JVM logs go; None: Spark's default (stderr)

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n
"""


def send_spark_logs_to(path: Path | None) -> None:
    """Local sessions started after this log to path (log4j2), not to the terminal: the CLI keeps Spark's warnings
    out of its human output and names the file when a command fails."""
    global _log_file  # noqa: PLW0603 - one choice per process, made by the CLI before any session starts
    _log_file = path


def spark_log_file() -> Path | None:
    return _log_file


def local_session(app_name: str, cores: int = 2) -> Any:
    """A Spark session in local mode whose Python workers run this interpreter (JavaMissing first when Java is not
    there: spark-submit would print shell errors before failing)."""
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if _log_file is not None:
        _log_file.parent.mkdir(parents=True, exist_ok=True)
        properties = _log_file.with_suffix(".log4j2.properties")
        properties.write_text(_LOG4J2.format(path=_log_file))
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{properties}")
    return (
        builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores * 2))
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


Engine = Literal["auto", "inline", "spark"]


class JavaMissing(Exception):
    """Spark cannot start its JVM here: no Java, or a JAVA_HOME without bin/java (the message names the fix)."""


def check_java() -> None:
    """Java is there for Spark: a JAVA_HOME set must hold bin/java (else spark-submit prints shell errors before it
    fails), and without one, java must be on PATH. Checked before a session is started, never after."""
    import shutil

    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise JavaMissing(
                f"JAVA_HOME={java_home} holds no bin/java, and Spark starts Java from there: point JAVA_HOME at a"
                " Java 17 installation, or unset it to use the java on PATH"
            )
    elif shutil.which("java") is None:
        raise JavaMissing("Java is not installed and Spark needs it: install Java 17 (or set JAVA_HOME)")


class SparkOnDemand:
    """Where a command's work runs, decided once the work is listed: in this process (no JVM) when it is at most
    ``max_objects`` items and ``max_bytes`` bytes (as a small purge is), else on a local Spark session started then
    (and stopped by :func:`spark_on_demand`). ``engine`` "inline" or "spark" decides without looking. Passed to
    :func:`on_executors` in place of a session."""

    def __init__(self, app_name: str, max_objects: int, max_bytes: int, engine: Engine = "auto") -> None:
        self.app_name = app_name
        self.max_objects = max_objects
        self.max_bytes = max_bytes
        self.engine = engine
        self.session: Any = None
        self.started = False  # the session is this object's own (stopped by spark_on_demand)
        self.decisions: list[str] = []  # one line per batch of work: where it ran and why

    def choose(self, items: int, size: int | None) -> Any:
        """The session for this much work, or None to run it in this process."""
        amount = f"{items} item(s)" + (f", {size / 1e6:.1f} MB" if size is not None else "")
        small = items <= self.max_objects and (size is None or size <= self.max_bytes)
        if self.engine == "inline" or (self.engine == "auto" and small):
            self.decisions.append(f"in this process ({amount})")
            return None
        if self.session is None:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()  # spark-submit's, or a notebook's: used, left running
            self.session = active if active is not None else local_session(self.app_name)
            self.started = active is None
            self.session.sparkContext.setLogLevel("ERROR")
        self.decisions.append(f"on local Spark ({amount})")
        return self.session

    @property
    def engine_used(self) -> str:
        return "spark" if self.session is not None else "in-process"


@contextmanager
def spark_on_demand(app_name: str, settings: Settings, engine: Engine = "auto") -> Iterator[SparkOnDemand]:
    """A :class:`SparkOnDemand` within [jobs]' thresholds; the session it started (if any) stops with the block."""
    jobs = settings.jobs
    executors = SparkOnDemand(app_name, jobs.in_process_max_objects, jobs.in_process_max_bytes, engine)
    if engine == "spark":
        check_java()  # before anything is listed or touched
    try:
        yield executors
    finally:
        if executors.started:
            executors.session.stop()


def on_executors(
    spark: Any,
    items: Sequence[T],
    work: Callable[[Iterable[T]], Iterator[R]],
    label: str = "objects done",
    size: Callable[[T], int] | None = None,
) -> list[R]:
    """Run work over items on the executors, a few tasks per core, and collect what it yields.

    Items are dealt round-robin to the tasks, so a list sorted by size (largest first) spreads the big objects
    over all tasks instead of giving them to the first one. Without a session (``spark=None``) work runs over all
    the items in this process, as one task: the inline purge of a small report, no JVM. A :class:`SparkOnDemand`
    decides between the two from the items' count and, with ``size``, their bytes. Progress (``label``) shows where
    the process shows it (:mod:`lakepurge.core.progress`).
    """
    if not items:
        return []
    if isinstance(spark, SparkOnDemand):
        spark = spark.choose(len(items), sum(map(size, items)) if size is not None else None)
    with track(label, len(items)) as bar:
        if spark is None:
            return list(work(_counted(items, bar)))
        tasks = min(len(items), spark.sparkContext.defaultParallelism * 4)
        dealt = [items[i] for task in range(tasks) for i in range(task, len(items), tasks)]
        with spark_tasks(spark, bar, len(items)):
            results: list[R] = spark.sparkContext.parallelize(dealt, tasks).mapPartitions(work).collect()
        return results


def _counted(items: Iterable[T], bar: Progress) -> Iterator[T]:
    for item in items:
        yield item
        bar.advance()


@contextmanager
def spark_session(app_name: str) -> Iterator[Any]:
    """The process's active session if there is one (left running), else a new local one (stopped after)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = local_session(app_name)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def get_session(app_name: str) -> Any:
    """The session spark-submit created, or a local one when run directly."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if "SPARK_ENV_LOADED" in os.environ or os.environ.get("SPARK_MASTER"):
        return SparkSession.builder.appName(app_name).getOrCreate()
    return local_session(app_name)
