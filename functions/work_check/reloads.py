"""Should the full-load job run for the tables the CDC lane left to it? The full-load lane of CheckWork.

The CDC Glue job never runs a (re)load: it writes the tables whose load is due to its reload request (a small
JSON object, ``cdclake.ops.reload_requests``) and holds their CDC. Here the request is compared with the
full-load job's runs: the job starts for exactly those tables when no run of it is active and none of the runs
started for this request succeeded; after ``max_runs`` failed runs of the same request it is given up on and
alerted once (the request records that), so a reload that keeps timing out never restarts forever.

The record is a conditional write (S3 PutObject ``If-Match`` with the ETag read): the CDC job may write a new
request meanwhile, and two checks may overlap (a retried Lambda invocation). Losing that race (412 Precondition
Failed, 409 ConditionalRequestConflict) is not an error: the request is read again and decided again, so an
alert is sent once, and never about a request that replaced the one given up on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from work import ACTIVE_RUN_STATES, GlueJobRuns

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

FAILED_RUN_STATES = frozenset({"FAILED", "TIMEOUT", "ERROR"})
MAX_RELOAD_RUNS = 3
# S3's answers to a conditional write that lost (moto answers NoSuchKey to If-Match on a key deleted since)
LOST_RACE_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"})


@dataclass(frozen=True)
class ReloadRequest:
    """The CDC lane's request as it was written, and whether an alert about it was sent."""

    tables: tuple[str, ...]
    reasons: Mapping[str, str] = field(default_factory=dict)
    updated: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    alerted: bool = False

    @property
    def table_list(self) -> str:
        """What the full-load job's --tables argument takes."""
        return ",".join(self.tables)


@dataclass(frozen=True)
class FullLoadRun:
    state: str
    tables: str  # its --tables argument ("" for a run of every table)
    started: datetime


@dataclass(frozen=True)
class ReloadDecision:
    start: bool
    alert: bool
    reason: str
    request: ReloadRequest | None = None
    failures: int = 0

    def as_payload(self) -> dict[str, Any]:
        """The state machine's field names (CheckWork's ResultSelector takes them as ``reload``)."""
        request = self.request
        reasons = "" if request is None else "; ".join(f"{t}: {request.reasons.get(t, '')}" for t in request.tables)
        return {
            "start": self.start,
            "alert": self.alert,
            "reason": self.reason,
            "tables": "" if request is None else request.table_list,
            "reasons": reasons,
            "failures": self.failures,
        }


def parse_request(text: str) -> ReloadRequest:
    document = json.loads(text)
    updated = datetime.strptime(document.get("updated", "1970-01-01T00:00:00Z"), "%Y-%m-%dT%H:%M:%SZ")
    return ReloadRequest(
        tables=tuple(document.get("tables", [])),
        reasons=dict(document.get("reasons") or {}),
        updated=updated.replace(tzinfo=UTC),
        alerted=bool(document.get("alerted", False)),
    )


def read_request(s3: S3Client, uri: str) -> str | None:
    """The request's text at ``uri`` (s3://bucket/key); None when no CDC run has written one yet."""
    stored = read_stored_request(s3, uri)
    return None if stored is None else stored[0]


def read_stored_request(s3: S3Client, uri: str) -> tuple[str, str] | None:
    """The request's text and ETag at ``uri``; None when no CDC run has written one yet.

    The key is listed before it is read: S3 answers a GetObject of a missing key with 404 NoSuchKey only to a
    caller allowed s3:ListBucket on the bucket, and with 403 AccessDenied to any other (S3 API reference,
    GetObject, "Permissions"), so "not written yet" and "not allowed" cannot be told apart by the read alone. The
    function may list this one key (s3:ListBucket with the condition s3:prefix = the key, template.yaml); a
    refused listing or read (AccessDenied) is raised, never taken for "no request"."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    if not any(item.get("Key") == key for item in listed.get("Contents", [])):
        return None
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
    except Exception as error:  # botocore's NoSuchKey: deleted since the listing
        if getattr(error, "response", {}).get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    return str(answer["Body"].read().decode("utf-8")), str(answer["ETag"])


def mark_alerted(s3: S3Client, uri: str, text: str, etag: str) -> bool:
    """Record in the request that its failing reload was alerted (the CDC job's next change replaces it), if the
    object is still the one read (``etag``). False when it changed since: read it again and decide again."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    document = json.loads(text)
    document["alerted"] = True
    try:
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=json.dumps(document).encode("utf-8"),
            ContentType="application/json",
            IfMatch=etag,
        )
    except Exception as error:  # botocore's ClientError
        if getattr(error, "response", {}).get("Error", {}).get("Code") in LOST_RACE_CODES:
            return False
        raise
    return True


def full_load_runs(glue: GlueJobRuns, job_name: str) -> list[FullLoadRun]:
    """The job's newest runs (the first page: Glue lists them newest first)."""
    pages = glue.get_paginator("get_job_runs").paginate(JobName=job_name)
    first: Mapping[str, Any] = next(iter(pages), {})
    runs = []
    for run in first.get("JobRuns", []):
        started = run.get("StartedOn")
        if isinstance(started, str):
            started = datetime.fromisoformat(started)
        if started is None:
            continue
        runs.append(
            FullLoadRun(
                state=str(run.get("JobRunState", "")),
                tables=str((run.get("Arguments") or {}).get("--tables", "")),
                started=started if started.tzinfo else started.replace(tzinfo=UTC),
            )
        )
    return runs


def decide_reload(
    request: ReloadRequest | None, runs: Sequence[FullLoadRun], max_runs: int = MAX_RELOAD_RUNS
) -> ReloadDecision:
    """start = tables requested, no full-load run active, none of this request's runs succeeded and fewer
    than ``max_runs`` failed; alert = given up on now and not alerted yet."""
    if request is None or not request.tables:
        return ReloadDecision(start=False, alert=False, reason="no reload requested", request=request)
    if any(run.state in ACTIVE_RUN_STATES for run in runs):
        return ReloadDecision(start=False, alert=False, reason="a full-load run is active", request=request)
    mine = [run for run in runs if run.tables == request.table_list and run.started >= request.updated]
    if any(run.state == "SUCCEEDED" for run in mine):
        return ReloadDecision(False, False, "loaded since the request (the CDC job clears it)", request)
    failures = sum(run.state in FAILED_RUN_STATES for run in mine)
    if failures >= max_runs:
        return ReloadDecision(False, not request.alerted, f"given up after {failures} failed runs", request, failures)
    return ReloadDecision(True, False, "reload requested", request, failures)
