"""S3 "Object Created" events in an SQS queue as ``follow``'s announcements of new bronze keys.

The queue is a wake-up signal and an index of new keys, never the list of work: every round lists
bronze itself (``dms.index``), so an event that never arrived costs nothing but a later listing.
An event is deleted once its file needs nothing more (applied, held in quarantine, gone, not a
table of this pipeline); the others are made visible again after the round, and come back.

One message group of a FIFO queue hands out at most 10 messages while earlier ones are in flight:
events of files already applied (found by a listing before their event was read) are deleted as
soon as they are received, so the window moves on without waiting for a round.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
else:
    SQSClient = Any

log = logging.getLogger("cdclake")

_MAX_PER_CALL = 10  # ReceiveMessage, DeleteMessageBatch and ChangeMessageVisibilityBatch take 10 at most
_MAX_WAIT_SECONDS = 20  # ReceiveMessage's long polling maximum


def announced_key(body: str, bucket: str, prefix: str) -> str | None:
    """The bronze key (relative to ``prefix``) an EventBridge S3 event announces; None when the body
    is not such an event or names another bucket or prefix."""
    try:
        detail = json.loads(body)["detail"]
        announced_bucket, key = detail["bucket"]["name"], detail["object"]["key"]
    except (ValueError, KeyError, TypeError):
        return None
    if announced_bucket != bucket or not isinstance(key, str):
        return None
    # S3 URL-encodes keys in its notifications; DMS names hold no "%" of their own. A "+" stays
    # as it is: should it have meant a space, the key is not found and the listing applies the file.
    key = unquote(key)
    root = prefix.strip("/") + "/" if prefix.strip("/") else ""
    return key[len(root) :] if key.startswith(root) else None


@dataclass
class QueueNotices:
    """The pipeline's file queue, read by the follow loop (the Glue CDC job)."""

    sqs: SQSClient
    queue_url: str
    bucket: str  # the bronze bucket and prefix: keys are handed on relative to them
    prefix: str = ""
    # How long a received event stays invisible while its round runs; it is deleted or made visible
    # again when the round ends, so this only matters when the process dies mid-round.
    visibility_seconds: int = 900
    held: dict[str, list[str]] = field(default_factory=dict)  # relative key -> receipt handles
    deleted: int = 0

    @property
    def announces(self) -> bool:
        return True

    def wait(self, until: float, stopping: threading.Event, done: Callable[[str], bool]) -> set[str]:
        """Receive until ``until``, and at least once (a round that overran its interval still
        reads what arrived); go on receiving while messages come, so done ones are cleared."""
        keys: set[str] = set()
        while not stopping.is_set():
            remaining = until - time.monotonic()
            answer = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=_MAX_PER_CALL,
                WaitTimeSeconds=max(0, min(_MAX_WAIT_SECONDS, int(remaining))),
                VisibilityTimeout=self.visibility_seconds,
            )
            messages = answer.get("Messages", [])
            finished: list[str] = []
            for message in messages:
                key = self._key(message["Body"])
                if key is None or done(key):
                    finished.append(message["ReceiptHandle"])
                else:
                    self.held.setdefault(key, []).append(message["ReceiptHandle"])
                    keys.add(key)
            self._delete(finished)
            if not messages and time.monotonic() >= until - 1:
                stopping.wait(max(0.0, until - time.monotonic()))
                break
        return keys

    def settle(self, done: Callable[[str], bool]) -> int:
        finished: list[str] = []
        again: list[str] = []
        for key, handles in self.held.items():
            (finished if done(key) else again).extend(handles)
        self.held = {}
        self._delete(finished)
        self._release(again)
        return len(finished)

    def _key(self, body: str) -> str | None:
        key = announced_key(body, self.bucket, self.prefix)
        if key is None:
            log.warning("queue message is not an S3 event of the bronze bucket: deleted: %s", body[:200])
        return key

    def _delete(self, handles: list[str]) -> None:
        for start in range(0, len(handles), _MAX_PER_CALL):
            chunk = handles[start : start + _MAX_PER_CALL]
            answer = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)]
            )
            self.deleted += len(answer.get("Successful", []))
            for failure in answer.get("Failed", []):
                # An expired handle: the event is visible again and is deleted when it comes back.
                log.info("queue message not deleted (%s): it comes back and is deleted then", failure.get("Code"))

    def _release(self, handles: list[str]) -> None:
        for start in range(0, len(handles), _MAX_PER_CALL):
            chunk = handles[start : start + _MAX_PER_CALL]
            self.sqs.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)],
            )
