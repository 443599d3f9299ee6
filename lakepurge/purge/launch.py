"""Starting the purge job and asking how it is doing, behind one interface, wherever Spark runs.

The workflow's Tasks are short Lambda invocations: one starts the job and keeps only its opaque id, later ones ask
its status until it ends. So a launcher keeps no state in memory: ``LocalSparkLauncher`` keeps each job's pid, log
and exit code in a directory, ``EmrServerlessLauncher`` asks EMR Serverless. A report with few objects is purged
inline instead (:func:`run_inline`): the same purge, in the calling process, without starting a JVM.

The job receives the report's URI and approved SHA-256 (it refuses a report that hashes differently), who approved
and when; never a user id. The hash key reaches it through its environment (see EmrServerlessLauncher).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
from botocore.exceptions import BotoCoreError, ClientError

from lakepurge.core import aws, executor_ids
from lakepurge.core.config import (
    ConfigError,
    EmrServerlessLauncherConfig,
    LocalLauncherConfig,
    Settings,
    WorkflowConfig,
)
from lakepurge.core.logs import get_logger
from lakepurge.core.privacy import hash_key
from lakepurge.core.s3io import ever_versioned, head_object, object_versions
from lakepurge.core.s3uri import S3Uri
from lakepurge.purge.certificate import PurgeResult
from lakepurge.purge.job import run_purge
from lakepurge.reports import layout
from lakepurge.reports.report import OBJECT_REFERENCE, Report

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = get_logger()

JobState = Literal["RUNNING", "SUCCEEDED", "FAILED"]


@dataclass(frozen=True)
class PurgeJobSpec:
    request_id: str
    report_uri: str  # s3:// URI of the report
    report_sha256: str  # approved hash; the job refuses a report hashing differently
    approved_by: str | None = None
    approved_at: str | None = None  # ISO timestamp

    def arguments(self, config: str | None) -> list[str]:
        """lakepurge_jobs/purge.py's arguments (config None: the job reads its settings from the environment)."""
        args = [] if config is None else ["--config", config]
        args += ["--report", self.report_uri, "--sha256", self.report_sha256]
        if self.approved_by is not None:
            args += ["--approved-by", self.approved_by]
        if self.approved_at is not None:
            args += ["--approved-at", self.approved_at]
        return args


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    detail: str  # short human text (EMR stateDetails, "exit code 3: ..."); never user data

    @property
    def done(self) -> bool:
        return self.state != "RUNNING"


class JobLauncher(Protocol):
    backend: str  # "local" | "emr-serverless"

    def start(self, spec: PurgeJobSpec) -> str:
        """Start the purge job; returns an opaque job id (a JSON-serialisable string)."""
        ...

    def status(self, job_id: str) -> JobStatus: ...


def launcher_for(settings: Settings, config_path: str | Path | None = None) -> JobLauncher:
    """The launcher the configuration names ([workflow.launcher]; local spark-submit without a [workflow]).

    config_path is the file the caller loaded its settings from, for the local job; without it the job reads
    LAKEPURGE_CONFIG_URI / LAKEPURGE_CONFIG / LAKEPURGE_CONFIG_TOML from the environment it inherits (see
    lakepurge.runtime). EMR jobs read launcher.config_uri: in a deployment, the same S3 object as the functions'
    LAKEPURGE_CONFIG_URI.
    """
    config = settings.workflow.launcher if settings.workflow is not None else LocalLauncherConfig()
    if isinstance(config, EmrServerlessLauncherConfig):
        return EmrServerlessLauncher(config)
    return LocalSparkLauncher(config, settings, config_path)


# -- inline -----------------------------------------------------------------------------------------------------------


def _inline_limit(settings: Settings, name: str) -> int:
    limit: int = (
        getattr(settings.workflow, name) if settings.workflow is not None else WorkflowConfig.model_fields[name].default
    )
    return limit


