"""Silver snapshots a mart reads: pinning, lineage, and the rows that changed between two snapshots.

Iceberg's changelog scan (``create_changelog_view``) refuses tables with delete files, and silver
tables are merge-on-read, so the changed rows come from a diff of the two snapshots' files instead:
rows of data files added since the older snapshot (after-images), and rows of the older snapshot
whose positions were deleted since, or whose data file was removed (before-images). Compaction
between the two shows up as the same rows on both sides: more groups recomputed, same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.lake.ledger import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_DATA, _POSITION_DELETES, _EQUALITY_DELETES = 0, 1, 2


class IncrementalUnavailable(Exception):
    """The change between two snapshots cannot be read as rows; the caller recomputes in full."""


@dataclass(frozen=True)
class ChangedRows:
    before: DataFrame  # rows of the older snapshot that were deleted or replaced since
    after: DataFrame  # rows of the newer snapshot that were written since


def current_snapshot(spark: SparkSession, table: SilverTable) -> int | None:
    """The snapshot id of ``table``'s main branch (None: missing table or no commit yet)."""
    if not table_exists(spark, table):
        return None
    row = spark.sql(f"SELECT snapshot_id FROM {table.metadata('refs')} WHERE name = 'main'").first()
    return int(row["snapshot_id"]) if row else None


def latest_commit_ts_at(spark: SparkSession, table: SilverTable, snapshot_id: int) -> str | None:
    """The newest source commit time applied up to ``snapshot_id`` (``cdclake.latest-commit-ts``)."""
    row = spark.sql(
        f"""
        SELECT max(s.summary['{LATEST_COMMIT_TS_PROPERTY}']) AS latest
        FROM {table.metadata("snapshots")} s
        WHERE s.committed_at <= (SELECT committed_at FROM {table.metadata("snapshots")}
                                 WHERE snapshot_id = {int(snapshot_id)})
        """
    ).first()
    return row["latest"] if row else None


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


def _is_ancestor(spark: SparkSession, table: SilverTable, snapshot_id: int) -> bool:
    row = spark.sql(
        f"SELECT count(*) AS n FROM {table.metadata('history')} "
        f"WHERE snapshot_id = {int(snapshot_id)} AND is_current_ancestor"
    ).first()
    return bool(row and row["n"])


def _files(spark: SparkSession, table: SilverTable, snapshot_id: int) -> dict[int, set[str]]:
    rows = spark.sql(f"SELECT content, file_path FROM {table.metadata('files')} VERSION AS OF {int(snapshot_id)}")
    result: dict[int, set[str]] = {_DATA: set(), _POSITION_DELETES: set(), _EQUALITY_DELETES: set()}
    for row in rows.collect():
        result.setdefault(int(row["content"]), set()).add(row["file_path"])
    return result


def changed_rows(spark: SparkSession, table: SilverTable, older: int, newer: int) -> ChangedRows:
    """The rows that changed in ``table`` between snapshots ``older`` and ``newer`` (``newer`` current).

    Columns: the table's own. Raises ``IncrementalUnavailable`` when ``older`` is not an ancestor
    (a rollback or a replace), has expired, or a snapshot holds equality deletes.
    """
    from pyspark.sql import functions as F

    if not _is_ancestor(spark, table, older):
        raise IncrementalUnavailable(f"{table.name}: the snapshot last reflected is no longer in its lineage")
    try:
        before_files, after_files = _files(spark, table, older), _files(spark, table, newer)
    except Exception as exc:
        raise IncrementalUnavailable(f"{table.name}: cannot read the snapshot last reflected ({exc})") from None
    if before_files[_EQUALITY_DELETES] or after_files[_EQUALITY_DELETES]:
        raise IncrementalUnavailable(f"{table.name} has equality delete files")
    added = sorted(after_files[_DATA] - before_files[_DATA])
    removed = sorted(before_files[_DATA] - after_files[_DATA])
    new_deletes = sorted(after_files[_POSITION_DELETES] - before_files[_POSITION_DELETES])

    def paths(values: list[str]) -> DataFrame:
        return F.broadcast(spark.createDataFrame([(v,) for v in values], "path string"))

    old = spark.sql(f"SELECT *, _file, _pos FROM {table.identifier} VERSION AS OF {int(older)}")
    new = spark.sql(f"SELECT *, _file, _pos FROM {table.identifier} VERSION AS OF {int(newer)}")
    columns = [c for c in old.columns if c not in ("_file", "_pos")]
    before = old.join(paths(removed), old["_file"] == F.col("path"), "left_semi")
    if new_deletes:
        deleted_now = (
            spark.sql(
                f"SELECT file_path, pos, delete_file_path FROM {table.metadata('position_deletes')} "
                f"VERSION AS OF {int(newer)}"
            )
            .join(paths(new_deletes), F.col("delete_file_path") == F.col("path"), "left_semi")
            .select("file_path", "pos")
        )
        deleted_before = spark.sql(
            f"SELECT file_path, pos FROM {table.metadata('position_deletes')} VERSION AS OF {int(older)}"
        )
        newly_deleted = deleted_now.join(deleted_before, ["file_path", "pos"], "left_anti")
        before = before.unionByName(
            old.join(
                newly_deleted,
                (old["_file"] == newly_deleted["file_path"]) & (old["_pos"] == newly_deleted["pos"]),
                "left_semi",
            )
        )
    after = new.join(paths(added), new["_file"] == F.col("path"), "left_semi")
    new_columns = [c for c in new.columns if c not in ("_file", "_pos")]
    return ChangedRows(before=before.select(*columns), after=after.select(*new_columns))
