"""Lambda handler: the state machine's CheckWork step (see work)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import BaseModel, Field, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
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
    """Returns start, reason, visible, inFlight, jobRunning and sweep."""
    settings = WorkCheckSettings.from_environment(os.environ)
    decision = check_work(boto3.client("sqs"), boto3.client("glue"), settings, event.sinceSweep)
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
    return decision.as_payload()