def inline_fits(settings: Settings, report: Report, s3: S3Client) -> bool:
    """Whether the report is small enough to purge inline (no Spark): at most workflow.inline_max_objects objects
    (a table's files to rewrite counted) and workflow.inline_max_bytes bytes to read (:func:`bytes_to_read`, asked
    only when the count fits). A report that changes a table needs deltalake (Iceberg: pyiceberg) and DuckDB, which
    the Lambda layer cannot hold: inline only where they are installed (the CLI, the local stack), else on Spark."""
    writers = {"delta": "deltalake", "iceberg": "pyiceberg"}
    needed = {writers[t.format] for t in report.tables if not t.empty and t.format in writers}
    if needed and any(importlib.util.find_spec(name) is None for name in (*needed, "duckdb")):
        return False
    files = sum(len(t.files) for t in report.tables)
    if len(report.objects) + len(report.versions) + files > _inline_limit(settings, "inline_max_objects"):
        return False
    limit = _inline_limit(settings, "inline_max_bytes")
    return bytes_to_read(s3, settings, report, stop_above=limit) <= limit


def bytes_to_read(s3: S3Client, settings: Settings, report: Report, stop_above: int | None = None) -> int:
    """The bytes a purge of the report reads: every version of each key it rewrites or names noncurrent versions
    of (the current one is rewritten, the noncurrent ones read for the users), from one listing per key in a
    bucket that was ever versioned, a HEAD otherwise. Objects of delete-object datasets are deleted, never read; a
    reference that resolved to nothing has no bytes. Counting stops once past ``stop_above``."""
    keys = [(o.s3path, o.dataset) for o in report.objects] + [(v.s3path, v.dataset) for v in report.versions]
    versioned: dict[str, bool] = {}
    total = 0
    for s3path, dataset in dict.fromkeys(keys):
        if s3path.startswith(OBJECT_REFERENCE) or settings.dataset_named(dataset).erase == "delete-object":
            continue
        uri = S3Uri.parse(s3path)
        if uri.bucket not in versioned:
            versioned[uri.bucket] = ever_versioned(s3, uri.bucket)
        if versioned[uri.bucket]:
            total += sum(v["Size"] for v in object_versions(s3, uri.bucket, uri.key) if v["Key"] == uri.key)
        else:
            head = head_object(s3, uri.bucket, uri.key)
            total += head.size if head is not None else 0
        if stop_above is not None and total > stop_above:
            break
    return total


def run_inline(
    settings: Settings, spec: PurgeJobSpec, report: Report | None = None, requested: Sequence[str] = ()
) -> PurgeResult:
    """The Spark job's purge, in this process: the report is read and its hash checked first (ReportTampered),
    then each object goes through the same engine on a few threads, every touched object is verified and the
    certificate written, exactly as lakepurge_jobs/purge.py does on executors. A caller that has just read the
    spec's report with layout.load_report (hash checked) passes it as ``report`` instead of having it read again;
    one that holds the users' raw ids passes them as ``requested`` (job.run_purge)."""
    key = hash_key(settings.privacy)
    if report is None:
        report, _ = layout.load_report(aws.client("s3"), spec.report_uri, spec.report_sha256)
    result = run_purge(
        None,
        settings,
        report,
        key,
        None,
        spec.approved_by,
        spec.report_sha256,
        approved_at=spec.approved_at,
        requested=requested,
    )
    log.info(
        "inline purge finished",
        extra={
            "request_id": spec.request_id,
            "objects": len(report.objects),
            "lines_erased": result.lines_erased,
            "objects_failed": len(result.failed),
            "verified": result.verified,
        },
    )
    return result


def write_sealed_ids(s3: S3Client, settings: Settings, report: Report, users: Sequence[str]) -> S3Uri | None:
    """Before a purge starts on Spark, from the raw ids its starter holds (StartPurge, the operator's CLI): the
    requested ids sealed for the job's executors (lakepurge.core.executor_ids) under the request's results prefix, so
    that each executor checks objects by the ids themselves instead of hashing every id it reads. The driver never
    opens them, and deletes them when its executors are done. Only ids whose keyed hash is one of the report's are
    sealed (an id the report holds no hash of never reaches executors). Where they were written, or None with no id
    to seal, or when they could not be written: they spare executors the hashing, nothing more, so the purge starts
    without them, as its driver goes on without them (purge.job.located_sealed_ids); a write S3 applied although
    its answer failed is found and used by the driver, and deleted by it, by the starter's own cleanup and when the
    request ends."""
    key = hash_key(settings.privacy)
    ids = executor_ids.covering(key, report.user_hashes, [user for user in users if user])
    if not ids:
        return None
    where = layout.executor_ids(layout.results_prefix(settings, report.request_id))
    try:
        executor_ids.write(s3, where, key, report.request_id, ids)
    except (BotoCoreError, ClientError) as exc:  # (past botocore's retries) the error's class only, never a body
        log.warning(
            "sealed ids not written: the executors will hash every id they read",
            extra={"request_id": report.request_id, "ids": len(ids), "error": type(exc).__name__},
        )
        return None
    log.info("sealed ids written for the executors", extra={"request_id": report.request_id, "ids": len(ids)})
    return where


