"""The values one CDC batch carries from its plan to its commit: the table's metadata, read once, the
batch, and the data commit the plan chose with the rows it commits.

``read_table_metadata`` is the one read of a silver table's metadata per batch (one load and refresh of the
Iceberg table, one of its schema, one of its tombstone table's properties); every decision of the plan
(``engine.prepare``) and the commit (``lake.row_delta``, ``lake.driver_write``, ``lake.publish``) takes it
from ``KeyedBatch.metadata`` instead of reading the table again.

Whether a batch's rows stay in Spark or were collected into the driver is said by the type of its
``DataCommit`` (``DriverRowDelta`` holds Arrow rows, every other way DataFrames), decided once by
``engine.prepare``: each commit function takes the one kind of rows it writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, Self, TypeVar

from cdclake.lake.journals import PRUNED_BEFORE_PROPERTY, parse_pruned_before, tombstones_of
from cdclake.lake.tables import IcebergField, SilverTable, iceberg_fields, iceberg_table, table_exists

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

# How a batch's data commit is made, by what each way does: "append" (append-only tables: one append);
# "row-delta" (Spark writes the new images and position deletes, one RowDelta, no scan of the table);
# "driver-row-delta" (the same, a small batch's files written by the driver from its collected rows);
# "merge" (one MERGE statement); "publish" (staged on a branch, then one RowDelta on main).
CommitWay = Literal["append", "row-delta", "driver-row-delta", "merge", "publish"]
# A batch's rows: materialised in Spark, or collected into the driver as Arrow.
Rows = TypeVar("Rows", "DataFrame", "pa.Table")


@dataclass(frozen=True)
class TableMetadata:
    """What a batch needs to know of a silver table, as one read found it (``read_table_metadata``).

    ``snapshot_id`` is the snapshot the batch is classified against and its RowDelta validated from
    (None: the table does not exist yet, or has no snapshot). A table that does not exist has no
    fields and no columns.
    """

    table: SilverTable
    exists: bool
    snapshot_id: int | None
    format_version: int
    partitioned: bool
    merge_mode: str  # ``write.merge.mode``: merge-on-read or copy-on-write
    fields: tuple[IcebergField, ...]  # the Iceberg schema's top-level columns (field ids, Iceberg types)
    schema: StructType | None  # the columns as Spark reads them, in order (None: no table)
    total_records: int  # in the current snapshot's data files (deleted ones included)
    total_files_size: int
    tombstones_exist: bool
    tombstones_pruned_before: datetime | None  # the tombstone horizon's cut (``dms.horizon``)

    @property
    def columns(self) -> list[tuple[str, str]]:
        """(name, Spark SQL type) of each column, in order."""
        return [] if self.schema is None else [(f.name, f.dataType.simpleString()) for f in self.schema.fields]

    @classmethod
    def absent(cls, table: SilverTable) -> TableMetadata:
        """A table that does not exist yet (its first batch creates it), without tombstones."""
        return cls(table, False, None, 2, False, "merge-on-read", (), None, 0, 0, False, None)


def read_table_metadata(spark: SparkSession, table: SilverTable) -> TableMetadata:
    """Read ``table``'s metadata and its tombstone table's once, for one batch."""
    tombstones = tombstones_of(table)
    tombstones_exist = table_exists(spark, tombstones)
    pruned_before = None
    if tombstones_exist:
        value = iceberg_table(spark, tombstones.identifier).properties().get(PRUNED_BEFORE_PROPERTY)
        pruned_before = parse_pruned_before(None if value is None else str(value))
    if not table_exists(spark, table):
        absent = TableMetadata.absent(table)
        return replace(absent, tombstones_exist=tombstones_exist, tombstones_pruned_before=pruned_before)
    iceberg = iceberg_table(spark, table.identifier)
    iceberg.refresh()
    current = iceberg.currentSnapshot()
    summary = None if current is None else current.summary()
    return TableMetadata(
        table=table,
        exists=True,
        snapshot_id=None if current is None else int(current.snapshotId()),
        format_version=int(iceberg.operations().current().formatVersion()),
        partitioned=not iceberg.spec().isUnpartitioned(),
        merge_mode=str(iceberg.properties().getOrDefault("write.merge.mode", "copy-on-write")),
        fields=tuple(iceberg_fields(spark, iceberg)),
        schema=spark.table(table.identifier).schema,
        total_records=0 if summary is None else int(summary.getOrDefault("total-records", "0")),
        total_files_size=0 if summary is None else int(summary.getOrDefault("total-files-size", "0")),
        tombstones_exist=tombstones_exist,
        tombstones_pruned_before=pruned_before,
    )


@dataclass(frozen=True)
class WrittenColumns:
    """What a keyed batch writes into its table's rows: the key, the data columns its changes carry,
    the silver columns the source no longer sends (NULL in new images), and the columns whose values were
    not captured (column -> the flag column that says which rows keep the stored value)."""

    key: Sequence[str]
    columns: Sequence[str]
    absent: Sequence[str] = ()
    unchanged: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KeyedBatch(Generic[Rows]):
    """A keyed table's batch, classified and ready for its one data commit, whichever way takes it.

    ``changes`` holds one row per key (inserts, updates and deletes; late changes and deletes of
    missing keys already left out) with its stored row's place (``_cdc_stored_file``/``_pos``):
    a materialised DataFrame, or, for a batch small enough for the driver, its rows collected as
    Arrow (``lake.driver_write``: only the RowDelta way takes those). ``metadata``: the table as
    the batch was classified against it (None: the batch creates the table).
    """

    table: SilverTable
    changes: Rows
    key: Sequence[str]
    columns: Sequence[str]  # the data columns the changes carry
    properties: Mapping[str, str]  # the ledger record the commit carries
    metadata: TableMetadata | None
    absent: Sequence[str] = ()  # silver columns the source no longer sends: NULL in new images
    unchanged: Mapping[str, str] = field(default_factory=dict)  # column -> flag of values not captured
    image_count: int | None = None  # rows written as new images (inserts and updates)
    replaced_count: int | None = None  # stored rows replaced (updates and deletes)

    @property
    def written(self) -> WrittenColumns:
        """What the batch writes into its table's rows."""
        return WrittenColumns(self.key, self.columns, self.absent, self.unchanged)

    @property
    def base_snapshot_id(self) -> int | None:
        """The snapshot the changes were classified against (None: a new table, or one without a snapshot)."""
        return None if self.metadata is None else self.metadata.snapshot_id


