"""The engine: full load and CDC apply for configured tables. Both shells call only this module.

Per table and batch the flow is: read files -> typed changes -> cleaning -> validation ->
latest change per key -> one MERGE (one Iceberg commit that also records the applied files).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdclake.bronze import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.changes import (
    COMMIT_TS,
    ERROR,
    OP,
    apply_cleaning,
    data_columns,
    flag_missing_keys,
    latest_change_per_key,
    merge_statement,
    to_changes,
)
from cdclake.config import PipelineConfig, TableConfig
from cdclake.errors import BadInputError, BronzeError, FullLoadPendingError
from cdclake.reader import FILE_ORDINAL, ROW_POSITION, read_files
from cdclake.silver import (
    KIND_CDC,
    SilverTable,
    add_missing_columns,
    append_rows,
    ensure_database,
    ledger_properties,
    merge_rows,
    read_ledger,
    replace_table,
    table_exists,
)
from cdclake.storage import BronzeStore, list_bronze

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("cdclake")

APPEND_ONLY_OP_COLUMN = "cdc_operation"
_MAX_REPORTED_ERRORS = 10


@dataclass(frozen=True)
class Engine:
    """Everything the engine needs, built once by a shell (Glue job, CLI, tests)."""

    spark: SparkSession
    config: PipelineConfig
    store: BronzeStore
    catalog: str = "silver"

    def silver_table(self, table: TableConfig) -> SilverTable:
        return SilverTable(self.catalog, self.config.database, table.target)


@dataclass
class TableReport:
    """The outcome of one full load or CDC batch for one table (the business metrics)."""

    table: str
    kind: str
    files_applied: int = 0
    files_skipped: int = 0  # already in the ledger
    bytes_applied: int = 0
    changes_read: int = 0
    inserted_or_updated: int = 0
    deleted: int = 0
    columns_added: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""


@dataclass
class RunReport:
    tables: list[TableReport] = field(default_factory=list)
    skipped_tables: list[str] = field(default_factory=list)  # reasons
    unconfigured: list[str] = field(default_factory=list)  # bronze sources with no configuration
    unrecognised: list[str] = field(default_factory=list)  # bronze keys that are not DMS files


# ------------------------------------------------------------------------------- transforms


def _prepared_changes(engine: Engine, table: TableConfig, files: Sequence[BronzeFile]) -> DataFrame:
    raw = read_files(engine.spark, engine.store, engine.config.bronze, table, files)
    changes = to_changes(raw, engine.config.bronze, table)
    changes = apply_cleaning(changes, table.clean, table.source)
    return flag_missing_keys(changes, table.silver_key())


def _raise_on_bad_rows(changes: DataFrame, files: Sequence[BronzeFile], table: TableConfig) -> None:
    """Fail loudly, naming file, row and reason, if any change cannot be applied.

    The common case (no bad row) costs one scan without a shuffle; row numbers are worked out
    only for the files that hold bad rows.
    """
    from pyspark.sql import functions as F

    bad = changes.where(F.col(ERROR).isNotNull()).select(FILE_ORDINAL, ROW_POSITION, ERROR)
    sample = bad.limit(_MAX_REPORTED_ERRORS).collect()
    if not sample:
        return
    ordinals = sorted({r[FILE_ORDINAL] for r in sample})
    # Row ids grow with the position inside a file, so a file's first id gives its row numbers.
    first_ids = {
        r[FILE_ORDINAL]: r["first"]
        for r in changes.where(F.col(FILE_ORDINAL).isin(ordinals))
        .groupBy(FILE_ORDINAL)
        .agg(F.min(ROW_POSITION).alias("first"))
        .collect()
    }
    ordered = sorted(sample, key=lambda r: (r[FILE_ORDINAL], r[ROW_POSITION]))
    details = "; ".join(
        f"{files[r[FILE_ORDINAL]].key} data row {r[ROW_POSITION] - first_ids[r[FILE_ORDINAL]] + 1}: {r[ERROR]}"
        for r in ordered
    )
    raise BadInputError(f"Table {table.source}: rows that cannot be applied: {details}.")


def _silver_rows(changes: DataFrame, table: TableConfig) -> DataFrame:
    """Changes -> the rows silver stores (append-only tables keep the operation)."""
    from pyspark.sql import functions as F

    if table.append_only:
        return changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN
        )
    latest = latest_change_per_key(changes, table.silver_key())
    return latest.where(F.col(OP) != "D").select(*data_columns(changes))


# ------------------------------------------------------------------------------- full load


def _skip_reason(table: TableConfig) -> str | None:
    if table.is_keyed or table.append_only:
        return None
    return (
        f"{table.source} has no primary key: skipped (declare primary_key, or append_only: true "
        "to keep every change row)"
    )


def full_load_table(engine: Engine, table: TableConfig, listing: BronzeListing, reload: bool = False) -> TableReport:
    """Create (or, with ``reload``, replace) the silver table from the table's LOAD files.

    Idempotent: a table whose ledger shows a full load is left alone unless ``reload`` is set,
    and a replace is one atomic commit, so re-running never doubles rows.
    """
    started = time.monotonic()
    silver = engine.silver_table(table)
    report = TableReport(table=table.source, kind="full-load")
    if not reload and read_ledger(engine.spark, silver).full_load_done:
        report.note = "already loaded"
        return report
    files = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    if not files and not table.columns:
        report.note = "no LOAD files and no declared columns: the table is created by its first CDC batch"
        return report
    log.info("full load table=%s files=%d", table.source, len(files))
    changes = _prepared_changes(engine, table, files) if files else _empty_changes(engine, table)
    _raise_on_bad_rows(changes, files, table)
    rows = _silver_rows(changes, table)
    ensure_database(engine.spark, engine.catalog, engine.config.database)
    replace_table(engine.spark, silver, rows, [f.key for f in files])
    report.files_applied = len(files)
    report.bytes_applied = sum(f.size for f in files)
    report.inserted_or_updated = engine.spark.table(silver.identifier).count()
    report.seconds = time.monotonic() - started
    log.info("full load done table=%s rows=%d seconds=%.1f", table.source, report.inserted_or_updated, report.seconds)
    return report


def _empty_changes(engine: Engine, table: TableConfig) -> DataFrame:
    """Change rows with the declared columns and no data (a source table empty at full load)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from cdclake.layout import headerless_columns
    from cdclake.reader import CORRUPT_RECORD

    names = headerless_columns(engine.config.bronze, table, FileKind.FULL_LOAD)
    schema = StructType(
        [StructField(n, StringType(), True) for n in (*names, CORRUPT_RECORD)]
        + [StructField(FILE_ORDINAL, LongType(), True), StructField(ROW_POSITION, LongType(), True)]
    )
    raw = engine.spark.createDataFrame([], schema)
    changes = apply_cleaning(to_changes(raw, engine.config.bronze, table), table.clean, table.source)
    return flag_missing_keys(changes, table.silver_key())


