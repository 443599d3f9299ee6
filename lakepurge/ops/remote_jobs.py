"""Heavy commands where the data is: `index backfill`, `index reconcile`, `verify` and `vacuum` with
``--on emr-serverless`` start the same lakepurge_jobs script the local command runs in-process, on the EMR
Serverless application of ``[workflow.launcher]``, and follow it until it ends.

A run is started with an idempotency token (a retried command within the same minute finds the same run) and is
followed by polling its state; the operator is told where its logs are. Nothing personal is in a run's record:
`verify` hands the job the users' keyed hashes in a document under the reports location, never the raw ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from lakepurge.core import aws
from lakepurge.core.config import ConfigError, EmrServerlessLauncherConfig, Settings
from lakepurge.core.privacy import Pseudonymizer
from lakepurge.purge.launch import EmrServerlessLauncher, JobStatus, SparkJob, follow
from lakepurge.reports import layout
from lakepurge.tables.iceberg import bound_forms

Say = Callable[[str], None]


@dataclass(frozen=True)
class RemoteRun:
    job_id: str
    status: JobStatus
    logs: str

    @property
    def succeeded(self) -> bool:
        return self.status.state == "SUCCEEDED"

    def summary(self) -> dict[str, Any]:
        return {
            "on": "emr-serverless",
            "job_id": self.job_id,
            "state": self.status.state,
            "detail": self.status.detail,
            "logs": self.logs,
        }


def emr_launcher(settings: Settings, client: Any = None) -> EmrServerlessLauncher:
    """The configured EMR Serverless application, or a ConfigError saying what to configure."""
    launcher = settings.workflow.launcher if settings.workflow is not None else None
    if not isinstance(launcher, EmrServerlessLauncherConfig):
        raise ConfigError(
            '--on emr-serverless needs [workflow.launcher] kind = "emr-serverless" with application_id, '
            "execution_role_arn, entry_point, archive and config_uri (see docs/DEPLOY.md)"
        )
    return EmrServerlessLauncher(launcher, client)


def run_remote(
    settings: Settings,
    job: SparkJob,
    say: Say,
    poll_seconds: float = 10.0,
    launcher: EmrServerlessLauncher | None = None,
) -> RemoteRun:
    """Start job on EMR Serverless and follow it to its end, saying each change of state."""
    launcher = launcher or emr_launcher(settings)
    job_id = launcher.start_job(job)
    logs = launcher.logs_of(job_id)
    say(f"{job.script}: EMR Serverless job run {job_id} on application {launcher.config.application_id}")
    say(f"  logs: {logs}")
    status = follow(launcher, job_id, say, poll_seconds)
    return RemoteRun(job_id, status, logs)


def minute_token() -> str:
    """The idempotency key of a command run now: the same command retried within the minute is the same run."""
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime())


def _dataset_job(script: str, datasets: Sequence[str], flag: str | None) -> SparkJob:
    """A job over the named datasets (all when none are named), with one optional flag."""
    arguments = [arg for name in datasets for arg in ("--dataset", name)] + ([flag] if flag else [])
    return SparkJob(script, tuple(arguments), minute_token())


def backfill_job(datasets: Sequence[str], force: bool) -> SparkJob:
    return _dataset_job("build_index", datasets, "--force" if force else None)


def reconcile_job(datasets: Sequence[str], report_only: bool) -> SparkJob:
    return _dataset_job("reconcile", datasets, "--report-only" if report_only else None)


def vacuum_job(datasets: Sequence[str], apply: bool) -> SparkJob:
    return _dataset_job("vacuum", datasets, "--yes" if apply else None)


def verify_remote(
    settings: Settings,
    users: Sequence[str],
    say: Say,
    poll_seconds: float = 10.0,
    launcher: EmrServerlessLauncher | None = None,
    more_hashes: Sequence[str] = (),
) -> tuple[RemoteRun, dict[str, Any] | None]:
    """The lake-wide half of `verify` on EMR Serverless: the job reads every object (and noncurrent version) for
    the users' keyed hashes (and more_hashes: identifiers known by keyed hash only) and writes what remains. Returns
    the run and its result (None if it wrote none)."""
    s3 = aws.client("s3")
    pseudonymizer = Pseudonymizer.from_config(settings.privacy)
    hashes = sorted({*pseudonymizer.many(users), *more_hashes})
    # Iceberg manifests' bounds truncate long ids: their forms are looked for too (hashed, as the ids are).
    bound = sorted(pseudonymizer.many(form for user in users for form in bound_forms(user)))
    verification_id = uuid.uuid4().hex
    source = layout.verification(settings, verification_id)
    target = layout.verification_result(settings, verification_id)
    layout.write_once(s3, source, orjson.dumps({"hashes": hashes, "bound_hashes": bound}))
    job = SparkJob("verify", ("--hashes", str(source), "--result", str(target)), verification_id)
    run = run_remote(settings, job, say, poll_seconds, launcher)
    stored = layout.read_or_none(s3, target) if run.succeeded else None
    return run, None if stored is None else orjson.loads(stored.body)
