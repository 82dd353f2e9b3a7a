"""Silver Iceberg tables at the edge: create, merge, append, and the applied-files ledger.

The ledger lives in the snapshot summaries of the very commits that apply the files
(``cdclake.kind`` and ``cdclake.files``), set through Iceberg's ``CommitMetadata``. A crash after a
commit and before the queue is acknowledged therefore cannot lose the record of what was applied,
and re-applying the same files is recognised and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cdclake.engine.schema import SchemaPlan
from cdclake.identifiers import quote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

KIND_PROPERTY = "cdclake.kind"
FILES_PROPERTY = "cdclake.files"
LATEST_COMMIT_TS_PROPERTY = "cdclake.latest-commit-ts"
KIND_FULL_LOAD = "full-load"
# A full load's data commit, before the checks that follow it: the lineage says "not loaded"
# until the full-load commit after it, so a crash in between makes the next run load again.
KIND_FULL_LOAD_STAGED = "full-load-staged"
KIND_CDC = "cdc"
TOMBSTONE_SUFFIX = "__tombstones"
SCHEMA_CHANGES_TABLE = "cdclake_schema_changes"
QUARANTINE_TABLE = "cdclake_quarantine"
QUARANTINE_ROWS_TABLE = "cdclake_quarantine_rows"
LEDGER_ARCHIVE_TABLE = "cdclake_ledger"

# Format v2 with merge-on-read row-level operations: a CDC batch writes delete files instead of
# rewriting data files, which keeps MERGE cost proportional to the changes. Maintenance compacts.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    "write.distribution-mode": "hash",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


@dataclass(frozen=True)
class SilverTable:
    catalog: str
    database: str
    name: str

    @property
    def identifier(self) -> str:
        return f"{quote(self.catalog)}.{quote(self.database)}.{quote(self.name)}"

    def metadata(self, table: str) -> str:
        return f"{self.identifier}.{quote(table)}"


@dataclass(frozen=True)
class LedgerState:
    """What the current snapshot lineage says about one table."""

    full_load_done: bool
    applied: frozenset[str]  # bronze keys applied since (and including) the last full load
    last_file: str | None


def commit_with_properties(spark: SparkSession, properties: dict[str, str], action: Callable[[], T]) -> T:
    """Run ``action`` so that every Iceberg commit it makes carries ``properties`` in its summary.

    Iceberg keeps the properties in a thread-local of the JVM thread that runs the write; py4j's
    pinned threads run the Python callback's Spark calls on that same JVM thread.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark.sparkContext._jvm
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    results: list[T] = []
    failures: list[BaseException] = []

    class _Callable:
        def call(self) -> None:
            # Keep the Python exception: raised through py4j it would come back as a bare Java error.
            try:
                results.append(action())
            except BaseException as exc:
                failures.append(exc)

        class Java:
            implements = ("java.util.concurrent.Callable",)

    java_props = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_props.put(key, value)
    runtime_exception = jvm.java.lang.Class.forName("java.lang.RuntimeException")
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(java_props, _Callable(), runtime_exception)
    if failures:
        raise failures[0]
    return results[0]


def ledger_properties(kind: str, files: Sequence[str], latest_commit_ts: str | None = None) -> dict[str, str]:
    """Snapshot-summary properties recording a batch: its kind, files and newest commit time."""
    properties = {KIND_PROPERTY: kind, FILES_PROPERTY: json.dumps(list(files), separators=(",", ":"))}
    if latest_commit_ts:
        properties[LATEST_COMMIT_TS_PROPERTY] = latest_commit_ts
    return properties


def table_exists(spark: SparkSession, table: SilverTable) -> bool:
    return bool(spark.catalog.tableExists(f"{table.catalog}.{table.database}.{table.name}"))


def ensure_database(spark: SparkSession, catalog: str, database: str) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(catalog)}.{quote(database)}")


def newest_first(snapshots: Sequence[Any]) -> list[Any]:
    """Order a lineage of snapshots (rows with ``snapshot_id`` and ``parent_id``) from the head back."""
    by_id = {row["snapshot_id"]: row for row in snapshots}
    parents = {row["parent_id"] for row in snapshots}
    heads = [row for row in snapshots if row["snapshot_id"] not in parents]
    ordered: list[Any] = []
    current = heads[0] if heads else None
    while current is not None:
        ordered.append(current)
        current = by_id.get(current["parent_id"])
    return ordered


