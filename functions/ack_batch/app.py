"""Lambda handler: the state machine's AcknowledgeBatch step (see batch_ack)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from batch_ack import acknowledge

logger = Logger()
tracer = Tracer()
metrics = Metrics()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """Event: ``{"receiptHandles": [str, ...]}``; returns ``{"deleted": n, "expired": m}``."""
    queue_url = os.environ["QUEUE_URL"]
    handles = [str(h) for h in event.get("receiptHandles", [])]
    result = acknowledge(boto3.client("sqs"), queue_url, handles)
    logger.info("batch acknowledged", extra={"deleted": result.deleted, "expired": result.expired})
    metrics.add_metric(name="CdcMessagesAcknowledged", unit=MetricUnit.Count, value=result.deleted)
    return {"deleted": result.deleted, "expired": result.expired}
