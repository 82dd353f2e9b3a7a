"""Progress inside one long Spark action (a full load's scan): its stages' tasks, read while it runs.

A run over many CDC files says where it stands after each batch (``report.Progress``); a full
load of a large table is one or two Spark actions, silent for minutes. ``watch_stages`` polls
Spark's status tracker from a background thread every ``interval`` seconds while its block runs
and logs one ``progress`` line each time: the active stages' tasks done and in all, the rows and
bytes they have read, the elapsed time and the time left at the rate so far. The shells choose
the interval: a terminal gets a line a second (the CLI draws it as one bar that rewrites
itself), logs and Glue one every 30 s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.report import ProgressLine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class StageTasks:
    """One active Spark stage: its id, its tasks done and in all, and the rows and bytes it has
    read so far (Spark counts them when a task ends and, for running tasks, at each executor
    heartbeat: every 10 s by default)."""

    stage_id: int
    done: int
    total: int
    rows_read: int = 0
    bytes_read: int = 0


def describe_stages(label: str, stages: Sequence[StageTasks], elapsed: float) -> ProgressLine | None:
    """One progress line for the active ``stages`` of ``label``'s work (None: nothing running).

    The time left assumes the remaining tasks of these stages take as long as the ones done;
    unknown (``eta_s=?``) until a task has finished.
    """
    if not stages:
        return None
    done, total = sum(s.done for s in stages), sum(s.total for s in stages)
    rows, read = sum(s.rows_read for s in stages), sum(s.bytes_read for s in stages)
    fraction = done / total if total else 0.0
    left = f"{elapsed * (total - done) / done:.0f}" if done else "?"
    ids = ",".join(str(s.stage_id) for s in stages)
    rate = rows / elapsed if elapsed > 0 else 0.0
    text = (
        f"{label} stage={ids} tasks={done}/{total} rows={rows} mb={read / 1e6:.1f} rows_per_s={rate:.0f} "
        f"elapsed_s={elapsed:.0f} eta_s={left}"
    )
    return ProgressLine(text, fraction)


def _active_stages(spark: SparkSession) -> list[StageTasks]:
    """The active stages from Spark's status store (with the rows read), or, where that is not
    reachable, from the public status tracker (tasks only)."""
    try:
        store: Any = spark.sparkContext._jsc.sc().statusStore()
        stages = []
        found = store.activeStages().iterator()
        while found.hasNext():
            stage = found.next()
            stages.append(
                StageTasks(
                    int(stage.stageId()),
                    int(stage.numCompleteTasks()),
                    int(stage.numTasks()),
                    int(stage.inputRecords()),
                    int(stage.inputBytes()),
                )
            )
    except Exception:
        tracker: Any = spark.sparkContext.statusTracker()
        stages = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                stages.append(StageTasks(int(stage_id), int(info.numCompletedTasks), int(info.numTasks)))
    return sorted(stages, key=lambda s: s.stage_id)


@contextmanager
def watch_stages(spark: SparkSession, label: str, interval: float) -> Iterator[None]:
    """Log ``label``'s Spark progress every ``interval`` seconds while the block runs (0: never)."""
    if interval <= 0:
        yield
        return
    stop = threading.Event()
    started = time.monotonic()

    def poll() -> None:
        while not stop.wait(interval):
            try:
                line = describe_stages(label, _active_stages(spark), time.monotonic() - started)
            except Exception:  # the session stopping under a poll: progress is never worth a failure
                return
            if line is not None:
                log.info("progress %s", line.text, extra={"progress": line.fraction})

    watcher = threading.Thread(target=poll, name=f"cdclake-progress-{label}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=5)