def _lineage(spark: SparkSession, table: SilverTable) -> list[Any]:
    """Ancestors of the current snapshot, newest first, with their ledger properties."""
    rows = spark.sql(
        f"""
        SELECT s.snapshot_id, s.parent_id, s.committed_at, s.summary['{KIND_PROPERTY}'] AS kind,
               s.summary['{FILES_PROPERTY}'] AS files
        FROM {table.metadata("snapshots")} s
        JOIN {table.metadata("history")} h ON s.snapshot_id = h.snapshot_id
        WHERE h.is_current_ancestor
        """
    ).collect()
    return newest_first(rows)


def _ledger_archive(table: SilverTable) -> SilverTable:
    return SilverTable(table.catalog, table.database, LEDGER_ARCHIVE_TABLE)


def read_ledger(spark: SparkSession, table: SilverTable) -> LedgerState:
    """Walk the current snapshot lineage back to the last full load, collecting applied files.

    Only ancestors of the current snapshot count: after a rollback, files applied by the
    rolled-back snapshots are pending again. Entries of snapshots that maintenance expired come
    from the ledger archive.
    """
    if not table_exists(spark, table):
        return LedgerState(full_load_done=False, applied=frozenset(), last_file=None)
    applied: set[str] = set()
    last_file: str | None = None
    full_load_done = False
    for row in _lineage(spark, table):
        if row["kind"] == KIND_FULL_LOAD_STAGED:
            # A full load that never finished: whatever came before it no longer describes silver.
            return LedgerState(full_load_done=False, applied=frozenset(applied), last_file=last_file)
        if row["files"]:
            files = json.loads(row["files"])
            applied.update(files)
            if last_file is None and files:
                last_file = max(files)
        if row["kind"] == KIND_FULL_LOAD:
            full_load_done = True
            break
    archive = _ledger_archive(table)
    if not full_load_done and table_exists(spark, archive):
        for row in spark.table(archive.identifier).where(f"silver_table = '{table.name}'").collect():
            full_load_done = full_load_done or row["kind"] == KIND_FULL_LOAD
            if row["file_key"]:
                applied.add(row["file_key"])
    return LedgerState(full_load_done=full_load_done, applied=frozenset(applied), last_file=last_file)


def expiring_snapshots(spark: SparkSession, table: SilverTable, older_than: datetime, retain_last: int) -> list[Any]:
    """The lineage snapshots (back to the last full load) that expiry at ``older_than`` removes."""
    lineage = []
    for row in _lineage(spark, table):
        lineage.append(row)
        if row["kind"] == KIND_FULL_LOAD:
            break
    cutoff = older_than.replace(tzinfo=None)
    return [r for r in lineage[retain_last:] if r["committed_at"].replace(tzinfo=None) < cutoff]


