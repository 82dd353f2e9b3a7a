"""Acknowledge a CDC batch: delete its queue messages, after the CDC job applied it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

_SQS_MAX_ENTRIES_PER_BATCH_CALL = 10
# An expired receipt handle means the message is visible again and will be re-delivered; that is harmless
# because the CDC job skips files it already applied. Any other failure is an error.
_HARMLESS_FAILURES = frozenset({"ReceiptHandleIsInvalid", "AWS.SimpleQueueService.ReceiptHandleIsInvalid"})


class AcknowledgeError(RuntimeError):
    """Some messages could not be deleted for a reason other than an expired receipt handle."""


@dataclass(frozen=True)
class AckResult:
    deleted: int
    expired: int


def acknowledge(sqs: SQSClient, queue_url: str, receipt_handles: list[str]) -> AckResult:
    """Delete the messages behind ``receipt_handles`` (batches of 10); raise ``AcknowledgeError`` on real failures."""
    deleted = expired = 0
    problems: list[str] = []
    for start in range(0, len(receipt_handles), _SQS_MAX_ENTRIES_PER_BATCH_CALL):
        chunk = receipt_handles[start : start + _SQS_MAX_ENTRIES_PER_BATCH_CALL]
        response = sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(chunk)],
        )
        deleted += len(response.get("Successful", []))
        for failure in response.get("Failed", []):
            if failure["Code"] in _HARMLESS_FAILURES:
                expired += 1
            else:
                problems.append(f"{failure['Code']}: {failure.get('Message', '')}")
    if problems:
        raise AcknowledgeError(f"{len(problems)} messages could not be deleted: {'; '.join(problems)}")
    return AckResult(deleted=deleted, expired=expired)
