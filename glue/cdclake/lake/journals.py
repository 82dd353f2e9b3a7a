"""The journals beside the silver tables: quarantine (files and rows), schema changes, tombstones."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdclake.lake.tables import SilverTable, ensure_table, merge_frame, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOMBSTONE_SUFFIX = "__tombstones"
SCHEMA_CHANGES_TABLE = "cdclake_schema_changes"
QUARANTINE_TABLE = "cdclake_quarantine"
QUARANTINE_ROWS_TABLE = "cdclake_quarantine_rows"


def tombstones_of(table: SilverTable) -> SilverTable:
    """Where the delete tombstones of ``table`` live: ``<table>__tombstones`` beside it."""
    return SilverTable(table.catalog, table.database, f"{table.name}{TOMBSTONE_SUFFIX}")


def _journal(
    spark: SparkSession, catalog: str, database: str, name: str, schema: str, rows: list[tuple[Any, ...]]
) -> None:
    journal = SilverTable(catalog, database, name)
    frame = spark.createDataFrame(rows, schema)
    ensure_table(spark, journal, frame)
    frame.writeTo(journal.identifier).append()


def record_schema_changes(spark: SparkSession, table: SilverTable, changes: Sequence[str], at: datetime) -> None:
    """Append to ``cdclake_schema_changes``: every change made to a silver table's schema."""
    rows = [(table.name, change, at) for change in changes]
    schema = "silver_table string, change string, changed_at timestamp"
    _journal(spark, table.catalog, table.database, SCHEMA_CHANGES_TABLE, schema, rows)


def record_quarantine(spark: SparkSession, table: SilverTable, files: Sequence[str], reason: str, at: datetime) -> None:
    """Record files in ``cdclake_quarantine``: held back (not applied by later runs) until a replay.

    Idempotent per (table, file): recording the same file again keeps one entry.
    """
    journal = SilverTable(table.catalog, table.database, QUARANTINE_TABLE)
    frame = spark.createDataFrame(
        [(table.name, key, reason, at) for key in files],
        "silver_table string, file_key string, reason string, quarantined_at timestamp",
    )
    ensure_table(spark, journal, frame)
    merge_frame(
        spark,
        frame,
        lambda view: (
            f"MERGE INTO {journal.identifier} t USING {view} s "
            "ON t.silver_table = s.silver_table AND t.file_key = s.file_key "
            "WHEN MATCHED THEN UPDATE SET t.reason = s.reason, t.quarantined_at = s.quarantined_at "
            "WHEN NOT MATCHED THEN INSERT *"
        ),
    )


def quarantined_files(spark: SparkSession, table: SilverTable) -> frozenset[str]:
    """The files of ``table`` held in quarantine (applied only by an explicit replay)."""
    journal = SilverTable(table.catalog, table.database, QUARANTINE_TABLE)
    if not table_exists(spark, journal):
        return frozenset()
    rows = spark.table(journal.identifier).where(f"silver_table = '{table.name}'").select("file_key").collect()
    return frozenset(r["file_key"] for r in rows)


def release_quarantine(spark: SparkSession, table: SilverTable, files: Sequence[str]) -> None:
    """Forget quarantine entries of files a replay has now applied."""
    journal = SilverTable(table.catalog, table.database, QUARANTINE_TABLE)
    if files and table_exists(spark, journal):
        keys = ", ".join("'" + k.replace("'", "''") + "'" for k in files)
        spark.sql(f"DELETE FROM {journal.identifier} WHERE silver_table = '{table.name}' AND file_key IN ({keys})")


def record_quarantined_rows(spark: SparkSession, table: SilverTable, rows: DataFrame) -> None:
    """Keep bad rows in ``cdclake_quarantine_rows`` (file_key, row_number, raw, reason, quarantined_at).

    Idempotent per (table, file, row): a re-run of the same batch does not duplicate them.
    """
    journal = SilverTable(table.catalog, table.database, QUARANTINE_ROWS_TABLE)
    from pyspark.sql import functions as F

    frame = rows.select(
        F.lit(table.name).alias("silver_table"), "file_key", "row_number", "raw", "reason", "quarantined_at"
    )
    ensure_table(spark, journal, frame)
    merge_frame(
        spark,
        frame,
        lambda view: (
            f"MERGE INTO {journal.identifier} t USING {view} s "
            "ON t.silver_table = s.silver_table AND t.file_key = s.file_key AND t.row_number = s.row_number "
            "WHEN NOT MATCHED THEN INSERT *"
        ),
    )
