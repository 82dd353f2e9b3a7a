"""Is there CDC work, and may a CDC run start? The state machine's CheckWork step.

The CDC Glue job consumes the file queue itself and applies everything pending in bronze, so the queue is only
the wake-up signal: a run is worth starting when the queue holds visible messages, or when a sweep is due (a run
lists bronze at its start and finds files whose S3 event never reached the queue). It may start only when no run
of the CDC job is active.

A run that stopped at its maximum run time (CdcMaxRunSeconds) may leave files it had already taken off the queue
(each event is deleted once its key is in the run's index): nothing in the queue announces them any more, so the
next check starts a sweep at once instead of waiting for the next due one.

Messages only in flight are not work. The CDC job deletes each event as soon as its key is in its index of
bronze, so none is left in flight when a run ends. One in flight belongs to a receive that has not deleted it
yet (a run that died a moment after receiving it, someone looking in the console): a run started now could not
receive it, nor anything behind it in its FIFO message group, until its visibility ends; then it is visible,
and it starts a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

# A run in one of these states holds the job (MaxConcurrentRuns 1) or may still commit: never start beside it.
ACTIVE_RUN_STATES = frozenset({"STARTING", "RUNNING", "STOPPING", "WAITING"})


class JobRunPages(Protocol):
    def paginate(self, **kwargs: Any) -> Any: ...


class GlueJobRuns(Protocol):
    """The part of a boto3 Glue client this module uses (no Glue type stubs are pinned)."""

    def get_paginator(self, operation_name: str) -> JobRunPages: ...


@dataclass(frozen=True)
class WorkCheckSettings:
    """What the function reads from its environment, once per invocation."""

    queue_url: str
    cdc_job_name: str
    # Start a run every N loop iterations since the last run even when the queue is empty. 0 = never.
    sweep_every_iterations: int = 60
    # The full-load lane (reloads.py): the CDC job's reload request (s3://bucket/key) and the full-load
    # job to start for it; either unset: no reload is ever started from here.
    reload_requests_uri: str = ""
    full_load_job_name: str = ""
    # The CDC job's --max_run_seconds (CdcMaxRunSeconds): a run that lasted that long stopped there, maybe with
    # files left (the module's docstring); 0: not known, no sweep for it.
    cdc_max_run_seconds: float = 0.0
    # The verify job (lanes.py): maintenance waits while a run of it is active; unset: not looked at.
    verify_job_name: str = ""
    # Maintenance is due this many hours after it last ran (lanes.py; MaintenanceEveryHours). 0 = never.
    maintenance_every_hours: float = 0.0
    environment: str = "dev"  # EnvironmentName: the Environment dimension of the function's metrics

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> WorkCheckSettings:
        try:
            settings = cls(
                queue_url=environ["QUEUE_URL"],
                cdc_job_name=environ["CDC_JOB_NAME"],
                sweep_every_iterations=int(environ.get("SWEEP_EVERY_ITERATIONS", "60")),
                reload_requests_uri=environ.get("RELOAD_REQUESTS_URI", ""),
                full_load_job_name=environ.get("FULL_LOAD_JOB_NAME", ""),
                cdc_max_run_seconds=float(environ.get("CDC_MAX_RUN_SECONDS", "0")),
                verify_job_name=environ.get("VERIFY_JOB_NAME", ""),
                maintenance_every_hours=float(environ.get("MAINTENANCE_EVERY_HOURS", "0")),
                environment=environ.get("ENVIRONMENT_NAME", "dev"),
            )
        except KeyError as missing:
            raise ValueError(f"The environment variable {missing} is not set.") from None
        if settings.sweep_every_iterations < 0:
            raise ValueError("SWEEP_EVERY_ITERATIONS must be 0 (never) or more.")
        if settings.maintenance_every_hours < 0:
            raise ValueError("MAINTENANCE_EVERY_HOURS must be 0 (never) or more.")
        if settings.cdc_max_run_seconds < 0:
            raise ValueError("CDC_MAX_RUN_SECONDS must be 0 (not known) or more.")
        return settings


@dataclass(frozen=True)
class QueueDepth:
    """The file queue's approximate message counts (SQS gives no exact ones)."""

    visible: int
    in_flight: int


