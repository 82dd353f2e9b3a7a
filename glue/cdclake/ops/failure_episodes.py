"""The tables in a failure episode, kept in one small S3 object that successive CDC runs share.

A Glue CDC run ends (idle, or at its maximum run time) and the next one starts with a fresh follow loop: an
episode kept in the loop alone would alert a table that keeps failing once a run. The CDC job keeps them here
instead (``--failure_episodes``, ``s3://<artifacts>/state/failing-tables.json``), so a table is alerted once
when its episode starts and once when a round applies it again, however many runs lie between.

The object: ``{"failing": {"s.t": {"reason": "...", "since": "2024-01-02T03:04:05Z"}}}``. Every change is
a conditional write (S3 PutObject ``If-Match`` with the ETag read, ``If-None-Match: *`` for the first one):
two writers (a run started by hand beside the job's) never overwrite each other's record. A write that
loses (412 Precondition Failed; 409 ConditionalRequestConflict while another write is in progress) reads
the object again and decides again, so a change the other writer recorded first is not alerted twice.

Reading or writing that fails otherwise (no permission, S3 down) is logged and the round's changes are
decided from what this run knows: an alert sent twice is better than a failing table never alerted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cdclake.alerts import EpisodeChanges, apply_episode_changes, episode_changes
from cdclake.dms.s3_bronze import MISSING_KEY_CODES

log = logging.getLogger("cdclake")

# S3's answers to a conditional write that lost: the ETag moved (or the object appeared), or another
# conditional write of the key was in progress. moto answers NoSuchKey to If-Match on a missing key.
LOST_RACE_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409", *MISSING_KEY_CODES})
MAX_ATTEMPTS = 5


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


@dataclass
class S3Episodes:
    """``FailureEpisodes`` in the S3 object ``uri`` (s3://bucket/key), written only when a round changes it."""

    s3: Any  # a boto3 S3 client
    uri: str
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    failing: dict[str, dict[str, str]] = field(default_factory=dict)  # as last read or written
    etag: str | None = None  # of the object as last read or written; None: none exists (or not read yet)
    read_yet: bool = False

    @property
    def bucket_key(self) -> tuple[str, str]:
        bucket, _, key = self.uri.removeprefix("s3://").partition("/")
        return bucket, key

    def settle(self, failed: Mapping[str, str], healthy: Set[str]) -> EpisodeChanges:
        """Record a round's outcome; the changes this call wrote (see the module's docstring)."""
        try:
            if not self.read_yet:
                self._read()
            for _ in range(MAX_ATTEMPTS):
                changes = episode_changes(self.failing.keys(), failed, healthy)
                if not changes.started and not changes.ended:
                    return changes
                if self._write(self._after(failed, changes)):
                    return changes
                self._read()  # lost to another writer: decide again from what it wrote
            log.error(
                "failure episodes at %s: lost %d conditional writes in a row; none alerted", self.uri, MAX_ATTEMPTS
            )
            return EpisodeChanges()
        except Exception as error:  # botocore's errors: access denied, throttled, the bucket gone
            changes = episode_changes(self.failing.keys(), failed, healthy)
            log.error("failure episodes at %s not kept (%s); alerting from this run's record", self.uri, error)
            self.failing = self._after(failed, changes)
            return changes

    def _after(self, failed: Mapping[str, str], changes: EpisodeChanges) -> dict[str, dict[str, str]]:
        since = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        reasons = apply_episode_changes({s: e.get("reason", "") for s, e in self.failing.items()}, failed, changes)
        return {s: self.failing.get(s) or {"reason": reason, "since": since} for s, reason in sorted(reasons.items())}

    def _read(self) -> None:
        bucket, key = self.bucket_key
        self.read_yet = True
        try:
            answer = self.s3.get_object(Bucket=bucket, Key=key)
        except Exception as error:
            if _code(error) not in MISSING_KEY_CODES:
                raise
            self.failing, self.etag = {}, None
            return
        document = json.loads(answer["Body"].read().decode("utf-8"))
        self.failing = {str(s): dict(e) for s, e in (document.get("failing") or {}).items()}
        self.etag = str(answer["ETag"])

    def _write(self, failing: dict[str, dict[str, str]]) -> bool:
        """Write ``failing`` if the object is still as last read; False when another writer changed it first."""
        bucket, key = self.bucket_key
        condition = {"IfNoneMatch": "*"} if self.etag is None else {"IfMatch": self.etag}
        body = json.dumps({"failing": failing}, indent=1).encode("utf-8")
        try:
            answer = self.s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="application/json", **condition)
        except Exception as error:
            if _code(error) in LOST_RACE_CODES:
                log.info("failure episodes at %s: another writer changed them first; read again", self.uri)
                return False
            raise
        self.failing, self.etag = failing, str(answer["ETag"])
        return True
