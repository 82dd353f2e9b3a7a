"""The commits that change a silver table's data: the seam the engine writes through. Each returns
the snapshot it made (``lake.iceberg.Snapshot``), which its caller plans the next batch from and
history records as reflected: nothing looks for it in the table's history afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cdclake.lake.batch import KeyedBatch, TableMetadata
from cdclake.lake.driver_write import append_collected, append_collected_validated, apply_collected_row_delta
from cdclake.lake.iceberg import Snapshot
from cdclake.lake.publish import append_validated, merge_validated, publish_changes
from cdclake.lake.row_delta import append_blocker, append_written, apply_row_delta
from cdclake.lake.tables import SilverTable, committed_by_spark, merge_frame

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


class IcebergCommitter:
    """Makes the commits that change a silver table's data, each carrying the batch's ledger properties.

    The engine calls only these; a test passes a subclass that fails at a chosen commit (or step
    of a full load) to show that a crash between any two steps loses nothing.
    """

    def merge(
        self, spark: SparkSession, batch: KeyedBatch[DataFrame], statement: Callable[[str, str], str]
    ) -> Snapshot:
        """Run the MERGE ``statement(target, view)`` of the batch's changes as one Iceberg commit
        carrying its properties; validated from the batch's base snapshot where it has one
        (``lake.publish.merge_validated``: the RowDelta that publishes it returns its snapshot),
        else (a table the batch created) straight on the table, its snapshot then found by
        ``lake.tables.committed_by_spark`` (Spark's MERGE hands none back)."""
        if batch.base_snapshot_id is not None:
            return merge_validated(spark, batch, statement)
        target = batch.table.identifier

        def run() -> None:
            merge_frame(spark, batch.changes, lambda view: statement(target, view))

        return committed_by_spark(spark, batch.table, dict(batch.properties), run)

    def publish(self, spark: SparkSession, batch: KeyedBatch[DataFrame]) -> Snapshot:
        """Apply the batch as one snapshot on ``main`` carrying its properties, at a cost that follows
        the batch (``lake.publish``: staged on a branch, one RowDelta)."""
        return publish_changes(spark, batch)

    def row_delta(
        self, spark: SparkSession, batch: KeyedBatch[DataFrame], before_commit: Callable[[], None] | None = None
    ) -> Snapshot:
        """Apply the batch as files Spark writes and one RowDelta on ``main`` carrying its properties
        (``lake.row_delta``: no scan of the table). ``before_commit`` is called once the files are
        written, before the commit (it waits for what must be committed first)."""
        return apply_row_delta(spark, batch, before_commit)

    def driver_row_delta(
        self, spark: SparkSession, batch: KeyedBatch[pa.Table], before_commit: Callable[[], None] | None = None
    ) -> Snapshot:
        """``row_delta`` of a batch collected into the driver: its files written by the driver
        (``lake.driver_write``: no Spark job), the same one RowDelta."""
        return apply_collected_row_delta(spark, batch, before_commit)

    def append_tombstones(self, spark: SparkSession, tombstones: SilverTable, rows: DataFrame) -> None:
        """Append a batch's tombstones (one commit to the tombstone table, no ledger properties)."""
        rows.writeTo(tombstones.identifier).append()

    def append_collected_tombstones(self, spark: SparkSession, tombstones: SilverTable, rows: pa.Table) -> None:
        """``append_tombstones`` of rows collected into the driver: one file the driver writes."""
        append_collected(spark, tombstones.identifier, rows)

    def append(
        self,
        spark: SparkSession,
        metadata: TableMetadata,
        rows: DataFrame,
        count: int,
        properties: dict[str, str],
    ) -> Snapshot:
        """Append ``rows`` (``count`` of them) as one commit carrying ``properties`` (append-only
        tables), only while the table has had no data commit since the snapshot ``metadata`` was read
        at (else a commit conflict): as written files and one RowDelta (``lake.row_delta.append_written``)
        where the table allows it, else staged on a branch (``lake.publish.append_validated``)."""
        assert metadata.snapshot_id is not None
        if append_blocker(metadata) is None:
            return append_written(spark, metadata, rows, count, properties)
        return append_validated(spark, metadata.table.identifier, rows, metadata.snapshot_id, properties)

    def driver_append(
        self, spark: SparkSession, metadata: TableMetadata, rows: pa.Table, properties: dict[str, str]
    ) -> Snapshot:
        """``append`` of rows collected into the driver: one file the driver writes, the same validated
        RowDelta (``lake.driver_write.append_collected_validated``: no Spark job)."""
        return append_collected_validated(spark, metadata, rows, properties)

    def append_history(self, take: Callable[[], object]) -> None:
        """Add a batch's changes to the table's history (one commit to the history table, after
        the silver commit it reflects; ``lake.history.apply_history``)."""
        take()

    def full_load_step(self, step: str, take: Callable[[], None]) -> None:
        """Take one step of finishing a staged full load (``engine.commit.FULL_LOAD_STEPS``: each a
        commit or a metadata change), in the engine's order."""
        take()

    def cut_step(self, step: str, take: Callable[[], None]) -> None:
        """Take one step of publishing a consistent cut (``lake.cuts.CutPublisher``: ``record``, then
        ``tag <table>`` for each table), in that order."""
        take()
