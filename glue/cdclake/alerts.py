"""Where the follow loop says that something needs a person: a table that keeps failing, files set
aside in quarantine. A seam with two sides: ``LoggedAlerts`` (a line at ERROR: a laptop's
``run --follow``, or a job run without a topic) and ``SnsAlerts`` (the stack's alert topic, which
the Glue CDC job is given as ``--alert_topic_arn``).

An alert that cannot be published is logged, with its text, and the loop goes on: stopping every
table's CDC because one message could not be sent would turn a notice into an outage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("cdclake")

_SUBJECT_CHARACTERS = 99  # SNS: a subject is ASCII, one line, under 100 characters


class Alerts(Protocol):
    """Sends a short subject and a message that says what happened and what to do."""

    def send(self, subject: str, message: str) -> None: ...


class TopicPublisher(Protocol):
    """The part of a boto3 SNS client this module uses (no SNS type stubs are pinned)."""

    def publish(self, **kwargs: Any) -> Any: ...


@dataclass
class LoggedAlerts:
    """Alerts as log lines at ERROR."""

    def send(self, subject: str, message: str) -> None:
        log.error("alert: %s: %s", subject, message)


@dataclass
class SnsAlerts:
    """Alerts published to an SNS topic (and logged at ERROR, so the job's log shows them too)."""

    sns: TopicPublisher
    topic_arn: str
    environment: str = "dev"

    def send(self, subject: str, message: str) -> None:
        log.error("alert: %s: %s", subject, message)
        line = f"cdclake {self.environment}: {' '.join(subject.split())}"
        try:
            self.sns.publish(
                TopicArn=self.topic_arn,
                Subject=line.encode("ascii", "replace").decode("ascii")[:_SUBJECT_CHARACTERS],
                Message=message,
            )
        except Exception as error:  # botocore's errors: no permission, throttled, the topic gone
            log.error("alert not published to %s (%s); its text is the line above", self.topic_arn, error)
