"""Silver snapshots a mart reads: pinning, lineage, and the rows that changed between two snapshots.

Pinning and lineage come from the Iceberg table's own metadata (the Java ``Table`` the catalog
holds, refreshed): no Spark job, so a mart whose inputs did not change costs a few metadata reads.

Iceberg's changelog scan (``create_changelog_view``) refuses tables with delete files ("Delete files
are currently not supported in changelog scans", Iceberg 1.10), and its incremental append read
skips overwrite snapshots; silver tables are merge-on-read, every CDC commit an overwrite with
position deletes. So the changed rows come from the files the snapshots in between added and
removed (each snapshot's own manifests, netted):

* after-images: the rows of the newer snapshot in data files added since;
* before-images: the rows of the older snapshot in data files removed since, and at the positions
  the delete files added since name (read from those delete files, ``file_path`` and ``pos``).

Both read only those data files (``change_scope`` plans them from the manifests; ``StagedScans``
reads them as Iceberg's compaction does): Iceberg prunes no file by a filter on ``_file``. Their
bytes, against the table's, are what ``gold.cost`` weighs against a full refresh.

Compaction between the two shows up as the same rows on both sides: more groups recomputed, same
result. A position named again by a rewritten delete file was already deleted at the older
snapshot, so the older snapshot's read does not return it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.lake.iceberg import EQUALITY_DELETES, IcebergTable, ScanTask
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


# Up to this many deleted positions (a data file's path and a position each, ~200 bytes), they are
# broadcast to the scan of the older snapshot instead of shuffling it.
BROADCAST_POSITIONS = 200_000


class IncrementalUnavailable(Exception):
    """The change between two snapshots cannot be read as rows; the caller recomputes in full."""


@dataclass(frozen=True)
class ChangedRows:
    before: DataFrame  # rows of the older snapshot that were deleted or replaced since
    after: DataFrame  # rows of the newer snapshot that were written since


@dataclass(frozen=True)
class ChangedFiles:
    """What the snapshots after ``older`` up to ``newer`` changed, netted (paths)."""

    added_data: list[str]
    removed_data: list[str]
    added_position_deletes: list[str]
    deleted_positions: int = 0  # rows of the added position delete files
    added_bytes: int = 0  # of the added data files
    added_delete_bytes: int = 0  # of the added position delete files
    removed_bytes: int = 0  # of the removed data files
    # The data files the added position deletes point into (a file-scoped delete file names its
    # data file by its bounds); None: a delete file does not say (partition-scoped deletes).
    deleted_from: list[str] | None = None


@dataclass(frozen=True)
class ChangeScope:
    """What an incremental refresh reads of one table between two snapshots, planned from metadata."""

    files: ChangedFiles
    before_files: list[ScanTask]  # the older snapshot's data files removed or deleted from since
    changed_bytes: int  # those files', the added data and delete files': what the before- and after-images read


def _table(spark: SparkSession, table: SilverTable) -> IcebergTable:
    return IcebergTable.latest(spark, table.identifier)


def current_snapshot(spark: SparkSession, table: SilverTable) -> int | None:
    """The snapshot id of ``table``'s main branch (None: missing table or no commit yet)."""
    if not table_exists(spark, table):
        return None
    return IcebergTable.latest(spark, table.identifier).current_snapshot_id


def latest_commit_ts_at(spark: SparkSession, table: SilverTable, snapshot_id: int) -> str | None:
    """The newest source commit time applied up to ``snapshot_id``: the largest
    ``cdclake.latest-commit-ts`` of it and its ancestors (the lineage's running maximum), read from
    the table's metadata like the ledger is, without a Spark job."""
    lineage = IcebergTable.latest(spark, table.identifier).lineage((LATEST_COMMIT_TS_PROPERTY,), start=snapshot_id)
    return max((s.summary[LATEST_COMMIT_TS_PROPERTY] for s in lineage if LATEST_COMMIT_TS_PROPERTY in s.summary),
               default=None)  # fmt: skip


def snapshots_after(spark: SparkSession, table: SilverTable, snapshot_id: int) -> list[Any]:
    """Current-lineage snapshots committed after ``snapshot_id``, oldest first (``committed_at``: UTC text)."""
    return spark.sql(
        f"""
        SELECT h.snapshot_id, CAST(h.made_current_at AS STRING) AS committed_at
        FROM {table.metadata("history")} h
        WHERE h.is_current_ancestor AND h.made_current_at > (
            SELECT made_current_at FROM {table.metadata("history")} WHERE snapshot_id = {int(snapshot_id)})
        ORDER BY h.made_current_at
        """
    ).collect()