# -- local spark-submit -----------------------------------------------------------------------------------------------

_JOB_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
LOG_FILE = "job.log"
EXIT_FILE = "exit_code"
PID_FILE = "pid"
STARTED_FILE = "started"  # the wrapper's start time in clock ticks since boot (Linux): guards against pid reuse
# A job directory claimed this long ago with no pid in it: the starter died before the process was started.
_START_GRACE_SECONDS = 60

# Where a local job finds its configuration when no file is passed (lakepurge.runtime reads the same variables).
_CONFIG_VARIABLES = ("LAKEPURGE_CONFIG_URI", "LAKEPURGE_CONFIG", "LAKEPURGE_CONFIG_TOML")
# Runs the job, then records its exit code atomically.
_WRAPPER = '"$@" >>job.log 2>&1; code=$?; echo "$code" >exit_code.tmp && mv exit_code.tmp exit_code; exit "$code"'

WrapperState = Literal["alive", "ended", "reused"]


def default_work_dir() -> Path:
    """A per-user directory under the system's temporary directory, the same for every process."""
    return Path(tempfile.gettempdir()) / f"lakepurge-jobs-{os.getuid()}"


def spark_submit() -> Path:
    """The spark-submit script pyspark's wheel ships (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConfigError("launcher 'local' needs pyspark (pip install 'lakepurge[spark]')")
    return Path(spec.origin).parent / "bin" / "spark-submit"


def job_entry_point(script: str = "purge") -> Path:
    """lakepurge_jobs/<script>.py as installed (the purge, or another job: backfill, reconcile, verify, vacuum)."""
    spec = importlib.util.find_spec(f"lakepurge_jobs.{script}")
    if spec is None or spec.origin is None:
        raise ConfigError(f"lakepurge_jobs.{script} not found: install lakepurge with its lakepurge_jobs package")
    return Path(spec.origin)


def _start_ticks(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), or None where there is no /proc or no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _signal_state(pid: int) -> WrapperState:
    """Without /proc (macOS): signal 0 tells whether the pid exists, not whose it is."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "ended"
    except PermissionError:
        return "reused"
    return "alive"


def _wrapper_state(pid: int, started: str) -> WrapperState:
    """Whether our wrapper process still runs. "ended": it exited or was killed and its pid is free (or is our own
    unreaped zombie), so a process group with that id can only be the job's; "reused": another process has the pid
    now (its start time differs)."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child (started by this process): reap it if it ended
        if reaped == pid:
            return "ended"
    except ChildProcessError:
        pass  # started by another process
    if not Path("/proc").is_dir():
        return _signal_state(pid)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return "ended"
    if started and fields[19] != started:
        return "reused"
    return "ended" if fields[0] in ("Z", "X") else "alive"


def _last_line(log_path: Path, marker: str = "lakepurge:") -> str:
    """The job's own last status line (it starts with marker), else the last line of the log; at most 300 chars.

    The job prints no user data: its status lines give counts, report URIs (request ids) and hash prefixes."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 65536))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return ""
    own = [line for line in lines if line.startswith(marker)]
    chosen = own[-1] if own else (lines[-1] if lines else "")
    return chosen[:300]


