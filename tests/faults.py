"""Faults the tests inject through the engine's seams (never by patching private names)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cdclake.lake.batch import KeyedBatch
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.iceberg import Snapshot
from cdclake.lake.publish import abandon_staged, commit_staged, stage_changes
from cdclake.lake.tables import SilverTable


def iceberg_failure(kind: str, message: str, wrapped_in: str | None = None) -> Exception:
    """What PySpark raises when an Iceberg call fails with ``org.apache.iceberg.exceptions.<kind>``
    (optionally wrapped, as Spark does, in a ``wrapped_in`` Java exception): a ``Py4JJavaError``
    carrying the real Java exception, made in the running JVM."""
    from py4j.protocol import Py4JJavaError
    from pyspark import SparkContext

    jvm, gateway = SparkContext._jvm, SparkContext._gateway
    assert jvm is not None and gateway is not None, "a Spark session is running"
    java = getattr(jvm.org.apache.iceberg.exceptions, kind)(message, gateway.new_array(jvm.java.lang.Object, 0))
    if wrapped_in is not None:
        java = jvm.org.apache.spark.SparkException(wrapped_in, java)
    return Py4JJavaError("An error occurred while calling o0.commit.\n", java)


def _before(commit: str) -> Any:
    """The ``commit`` method of the committer it extends, preceded by ``self.before(table)``: the table of
    the call's second argument (a keyed batch, or an append's table metadata)."""

    def intercepted(self: BeforeRowDeltas, spark: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        self.before(batch.table)
        # the next committer past the Before* classes in the instance's MRO (a mixin's, else IcebergCommitter's)
        return getattr(super(BeforeRowDeltas, self), commit)(spark, batch, *args, **kwargs)

    return intercepted


class BeforeRowDeltas(IcebergCommitter):
    """A committer that calls ``before(table)`` just before each RowDelta of a keyed batch (written
    by Spark or by the driver); what ``before`` raises stops the commit."""

    def before(self, table: SilverTable) -> None:
        """What happens just before a data commit to ``table``: nothing here (subclasses say)."""

    row_delta = _before("row_delta")
    driver_row_delta = _before("driver_row_delta")


class BeforeKeyedCommits(BeforeRowDeltas):
    """``BeforeRowDeltas`` before every commit of a keyed batch: its MERGE and its publish too."""

    merge = _before("merge")
    publish = _before("publish")


class BeforeDataCommits(BeforeKeyedCommits):
    """``BeforeKeyedCommits`` before every data commit: an append-only table's appends too."""

    append = _before("append")
    driver_append = _before("driver_append")


class CrashingCommitter(BeforeDataCommits):
    """A committer whose data commits never happen: the job is killed just before each one."""

    def before(self, table: SilverTable) -> None:
        raise RuntimeError("the job was killed before its data commit")


class TombstoneWitness(IcebergCommitter):
    """A committer whose tombstone appends are slow (``delay`` seconds before each) and which reads
    the tombstone table just before each data commit (``seen``): what a crash at that moment
    would leave behind."""

    def __init__(self, tombstones: str, delay: float = 2.0) -> None:
        self.tombstones = tombstones  # the tombstone table's identifier
        self.delay = delay
        self.seen: list[list[tuple[Any, ...]]] = []

    def append_tombstones(self, *args: Any) -> None:
        time.sleep(self.delay)
        super().append_tombstones(*args)

    def append_collected_tombstones(self, *args: Any) -> None:
        time.sleep(self.delay)
        super().append_collected_tombstones(*args)

    def _look(self, spark: Any) -> None:
        exists = spark.catalog.tableExists(self.tombstones.replace("`", ""))
        self.seen.append(sorted(tuple(r) for r in spark.table(self.tombstones).collect()) if exists else [])

    def merge(self, spark: Any, *args: Any) -> Snapshot:
        self._look(spark)
        return super().merge(spark, *args)

    def row_delta(self, spark: Any, *args: Any, before_commit: Any = None, **kwargs: Any) -> Snapshot:
        return super().row_delta(spark, *args, before_commit=self._looking(spark, before_commit), **kwargs)

    def driver_row_delta(self, spark: Any, *args: Any, before_commit: Any = None, **kwargs: Any) -> Snapshot:
        return super().driver_row_delta(spark, *args, before_commit=self._looking(spark, before_commit), **kwargs)

    def _looking(self, spark: Any, before_commit: Any) -> Callable[[], None]:
        def look() -> None:
            if before_commit is not None:
                before_commit()
            self._look(spark)

        return look


