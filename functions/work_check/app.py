"""Lambda handler: the state machine's CheckWork step (see work)."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import BaseModel, Field, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from lanes import decide_lanes, job_active, maintenance_due
from reloads import FullLoadRun, decide_reload, full_load_runs, mark_alerted, parse_request, read_stored_request
from work import WorkCheckSettings, check_work

MARK_ATTEMPTS = 3  # a request read, decided and marked; again when the conditional write lost

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class WorkCheckRequest(BaseModel):
    """What the state machine's CheckWork step sends."""

    sinceSweep: int = Field(ge=0)  # the state machine's field names: loop iterations since the last CDC run
    executionId: str = ""
    lastMaintenance: str = ""  # when maintenance last ran (RFC 3339); "": not in this line of executions
    startedAt: str = ""  # the execution's start (RFC 3339)


@logger.inject_lambda_context(correlation_id_path="executionId")
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=WorkCheckRequest)
def handler(event: WorkCheckRequest, context: LambdaContext) -> dict[str, Any]:
    """Returns start, reason, visible, inFlight, jobRunning and sweep; reload: the full-load lane's
    decision (start, alert, reason, tables, reasons, failures; see reloads); lanes: whether another lane
    runs beside the serial one (busy, reason) and maintenance: whether it is due by the clock (due, reason;
    see lanes)."""
    settings = WorkCheckSettings.from_environment(os.environ)
    # Every metric of the stack carries the Environment dimension, as the Glue jobs' do (ops/metrics.py).
    metrics.set_default_dimensions(Environment=settings.environment)
    glue = boto3.client("glue")
    decision = check_work(boto3.client("sqs"), glue, settings, event.sinceSweep)
    loads = full_load_runs(glue, settings.full_load_job_name) if settings.full_load_job_name else []
    reload = _reload(settings, loads)
    lanes = decide_lanes(loads, job_active(glue, settings.verify_job_name), reload["start"])
    logger.info(
        "work checked",
        extra={
            "start": decision.start,
            "reason": decision.reason,
            "visible": decision.depth.visible,
            "in_flight": decision.depth.in_flight,
            "job_running": decision.job_running,
            "since_sweep": event.sinceSweep,
        },
    )
    metrics.add_metric(name="QueueVisibleMessages", unit=MetricUnit.Count, value=decision.depth.visible)
    metrics.add_metric(name="QueueInFlightMessages", unit=MetricUnit.Count, value=decision.depth.in_flight)
    clock = maintenance_due(settings.maintenance_every_hours, event.lastMaintenance, event.startedAt, datetime.now(UTC))
    if lanes.busy:
        logger.info("lanes busy", extra={"reason": lanes.reason, "maintenance": clock.reason})
    return {
        **decision.as_payload(),
        "reload": reload,
        "lanes": lanes.as_payload(),
        "maintenance": clock.as_payload(),
    }


def _reload(settings: WorkCheckSettings, runs: list[FullLoadRun]) -> dict[str, Any]:
    """The full-load lane: start the full-load job for the tables the CDC job asked for, or alert once
    that their reload keeps failing (recorded in the request, so the next check does not alert again)."""
    if not settings.reload_requests_uri or not settings.full_load_job_name:
        return decide_reload(None, []).as_payload()
    s3 = boto3.client("s3")
    for _ in range(MARK_ATTEMPTS):
        stored = read_stored_request(s3, settings.reload_requests_uri)
        request = None if stored is None else parse_request(stored[0])
        reload = decide_reload(request, runs if request else [])
        if not reload.alert or stored is None or mark_alerted(s3, settings.reload_requests_uri, *stored):
            break
        # Lost the conditional write: the request changed since it was read. Read it and decide again.
        logger.info("reload request changed while marking it alerted; read again")
    else:
        reload = replace(reload, alert=False, reason=f"{reload.reason}; not alerted: the request kept changing")
    if request is not None and request.tables:
        logger.info("reload checked", extra={"tables": request.table_list, "start": reload.start,
                                             "alert": reload.alert, "reason": reload.reason})  # fmt: skip
    return reload.as_payload()
