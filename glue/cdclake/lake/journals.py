"""The journals beside the silver tables: quarantine (files and rows), schema changes, tombstones."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.columns import TOMBSTONE_SUFFIX
from cdclake.identifiers import sql_string
from cdclake.lake.tables import SilverTable, ensure_table, merge_frame, table_exists, table_property

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA_CHANGES_TABLE = "cdclake_schema_changes"
QUARANTINE_TABLE = "cdclake_quarantine"
QUARANTINE_ROWS_TABLE = "cdclake_quarantine_rows"
DISMISSED_TABLE = "cdclake_quarantine_dismissed"
VERIFY_TABLE = "cdclake_verify"  # the verify job's results, one row per table and run (verify.log)
# On the tombstone table, an ISO 8601 UTC time: maintenance pruned the tombstones of deletes before it
# (``dms.horizon``).
PRUNED_BEFORE_PROPERTY = "cdclake.tombstones.pruned-before"


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


def _merge(
    spark: SparkSession, journal: SilverTable, frame: DataFrame, on: Sequence[str], clauses: str, create: bool = True
) -> None:
    """MERGE ``frame`` into ``journal`` matching rows on the columns ``on``, by the WHEN ``clauses`` (``t``: the
    journal, ``s``: the frame); ``create``: the journal is created with the frame's columns when missing."""
    matching = " AND ".join(f"t.{column} = s.{column}" for column in on)
    with _journal_write(journal):
        if create:
            ensure_table(spark, journal, frame)
        merge_frame(
            spark, frame, lambda view: f"MERGE INTO {journal.identifier} t USING {view} s ON {matching} {clauses}"
        )


_FILE_ENTRY = ("silver_table", "file_key")  # a quarantined file's entry
_ROW_ENTRY = (*_FILE_ENTRY, "row_number")  # a quarantined row's entry


def tombstones_of(table: SilverTable) -> SilverTable:
    """Where the delete tombstones of ``table`` live: ``<table>__tombstones`` beside it."""
    return SilverTable(table.catalog, table.database, f"{table.name}{TOMBSTONE_SUFFIX}")


def parse_pruned_before(value: str | None) -> datetime | None:
    """The tombstone table's ``cdclake.tombstones.pruned-before`` property (ISO 8601), None when absent."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def tombstones_pruned_before(spark: SparkSession, tombstones: SilverTable) -> datetime | None:
    """The newest cut maintenance pruned these tombstones at; None if never (or no tombstone table)."""
    return parse_pruned_before(table_property(spark, tombstones, PRUNED_BEFORE_PROPERTY))


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
    updated = "WHEN MATCHED THEN UPDATE SET t.reason = s.reason, t.quarantined_at = s.quarantined_at"
    _merge(spark, journal, frame, _FILE_ENTRY, f"{updated} WHEN NOT MATCHED THEN INSERT *")


def quarantined_files_by_table(spark: SparkSession, catalog: str, database: str) -> dict[str, frozenset[str]]:
    """Every table's files held in quarantine in ``database`` (one read of the journal)."""
    journal = SilverTable(catalog, database, QUARANTINE_TABLE)
    if not table_exists(spark, journal):
        return {}
    held: dict[str, set[str]] = {}
    for row in spark.table(journal.identifier).select("silver_table", "file_key").collect():
        held.setdefault(row["silver_table"], set()).add(row["file_key"])
    return {table: frozenset(keys) for table, keys in held.items()}


def files_with_quarantined_rows(spark: SparkSession, catalog: str, database: str) -> dict[str, frozenset[str]]:
    """Every table's files with rows held in ``cdclake_quarantine_rows`` (one read of the journal)."""
    journal = SilverTable(catalog, database, QUARANTINE_ROWS_TABLE)
    if not table_exists(spark, journal):
        return {}
    held: dict[str, set[str]] = {}
    for row in spark.table(journal.identifier).select("silver_table", "file_key").distinct().collect():
        held.setdefault(row["silver_table"], set()).add(row["file_key"])
    return {table: frozenset(keys) for table, keys in held.items()}