def changed_files(spark: SparkSession, table: SilverTable, older: int, newer: int) -> ChangedFiles:
    """The files the snapshots after ``older`` up to ``newer`` added and removed, netted: a file
    added and removed again in between is in neither list.

    Raises ``IncrementalUnavailable`` when ``older`` is not an ancestor of ``newer`` (a rollback or
    a replace), has expired, or equality deletes were added (their rows are not named by position).
    """
    found = _table(spark, table)
    if found.snapshot(int(older)) is None:
        raise IncrementalUnavailable(f"{table.name}: the snapshot last reflected has expired")
    between = found.snapshots_after(int(older), int(newer))
    if between is None:
        raise IncrementalUnavailable(f"{table.name}: the snapshot last reflected is no longer in its lineage")
    net = found.net_files(between)
    if any(file.content == EQUALITY_DELETES for file in net.added_deletes):
        raise IncrementalUnavailable(f"{table.name} has equality delete files")
    added_data = sorted(net.added_data, key=lambda f: f.path)
    deletes = sorted(net.added_deletes, key=lambda f: f.path)
    removed = sorted(net.removed_data, key=lambda f: f.path)
    pointed = [file.referenced for file in deletes]
    return ChangedFiles(
        added_data=[f.path for f in added_data],
        removed_data=[f.path for f in removed],
        added_position_deletes=[f.path for f in deletes],
        deleted_positions=sum(f.records for f in deletes),
        added_bytes=sum(f.size for f in added_data),
        added_delete_bytes=sum(f.size for f in deletes),
        removed_bytes=sum(f.size for f in removed),
        deleted_from=None if None in pointed else sorted({p for p in pointed if p is not None}),
    )


def change_scope(spark: SparkSession, table: SilverTable, older: int, newer: int) -> ChangeScope:
    """What an incremental refresh of ``table`` from ``older`` to ``newer`` reads to find the changed
    rows, from the table's metadata only (its manifests; no Spark job). Raises
    ``IncrementalUnavailable`` as ``changed_files`` does."""
    files = changed_files(spark, table, older, newer)
    wanted = None if files.deleted_from is None else {*files.deleted_from, *files.removed_data}
    before_files = [t for t in _table(spark, table).planned_files(older) if wanted is None or t.path in wanted]
    changed = sum(t.size for t in before_files) + files.added_bytes + files.added_delete_bytes
    return ChangeScope(files=files, before_files=before_files, changed_bytes=changed)


def table_bytes(spark: SparkSession, table: SilverTable, snapshot_id: int) -> int:
    """The bytes of the data and delete files of ``table`` at ``snapshot_id``: what a scan of it
    reads. From the snapshot's summary (``total-files-size``), else its manifests; no Spark job."""
    found = _table(spark, table)
    snapshot = found.snapshot(int(snapshot_id), keys=("total-files-size",))
    if snapshot is not None and "total-files-size" in snapshot.summary:
        return int(snapshot.summary["total-files-size"])
    return sum(task.size for task in found.planned_files(snapshot_id))


class StagedScans:
    """Reads of chosen data files of a table (Iceberg FileScanTasks, their delete files applied),
    through Iceberg's staged scan task sets (what its compaction reads with): a filter on ``_file``
    would scan every file, Iceberg prunes none by it. Each set is dropped when the refresh ends."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.staged: list[tuple[IcebergTable, str]] = []

    def read(self, table: SilverTable, tasks: Sequence[ScanTask]) -> DataFrame:
        """The rows of ``tasks`` with the table's current columns, ``_file`` and ``_pos``."""
        from pyspark.sql import functions as F

        if not tasks:
            return self.spark.table(table.identifier).select("*", "_file", "_pos").where(F.lit(False))
        found = _table(self.spark, table)
        set_id = f"cdclake-gold-{uuid.uuid4().hex}"
        found.stage_scan(set_id, tasks)
        self.staged.append((found, set_id))
        frame = self.spark.read.format("iceberg").option("scan-task-set-id", set_id).load(table.identifier)
        return frame.select("*", "_file", "_pos")

    def close(self) -> None:
        for found, set_id in self.staged:
            found.unstage_scan(set_id)
        self.staged.clear()


@contextmanager
def staged_scans(spark: SparkSession) -> Iterator[StagedScans]:
    """Staged reads for one refresh, dropped afterwards."""
    scans = StagedScans(spark)
    try:
        yield scans
    finally:
        scans.close()


def changed_rows(
    spark: SparkSession, table: SilverTable, scope: ChangeScope, newer: int, scans: StagedScans
) -> ChangedRows:
    """The rows that changed in ``table`` between the snapshots ``scope`` was planned for (the
    newer one: ``newer``), reading only the data files the changes touch; columns: the table's."""
    from pyspark.sql import functions as F

    files = scope.files
    old = scans.read(table, scope.before_files)
    columns = [c for c in old.columns if c not in ("_file", "_pos")]
    before = old.where(F.lit(False))
    if files.removed_data:
        before = before.unionByName(old.where(F.col("_file").isin(files.removed_data)))
    if files.added_position_deletes:
        positions = (
            spark.read.schema("file_path string, pos bigint")
            .parquet(*files.added_position_deletes)
            .select(F.col("file_path").alias("_cdc_deleted_file"), F.col("pos").alias("_cdc_deleted_pos"))
        )
        if files.deleted_positions <= BROADCAST_POSITIONS:  # else a shuffle: the driver's memory is shared
            positions = F.broadcast(positions)
        condition = (old["_file"] == positions["_cdc_deleted_file"]) & (old["_pos"] == positions["_cdc_deleted_pos"])
        before = before.unionByName(old.join(positions, condition, "left_semi"))
    added = set(files.added_data)
    after_files = [task for task in _table(spark, table).planned_files(newer) if task.path in added]
    after = scans.read(table, after_files)
    return ChangedRows(before=before.select(*columns), after=after.select(*columns))