class RacingCommitter(BeforeKeyedCommits):
    """A committer that loses the commit race ``losses`` times: just before each of its first
    ``losses`` data commits (merge, publish or RowDelta), another writer (``rival``) commits to the
    table, and Iceberg refuses."""

    def __init__(self, losses: int, rival: Any = None) -> None:
        self.losses = losses
        self.rival = rival  # called with no arguments: the other writer's commit
        self.attempts = 0

    def before(self, table: SilverTable) -> None:
        self.attempts += 1
        if self.attempts <= self.losses:
            if self.rival is not None:
                self.rival()
            raise iceberg_failure(
                "CommitFailedException", "Cannot commit: base metadata location is not the table's current one"
            )


class MaintenanceRacingCommitter(BeforeRowDeltas):
    """A committer whose first data commit is overtaken by maintenance: the batch is classified
    (and, on the branch path, staged), then ``rival`` (a compaction) commits to the table before
    the batch's RowDelta does."""

    def __init__(self, rival: Any) -> None:
        self.rival = rival
        self.attempts = 0

    def publish(self, spark: Any, batch: KeyedBatch) -> Snapshot:
        self.attempts += 1
        if self.attempts > 1:
            return super().publish(spark, batch)
        staged = stage_changes(spark, batch)
        self.rival()
        try:
            return commit_staged(spark, staged, dict(batch.properties))
        except BaseException:
            abandon_staged(spark, staged)
            raise

    def before(self, table: SilverTable) -> None:
        self.attempts += 1
        if self.attempts == 1:
            self.rival()


class FullLoadCrash(IcebergCommitter):
    """A committer whose job is killed at one step of finishing a full load (``step``, one of
    ``engine.commit.FULL_LOAD_STEPS``): just before the step, or with ``after``, just after it."""

    def __init__(self, step: str, after: bool = False) -> None:
        self.step = step
        self.after = after

    def full_load_step(self, step: str, take: Callable[[], None]) -> None:
        if step == self.step and not self.after:
            raise RuntimeError(f"the job was killed before the full load's {step} step")
        super().full_load_step(step, take)
        if step == self.step:
            raise RuntimeError(f"the job was killed after the full load's {step} step")


class HistoryCrash(IcebergCommitter):
    """A committer whose job is killed between a silver commit and the history append after it:
    just before its ``at``-th history append (1: the first), and each one after it up to
    ``times`` appends in all (a catch-up killed again)."""

    def __init__(self, at: int = 1, times: int = 1) -> None:
        self.at = at
        self.times = times
        self.appends = 0

    def append_history(self, take: Callable[[], object]) -> None:
        self.appends += 1
        if self.at <= self.appends < self.at + self.times:
            raise RuntimeError("the job was killed between the silver commit and the history append")
        super().append_history(take)


class RivalBeforeHistory(IcebergCommitter):
    """A committer whose first history append is overtaken: between the batch's silver commit and
    its history, another writer (``rival``, called with no arguments) commits to the table."""

    def __init__(self, rival: Callable[[], None]) -> None:
        self.rival = rival
        self.appends = 0

    def append_history(self, take: Callable[[], object]) -> None:
        self.appends += 1
        if self.appends == 1:
            self.rival()
        super().append_history(take)
