"""S3 "Object Created" events in an SQS queue as ``follow``'s announcements of new bronze keys.

The queue is a wake-up signal and names new keys, never the list of work: the loop's listing of
bronze is (``dms.index``), so an event that never arrived costs nothing but a later listing. Each
received event's key is handed to the loop at once, which puts it in its bronze index (or finds
its file applied, gone, or not a table of this pipeline); the event is then deleted, before the
next receive. No event is ever made visible again: every receive counts toward the queue's
``maxReceiveCount``, so an event received once a round would reach the dead-letter queue while
its file is still pending, and an event in flight holds back every later one of its message group
(a FIFO queue hands out nothing more of a group while earlier messages are in flight). So nothing
stays in flight between rounds, and a file that waits (its table failing, a batch bound) waits
in the index, not in the queue.

An event stays in flight only when the loop could not index its key (an error reading bronze): it
comes back after ``visibility_seconds``. A retried receive sends the ``ReceiveRequestAttemptId``
of the receive it repeats, so that SQS hands back the same messages rather than leaving them
invisible for the visibility timeout; a receive that succeeded is followed by a new one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
else:
    SQSClient = Any

log = logging.getLogger("cdclake")

_MAX_PER_CALL = 10  # ReceiveMessage and DeleteMessageBatch take 10 at most
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


class Notices(Protocol):
    """Where new bronze keys are announced."""

    @property
    def announces(self) -> bool:
        """True when new files are announced (a round may skip looking at bronze without news)."""
        ...

    def wait(self, until: float, stopping: threading.Event, note: Callable[[str], bool]) -> set[str]:
        """The keys (relative to the bronze root) announced until ``until`` (``time.monotonic``).
        Each is handed to ``note`` as it arrives (the loop indexes it), and its announcement is
        acknowledged at once when ``note`` says it needs nothing more."""
        ...

    def settle(self, done: Callable[[str], bool]) -> int:
        """Acknowledge the announcements not acknowledged yet whose key is ``done``. Returns how
        many were acknowledged."""
        ...


@dataclass
class Polling:
    """No announcements: every round looks at every table folder (a local bronze directory)."""

    @property
    def announces(self) -> bool:
        return False

    def wait(self, until: float, stopping: threading.Event, note: Callable[[str], bool]) -> set[str]:
        stopping.wait(max(0.0, until - time.monotonic()))
        return set()

    def settle(self, done: Callable[[str], bool]) -> int:
        return 0


@dataclass
class QueueNotices:
    """The pipeline's file queue, read by the follow loop (the Glue CDC job)."""

    sqs: SQSClient
    queue_url: str
    bucket: str  # the bronze bucket and prefix: keys are handed on relative to them
    prefix: str = ""
    # How long a received event stays invisible: from its receipt to its deletion a moment later
    # (the loop reads its file's size when its key is new), so this only matters when the process
    # dies in between or bronze cannot be read: then the event comes back after this long.
    visibility_seconds: int = 120
    # A receive that fails (after botocore's own retries) is sent again this many times in all,
    # after pauses of about 1, 2, 4 ... times ``receive_backoff_seconds``, with the same attempt id.
    receive_attempts: int = 3
    receive_backoff_seconds: float = 1.0
    held: dict[str | None, list[str]] = field(default_factory=dict)  # key -> receipt handles not yet deleted
    deleted: int = 0
    _attempt_id: str | None = field(default=None, repr=False)  # the receive in progress (kept across a failure)

    @property
    def announces(self) -> bool:
        return True

    def wait(self, until: float, stopping: threading.Event, note: Callable[[str], bool]) -> set[str]:
        """Receive until ``until``, and at least once (a round that overran its interval still
        reads what arrived); go on receiving while messages come. Each received key is handed to
        ``note`` (the loop indexes it) and its event deleted when ``note`` says it needs nothing
        more, before the next receive. Returns the keys received."""
        keys: set[str] = set()
        while not stopping.is_set():
            remaining = until - time.monotonic()
            messages = self._receive(max(0, min(_MAX_WAIT_SECONDS, int(remaining))), stopping)
            for message in messages:
                key = self._key(message["Body"])
                self.held.setdefault(key, []).append(message["ReceiptHandle"])
                if key is not None:
                    keys.add(key)
            self.settle(note)
            if not messages and time.monotonic() >= until - 1:
                stopping.wait(max(0.0, until - time.monotonic()))
                break
        return keys

    def settle(self, done: Callable[[str], bool]) -> int:
        """Delete the events received and not yet deleted whose key is ``done`` (and those that are
        not S3 events of bronze); the others stay in flight until their visibility ends. Returns
        how many were deleted."""
        finished = [key for key in self.held if key is None or done(key)]
        before = self.deleted
        self._delete([handle for key in finished for handle in self.held[key]])
        for key in finished:  # after the delete: should it fail, the loop's last settle tries again
            del self.held[key]
        return self.deleted - before

    def _receive(self, wait_seconds: int, stopping: threading.Event) -> list[Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._attempt_id is None:
            self._attempt_id = uuid.uuid4().hex
        attempt = 1
        while True:
            try:
                answer = self.sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=_MAX_PER_CALL,
                    WaitTimeSeconds=wait_seconds,
                    VisibilityTimeout=self.visibility_seconds,
                    ReceiveRequestAttemptId=self._attempt_id,
                )
            except (BotoCoreError, ClientError) as error:
                if attempt >= self.receive_attempts:
                    raise  # the attempt id stays: a later receive repeats this one
                pause = self.receive_backoff_seconds * 2 ** (attempt - 1)
                log.warning("queue receive failed (%s): sent again in %.0f s with the same attempt id", error, pause)
                if stopping.wait(pause):
                    return []  # the loop is stopping; the attempt id stays for a later receive
                attempt += 1
            else:
                self._attempt_id = None
                return list(answer.get("Messages", []))

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
