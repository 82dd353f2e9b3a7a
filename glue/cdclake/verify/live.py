"""Verify against a live source: a difference is reported only once silver has caught up with the moment the
comparison started, so lag is reported as lag, with its size, and not as a difference.

The comparison notes where the source stands (``SourcePosition``: the source's clock, which the DMS commit
timestamps silver records are comparable with, and its log position where the engine has one, such as
PostgreSQL's LSN) when it starts, and again once a table found differing has been read. That table is compared
again, in the ranges that differed, once silver has caught up with the second position:

* its newest applied change was committed at or after the noted clock (a busy table catches up this way), or
* no CDC file of it is waiting in bronze, and ``delivery_seconds`` have passed since the noted moment: the
  longest a change committed before it takes to reach bronze (DMS's ``CdcMaxBatchInterval``, or `capture`'s
  ``--max-batch-interval``, plus the writing). A quiet table catches up this way.

Only the keys that differ in both comparisons can be reported; the others were lag, and are counted as such.
A table that has not caught up when ``wait_seconds`` have passed (counted from the end of the first pass, for
every table at once) is reported as lagging: how far its newest change is behind the noted clock, and how many
files wait. This module is the rule alone; the reading, and which keys are confirmed, is ``verify.run``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class SourcePosition:
    """Where the source stood when a comparison started."""

    clock: datetime  # the source's clock, in UTC without a zone (as DMS commit timestamps are)
    log_position: str | None = None  # PostgreSQL's LSN; None where the engine gives none
    noted_at: float = field(default_factory=time.monotonic)  # this process's clock when noted

    def describe(self) -> str:
        at = self.clock.isoformat(sep=" ", timespec="microseconds")
        return f"{at} UTC" + (f", log position {self.log_position}" if self.log_position else "")


@dataclass(frozen=True)
class SilverPosition:
    """How far silver has applied one table: its newest applied commit, and the CDC files still waiting."""

    latest_change: datetime | None  # UTC without a zone; None: no CDC change applied yet
    pending_files: int = 0


@dataclass(frozen=True)
class LiveSettings:
    """How long a differing table may take to catch up before it is reported as lagging."""

    wait_seconds: float = 300.0  # for every differing table together, after the first pass
    delivery_seconds: float = 90.0  # the longest a committed change takes to reach bronze
    poll_seconds: float = 5.0
    tell_seconds: float = 10.0  # how often a wait says what it waits for


def caught_up(silver: SilverPosition, started: SourcePosition, settings: LiveSettings, now: float) -> bool:
    """Whether silver holds every change the source had committed when ``started`` was noted."""
    if silver.latest_change is not None and silver.latest_change >= started.clock:
        return True
    return silver.pending_files == 0 and now - started.noted_at >= settings.delivery_seconds


def lag_text(silver: SilverPosition, started: SourcePosition) -> str:
    """Lag as users read it: how far behind, and the files waiting."""
    parts = []
    if silver.latest_change is None:
        parts.append("no change applied yet")
    else:
        behind = (started.clock - silver.latest_change).total_seconds()
        parts.append(f"newest change applied {behind:.0f} s before verify started")
    if silver.pending_files:
        parts.append(f"{silver.pending_files} file(s) waiting in bronze")
    return ", ".join(parts)


def lag_seconds(silver: SilverPosition, started: SourcePosition) -> float | None:
    if silver.latest_change is None:
        return None
    return max(0.0, (started.clock - silver.latest_change).total_seconds())


@dataclass(frozen=True)
class Waited:
    """What waiting for one table came to: caught up (compare again) or not (lagging), and silver's position."""

    caught_up: bool
    silver: SilverPosition


def waiting_text(table: str, silver: SilverPosition, started: SourcePosition, settings: LiveSettings,
                 now: float, deadline: float) -> str:  # fmt: skip
    """What verify is waiting for, for the user who sees nothing else meanwhile: the table, why
    (files of it still to apply, or changes that may still be on their way to bronze), and how long
    at most."""
    delivered_at = started.noted_at + settings.delivery_seconds
    if silver.pending_files:
        why = f"{silver.pending_files} CDC file(s) of it wait in bronze for `cdclake run` to apply them"
        ends = deadline
    else:
        why = (
            "nothing of it waits in bronze, but a change committed before it was read may still be on its way "
            f"there (--delivery {settings.delivery_seconds:.0f} s)"
        )
        ends = min(deadline, delivered_at)
    left, wait_left = max(ends - now, 0), max(deadline - now, 0)
    return (
        f"verify: {table} differs from the source, which may be lag: waiting for silver to catch up before "
        f"reading it again: {why}; {left:.0f} s left at most (--wait ends in {wait_left:.0f} s)"
    )


def wait_for_silver(
    silver_at: Callable[[], SilverPosition],
    started: SourcePosition,
    settings: LiveSettings,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    tell: Callable[[str], None] | None = None,
    table: str = "",
) -> Waited:
    """Poll ``silver_at`` until silver has caught up with ``started`` or ``deadline`` (``clock``'s time)
    passes; ``tell`` hears what it waits for when it starts waiting and every ``settings.tell_seconds``."""
    told: float | None = None
    while True:
        silver, now = silver_at(), clock()
        if caught_up(silver, started, settings, now):
            return Waited(True, silver)
        if now >= deadline:
            return Waited(False, silver)
        if tell is not None and (told is None or now - told >= settings.tell_seconds):
            tell(waiting_text(table, silver, started, settings, now, deadline))
            told = now
        # Wake at the next poll, or when the delivery window ends if that is sooner and all that is missing.
        until_delivered = started.noted_at + settings.delivery_seconds - now
        pause = min(settings.poll_seconds, until_delivered) if until_delivered > 0 else settings.poll_seconds
        sleep(max(0.05, min(pause, deadline - now)))


def persisting(first: Sequence[str], again: Sequence[str]) -> list[str]:
    """The keys that differ in both comparisons, in the order of the second."""
    before = set(first)
    return [key for key in again if key in before]
