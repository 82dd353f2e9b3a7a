"""The Lambda handlers against moto SQS/S3, with a fake Lambda context."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from batch_manifest import BronzeObject, QueuedObject, take_batch
from conftest import FakeLambdaContext, load_handler_module
from moto import mock_aws

from cdclake.dms.manifest import read_manifest
from s3_events import object_created_event

BRONZE = "bronze"


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, str]]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="artifacts")
        url = sqs.create_queue(
            QueueName="files.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        )["QueueUrl"]
        monkeypatch.setenv("QUEUE_URL", url)
        monkeypatch.setenv("MANIFEST_BUCKET", "artifacts")
        monkeypatch.setenv("MAX_FILES_PER_BATCH", "10")
        monkeypatch.setenv("MAX_BYTES_PER_BATCH", "250")
        monkeypatch.setenv("RECEIVE_WAIT_SECONDS", "1")
        yield sqs, s3, url


def send(sqs: Any, url: str, key: str, size: int) -> None:
    sqs.send_message(QueueUrl=url, MessageBody=object_created_event(BRONZE, key, size), MessageGroupId="dms")


def test_dequeue_writes_an_ordered_manifest_cdclake_reads(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    sqs, s3, url = queue
    send(sqs, url, "dms/s/orders/20240301-120000200.csv", 100)
    send(sqs, url, "dms/s/orders/LOAD00000001.csv", 5000)  # full-load file: acknowledged, not applied
    send(sqs, url, "dms/s/orders/20240301-120000100.csv", 100)
    send(sqs, url, "dms/s/orders/20240301-120000300.csv", 100)  # over the 250-byte limit: next batch

    result = load_handler_module("dequeue_batch").handler({"executionName": "run-1", "iteration": 7}, lambda_context)

    assert result["manifestUri"] == "s3://artifacts/manifests/run-1/000007.json"
    assert (result["fileCount"], result["byteCount"]) == (2, 200)
    assert len(result["receiptHandles"]) == 3
    assert result["skipped"] == [f"s3://{BRONZE}/dms/s/orders/LOAD00000001.csv"]
    # The entries HoldBatch sends: the batch's messages, held for the rest of the 12 hours SQS allows from the
    # receive (the default receive visibility is 180 s)
    assert result["holdEntries"] == [
        {"Id": f"m{i}", "ReceiptHandle": handle, "VisibilityTimeout": 43200 - 180}
        for i, handle in enumerate(result["receiptHandles"])
    ]
    text = s3.get_object(Bucket="artifacts", Key="manifests/run-1/000007.json")["Body"].read().decode()
    entries = read_manifest(text, "test")  # the CDC job's own reader
    assert [(e.key, e.size) for e in entries] == [
        (f"s3://{BRONZE}/dms/s/orders/20240301-120000100.csv", 100),
        (f"s3://{BRONZE}/dms/s/orders/20240301-120000200.csv", 100),
    ]
    # The file that did not fit was handed back at once: visible again, and next once the batch is deleted.
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("1", "3")
    load_handler_module("ack_batch").handler({"receiptHandles": result["receiptHandles"]}, lambda_context)
    [left] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(left["Body"])["detail"]["object"]["key"] == "dms/s/orders/20240301-120000300.csv"


def test_dequeue_of_an_empty_queue_writes_nothing(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    _, s3, _ = queue
    result = load_handler_module("dequeue_batch").handler({"executionName": "run-1"}, lambda_context)
    assert result == {
        "manifestUri": "",
        "receiptHandles": [],
        "messageCount": 0,
        "fileCount": 0,
        "byteCount": 0,
        "skipped": [],
        "holdEntries": [],
    }
    assert s3.list_objects_v2(Bucket="artifacts")["KeyCount"] == 0


def visible_and_in_flight(sqs: Any, url: str) -> tuple[str, str]:
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]


def test_dequeue_rejects_a_message_that_is_not_an_s3_event_and_releases_what_it_received(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    # GIVEN a good file announcement followed by a message of another kind
    sqs, _, url = queue
    send(sqs, url, "dms/s/orders/20240301-120000100.csv", 100)
    sqs.send_message(QueueUrl=url, MessageBody='{"detail-type": "Object Deleted"}', MessageGroupId="dms")
    # WHEN the batch is dequeued THEN the invocation fails, naming the problem
    with pytest.raises(ValueError, match="not an 'Object Created' event"):
        load_handler_module("dequeue_batch").handler({"executionName": "run-1"}, lambda_context)
    # AND both messages are visible again at once: the message group is not held for the visibility timeout
    assert visible_and_in_flight(sqs, url) == ("2", "0")


def test_dequeue_rejects_an_s3_event_without_a_bucket(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    sqs, _, url = queue
    event = json.loads(object_created_event(BRONZE, "dms/s/orders/20240301-120000100.csv", 5))
    del event["detail"]["bucket"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(event), MessageGroupId="dms")
    with pytest.raises(ValueError, match="not an EventBridge S3 event"):
        load_handler_module("dequeue_batch").handler({"executionName": "run-1"}, lambda_context)
    assert visible_and_in_flight(sqs, url) == ("1", "0")


def test_a_payload_without_the_execution_name_is_rejected(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    sqs, _, url = queue
    send(sqs, url, "dms/s/orders/20240301-120000100.csv", 100)
    with pytest.raises(ValueError, match="executionName"):
        load_handler_module("dequeue_batch").handler({"iteration": 1}, lambda_context)
    assert visible_and_in_flight(sqs, url) == ("1", "0")  # rejected before receiving anything


def test_log_lines_carry_the_execution_as_correlation_id(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext
) -> None:
    # The Powertools loggers write JSON through their own formatter; read it from an extra stream handler
    # (both functions' Loggers are the service's one logging.Logger here, "cdclake", so one handler sees both).
    stream = io.StringIO()
    modules = [load_handler_module("dequeue_batch"), load_handler_module("ack_batch")]
    handler = logging.StreamHandler(stream)
    handler.setFormatter(modules[0].logger.registered_formatter)
    modules[0].logger.addHandler(handler)
    execution = "arn:aws:states:us-east-1:123456789012:execution:cdclake-dev-pipeline:run-9"
    try:
        modules[0].handler({"executionName": "run-9", "executionId": execution, "iteration": 0}, lambda_context)
        modules[1].handler({"receiptHandles": [], "executionId": execution}, lambda_context)
    finally:
        modules[0].logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["message"], line["correlation_id"]) for line in lines] == [
        ("batch dequeued", execution),
        ("batch acknowledged", execution),
    ]


def test_stops_receiving_once_the_byte_budget_is_reached(queue: tuple[Any, Any, str]) -> None:
    # GIVEN a stub queue that would hand out one 300-byte message per receive (as with several message groups)
    from batch_manifest import receive_in_order

    class OneAtATime:
        def __init__(self) -> None:
            self.calls = 0
            self.visibilities: list[int] = []

        def receive_message(self, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            self.visibilities.append(kwargs["VisibilityTimeout"])
            body = object_created_event(BRONZE, f"dms/s/t/20240301-12000000{self.calls}.csv", 300)
            return {"Messages": [{"Body": body, "ReceiptHandle": f"h{self.calls}"}]}

    stub = OneAtATime()
    # WHEN a batch of at most 10 files and 512 bytes is received
    received = receive_in_order(stub, "url", max_files=10, max_bytes=512, wait_seconds=0, visibility_seconds=180)  # type: ignore[arg-type]
    # THEN receiving stopped at the second message, whose bytes reach the budget
    assert [m.receipt_handle for m in received] == ["h1", "h2"]
    # AND every receive asked for the short receive visibility, never the queue's 12-hour default
    assert stub.visibilities == [180, 180]


def test_ack_deletes_exactly_the_batch(queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext) -> None:
    sqs, _, url = queue
    for n in range(12):
        send(sqs, url, f"dms/s/t/20240301-1200000{n:02d}.csv", 1)
    handles = [m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]

    result = load_handler_module("ack_batch").handler({"receiptHandles": handles}, lambda_context)

    assert result == {"deleted": 10, "expired": 0}
    remaining = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert remaining["Attributes"]["ApproximateNumberOfMessages"] == "2"


def test_a_single_file_over_the_byte_limit_still_forms_a_batch() -> None:
    big = QueuedObject(BronzeObject("b", "p/s/t/20240301-1.csv", 10_000), "h1")
    small = QueuedObject(BronzeObject("b", "p/s/t/20240301-2.csv", 1), "h2")
    batch, rest = take_batch([big, small], max_files=10, max_bytes=100)
    assert [f.key for f in batch.files] == ["p/s/t/20240301-1.csv"]
    assert batch.receipt_handles == ["h1"]
    assert rest == [small]


def test_a_file_announced_twice_is_listed_once_and_acknowledged_twice() -> None:
    first = QueuedObject(BronzeObject("b", "p/s/t/20240301-1.csv", 5), "h1")
    again = QueuedObject(BronzeObject("b", "p/s/t/20240301-1.csv", 5), "h2")
    batch, rest = take_batch([first, again], max_files=10, max_bytes=100)
    assert len(batch.files) == 1 and batch.byte_count == 5
    assert batch.receipt_handles == ["h1", "h2"] and rest == []


def test_messages_for_objects_that_are_not_cdc_files_are_counted_and_logged(
    queue: tuple[Any, Any, str], lambda_context: FakeLambdaContext, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a CDC file and two objects that are not DMS CDC files (the rule's filter lets a "2*" name through)
    sqs, _, url = queue
    send(sqs, url, "dms/s/orders/20240301-120000100.csv", 10)
    send(sqs, url, "dms/s/orders/2024-notes.txt", 10)
    send(sqs, url, "dms/s/orders/LOAD00000001.csv", 10)
    capsys.readouterr()
    module = load_handler_module("dequeue_batch")
    stream = io.StringIO()  # the Logger's own handler holds the stdout of its first import: read an extra one
    handler = logging.StreamHandler(stream)
    handler.setFormatter(module.logger.registered_formatter)
    module.logger.addHandler(handler)
    # WHEN the batch is dequeued
    try:
        result = module.handler({"executionName": "run-1"}, lambda_context)
    finally:
        module.logger.removeHandler(handler)
    # THEN they are acknowledged with the batch, and a metric and a warning say how many and which
    assert result["messageCount"] == 3 and result["fileCount"] == 1
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    [emf] = metrics
    assert emf["NonCdcMessagesSkipped"] == [2.0]
    logged = [json.loads(line) for line in stream.getvalue().splitlines()]
    [warning] = [line for line in logged if line.get("level") == "WARNING"]
    assert warning["message"] == "messages for objects that are not DMS CDC files acknowledged without applying"
    assert warning["skipped"] == result["skipped"] and len(result["skipped"]) == 2
