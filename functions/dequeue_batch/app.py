"""Lambda handler: the state machine's DequeueBatch step (see batch_manifest)."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from batch_manifest import BatchSettings, dequeue_batch

logger = Logger()
tracer = Tracer()
metrics = Metrics()


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Event: ``{"executionName": str, "iteration": int}``; returns the batch (manifestUri, receiptHandles, ...)."""
    settings = BatchSettings.from_environment(os.environ)
    result = dequeue_batch(
        sqs=boto3.client("sqs"),
        s3=boto3.client("s3"),
        settings=settings,
        execution_name=str(event["executionName"]),
        iteration=int(event.get("iteration", 0)),
    )
    logger.info(
        "batch dequeued",
        extra={
            "manifest_uri": result["manifestUri"],
            "file_count": result["fileCount"],
            "byte_count": result["byteCount"],
            "messages": len(result["receiptHandles"]),
            "skipped": result["skipped"],
        },
    )
    metrics.add_metric(name="CdcFilesDequeued", unit=MetricUnit.Count, value=result["fileCount"])
    metrics.add_metric(name="CdcBytesDequeued", unit=MetricUnit.Bytes, value=result["byteCount"])
    return result
