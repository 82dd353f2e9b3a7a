"""Lambda handler: the state machine's CheckWork step (see work)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import BaseModel, Field, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from reloads import decide_reload, full_load_runs, mark_alerted, parse_request, read_request
from work import WorkCheckSettings, check_work

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class WorkCheckRequest(BaseModel):
    """What the state machine's CheckWork step sends."""

    sinceSweep: int = Field(ge=0)  # the state machine's field names: loop iterations since the last CDC run
    executionId: str = ""


@logger.inject_lambda_context(correlation_id_path="executionId")
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=WorkCheckRequest)
def handler(event: WorkCheckRequest, context: LambdaContext) -> dict[str, Any]:
    """Returns start, reason, visible, inFlight, jobRunning and sweep, and reload: the full-load lane's
    decision (start, alert, reason, tables, reasons, failures; see reloads)."""
    settings = WorkCheckSettings.from_environment(os.environ)
    glue = boto3.client("glue")
    decision = check_work(boto3.client("sqs"), glue, settings, event.sinceSweep)
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
    return {**decision.as_payload(), "reload": _reload(settings, glue)}


def _reload(settings: WorkCheckSettings, glue: Any) -> dict[str, Any]:
    """The full-load lane: start the full-load job for the tables the CDC job asked for, or alert once
    that their reload keeps failing (recorded in the request, so the next check does not alert again)."""
    if not settings.reload_requests_uri or not settings.full_load_job_name:
        return decide_reload(None, []).as_payload()
    s3 = boto3.client("s3")
    text = read_request(s3, settings.reload_requests_uri)
    request = None if text is None else parse_request(text)
    reload = decide_reload(request, full_load_runs(glue, settings.full_load_job_name) if request else [])
    if reload.alert and text is not None:
        mark_alerted(s3, settings.reload_requests_uri, text)
    if request is not None and request.tables:
        logger.info("reload checked", extra={"tables": request.table_list, "start": reload.start,
                                             "alert": reload.alert, "reason": reload.reason})  # fmt: skip
    return reload.as_payload()
