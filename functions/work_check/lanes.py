"""Is maintenance due, and may it start now, or would it run beside another lane? CheckWork's answers for the
serial lane.

Maintenance is due by time: ``MaintenanceEveryHours`` after it last ran (the state machine records when, and hands
it over to its successor), or after the execution started when it has not run in this line of executions. The state
machine adds the other half, a change: it runs maintenance only once a CDC run ran since (a quiet source starts
no maintenance job; the job itself also skips every table with no commit since its last maintenance).

The state machine runs the CDC, gold and maintenance jobs one after the other, but two jobs run beside that lane:
the full-load job for a reload (started here, not waited for) and the verify job (started by a reload's run, after
the first full load, or on VerifySchedule). Maintenance rewrites and expires the files of every table and journal:
beside a reload replacing a table, or a verify run writing cdclake_verify, their commits would race (one of them
refused by Iceberg's validation, or snapshots expired under a load being finished). So maintenance waits while a
full-load or verify run is active, or when this check starts a reload; it stays due and runs once they are done.
Gold is not held: it writes only the marts and reads silver at pinned snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reloads import FullLoadRun
from work import ACTIVE_RUN_STATES, GlueJobRuns


@dataclass(frozen=True)
class Lanes:
    busy: bool
    reason: str

    def as_payload(self) -> dict[str, Any]:
        """The state machine's field names (CheckWork's ResultSelector takes them as ``lanes``)."""
        return {"busy": self.busy, "reason": self.reason}


def job_active(glue: GlueJobRuns, job_name: str) -> bool:
    """Whether a run of the job is active (the first page: Glue lists a job's runs newest first)."""
    if not job_name:
        return False
    pages = glue.get_paginator("get_job_runs").paginate(JobName=job_name)
    try:
        first: Mapping[str, Any] = next(iter(pages), {})
    except Exception as error:  # botocore's EntityNotFoundException: no such job, so no run of it
        if getattr(error, "response", {}).get("Error", {}).get("Code") == "EntityNotFoundException":
            return False
        raise
    return any(run.get("JobRunState") in ACTIVE_RUN_STATES for run in first.get("JobRuns", []))


def decide_lanes(full_load_runs: Sequence[FullLoadRun], verify_active: bool, reload_starts: bool) -> Lanes:
    """busy = a full-load run active, a reload started by this check, or a verify run active (in that order of
    reasons)."""
    if any(run.state in ACTIVE_RUN_STATES for run in full_load_runs):
        return Lanes(True, "a full-load run is active")
    if reload_starts:
        return Lanes(True, "a reload starts now")
    if verify_active:
        return Lanes(True, "a verify run is active")
    return Lanes(False, "no other lane is running")


@dataclass(frozen=True)
class MaintenanceClock:
    due: bool
    reason: str

    def as_payload(self) -> dict[str, Any]:
        """The state machine's field names (CheckWork's ResultSelector takes them as ``maintenance``)."""
        return {"due": self.due, "reason": self.reason}


def _instant(text: str) -> datetime | None:
    """An RFC 3339 time as Step Functions writes it (``2024-03-01T12:00:00.123Z``); None when empty or unreadable."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def maintenance_due(every_hours: float, last: str, started: str, now: datetime) -> MaintenanceClock:
    """due = ``every_hours`` > 0 and at least that long since ``last`` (when maintenance last ran), or, without
    one, since ``started`` (the execution's start; neither known: due)."""
    if every_hours <= 0:
        return MaintenanceClock(False, "maintenance is off (MaintenanceEveryHours 0)")
    since = _instant(last) or _instant(started)
    if since is None:
        return MaintenanceClock(True, "due: no earlier maintenance known")
    due_at = since + timedelta(hours=every_hours)
    if now >= due_at:
        return MaintenanceClock(True, f"due since {due_at:%Y-%m-%dT%H:%M:%SZ}")
    return MaintenanceClock(False, f"due at {due_at:%Y-%m-%dT%H:%M:%SZ}")
