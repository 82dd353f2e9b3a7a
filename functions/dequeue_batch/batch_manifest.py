"""The next CDC batch: receive S3 "Object Created" events from the FIFO queue, in order, and write the manifest.

The manifest is the format ``cdclake.dms.manifest.read_manifest`` reads (a test proves it):
``{"files": [{"key": "s3://bucket/prefix/schema/table/20240301-1200000000.csv", "size": 123}]}``.
Re-implemented here (a few lines) so this function needs no Spark-side package.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

# A DMS CDC file name is its write timestamp (``20240301-120000000.csv[.gz]``); the same rule as
# cdclake.dms.files. Full-load files (LOADxxxxxxxx) also raise events but belong to the full-load job.
_CDC_FILE_NAME = re.compile(r"^\d{8}-\d+\.(csv|parquet)(\.gz)?$")
_SQS_MAX_MESSAGES_PER_RECEIVE = 10
_SQS_MAX_WAIT_SECONDS = 20  # the ReceiveMessage long-polling maximum
_SQS_MAX_VISIBILITY_SECONDS = 43200  # 12 hours, counted from the receive
_MAX_RECEIVE_VISIBILITY_SECONDS = 900  # leaves a hold of 11.75 h at least


class MalformedMessageError(ValueError):
    """A queue message that is not an EventBridge S3 "Object Created" event."""


@dataclass(frozen=True)
class BatchSettings:
    """What the function reads from its environment, once per invocation."""

    queue_url: str
    manifest_bucket: str
    manifest_prefix: str = "manifests"
    max_files: int = 10  # one SQS FIFO message group yields at most 10 messages while earlier ones are in flight
    max_bytes: int = 512 * 1024 * 1024
    receive_wait_seconds: int = 10  # long polling: an empty queue answers after this wait, not at once
    # How long received messages stay in flight unless the state machine extends them (HoldBatch, just before
    # the CDC job starts). Longer than this function's timeout; short, so that a run that fails after receiving
    # (a timeout, a failure on the way out, a retried invocation) holds the message group this long at most.
    receive_visibility_seconds: int = 180

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> BatchSettings:
        try:
            settings = cls(
                queue_url=environ["QUEUE_URL"],
                manifest_bucket=environ["MANIFEST_BUCKET"],
                manifest_prefix=environ.get("MANIFEST_PREFIX", "manifests").strip("/"),
                max_files=int(environ.get("MAX_FILES_PER_BATCH", "10")),
                max_bytes=int(environ.get("MAX_BYTES_PER_BATCH", str(512 * 1024 * 1024))),
                receive_wait_seconds=int(environ.get("RECEIVE_WAIT_SECONDS", "10")),
                receive_visibility_seconds=int(environ.get("RECEIVE_VISIBILITY_SECONDS", "180")),
            )
        except KeyError as missing:
            raise ValueError(f"The environment variable {missing} is not set.") from None
        if settings.max_files < 1 or settings.max_bytes < 1:
            raise ValueError("MAX_FILES_PER_BATCH and MAX_BYTES_PER_BATCH must be positive.")
        if not 0 <= settings.receive_wait_seconds <= _SQS_MAX_WAIT_SECONDS:
            raise ValueError(f"RECEIVE_WAIT_SECONDS must be 0 to {_SQS_MAX_WAIT_SECONDS}.")
        if not 1 <= settings.receive_visibility_seconds <= _MAX_RECEIVE_VISIBILITY_SECONDS:
            raise ValueError(f"RECEIVE_VISIBILITY_SECONDS must be 1 to {_MAX_RECEIVE_VISIBILITY_SECONDS}.")
        return settings


@dataclass(frozen=True)
class BronzeObject:
    bucket: str
    key: str
    size: int

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def is_cdc_file(self) -> bool:
        return bool(_CDC_FILE_NAME.match(self.key.rsplit("/", 1)[-1]))


@dataclass(frozen=True)
class QueuedObject:
    """One received message: the object it announces and the handle that acknowledges it."""

    obj: BronzeObject
    receipt_handle: str


@dataclass(frozen=True)
class Batch:
    files: list[BronzeObject]  # CDC files, in apply order, each once
    receipt_handles: list[str]  # every message taken in this batch (files, duplicates, non-CDC objects)
    skipped: list[str] = field(default_factory=list)  # URIs announced but not CDC files (e.g. LOAD files)

    @property
    def byte_count(self) -> int:
        return sum(f.size for f in self.files)


def parse_object_created(body: str) -> BronzeObject:
    """The bucket, key and size of an EventBridge S3 "Object Created" event (the queue message body).

    Parsed with Powertools' model of that event, so a message of any other shape is rejected with the
    fields that are wrong.
    """
    try:
        document = json.loads(body)
        detail_type = document.get("detail-type")
    except (ValueError, AttributeError):
        raise MalformedMessageError("not an EventBridge event (the body is not a JSON object)") from None
    if detail_type != "Object Created":
        raise MalformedMessageError(f"not an 'Object Created' event: {detail_type!r}")
    try:
        event = parse(event=document, model=S3EventNotificationEventBridgeModel)
    except ValidationError as exc:
        raise MalformedMessageError(f"not an EventBridge S3 event ({exc.error_count()} invalid fields)") from None
    return BronzeObject(
        bucket=event.detail.bucket.name,
        key=event.detail.object.key,
        size=int(event.detail.object.size or 0),
    )


def take_batch(queued: list[QueuedObject], max_files: int, max_bytes: int) -> tuple[Batch, list[QueuedObject]]:
    """Split received messages (in FIFO order) into this batch and the rest to hand back to the queue.

    A file larger than ``max_bytes`` still forms a batch on its own, so it can never block the queue.
    Duplicate announcements of one object are acknowledged with the batch but listed once.
    Files are ordered by key: DMS names each table's CDC files by write timestamp.
    """
    files: dict[str, BronzeObject] = {}
    handles: list[str] = []
    skipped: list[str] = []
    total = 0
    for index, item in enumerate(queued):
        obj = item.obj
        if obj.is_cdc_file and obj.uri not in files:
            full = len(files) >= max_files or (files and total + obj.size > max_bytes)
            if full:
                return _batch(files, handles, skipped), queued[index:]
            files[obj.uri] = obj
            total += obj.size
        elif not obj.is_cdc_file:
            skipped.append(obj.uri)
        handles.append(item.receipt_handle)
    return _batch(files, handles, skipped), []


def _batch(files: dict[str, BronzeObject], handles: list[str], skipped: list[str]) -> Batch:
    ordered = sorted(files.values(), key=lambda f: (f.bucket, f.key))
    return Batch(files=ordered, receipt_handles=handles, skipped=skipped)


def manifest_document(files: list[BronzeObject]) -> str:
    return json.dumps({"files": [{"key": f.uri, "size": f.size} for f in files]}, indent=1)


def manifest_key(prefix: str, execution_name: str, iteration: int) -> str:
    """One manifest per (execution, iteration): a retried invocation overwrites its own manifest."""
    return f"{prefix}/{execution_name}/{iteration:06d}.json".lstrip("/")


@dataclass(frozen=True)
class ReceivedMessage:
    body: str
    receipt_handle: str


def receive_in_order(
    sqs: SQSClient, queue_url: str, max_files: int, max_bytes: int, wait_seconds: int, visibility_seconds: int
) -> list[ReceivedMessage]:
    """Receive up to ``max_files`` messages in FIFO order; stop early once their announced bytes reach ``max_bytes``.

    The first receive long-polls (``wait_seconds``); later ones only collect what is already there. In a FIFO
    message group the first receive is in practice the only one that returns messages: SQS hands out no more of
    a group while some of its messages are in flight. What it returns beyond the budget is released by
    ``dequeue_batch``, and the queue's ``maxReceiveCount`` is sized so that such releases can never send a
    message to the dead-letter queue (docs/deploy.md, "Large files").
    """
    received: list[ReceivedMessage] = []
    announced = 0
    while len(received) < max_files and announced < max_bytes:
        response = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(_SQS_MAX_MESSAGES_PER_RECEIVE, max_files - len(received)),
            WaitTimeSeconds=wait_seconds if not received else 0,
            VisibilityTimeout=visibility_seconds,
        )
        messages = response.get("Messages", [])
        if not messages:
            break
        for message in messages:
            received.append(ReceivedMessage(message["Body"], message["ReceiptHandle"]))
            announced += _announced_size(message["Body"])
    return received


def _announced_size(body: str) -> int:
    """The object size an event announces, 0 when the body is not readable (it is rejected later)."""
    try:
        return int(json.loads(body)["detail"]["object"]["size"])
    except (ValueError, KeyError, TypeError):
        return 0


def release(sqs: SQSClient, queue_url: str, receipt_handles: list[str]) -> None:
    """Make messages visible again at once (they keep their FIFO position)."""
    for start in range(0, len(receipt_handles), _SQS_MAX_MESSAGES_PER_RECEIVE):
        chunk = receipt_handles[start : start + _SQS_MAX_MESSAGES_PER_RECEIVE]
        sqs.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0} for i, handle in enumerate(chunk)],
        )


def hold_entries(receipt_handles: list[str], receive_visibility_seconds: int) -> list[dict[str, Any]]:
    """The ChangeMessageVisibilityBatch entries that hold a batch for its CDC job (the state machine sends them).

    SQS caps a message's visibility at 12 hours counted from its receive, and the extension comes at most
    ``receive_visibility_seconds`` after it: the hold is the rest of the 12 hours (11.95 h with 180 s), longer
    than the CDC job's longest timeout (10 h), so a batch cannot come back while its job runs.
    """
    hold = _SQS_MAX_VISIBILITY_SECONDS - receive_visibility_seconds
    return [
        {"Id": f"m{i}", "ReceiptHandle": handle, "VisibilityTimeout": hold} for i, handle in enumerate(receipt_handles)
    ]


def dequeue_batch(
    sqs: SQSClient, s3: S3Client, settings: BatchSettings, execution_name: str, iteration: int
) -> dict[str, Any]:
    """Take the next batch from the queue and write its manifest; the state machine's view of it.

    ``messageCount`` 0 means nothing was received (the state machine then waits). Messages are received with
    the short ``receive_visibility_seconds``: a run that fails after this function returned (a timeout, a retried
    invocation) holds them that long at most; the state machine extends the batch just before its CDC job
    starts. On an error raised here every received message is released at once before the error propagates.
    """
    received = receive_in_order(
        sqs,
        settings.queue_url,
        settings.max_files,
        settings.max_bytes,
        settings.receive_wait_seconds,
        settings.receive_visibility_seconds,
    )
    try:
        queued = [QueuedObject(parse_object_created(m.body), m.receipt_handle) for m in received]
        batch, rest = take_batch(queued, settings.max_files, settings.max_bytes)
        manifest_uri = ""
        if batch.files:
            key = manifest_key(settings.manifest_prefix, execution_name, iteration)
            s3.put_object(
                Bucket=settings.manifest_bucket,
                Key=key,
                Body=manifest_document(batch.files).encode("utf-8"),
                ContentType="application/json",
            )
            manifest_uri = f"s3://{settings.manifest_bucket}/{key}"
        if rest:
            release(sqs, settings.queue_url, [item.receipt_handle for item in rest])
    except Exception:
        release(sqs, settings.queue_url, [m.receipt_handle for m in received])
        raise
    return {
        "manifestUri": manifest_uri,
        "receiptHandles": batch.receipt_handles,
        "messageCount": len(batch.receipt_handles),
        "fileCount": len(batch.files),
        "byteCount": batch.byte_count,
        "skipped": batch.skipped,
        "holdEntries": hold_entries(batch.receipt_handles, settings.receive_visibility_seconds),
    }
