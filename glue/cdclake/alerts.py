"""Where the follow loop says that something needs a person: a table that keeps failing (and, once,
that it recovered), files set aside in quarantine. A seam with two sides: ``LoggedAlerts`` (a line at ERROR: a laptop's
``run --follow``, or a job run without a topic) and ``SnsAlerts`` (the stack's alert topic, which
the Glue CDC job is given as ``--alert_topic_arn``).

An alert that cannot be published is logged, with its text, and the loop goes on: stopping every
table's CDC because one message could not be sent would turn a notice into an outage.

Which tables are in a failure episode is ``FailureEpisodes``' to remember: ``MemoryEpisodes`` for one
process (a laptop's ``run --follow``), or a durable record shared by successive runs
(``ops.failure_episodes.S3Episodes``, the Glue CDC job's), so a table that fails in run after run is
alerted once, not once a run, and its recovery once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class EpisodeChanges:
    """What one ``FailureEpisodes.settle`` changed: the tables whose failure episode it started (alert them
    as failing) and those whose episode it ended (alert them as recovered)."""

    started: frozenset[str] = frozenset()
    ended: frozenset[str] = frozenset()


class FailureEpisodes(Protocol):
    """The tables in a failure episode, from the round a table fails after being healthy to the round that
    works it without failing. ``settle`` records a round's outcome and returns only the changes this call
    made: a change another writer recorded first is not returned again (it alerted)."""

    def settle(self, failed: Mapping[str, str], healthy: Set[str]) -> EpisodeChanges: ...


@dataclass
class MemoryEpisodes:
    """Episodes kept in this process only: a new process starts with none."""

    failing: dict[str, str] = field(default_factory=dict)  # source -> the reason its episode started with

    def settle(self, failed: Mapping[str, str], healthy: Set[str]) -> EpisodeChanges:
        changes = episode_changes(self.failing.keys(), failed, healthy)
        self.failing = apply_episode_changes(self.failing, failed, changes)
        return changes


def episode_changes(failing: Set[str], failed: Mapping[str, str], healthy: Set[str]) -> EpisodeChanges:
    """The episodes a round starts (failed now, not failing before) and ends (failing before, healthy now)."""
    return EpisodeChanges(frozenset(failed.keys() - failing), frozenset((healthy - failed.keys()) & failing))


def apply_episode_changes(
    failing: Mapping[str, str], failed: Mapping[str, str], changes: EpisodeChanges
) -> dict[str, str]:
    """``failing`` (source -> reason) after ``changes``."""
    after = {source: reason for source, reason in failing.items() if source not in changes.ended}
    after.update((source, failed[source]) for source in changes.started)
    return after
