"""The journals beside the silver tables: quarantine (files and rows), schema changes, tombstones."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import sql_string
from cdclake.lake.tables import SilverTable, ensure_table, merge_frame, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOMBSTONE_SUFFIX = "__tombstones"
SCHEMA_CHANGES_TABLE = "cdclake_schema_changes"
QUARANTINE_TABLE = "cdclake_quarantine"
QUARANTINE_ROWS_TABLE = "cdclake_quarantine_rows"


# The journals are shared by every table of a database: the tables of one run, worked on
# concurrently, write them one at a time (Iceberg would otherwise reject one of two concurrent
# MERGEs into the same journal).
_JOURNAL_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


@contextmanager
def _journal_write(journal: SilverTable) -> Iterator[None]:
    with _LOCKS_LOCK:
        lock = _JOURNAL_LOCKS.setdefault(journal.identifier, threading.Lock())
    with lock:
        yield


def tombstones_of(table: SilverTable) -> SilverTable:
    """Where the delete tombstones of ``table`` live: ``<table>__tombstones`` beside it."""
    return SilverTable(table.catalog, table.database, f"{table.name}{TOMBSTONE_SUFFIX}")


def _journal(
    spark: SparkSession, catalog: str, database: str, name: str, schema: str, rows: list[tuple[Any, ...]]
) -> None:
    journal = SilverTable(catalog, database, name)
    frame = spark.createDataFrame(rows, schema)
    with _journal_write(journal):
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
    with _journal_write(journal):
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


def quarantined_files_by_table(spark: SparkSession, catalog: str, database: str) -> dict[str, frozenset[str]]:
    """Every table's files held in quarantine in ``database`` (one read of the journal)."""
    journal = SilverTable(catalog, database, QUARANTINE_TABLE)
    if not table_exists(spark, journal):
        return {}
    held: dict[str, set[str]] = {}
    for row in spark.table(journal.identifier).select("silver_table", "file_key").collect():
        held.setdefault(row["silver_table"], set()).add(row["file_key"])
    return {table: frozenset(keys) for table, keys in held.items()}


def release_quarantine(spark: SparkSession, table: SilverTable, files: Sequence[str]) -> None:
    """Forget quarantine entries of files a replay has now applied."""
    journal = SilverTable(table.catalog, table.database, QUARANTINE_TABLE)
    if files and table_exists(spark, journal):
        keys = ", ".join(sql_string(k) for k in files)
        with _journal_write(journal):
            where = f"silver_table = {sql_string(table.name)} AND file_key IN ({keys})"
            spark.sql(f"DELETE FROM {journal.identifier} WHERE {where}")


def record_quarantined_rows(spark: SparkSession, table: SilverTable, rows: DataFrame) -> None:
    """Keep bad rows in ``cdclake_quarantine_rows`` (file_key, row_number, raw, reason, quarantined_at).

    Idempotent per (table, file, row): a re-run of the same batch does not duplicate them.
    """
    journal = SilverTable(table.catalog, table.database, QUARANTINE_ROWS_TABLE)
    from pyspark.sql import functions as F

    frame = rows.select(
        F.lit(table.name).alias("silver_table"), "file_key", "row_number", "raw", "reason", "quarantined_at"
    )
    with _journal_write(journal):
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