def archive_ledger(spark: SparkSession, table: SilverTable, snapshots: Sequence[Any]) -> int:
    """Copy the ledger entries of ``snapshots`` into ``cdclake_ledger``; return how many.

    Idempotent, and done before the snapshots expire, so the record of applied files survives.
    """
    rows = [
        (table.name, key, row["kind"] or KIND_CDC, row["snapshot_id"])
        for row in snapshots
        for key in (json.loads(row["files"]) if row["files"] else []) or [""]
        if row["kind"]
    ]
    if not rows:
        return 0
    archive = _ledger_archive(table)
    frame = spark.createDataFrame(rows, "silver_table string, file_key string, kind string, snapshot_id bigint")
    ensure_table(spark, archive, frame)
    frame.createOrReplaceTempView("cdclake_new_ledger")
    spark.sql(
        f"MERGE INTO {archive.identifier} t USING cdclake_new_ledger s "
        "ON t.silver_table = s.silver_table AND t.file_key = s.file_key AND t.kind = s.kind "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark.catalog.dropTempView("cdclake_new_ledger")
    return len(rows)


def forget_archived_ledger(spark: SparkSession, table: SilverTable) -> None:
    """A new full load starts a new ledger: drop the archived entries of the old one."""
    archive = _ledger_archive(table)
    if table_exists(spark, archive):
        spark.sql(f"DELETE FROM {archive.identifier} WHERE silver_table = '{table.name}'")


def replace_table(
    spark: SparkSession, table: SilverTable, rows: DataFrame, files: Sequence[str], kind: str = KIND_FULL_LOAD
) -> None:
    """Create or atomically replace ``table`` with ``rows``: the full load, recorded in the ledger
    (as ``kind``: a staged load is recorded as done only by ``record_full_load`` after it)."""
    writer = rows.writeTo(table.identifier).using("iceberg")
    for key, value in TABLE_PROPERTIES.items():
        writer = writer.tableProperty(key, value)
    commit_with_properties(spark, ledger_properties(kind, files), writer.createOrReplace)


def record_full_load(spark: SparkSession, table: SilverTable, files: Sequence[str]) -> None:
    """Record a staged full load as done: a commit that adds no data, only the ledger entry."""
    empty = spark.table(table.identifier).limit(0)
    commit_with_properties(spark, ledger_properties(KIND_FULL_LOAD, files), empty.writeTo(table.identifier).append)


def silver_columns(spark: SparkSession, table: SilverTable) -> list[tuple[str, str]]:
    """(name, Spark SQL type) of each column of ``table``, in order."""
    return [(f.name, f.dataType.simpleString()) for f in spark.table(table.identifier).schema.fields]


def apply_schema_plan(spark: SparkSession, table: SilverTable, plan: SchemaPlan) -> None:
    """Add and widen columns (metadata-only Iceberg changes; no data is rewritten)."""
    for column, type_name in plan.add:
        spark.sql(f"ALTER TABLE {table.identifier} ADD COLUMN {quote(column)} {type_name}")
    for column, _old, new in plan.widen:
        spark.sql(f"ALTER TABLE {table.identifier} ALTER COLUMN {quote(column)} TYPE {new}")


def tombstones_of(table: SilverTable) -> SilverTable:
    """Where the delete tombstones of ``table`` live: ``<table>__tombstones`` beside it."""
    return SilverTable(table.catalog, table.database, f"{table.name}{TOMBSTONE_SUFFIX}")


def ensure_table(spark: SparkSession, table: SilverTable, empty: DataFrame) -> None:
    """Create ``table`` with ``empty``'s schema unless it exists (no ledger entry)."""
    if not table_exists(spark, table):
        writer = empty.limit(0).writeTo(table.identifier).using("iceberg")
        for key, value in TABLE_PROPERTIES.items():
            writer = writer.tableProperty(key, value)
        writer.create()


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
    frame.createOrReplaceTempView("cdclake_new_quarantine")
    spark.sql(
        f"MERGE INTO {journal.identifier} t USING cdclake_new_quarantine s "
        "ON t.silver_table = s.silver_table AND t.file_key = s.file_key "
        "WHEN MATCHED THEN UPDATE SET t.reason = s.reason, t.quarantined_at = s.quarantined_at "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark.catalog.dropTempView("cdclake_new_quarantine")


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
    frame.createOrReplaceTempView("cdclake_new_bad_rows")
    spark.sql(
        f"MERGE INTO {journal.identifier} t USING cdclake_new_bad_rows s "
        "ON t.silver_table = s.silver_table AND t.file_key = s.file_key AND t.row_number = s.row_number "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    spark.catalog.dropTempView("cdclake_new_bad_rows")


def merge_rows(spark: SparkSession, statement: str, ledger: dict[str, str]) -> None:
    """Run one MERGE statement as one Iceberg commit carrying the ``ledger`` properties."""
    commit_with_properties(spark, ledger, lambda: spark.sql(statement))


def append_rows(spark: SparkSession, table: SilverTable, rows: DataFrame, ledger: dict[str, str]) -> None:
    """Append ``rows`` as one commit carrying the ``ledger`` properties (append-only tables)."""
    commit_with_properties(spark, ledger, rows.writeTo(table.identifier).append)
