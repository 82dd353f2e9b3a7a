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

from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.ledger import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, iceberg_table, table_exists

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
    before_files: list[Any]  # the older snapshot's FileScanTasks of the data files removed or deleted from since
    changed_bytes: int  # those files', the added data and delete files': what the before- and after-images read


def _table(spark: SparkSession, table: SilverTable) -> Any:
    found = iceberg_table(spark, table.identifier)
    found.refresh()
    return found


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
    between: list[Any] = []
    snapshot = found.snapshot(int(newer))
    while snapshot is not None and int(snapshot.snapshotId()) != int(older):
        between.append(snapshot)
        parent = snapshot.parentId()
        snapshot = None if parent is None else found.snapshot(parent)
    if snapshot is None:
        raise IncrementalUnavailable(f"{table.name}: the snapshot last reflected is no longer in its lineage")
    io = found.io()
    content_files = spark.sparkContext._jvm.org.apache.iceberg.util.ContentFileUtil  # type: ignore[union-attr]
    added: dict[str, int] = {}  # path -> content (0 data, 1 position deletes, 2 equality deletes)
    records: dict[str, int] = {}
    sizes: dict[str, int] = {}
    referenced: dict[str, str | None] = {}  # position delete file -> the data file it points into
    removed_data: set[str] = set()
    for snap in reversed(between):  # oldest first
        for files, is_data in ((snap.removedDataFiles(io), True), (snap.removedDeleteFiles(io), False)):
            for file in files:
                path = str(file.location())
                if added.pop(path, None) is None and is_data:
                    removed_data.add(path)
                    sizes[path] = int(file.fileSizeInBytes())
        for files in (snap.addedDataFiles(io), snap.addedDeleteFiles(io)):
            for file in files:
                path = str(file.location())
                added[path] = int(file.content().id())
                records[path] = int(file.recordCount())
                sizes[path] = int(file.fileSizeInBytes())
                if added[path] == 1:
                    data_file = content_files.referencedDataFileLocation(file)
                    referenced[path] = None if data_file is None else str(data_file)
    if 2 in added.values():
        raise IncrementalUnavailable(f"{table.name} has equality delete files")
    added_data = sorted(p for p, content in added.items() if content == 0)
    deletes = sorted(p for p, content in added.items() if content == 1)
    pointed = [referenced[p] for p in deletes]
    return ChangedFiles(
        added_data=added_data,
        removed_data=sorted(removed_data),
        added_position_deletes=deletes,
        deleted_positions=sum(records[p] for p in deletes),
        added_bytes=sum(sizes[p] for p in added_data),
        added_delete_bytes=sum(sizes[p] for p in deletes),
        removed_bytes=sum(sizes[p] for p in removed_data),
        deleted_from=None if None in pointed else sorted({p for p in pointed if p is not None}),
    )


def change_scope(spark: SparkSession, table: SilverTable, older: int, newer: int) -> ChangeScope:
    """What an incremental refresh of ``table`` from ``older`` to ``newer`` reads to find the changed
    rows, from the table's metadata only (its manifests; no Spark job). Raises
    ``IncrementalUnavailable`` as ``changed_files`` does."""
    files = changed_files(spark, table, older, newer)
    wanted = None if files.deleted_from is None else {*files.deleted_from, *files.removed_data}
    before_files: list[Any] = []
    before_bytes = 0
    for task, path, size in _planned_files(_table(spark, table), older):
        if wanted is None or path in wanted:
            before_files.append(task)
            before_bytes += size
    changed = before_bytes + files.added_bytes + files.added_delete_bytes
    return ChangeScope(files=files, before_files=before_files, changed_bytes=changed)


def table_bytes(spark: SparkSession, table: SilverTable, snapshot_id: int) -> int:
    """The bytes of the data and delete files of ``table`` at ``snapshot_id``: what a scan of it
    reads. From the snapshot's summary (``total-files-size``), else its manifests; no Spark job."""
    found = _table(spark, table)
    total = found.snapshot(int(snapshot_id)).summary().get("total-files-size")
    if total is not None:
        return int(total)
    return sum(size for _, _, size in _planned_files(found, snapshot_id))


def _planned_files(found: Any, snapshot_id: int) -> Iterator[tuple[Any, str, int]]:
    """Each data file of a snapshot as Iceberg plans its scan: (FileScanTask with the snapshot's
    delete files, path, bytes)."""
    tasks = found.newScan().useSnapshot(int(snapshot_id)).planFiles()
    try:
        iterator = tasks.iterator()
        while iterator.hasNext():
            task = iterator.next()
            data_file = task.file()
            yield task, str(data_file.location()), int(data_file.fileSizeInBytes())
    finally:
        tasks.close()


class StagedScans:
    """Reads of chosen data files of a table (Iceberg FileScanTasks, their delete files applied),
    through Iceberg's staged scan task sets (what its compaction reads with): a filter on ``_file``
    would scan every file, Iceberg prunes none by it. Each set is dropped when the refresh ends."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.staged: list[tuple[Any, str]] = []

    def read(self, table: SilverTable, tasks: Sequence[Any]) -> DataFrame:
        """The rows of ``tasks`` with the table's current columns, ``_file`` and ``_pos``."""
        from pyspark.sql import functions as F

        if not tasks:
            return self.spark.table(table.identifier).select("*", "_file", "_pos").where(F.lit(False))
        jvm: Any = self.spark.sparkContext._jvm
        found = _table(self.spark, table)
        listed = jvm.java.util.ArrayList()
        for task in tasks:
            listed.add(task)
        set_id = f"cdclake-gold-{uuid.uuid4().hex}"
        jvm.org.apache.iceberg.spark.ScanTaskSetManager.get().stageTasks(found, set_id, listed)
        self.staged.append((found, set_id))
        frame = self.spark.read.format("iceberg").option("scan-task-set-id", set_id).load(table.identifier)
        return frame.select("*", "_file", "_pos")

    def close(self) -> None:
        manager = self.spark.sparkContext._jvm.org.apache.iceberg.spark.ScanTaskSetManager.get()  # type: ignore[union-attr]
        for found, set_id in self.staged:
            manager.removeTasks(found, set_id)
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
    after_files = [task for task, path, _ in _planned_files(_table(spark, table), newer) if path in added]
    after = scans.read(table, after_files)
    return ChangedRows(before=before.select(*columns), after=after.select(*columns))