class LocalSparkLauncher:
    """spark-submit on this machine, detached: the job outlives the process that started it, and any process can
    ask its status from its directory ``work_dir/<job id>/`` (pid, start time, job.log, exit_code)."""

    backend = "local"

    def __init__(self, config: LocalLauncherConfig, settings: Settings, config_path: str | Path | None = None) -> None:
        self.config = config
        self.settings = settings
        self.config_path = Path(config_path).resolve() if config_path is not None else None
        self.work_dir = Path(config.work_dir) if config.work_dir else default_work_dir()

    def command(self, spec: PurgeJobSpec) -> list[str]:
        return self.submit_command("purge", spec.arguments(str(self.config_path) if self.config_path else None))

    def submit_command(self, script: str, arguments: Sequence[str]) -> list[str]:
        """spark-submit of lakepurge_jobs/<script>.py with arguments, on this launcher's master."""
        conf = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.python.worker.reuse": "true",
            "spark.log.level": "WARN",  # the job's own lines, not Spark's INFO chatter, make up job.log
        }
        if self.config.master.startswith("local"):
            conf |= {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
        return [
            str(spark_submit()),
            "--master",
            self.config.master,
            *(arg for name, value in conf.items() for arg in ("--conf", f"{name}={value}")),
            str(job_entry_point(script)),
            *arguments,
        ]

    def environment(self) -> dict[str, str]:
        """This process's environment (AWS endpoint and credentials, the hash key, the config), with the job's
        Python set to this interpreter and a relative LAKEPURGE_CONFIG made absolute (the job runs elsewhere)."""
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if "LAKEPURGE_CONFIG" in env:
            env["LAKEPURGE_CONFIG"] = str(Path(env["LAKEPURGE_CONFIG"]).resolve())
        return env

    def _check_ready(self) -> None:
        """Fail now, not ten seconds into a JVM, when the job could not read its settings or hash key."""
        if self.config_path is None and not set(_CONFIG_VARIABLES) & os.environ.keys():
            raise ConfigError(
                "launcher 'local': pass the configuration file, or set LAKEPURGE_CONFIG_URI, LAKEPURGE_CONFIG or"
                " LAKEPURGE_CONFIG_TOML"
            )
        hash_key(self.settings.privacy)

    def _attempts(self, base: str) -> list[str]:
        if not self.work_dir.is_dir():
            return []
        pattern = re.compile(re.escape(base) + r"(?:-r(\d+))?")
        found = [(int(m.group(1) or 0), d.name) for d in self.work_dir.iterdir() if (m := pattern.fullmatch(d.name))]
        return [name for _, name in sorted(found)]

    def start(self, spec: PurgeJobSpec) -> str:
        """Start the job, or return the id of this spec's job when one is running or has succeeded (a retried
        Task must not start a second purge); after a failed attempt a new one starts (the purge is idempotent)."""
        self._check_ready()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        base = f"{_UNSAFE.sub('_', spec.request_id)[:80]}-{spec.report_sha256[:12]}"
        attempts = self._attempts(base)
        if attempts and self.status(attempts[-1]).state != "FAILED":
            return attempts[-1]
        job_id = base if not attempts else f"{base}-r{len(attempts)}"
        job_dir = self.work_dir / job_id
        try:
            job_dir.mkdir()
        except FileExistsError:
            return job_id  # another starter claimed this attempt a moment ago
        command = self.command(spec)
        (job_dir / "job.json").write_bytes(
            orjson.dumps(
                {"request_id": spec.request_id, "report": spec.report_uri, "command": shlex.join(command)},
                option=orjson.OPT_INDENT_2,
            )
        )
        process = subprocess.Popen(
            ["/bin/sh", "-c", _WRAPPER, "lakepurge-purge", *command],
            cwd=job_dir,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own session and process group: detached from the caller's
        )
        (job_dir / STARTED_FILE).write_text(_start_ticks(process.pid) or "")
        (job_dir / f"{PID_FILE}.tmp").write_text(str(process.pid))
        (job_dir / f"{PID_FILE}.tmp").rename(job_dir / PID_FILE)
        log.info("purge job started", extra={"request_id": spec.request_id, "job_id": job_id, "backend": "local"})
        return job_id

    def job_dir(self, job_id: str) -> Path:
        if not _JOB_ID.match(job_id):
            raise ValueError(f"not a local job id: {job_id!r}")
        return self.work_dir / job_id

    def pid(self, job_id: str) -> int | None:
        try:
            return int((self.job_dir(job_id) / PID_FILE).read_text())
        except FileNotFoundError:
            return None

    def status(self, job_id: str) -> JobStatus:
        job_dir = self.job_dir(job_id)
        if not job_dir.is_dir():
            return JobStatus("FAILED", "no such job")
        finished = self._exit_status(job_dir)
        if finished is not None:
            return finished
        pid = self.pid(job_id)
        if pid is None:
            if time.time() - job_dir.stat().st_mtime < _START_GRACE_SECONDS:
                return JobStatus("RUNNING", "starting")
            return JobStatus("FAILED", "lost: the job was never started")
        started = (job_dir / STARTED_FILE).read_text().strip() if (job_dir / STARTED_FILE).exists() else ""
        state = _wrapper_state(pid, started)
        if state == "alive":
            return JobStatus("RUNNING", "running")
        return self._exit_status(job_dir) or self._lost(job_dir, pid, state)  # it may have ended just now

    @staticmethod
    def _exit_status(job_dir: Path) -> JobStatus | None:
        """The outcome the wrapper recorded, or None while there is none."""
        try:
            code = int((job_dir / EXIT_FILE).read_text().strip())
        except FileNotFoundError:
            return None
        if code == 0:
            return JobStatus("SUCCEEDED", "exit code 0")
        last = _last_line(job_dir / LOG_FILE)
        return JobStatus("FAILED", f"exit code {code}" + (f": {last}" if last else ""))

    @staticmethod
    def _lost(job_dir: Path, pid: int, state: WrapperState) -> JobStatus:
        """The wrapper died without recording an exit code (killed). What is left of its process group (the JVM,
        Python workers) is ended, so a job reported FAILED is not still writing: the wrapper led its group, and
        with its pid free ("ended") the group id can only be the job's."""
        if state == "ended":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        last = _last_line(job_dir / LOG_FILE)
        return JobStatus("FAILED", "lost: the job's process ended without an exit code" + (f"; {last}" if last else ""))


# -- EMR Serverless ---------------------------------------------------------------------------------------------------

EMR_STATES: dict[str, JobState] = {
    "SUBMITTED": "RUNNING",
    "PENDING": "RUNNING",
    "SCHEDULED": "RUNNING",
    "RUNNING": "RUNNING",
    "QUEUED": "RUNNING",
    "SUCCESS": "SUCCEEDED",
    "FAILED": "FAILED",
    "CANCELLING": "FAILED",
    "CANCELLED": "FAILED",
}

# The packaged environment (venv-pack) unpacked as ./environment on the driver and executors, as AWS documents for
# Python dependencies on EMR Serverless.
_ENVIRONMENT_PYTHON = "./environment/bin/python"


class EmrServerlessLauncher:
    """StartJobRun on an EMR Serverless application; the job id is the jobRunId.

    The job reads its configuration from launcher.config_uri. With privacy.hash_key_secret (what the SAM template
    configures) the driver reads the hash key from Secrets Manager at run time (the job role needs
    secretsmanager:GetSecretValue on it) and hands it to the executors in memory with the task closure: the key is
    in no request, job run, Spark property or application configuration. lakepurge never puts the key in a
    request; with privacy.hash_key_env instead, the driver's environment must hold it (``--conf
    spark.emr-serverless.driverEnv.<name>=...``), visible to whoever may read the job run or application.
    """

    backend = "emr-serverless"

    def __init__(self, config: EmrServerlessLauncherConfig, client: Any = None) -> None:
        self.config = config
        self._client = client

    @property
    def client(self) -> Any:
        return self._client or aws.client("emr-serverless")

    def spark_submit_parameters(self) -> str:
        parameters = [
            f"--conf spark.archives={self.config.archive}#environment",
            f"--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON={_ENVIRONMENT_PYTHON}",
            f"--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON={_ENVIRONMENT_PYTHON}",
            f"--conf spark.executorEnv.PYSPARK_PYTHON={_ENVIRONMENT_PYTHON}",
        ]
        if self.config.spark_submit_parameters.strip():
            parameters.append(self.config.spark_submit_parameters.strip())
        return " ".join(parameters)

    @staticmethod
    def client_token(spec: PurgeJobSpec) -> str:
        """Same request and report, same token: a retried start returns the first run instead of a second one."""
        digest = hashlib.sha256(f"{spec.request_id}\n{spec.report_sha256}".encode()).hexdigest()[:16]
        return f"{_UNSAFE.sub('_', spec.request_id)[:47]}-{digest}"

    def start(self, spec: PurgeJobSpec) -> str:
        job_id = self._submit(
            name=f"lakepurge-purge-{spec.request_id}",
            entry_point=self.config.entry_point,
            arguments=spec.arguments(self.config.config_uri),
            token=self.client_token(spec),
            tags={"lakepurge:request-id": spec.request_id[:256]},
        )
        log.info("purge job started", extra={"request_id": spec.request_id, "job_id": job_id, "backend": self.backend})
        return job_id

    def entry_point_of(self, script: str) -> str:
        """The s3:// URI of lakepurge_jobs/<script>.py: published beside the purge job (infra/package.py)."""
        return self.config.entry_point.rsplit("/", 1)[0] + f"/{script}.py"

    def start_job(self, job: SparkJob) -> str:
        """Start one of the other Spark jobs (backfill, reconcile, verify, vacuum). The same job asked for twice
        (same script, arguments and idempotency key) is one run: EMR returns the first for the same client token."""
        arguments = ["--config", self.config.config_uri, *job.arguments]
        digest = hashlib.sha256("\n".join([job.script, job.idempotency, *arguments]).encode()).hexdigest()[:24]
        job_id = self._submit(
            name=f"lakepurge-{job.script}",
            entry_point=self.entry_point_of(job.script),
            arguments=arguments,
            token=f"lakepurge-{job.script}-{digest}"[:64],
            tags={"lakepurge:job": job.script},
        )
        log.info("spark job started", extra={"job": job.script, "job_id": job_id, "backend": self.backend})
        return job_id

    def _submit(self, name: str, entry_point: str, arguments: list[str], token: str, tags: dict[str, str]) -> str:
        request: dict[str, Any] = {
            "applicationId": self.config.application_id,
            "executionRoleArn": self.config.execution_role_arn,
            "name": name[:256],
            "clientToken": token,
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": entry_point,
                    "entryPointArguments": arguments,
                    "sparkSubmitParameters": self.spark_submit_parameters(),
                }
            },
            "tags": tags,
        }
        if self.config.log_uri:
            request["configurationOverrides"] = {
                "monitoringConfiguration": {"s3MonitoringConfiguration": {"logUri": self.config.log_uri}}
            }
        job_id: str = self.client.start_job_run(**request)["jobRunId"]
        return job_id

    def logs_of(self, job_id: str) -> str:
        """Where the run's driver and executor logs are, in words an operator can follow."""
        if self.config.log_uri:
            base = self.config.log_uri.rstrip("/")
            return (
                f"{base}/applications/{self.config.application_id}/jobs/{job_id}/ (SPARK_DRIVER/stdout.gz, stderr.gz)"
            )
        return (
            "no [workflow.launcher] log_uri is configured: open the run in EMR Studio "
            f"(aws emr-serverless get-dashboard-for-job-run --application-id {self.config.application_id} "
            f"--job-run-id {job_id})"
        )

    def status(self, job_id: str) -> JobStatus:
        run = self.client.get_job_run(applicationId=self.config.application_id, jobRunId=job_id)["jobRun"]
        state = str(run["state"])
        detail = str(run.get("stateDetails") or state)[:300]
        mapped = EMR_STATES.get(state)
        if mapped is None:  # a state this code does not know: fail loudly rather than poll forever
            return JobStatus("FAILED", f"unrecognised EMR Serverless state {state}: {detail}")
        return JobStatus(mapped, detail)


@dataclass(frozen=True)
class SparkJob:
    """A run of lakepurge_jobs/<script>.py other than the purge: what it is given besides its configuration."""

    script: str  # "build_index", "reconcile", "verify", "vacuum"
    arguments: tuple[str, ...] = ()  # never a raw user id: they are recorded with the run
    idempotency: str = ""  # same script, arguments and key: the same run (say, the day, or a document's hash)


def follow(
    launcher: EmrServerlessLauncher,
    job_id: str,
    say: Callable[[str], None],
    poll_seconds: float = 10.0,
    timeout_seconds: float | None = None,
) -> JobStatus:
    """Ask the run's state every poll_seconds until it ends (or timeout_seconds pass: then its last state, still
    RUNNING), saying each change of state."""
    started = time.monotonic()
    last = ""
    while True:
        status = launcher.status(job_id)
        if status.detail != last:
            say(f"  {time.monotonic() - started:6.0f} s  {status.state.lower()}: {status.detail}")
            last = status.detail
        if status.done:
            return status
        if timeout_seconds is not None and time.monotonic() - started >= timeout_seconds:
            return status
        time.sleep(poll_seconds)