@dataclass(frozen=True)
class WorkDecision:
    start: bool
    reason: str
    depth: QueueDepth
    job_running: bool
    sweep: bool

    def as_payload(self) -> dict[str, Any]:
        """The state machine's field names (CheckWork's ResultSelector reads them)."""
        return {
            "start": self.start,
            "reason": self.reason,
            "visible": self.depth.visible,
            "inFlight": self.depth.in_flight,
            "jobRunning": self.job_running,
            "sweep": self.sweep,
        }


def read_queue_depth(sqs: SQSClient, queue_url: str) -> QueueDepth:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return QueueDepth(
        visible=int(attributes.get("ApproximateNumberOfMessages", "0")),
        in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0")),
    )


@dataclass(frozen=True)
class CdcRuns:
    """What the CDC job's newest runs say: whether one is active (STARTING, RUNNING, STOPPING or WAITING), and
    whether the newest one that ended succeeded after running its maximum time (the module's docstring)."""

    active: bool
    stopped_at_max: bool = False


def read_cdc_runs(glue: GlueJobRuns, job_name: str, max_run_seconds: float) -> CdcRuns:
    """The CDC job's runs, as ``CdcRuns`` says (``max_run_seconds`` 0: never stopped at its maximum).

    Only the first page is read: Glue lists a job's runs newest first, and the CDC job allows one concurrent run,
    so an active run, and the newest ended one (by its start), are among them.
    """
    pages = glue.get_paginator("get_job_runs").paginate(JobName=job_name)
    first: Mapping[str, Any] = next(iter(pages), {})
    runs = list(first.get("JobRuns", []))
    ended = [run for run in runs if run.get("JobRunState") not in ACTIVE_RUN_STATES]
    # The newest by its start (a run Glue lists without one: not known, so no sweep for it)
    dated = all(run.get("StartedOn") for run in ended)
    newest: Mapping[str, Any] = max(ended, key=lambda run: run["StartedOn"]) if ended and dated else {}
    at_max = (
        max_run_seconds > 0
        and newest.get("JobRunState") == "SUCCEEDED"
        and float(newest.get("ExecutionTime") or 0) >= max_run_seconds
    )
    return CdcRuns(active=any(run.get("JobRunState") in ACTIVE_RUN_STATES for run in runs), stopped_at_max=at_max)


def decide(
    depth: QueueDepth, job_running: bool, since_sweep: int, sweep_every: int, stopped_at_max: bool = False
) -> WorkDecision:
    """start = no active run and (messages visible, or a sweep due: every ``sweep_every`` iterations, 0 = never, or
    at once after a run that stopped at its maximum run time). Messages in flight alone are not work (see the
    module's docstring)."""
    sweep_due = (sweep_every > 0 and since_sweep >= sweep_every) or stopped_at_max
    if job_running:
        reason = "a CDC job run is active"
    elif depth.visible > 0:
        reason = "files queued"
    elif stopped_at_max:
        reason = "sweep: the last CDC run stopped at its maximum run time (it may have left files)"
    elif sweep_due:
        reason = "sweep due"
    elif depth.in_flight > 0:
        reason = "no work: messages only in flight (they start a run once visible again)"
    else:
        reason = "no work"
    start = not job_running and (depth.visible > 0 or sweep_due)
    return WorkDecision(start=start, reason=reason, depth=depth, job_running=job_running, sweep=sweep_due)


def check_work(sqs: SQSClient, glue: GlueJobRuns, settings: WorkCheckSettings, since_sweep: int) -> WorkDecision:
    """Reads the queue's depth and the CDC job's runs, then decides (see ``decide``)."""
    depth = read_queue_depth(sqs, settings.queue_url)
    runs = read_cdc_runs(glue, settings.cdc_job_name, settings.cdc_max_run_seconds)
    return decide(depth, runs.active, since_sweep, settings.sweep_every_iterations, runs.stopped_at_max)
