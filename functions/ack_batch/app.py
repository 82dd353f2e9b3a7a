"""Lambda handler: the state machine's AcknowledgeBatch step (see batch_ack)."""

from __future__ import annotations

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import BaseModel, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from batch_ack import acknowledge

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class AckRequest(BaseModel):
    """What the state machine's AcknowledgeBatch step sends."""

    receiptHandles: list[str]  # the state machine's field names
    executionId: str = ""


@logger.inject_lambda_context(correlation_id_path="executionId")
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=AckRequest)
def handler(event: AckRequest, context: LambdaContext) -> dict[str, int]:
    """Returns ``{"deleted": n, "expired": m}``."""
    result = acknowledge(boto3.client("sqs"), os.environ["QUEUE_URL"], event.receiptHandles)
    logger.info("batch acknowledged", extra={"deleted": result.deleted, "expired": result.expired})
    metrics.add_metric(name="CdcMessagesAcknowledged", unit=MetricUnit.Count, value=result.deleted)
    return {"deleted": result.deleted, "expired": result.expired}
