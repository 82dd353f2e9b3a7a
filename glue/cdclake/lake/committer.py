"""The commits that change a silver table's data: the seam the engine writes through."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdclake.lake.driver_write import append_collected, apply_collected_row_delta, is_collected
from cdclake.lake.publish import publish_changes
from cdclake.lake.row_delta import apply_row_delta
from cdclake.lake.tables import SilverTable, commit_with_properties, merge_frame

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class KeyedBatch:
    """A keyed table's batch, classified and ready for its one data commit, whichever path takes it.

    ``changes`` holds one row per key (inserts, updates and deletes; late changes and deletes of
    missing keys already left out) with its stored row's place (``_cdc_stored_file``/``_pos``):
    a materialised DataFrame, or, for a batch small enough for the driver, its rows collected as
    Arrow (``lake.driver_write``: only the RowDelta path takes those).
    """

    table: SilverTable
    changes: DataFrame | pa.Table
    key: Sequence[str]
    columns: Sequence[str]  # the data columns the changes carry
    properties: Mapping[str, str]  # the ledger record the commit carries
    base_snapshot_id: int | None  # the snapshot the changes were classified against (None: a new table)
    absent: Sequence[str] = ()  # silver columns the source no longer sends: NULL in new images
    unchanged: Mapping[str, str] = field(default_factory=dict)  # column -> flag of values not captured
    image_count: int | None = None  # rows written as new images (inserts and updates)
    replaced_count: int | None = None  # stored rows replaced (updates and deletes)


class IcebergCommitter:
    """Makes the commits that change a silver table's data, each carrying the batch's ledger properties.

    The engine calls only these; a test passes a subclass that fails at a chosen commit (or step
    of a full load) to show that a crash between any two steps loses nothing.
    """

    def merge(self, spark: SparkSession, batch: KeyedBatch, statement: Callable[[str], str]) -> None:
        """Run the MERGE ``statement(view)`` of the batch's changes as one Iceberg commit carrying
        its properties."""
        changes = batch.changes
        assert not is_collected(changes), "collected changes are committed through a RowDelta"
        commit_with_properties(spark, dict(batch.properties), lambda: merge_frame(spark, changes, statement))

    def publish(self, spark: SparkSession, batch: KeyedBatch) -> None:
        """Apply the batch as one snapshot on ``main`` carrying its properties, at a cost that follows
        the batch (``lake.publish``: staged on a branch, one RowDelta)."""
        assert not is_collected(batch.changes), "collected changes are committed through a RowDelta"
        publish_changes(
            spark, batch.table.identifier, batch.changes, batch.key, batch.columns, dict(batch.properties),
            batch.absent, dict(batch.unchanged),
        )  # fmt: skip

    def row_delta(
        self, spark: SparkSession, batch: KeyedBatch, before_commit: Callable[[], None] | None = None
    ) -> None:
        """Apply the batch as written files and one RowDelta on ``main`` carrying its properties
        (``lake.row_delta``: no scan of the table). ``before_commit`` is called once the files are
        written, before the commit (it waits for what must be committed first)."""
        assert batch.base_snapshot_id is not None, "a RowDelta needs the snapshot the batch was classified at"
        if is_collected(batch.changes):
            apply_collected_row_delta(
                spark, batch.table.identifier, batch.changes, batch.columns, dict(batch.properties),
                batch.base_snapshot_id, batch.absent, before_commit,
            )  # fmt: skip
            return
        apply_row_delta(
            spark, batch.table.identifier, batch.changes, batch.key, batch.columns, dict(batch.properties),
            batch.base_snapshot_id, batch.absent, batch.image_count, batch.replaced_count, before_commit,
        )  # fmt: skip

    def append_tombstones(self, spark: SparkSession, tombstones: SilverTable, rows: DataFrame | pa.Table) -> None:
        """Append a batch's tombstones (one commit to the tombstone table, no ledger properties);
        collected ones as a file the driver writes."""
        if is_collected(rows):
            append_collected(spark, tombstones.identifier, rows)
        else:
            rows.writeTo(tombstones.identifier).append()

    def append(self, spark: SparkSession, table: SilverTable, rows: DataFrame, properties: dict[str, str]) -> None:
        """Append ``rows`` as one commit carrying ``properties`` (append-only tables)."""
        commit_with_properties(spark, properties, rows.writeTo(table.identifier).append)

    def append_history(self, take: Callable[[], object]) -> None:
        """Add a batch's changes to the table's history (one commit to the history table, after
        the silver commit it reflects; ``lake.history.apply_history``)."""
        take()

    def full_load_step(self, step: str, take: Callable[[], None]) -> None:
        """Take one step of finishing a staged full load (``engine.commit.FULL_LOAD_STEPS``: each a
        commit or a metadata change), in the engine's order."""
        take()
