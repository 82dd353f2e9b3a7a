"""Lambda handler: the state machine's DequeueBatch step (see batch_manifest)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import BaseModel, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from batch_manifest import BatchSettings, dequeue_batch

logger = Logger()
tracer = Tracer()
metrics = Metrics()


class DequeueRequest(BaseModel):
    """What the state machine's DequeueBatch step sends."""

    executionName: str  # the state machine's field names
    executionId: str = ""
    iteration: int = 0


@logger.inject_lambda_context(correlation_id_path="executionId")
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=DequeueRequest)
def handler(event: DequeueRequest, context: LambdaContext) -> dict[str, Any]:
    """Returns the batch: manifestUri, receiptHandles, messageCount, fileCount, byteCount, skipped, holdEntries."""
    settings = BatchSettings.from_environment(os.environ)
    result = dequeue_batch(
        sqs=boto3.client("sqs"),
        s3=boto3.client("s3"),
        settings=settings,
        execution_name=event.executionName,
        iteration=event.iteration,
    )
    logger.info(
        "batch dequeued",
        extra={
            "manifest_uri": result["manifestUri"],
            "file_count": result["fileCount"],
            "byte_count": result["byteCount"],
            "messages": result["messageCount"],
            "skipped": result["skipped"],
        },
    )
    if result["skipped"]:
        # The rule queues only "<prefix>/*/2*" keys: anything else that arrives is unexpected, never silent.
        logger.warning(
            "messages for objects that are not DMS CDC files acknowledged without applying",
            extra={"skipped": result["skipped"]},
        )
    metrics.add_metric(name="NonCdcMessagesSkipped", unit=MetricUnit.Count, value=len(result["skipped"]))
    metrics.add_metric(name="CdcFilesDequeued", unit=MetricUnit.Count, value=result["fileCount"])
    metrics.add_metric(name="CdcBytesDequeued", unit=MetricUnit.Bytes, value=result["byteCount"])
    return result
