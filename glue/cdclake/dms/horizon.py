"""The tombstone horizon: how late a CDC file may arrive and still be applied blindly (pure).

A delete leaves a tombstone (``<table>__tombstones``) so that an older change arriving later cannot bring the
row back. Maintenance prunes tombstones whose delete is older than ``TombstoneRetentionDays`` and records the
newest cut it made (``pruned_before``, a table property of the tombstone table). From then on a change older
than that cut may precede a delete whose tombstone is gone: applying it could revive a deleted row, silently.

Nothing bounds how late a file arrives (EventBridge retries for a day, a dead-letter queue is re-driven by hand,
a FIFO message's age restarts in its dead-letter queue, EventBridge does not keep order). So the CDC job holds a
file written before the horizon in quarantine, with the reason, instead of applying it; after review (does silver
still hold the rows it touches? were they deleted since?) ``cdclake replay`` (or the Glue job's ``--replay``)
applies it, skipping this check.

A CDC file's name is the time DMS wrote it, after every change in it was committed; its changes are older by at
most the endpoint's ``CdcMaxBatchInterval`` (60 s by default). ``margin`` (a day) covers that with room to spare,
so the check needs only the file name, before anything is read. The cut itself is read with the table's
metadata (``lake.batch.TableMetadata.tombstones_pruned_before``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cdclake.dms.files import BronzeFile, FileKind

DEFAULT_MARGIN = timedelta(days=1)


@dataclass(frozen=True)
class LateFile:
    """A CDC file to hold in quarantine instead of applying, and why (the quarantine's reason text)."""

    file: BronzeFile
    reason: str


def written_at(file: BronzeFile) -> datetime:
    """When DMS wrote a CDC file: its name, ``yyyyMMdd-HHmmss`` followed by fractions of a second (UTC)."""
    stamp = file.sort_key[2]
    day, _, clock = stamp.partition("-")
    fraction = (clock[6:] + "000000")[:6]
    return datetime.strptime(f"{day}{clock[:6]}{fraction}", "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)


def pruned_before_after(previous: datetime | None, now: datetime, retention_days: int) -> datetime:
    """The cut to record once maintenance pruned tombstones older than ``retention_days`` before ``now``.

    Never moves back (a shorter retention later does not un-forget what was pruned).
    """
    cut = now.astimezone(UTC) - timedelta(days=retention_days)
    return cut if previous is None or cut > previous else previous


def beyond_horizon(
    files: Sequence[BronzeFile],
    pruned_before: datetime | None,
    *,
    replay: bool = False,
    margin: timedelta = DEFAULT_MARGIN,
) -> list[LateFile]:
    """The CDC files of a batch that must be held: written before ``pruned_before + margin``.

    ``pruned_before`` None (tombstones never pruned) or a ``replay`` (a person reviewed the files) holds none.
    Full-load files are never held: a load replaces the table, tombstones do not apply to it.
    """
    if pruned_before is None or replay:
        return []
    horizon = pruned_before.astimezone(UTC) + margin
    late = []
    for file in files:
        if file.kind is not FileKind.CDC:
            continue
        written = written_at(file)
        if written < horizon:
            late.append(
                LateFile(
                    file,
                    f"written {written:%Y-%m-%d %H:%M:%S} UTC, before the tombstone horizon "
                    f"{horizon:%Y-%m-%d %H:%M:%S} UTC (tombstones of deletes before {pruned_before:%Y-%m-%d %H:%M:%S} "
                    "were pruned): applying it could bring back a deleted row. Review it, then replay it "
                    "(docs/runbook.md, A file older than the tombstone horizon)",
                )
            )
    return late
