"""The commits that change a silver table's data: the seam the engine writes through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cdclake.lake.publish import publish_changes
from cdclake.lake.row_delta import apply_row_delta
from cdclake.lake.tables import SilverTable, commit_with_properties, merge_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class IcebergCommitter:
    """Makes the commits that change a silver table's data, each carrying the batch's ledger properties.

    The engine calls only these; a test passes a subclass that fails at a chosen commit to show
    that a crash between any two steps loses nothing.
    """

    def merge(
        self, spark: SparkSession, rows: DataFrame, statement: Callable[[str], str], properties: dict[str, str]
    ) -> None:
        """Run the MERGE ``statement(view)`` of ``rows`` as one Iceberg commit carrying ``properties``."""
        commit_with_properties(spark, properties, lambda: merge_frame(spark, rows, statement))

    def publish(
        self,
        spark: SparkSession,
        table: SilverTable,
        changes: DataFrame,
        key: Sequence[str],
        columns: Sequence[str],
        properties: dict[str, str],
        absent: Sequence[str] = (),
        unchanged: dict[str, str] | None = None,
    ) -> None:
        """Apply classified changes (one per key) as one snapshot on ``main`` carrying ``properties``,
        at a cost that follows the batch (``lake.publish``: staged on a branch, one RowDelta)."""
        publish_changes(spark, table.identifier, changes, key, columns, properties, absent, unchanged)

    def row_delta(
        self,
        spark: SparkSession,
        table: SilverTable,
        changes: DataFrame,
        key: Sequence[str],
        columns: Sequence[str],
        properties: dict[str, str],
        base_snapshot_id: int,
        absent: Sequence[str] = (),
        image_count: int | None = None,
        replaced_count: int | None = None,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        """Apply classified changes carrying their stored rows' places as written files and one
        RowDelta on ``main`` carrying ``properties`` (``lake.row_delta``: no scan of the table).
        ``before_commit`` is called once the files are written, before the commit (it waits for
        what must be committed first)."""
        apply_row_delta(
            spark, table.identifier, changes, key, columns, properties, base_snapshot_id, absent, image_count,
            replaced_count, before_commit,
        )  # fmt: skip

    def append_tombstones(self, spark: SparkSession, tombstones: SilverTable, rows: DataFrame) -> None:
        """Append a batch's tombstones (one commit to the tombstone table, no ledger properties)."""
        rows.writeTo(tombstones.identifier).append()

    def append(self, spark: SparkSession, table: SilverTable, rows: DataFrame, properties: dict[str, str]) -> None:
        """Append ``rows`` as one commit carrying ``properties`` (append-only tables)."""
        commit_with_properties(spark, properties, rows.writeTo(table.identifier).append)