def _in_files(table: SilverTable, files: Sequence[str], alias: str = "") -> str:
    """SQL: a journal entry of ``table`` about one of ``files``."""
    keys = ", ".join(sql_string(k) for k in files)
    return f"{alias}silver_table = {sql_string(table.name)} AND {alias}file_key IN ({keys})"


def release_quarantine(spark: SparkSession, table: SilverTable, files: Sequence[str]) -> None:
    """Forget quarantine entries of files a replay has now applied."""
    journal = SilverTable(table.catalog, table.database, QUARANTINE_TABLE)
    if files and table_exists(spark, journal):
        with _journal_write(journal):
            spark.sql(f"DELETE FROM {journal.identifier} WHERE {_in_files(table, files)}")


def release_quarantined_rows(
    spark: SparkSession, table: SilverTable, files: Sequence[str], still_bad: DataFrame | None
) -> None:
    """Forget the quarantined rows of files a replay has applied again, except the rows that are
    still bad (``still_bad``: file_key, row_number; recorded again by the replay itself)."""
    journal = SilverTable(table.catalog, table.database, QUARANTINE_ROWS_TABLE)
    if not files or not table_exists(spark, journal):
        return
    from pyspark.sql import functions as F

    if still_bad is None:
        with _journal_write(journal):
            spark.sql(f"DELETE FROM {journal.identifier} WHERE {_in_files(table, files)}")
        return
    kept = still_bad.select(F.lit(table.name).alias("silver_table"), "file_key", "row_number")
    clauses = f"WHEN NOT MATCHED BY SOURCE AND {_in_files(table, files, 't.')} THEN DELETE"
    _merge(spark, journal, kept, _ROW_ENTRY, clauses, create=False)


def record_quarantined_rows(spark: SparkSession, table: SilverTable, rows: DataFrame) -> None:
    """Keep bad rows in ``cdclake_quarantine_rows`` (file_key, row_number, raw, reason, quarantined_at).

    Idempotent per (table, file, row): a re-run of the same batch does not duplicate them.
    """
    journal = SilverTable(table.catalog, table.database, QUARANTINE_ROWS_TABLE)
    from pyspark.sql import functions as F

    frame = rows.select(
        F.lit(table.name).alias("silver_table"), "file_key", "row_number", "raw", "reason", "quarantined_at"
    )
    _merge(spark, journal, frame, _ROW_ENTRY, "WHEN NOT MATCHED THEN INSERT *")


def dismiss_quarantine(
    spark: SparkSession, table: SilverTable, files: Sequence[str], why: str, at: datetime
) -> list[tuple[str, int, int]]:
    """Clear the quarantine entries (held files and bad rows) of ``files``, after recording each
    in ``cdclake_quarantine_dismissed`` (silver_table, file_key, files, rows, reason, why,
    dismissed_at): a dismissal is never silent. Returns (file_key, file entries, row entries)."""
    from pyspark.sql import functions as F

    if not files:
        return []
    entries: dict[str, tuple[int, int, str]] = {}
    for journal_name, column in ((QUARANTINE_TABLE, 0), (QUARANTINE_ROWS_TABLE, 1)):
        journal = SilverTable(table.catalog, table.database, journal_name)
        if not table_exists(spark, journal):
            continue
        found = (
            spark.table(journal.identifier)
            .where(F.expr(_in_files(table, files)))
            .groupBy("file_key")
            .agg(F.count(F.lit(1)).alias("n"), F.max_by("reason", "quarantined_at").alias("reason"))
            .collect()
        )
        for row in found:
            counts = list(entries.get(row["file_key"], (0, 0, row["reason"])))
            counts[column] = int(row["n"])
            entries[row["file_key"]] = (counts[0], counts[1], str(counts[2]))
    if not entries:
        return []
    record = [(table.name, key, n_files, n_rows, reason, why, at) for key, (n_files, n_rows, reason) in entries.items()]
    schema = (
        "silver_table string, file_key string, files int, rows int, reason string, why string, dismissed_at timestamp"
    )
    _journal(spark, table.catalog, table.database, DISMISSED_TABLE, schema, record)
    release_quarantine(spark, table, list(entries))
    release_quarantined_rows(spark, table, list(entries), None)
    return [(key, n_files, n_rows) for key, (n_files, n_rows, _) in sorted(entries.items())]
