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

Compaction between the two shows up as the same rows on both sides: more groups recomputed, same
result. A position named again by a rewritten delete file was already deleted at the older
snapshot, so the older snapshot's read does not return it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def _table(spark: SparkSession, table: SilverTable) -> Any:
    found = iceberg_table(spark, table.identifier)
    found.refresh()
    return found


def current_snapshot(spark: SparkSession, table: SilverTable) -> int | None:
    """The snapshot id of ``table``'s main branch (None: missing table or no commit yet)."""
    if not table_exists(spark, table):
        return None
    snapshot = _table(spark, table).currentSnapshot()
    return None if snapshot is None else int(snapshot.snapshotId())


def latest_commit_ts_at(spark: SparkSession, table: SilverTable, snapshot_id: int) -> str | None:
    """The newest source commit time applied up to ``snapshot_id``: the largest
    ``cdclake.latest-commit-ts`` of it and its ancestors (the lineage's running maximum), read from
    the table's metadata like the ledger is, without a Spark job."""
    found = _table(spark, table)
    newest: str | None = None
    snapshot = found.snapshot(int(snapshot_id))
    while snapshot is not None:
        value = snapshot.summary().get(LATEST_COMMIT_TS_PROPERTY)
        if value is not None and (newest is None or str(value) > newest):
            newest = str(value)
        parent = snapshot.parentId()
        snapshot = None if parent is None else found.snapshot(parent)
    return newest


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
    added: dict[str, int] = {}  # path -> content (0 data, 1 position deletes, 2 equality deletes)
    records: dict[str, int] = {}
    removed_data: set[str] = set()
    for snap in reversed(between):  # oldest first
        for files, is_data in ((snap.removedDataFiles(io), True), (snap.removedDeleteFiles(io), False)):
            for file in files:
                path = str(file.location())
                if added.pop(path, None) is None and is_data:
                    removed_data.add(path)
        for files in (snap.addedDataFiles(io), snap.addedDeleteFiles(io)):
            for file in files:
                added[str(file.location())] = int(file.content().id())
                records[str(file.location())] = int(file.recordCount())
    if 2 in added.values():
        raise IncrementalUnavailable(f"{table.name} has equality delete files")
    return ChangedFiles(
        added_data=sorted(p for p, content in added.items() if content == 0),
        removed_data=sorted(removed_data),
        added_position_deletes=sorted(p for p, content in added.items() if content == 1),
        deleted_positions=sum(records[p] for p, content in added.items() if content == 1),
    )


def changed_rows(spark: SparkSession, table: SilverTable, older: int, newer: int) -> ChangedRows:
    """The rows that changed in ``table`` between snapshots ``older`` and ``newer``; columns: the
    table's own. Raises ``IncrementalUnavailable`` as ``changed_files`` does."""
    from pyspark.sql import functions as F

    files = changed_files(spark, table, older, newer)
    old = spark.sql(f"SELECT *, _file, _pos FROM {table.identifier} VERSION AS OF {int(older)}")
    new = spark.sql(f"SELECT *, _file FROM {table.identifier} VERSION AS OF {int(newer)}")
    old_columns = [c for c in old.columns if c not in ("_file", "_pos")]
    new_columns = [c for c in new.columns if c != "_file"]
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
    after = new.where(F.col("_file").isin(files.added_data)) if files.added_data else new.where(F.lit(False))
    return ChangedRows(before=before.select(*old_columns), after=after.select(*new_columns))