@dataclass(frozen=True)
class Append:
    """Append-only tables: every change appended as a row, one commit carrying ``properties``."""

    rows: DataFrame  # materialised (a local checkpoint)
    properties: dict[str, str]  # the ledger record of the batch's data commit
    count: int  # rows to append
    # the table as the batch was planned against it (its ledger read at ``metadata.snapshot_id``):
    # the append commits only while main is still there (None: the batch creates the table)
    metadata: TableMetadata | None = None
    way: ClassVar[CommitWay] = "append"

    def release(self) -> None:
        """Free the materialised rows once the commit is done (or failed)."""
        self.rows.unpersist()


@dataclass(frozen=True)
class DriverAppend:
    """A small append-only batch collected as Arrow once: one data file the driver writes and one
    RowDelta validated from ``metadata.snapshot_id`` (``lake.driver_write``: no Spark job)."""

    rows: pa.Table
    properties: dict[str, str]  # the ledger record of the batch's data commit
    metadata: TableMetadata  # the table as the batch was planned against it
    way: ClassVar[CommitWay] = "append"

    def release(self) -> None:
        """Nothing to free in Spark: the rows are the driver's."""


@dataclass(frozen=True)
class _Keyed(Generic[Rows]):
    """A keyed batch and the tombstones its deletes leave (``engine.plan.tombstone_rows``), in Spark or Arrow."""

    batch: KeyedBatch[Rows]
    tombstones: Rows

    def with_metadata(self, metadata: TableMetadata) -> Self:
        """The same commit of a batch whose table's metadata was read again (an evolved schema)."""
        return replace(self, batch=replace(self.batch, metadata=metadata))

    @property
    def properties(self) -> Mapping[str, str]:
        """The ledger record the batch's data commit carries."""
        return self.batch.properties


@dataclass(frozen=True)
class _InSpark(_Keyed["DataFrame"]):
    """A keyed batch whose classified rows stay in Spark, materialised once (``classified``, a local
    checkpoint): ``batch.changes`` and ``tombstones`` are read from it."""

    classified: DataFrame  # every classified change, materialised
    way: ClassVar[CommitWay]

    def release(self) -> None:
        """Free the materialised rows once the commit is done (or failed)."""
        self.classified.unpersist()


class RowDelta(_InSpark):
    """Files Spark writes and one RowDelta, no scan of the table (``lake.row_delta``)."""

    way: ClassVar[CommitWay] = "row-delta"


class Merge(_InSpark):
    """One MERGE statement (``engine.statements.merge_statement``)."""

    way: ClassVar[CommitWay] = "merge"


class Publish(_InSpark):
    """Staged on a private branch, then one RowDelta on ``main`` (``lake.publish``)."""

    way: ClassVar[CommitWay] = "publish"


@dataclass(frozen=True)
class DriverRowDelta(_Keyed["pa.Table"]):
    """A batch small enough for the driver, collected as Arrow once: its files are written by the
    driver and committed as one RowDelta, its tombstones appended as a file the driver writes
    (``lake.driver_write``: no Spark job)."""

    way: ClassVar[CommitWay] = "driver-row-delta"

    def release(self) -> None:
        """Nothing to free in Spark: the rows are the driver's."""


KeyedCommit = RowDelta | Merge | Publish | DriverRowDelta
# The one data commit a batch's plan chose, with the rows it commits (``engine.commit_way.choose_commit_way``).
DataCommit = Append | DriverAppend | KeyedCommit