# ------------------------------------------------------------------------------- CDC


def apply_cdc_batch(engine: Engine, table: TableConfig, files: Sequence[BronzeFile]) -> TableReport:
    """Apply one batch of CDC files of one table as one Iceberg commit; skip files already applied."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    silver = engine.silver_table(table)
    report = TableReport(table=table.source, kind="cdc")
    ledger = read_ledger(engine.spark, silver)
    pending = sorted({f for f in files if f.key not in ledger.applied})
    report.files_skipped = len(files) - len(pending)
    if not pending:
        report.note = "nothing new"
        return report
    if not ledger.full_load_done:
        # Creating the table from CDC alone would mark it loaded and its LOAD files would never
        # be applied; only a table that had no rows at full load (no LOAD files) starts from CDC.
        listing = list_bronze(engine.store, f"{table.source_schema}/{table.source_table}")
        if listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD):
            raise FullLoadPendingError(
                f"Table {table.source} has full-load files in bronze that are not applied yet: "
                "run the full load before its CDC files."
            )
    log.info(
        "cdc batch table=%s files=%d first=%s last=%s", table.source, len(pending), pending[0].name, pending[-1].name
    )
    changes = _prepared_changes(engine, table, pending).cache()
    try:
        _raise_on_bad_rows(changes, pending, table)
        report.changes_read = changes.count()
        rows = _cdc_rows(changes, table).cache()
        if not table_exists(engine.spark, silver):
            ensure_database(engine.spark, engine.catalog, engine.config.database)
            replace_table(engine.spark, silver, rows.limit(0).drop(OP, COMMIT_TS), [])
        report.columns_added = add_missing_columns(engine.spark, silver, rows.drop(OP, COMMIT_TS))
        stats = rows.groupBy(OP).agg(F.count(F.lit(1)).alias("n"), F.max(COMMIT_TS).alias("ts")).collect()
        counts = {r[OP]: r["n"] for r in stats}
        latest_ts = max((r["ts"] for r in stats if r["ts"]), default=None)
        report.deleted = counts.get("D", 0) if not table.append_only else 0
        report.inserted_or_updated = sum(counts.values()) - report.deleted
        ledger_entry = ledger_properties(KIND_CDC, [f.key for f in pending], latest_ts)
        if table.append_only:
            append_rows(engine.spark, silver, rows.drop(OP, COMMIT_TS), ledger_entry)
        else:
            view = f"cdclake_changes_{table.target}"
            rows.createOrReplaceTempView(view)
            statement = merge_statement(silver.identifier, view, table.silver_key(), data_columns(rows))
            merge_rows(engine.spark, statement, ledger_entry)
            engine.spark.catalog.dropTempView(view)
        rows.unpersist()
    finally:
        changes.unpersist()
    report.files_applied = len(pending)
    report.bytes_applied = sum(f.size for f in pending)
    report.seconds = time.monotonic() - started
    log.info(
        "cdc batch done table=%s upserts=%d deletes=%d seconds=%.1f",
        table.source, report.inserted_or_updated, report.deleted, report.seconds,
    )  # fmt: skip
    return report


def _cdc_rows(changes: DataFrame, table: TableConfig) -> DataFrame:
    """The MERGE source: the latest change per key with its operation (deletes included)."""
    from pyspark.sql import functions as F

    if table.append_only:
        return changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN, OP, COMMIT_TS
        )
    latest = latest_change_per_key(changes, table.silver_key())
    return latest.select(*data_columns(changes), OP, COMMIT_TS)


def group_by_table(
    engine: Engine, files: Iterable[BronzeFile], report: RunReport
) -> list[tuple[TableConfig, list[BronzeFile]]]:
    """CDC files per configured table in apply order; others are reported, never dropped silently."""
    grouped: dict[str, tuple[TableConfig, list[BronzeFile]]] = {}
    for file in sorted(files):
        table = engine.config.table_for_source(file.schema, file.table)
        if table is None:
            if file.source not in report.unconfigured:
                report.unconfigured.append(file.source)
            continue
        if reason := _skip_reason(table):
            if reason not in report.skipped_tables:
                report.skipped_tables.append(reason)
            continue
        grouped.setdefault(table.source, (table, []))[1].append(file)
    return list(grouped.values())


def apply_cdc_files(engine: Engine, files: Sequence[BronzeFile]) -> RunReport:
    """Apply an explicit set of CDC files (a state-machine manifest): one commit per table."""
    report = RunReport()
    for table, table_files in group_by_table(engine, files, report):
        report.tables.append(apply_cdc_batch(engine, table, table_files))
    _warn(report)
    return report


def files_from_keys(store: BronzeStore, keys: Iterable[str], sizes: dict[str, int] | None = None) -> list[BronzeFile]:
    """Turn keys or full URIs (``s3://bucket/prefix/...`` or paths under the store root) into files."""
    files = []
    root = store.root.rstrip("/") + "/"
    for key in keys:
        relative = key[len(root) :] if key.startswith(root) else key.lstrip("/")
        if not store.exists(relative):
            raise BronzeError(f"The CDC file {key} is not in bronze ({store.root}).")
        files.append(parse_key(relative, (sizes or {}).get(key, 0)))
    return files


# ------------------------------------------------------------------------------- whole run


def run(engine: Engine, tables: Sequence[TableConfig] | None = None) -> RunReport:
    """Full load where a table has none yet, then every pending CDC file, in batches."""
    listing = list_bronze(engine.store)
    report = RunReport(unrecognised=list(listing.unrecognised))
    selected = list(tables or engine.config.tables)
    for table in selected:
        if reason := _skip_reason(table):
            report.skipped_tables.append(reason)
            continue
        loaded = full_load_table(engine, table, listing)
        if loaded.note != "already loaded":
            report.tables.append(loaded)
    cdc_files = [f for f in listing.files if f.kind is FileKind.CDC]
    wanted = {t.source for t in selected}
    grouped = group_by_table(engine, cdc_files, report)
    for table, files in grouped:
        if table.source not in wanted:
            continue
        ledger = read_ledger(engine.spark, engine.silver_table(table))
        pending = [f for f in files if f.key not in ledger.applied]
        size = engine.config.max_files_per_batch
        for start in range(0, len(pending), size):
            report.tables.append(apply_cdc_batch(engine, table, pending[start : start + size]))
    unconfigured_sources = sorted(
        f"{s}.{t}" for s, t in listing.sources() if engine.config.table_for_source(s, t) is None
    )
    report.unconfigured = sorted(set(report.unconfigured) | set(unconfigured_sources))
    _warn(report)
    return report


def _warn(report: RunReport) -> None:
    for reason in report.skipped_tables:
        log.warning("table skipped: %s", reason)
    for source in report.unconfigured:
        log.warning("bronze holds files for %s, which is not configured: left in place, not applied", source)
    for reason in report.unrecognised:
        log.warning("bronze key is not a DMS data file: %s", reason)
