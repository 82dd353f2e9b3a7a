"""The engine: full load and CDC apply for configured tables. Both shells call only this module.

Per table and batch the flow is: read files -> typed changes -> cleaning -> validation ->
latest change per key -> one MERGE (one Iceberg commit that also records the applied files).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.columns import (
    COMMIT_TS,
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_LATE,
    EFFECT_UPDATE,
    EFFECTS,
    FILE_INDEX,
    OP,
    RAW_LINE,
    ROW_POSITION,
    SILVER_ORDER,
    TOMBSTONE_DELETED_AT,
)
from cdclake.config import PipelineConfig, TableConfig
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.dms.reader import read_files
from cdclake.dms.store import BronzeStore, list_bronze
from cdclake.engine.changes import (
    apply_cleaning,
    classify_effects,
    data_columns,
    error_text,
    flag_missing_keys,
    has_error,
    latest_change_per_key,
    merge_statement,
    to_changes,
    tombstone_statement,
    unchanged_flags,
    with_silver_order,
)
from cdclake.engine.schema import SchemaPlan, plan_schema_change
from cdclake.errors import BadInputError, BronzeError, ConfigError, FullLoadPendingError
from cdclake.lake.tables import (
    KIND_CDC,
    KIND_FULL_LOAD_STAGED,
    SilverTable,
    append_rows,
    apply_schema_plan,
    ensure_database,
    ensure_table,
    forget_archived_ledger,
    ledger_properties,
    merge_rows,
    quarantined_files,
    read_ledger,
    record_full_load,
    record_quarantine,
    record_quarantined_rows,
    record_schema_changes,
    release_quarantine,
    replace_table,
    silver_columns,
    table_exists,
    tombstones_of,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("cdclake")

APPEND_ONLY_OP_COLUMN = "cdc_operation"
_MAX_REPORTED_ERRORS = 10
# The one-scan full load fails with this at its first bad row, for the careful path to take over.
_NEEDS_SCREENING = "cdclake: this full load holds rows that need screening"
# Up to this many bytes of change files, the batch's keys are broadcast to pick the stored rows
# they touch (a few tens of MB of keys at most: well within a 2 GB driver).
_SMALL_BATCH_BYTES = 128 * 1024 * 1024


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
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    deleted_missing: int = 0  # deletes of keys silver does not hold (tombstoned all the same)
    ignored_late: int = 0  # changes older than the stored row or the key's tombstone
    schema_changes: list[str] = field(default_factory=list)
    columns_dropped_at_source: list[str] = field(default_factory=list)
    quarantined_files: list[str] = field(default_factory=list)
    rows_quarantined: int = 0
    latest_commit_ts: str | None = None  # the newest source commit this batch applied
    files_held: int = 0  # in quarantine from an earlier run: applied only by a replay
    seconds: float = 0.0
    note: str = ""


@dataclass
class RunReport:
    tables: list[TableReport] = field(default_factory=list)
    skipped_tables: list[str] = field(default_factory=list)  # reasons
    unconfigured: list[str] = field(default_factory=list)  # bronze sources with no configuration
    unrecognised: list[str] = field(default_factory=list)  # bronze keys that are not DMS files

    @property
    def quarantined(self) -> list[TableReport]:
        """Batches that set files or rows aside."""
        return [t for t in self.tables if t.quarantined_files or t.rows_quarantined]


# ------------------------------------------------------------------------------- transforms


def _prepared_changes(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool = False
) -> DataFrame:
    raw = read_files(engine.spark, engine.store, engine.config.bronze, table, files)
    changes = to_changes(raw, engine.config.bronze, table)
    changes = with_silver_order(changes, {i: f.position for i, f in enumerate(files)}, full_load)
    changes = apply_cleaning(changes, table.clean, table.source)
    return flag_missing_keys(changes, table.silver_key())


@dataclass(frozen=True)
class RowCounts:
    """How many rows a read held, how many of them cannot be applied, and its earliest timestamp."""

    total: int
    bad: int
    earliest_commit_ts: str | None  # the smallest timestamp-column value (full load: its watermark)

    @staticmethod
    def columns() -> list[Column]:
        """The aggregates behind the counts, for a query of its own or an ``observe``."""
        from pyspark.sql import functions as F

        return [
            F.count(F.lit(1)).alias("total"),
            F.count_if(has_error()).alias("bad"),
            F.min(COMMIT_TS).alias("earliest"),
        ]

    @classmethod
    def of(cls, row: Any) -> RowCounts:
        return cls(int(row["total"]), int(row["bad"]), row["earliest"])


def _count_rows(changes: DataFrame) -> RowCounts:
    """Count a read in one scan; the scan also surfaces files Spark cannot read."""
    return RowCounts.of(changes.agg(*RowCounts.columns()).collect()[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _read_full_load(engine: Engine, table: TableConfig, files: Sequence[BronzeFile]) -> tuple[DataFrame, RowCounts]:
    """Read and count the LOAD files; unreadable ones stop the load, named one by one."""
    changes = _prepared_changes(engine, table, files, full_load=True)
    try:
        return changes, _count_rows(changes)
    except ConfigError:
        raise
    except Exception as failure:
        culprits = _unreadable_files(engine, table, files, full_load=True)
        if not culprits:
            raise failure
        details = "; ".join(f"{f.key}: {reason}" for f, reason in culprits)
        raise BadInputError(f"Table {table.source}: full-load files that cannot be read: {details}.") from None


def _unreadable_files(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool
) -> list[tuple[BronzeFile, str]]:
    """Read each file alone; the ones that fail, with the first line of why."""
    culprits = []
    for file in files:
        try:
            _count_rows(_prepared_changes(engine, table, [file], full_load))
        except ConfigError:
            raise
        except Exception as exc:
            culprits.append((file, _first_line(exc)))
    return culprits


def _bad_rows(changes: DataFrame, files: Sequence[BronzeFile]) -> DataFrame:
    """The rows that cannot be applied: file_key, row_number (1-based data row), raw, reason."""
    from pyspark.sql import functions as F

    bad = changes.where(has_error())
    # Row ids grow with the position inside a file, so a file's first id gives its row numbers.
    first_ids = (
        changes.join(bad.select(FILE_INDEX).distinct(), FILE_INDEX, "left_semi")
        .groupBy(FILE_INDEX)
        .agg(F.min(ROW_POSITION).alias("_cdc_first"))
    )
    keys = F.create_map(*[x for i, f in enumerate(files) for x in (F.lit(i), F.lit(f.key))])
    values = F.to_json(F.struct(*[F.col(c) for c in data_columns(changes)]))
    return bad.join(F.broadcast(first_ids), FILE_INDEX).select(
        F.element_at(keys, F.col(FILE_INDEX)).alias("file_key"),
        (F.col(ROW_POSITION) - F.col("_cdc_first") + 1).alias("row_number"),
        F.coalesce(F.col(RAW_LINE), values).alias("raw"),
        error_text().alias("reason"),
    )


def _screen_bad_rows(
    engine: Engine,
    table: TableConfig,
    changes: DataFrame,
    files: Sequence[BronzeFile],
    counts: RowCounts,
    report: TableReport,
) -> None:
    """Quarantine the bad rows of ``changes`` (a read of ``files``); fail loudly above the limit."""
    from pyspark.sql import functions as F

    if counts.bad == 0:
        return
    bad_rows = _bad_rows(changes, files)
    limit = engine.config.max_bad_row_ratio
    if counts.bad > limit * counts.total:
        sample = bad_rows.orderBy("file_key", "row_number").limit(_MAX_REPORTED_ERRORS).collect()
        details = "; ".join(f"{r['file_key']} data row {r['row_number']}: {r['reason']}" for r in sample)
        raise BadInputError(
            f"Table {table.source}: rows that cannot be applied: {details} ({counts.bad} of {counts.total} "
            f"rows, above quarantine.max_bad_row_ratio {limit:g}); nothing of this batch was applied."
        )
    stamped = bad_rows.withColumn("quarantined_at", F.lit(datetime.now(UTC)))
    record_quarantined_rows(engine.spark, engine.silver_table(table), stamped)
    report.rows_quarantined = counts.bad
    log.warning("rows quarantined table=%s rows=%d of=%d", table.source, counts.bad, counts.total)


def _silver_rows(changes: DataFrame, table: TableConfig, deduplicate: bool = True) -> DataFrame:
    """Changes -> the rows silver stores (append-only tables keep the operation); ``deduplicate``
    keeps each key's last change, which a caller that checks the keys afterwards can skip."""
    from pyspark.sql import functions as F

    if table.append_only:
        return changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN
        )
    latest = latest_change_per_key(changes, table.silver_key()) if deduplicate else changes
    return latest.where(F.col(OP) != "D").select(*data_columns(changes), SILVER_ORDER)


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
    and every replace is atomic, so re-running never doubles rows.

    The common case (every row valid, every key once) takes one scan of the files: the rows are
    written as a staged load while the scan counts them, the key check reads only the key
    columns back, and a commit without data records the load as done. A bad row or an
    unreadable file fails the scan before anything is committed; a repeated key is found after
    the staged commit (readers may see that key twice until the next commit). Either sends the
    load down the careful path: count, quarantine, de-duplicate, then one replace.
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
    ensure_database(engine.spark, engine.catalog, engine.config.database)
    if not (files and _full_load_in_one_scan(engine, table, files, listing, report)):
        _full_load_carefully(engine, table, files, listing, report)
    forget_archived_ledger(engine.spark, silver)
    tombstones = tombstones_of(silver)
    if table_exists(engine.spark, tombstones):
        engine.spark.sql(f"DELETE FROM {tombstones.identifier}")  # the new load is the truth now
    report.files_applied = len(files)
    report.bytes_applied = sum(f.size for f in files)
    report.inserted = engine.spark.table(silver.identifier).count()
    report.seconds = time.monotonic() - started
    log.info("full load done table=%s rows=%d seconds=%.1f", table.source, report.inserted, report.seconds)
    return report


def _full_load_in_one_scan(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], listing: BronzeListing, report: TableReport
) -> bool:
    """Load in one scan, assuming valid rows and unique keys; False (nothing recorded as loaded)
    when the assumption fails, for the careful path to take over."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    silver = engine.silver_table(table)
    observation = Observation("cdclake_full_load")
    changes = _prepared_changes(engine, table, files, full_load=True).observe(
        observation, F.count(F.lit(1)).alias("rows"), F.min(COMMIT_TS).alias("earliest")
    )
    # Fail the scan at the first bad row: nothing is committed and the careful path screens them.
    valid = changes.where(F.when(has_error(), F.raise_error(F.lit(_NEEDS_SCREENING))).otherwise(F.lit(True)))
    try:
        replace_table(
            engine.spark, silver, _silver_rows(valid, table, deduplicate=False), [f.key for f in files],
            kind=KIND_FULL_LOAD_STAGED,
        )  # fmt: skip
    except ConfigError:
        raise
    except Exception as failure:
        log.info("full load table=%s takes the careful path: %s", table.source, _first_line(failure))
        return False
    stats = observation.get
    if not table.append_only and _has_repeated_keys(engine.spark, silver, table.silver_key()):
        log.warning("full load table=%s: a key occurs more than once; keeping each key's last row", table.source)
        return False
    superseded = superseded_cdc_files(listing, table, stats["earliest"])
    record_full_load(engine.spark, silver, [f.key for f in (*files, *superseded)])
    report.changes_read = stats["rows"]
    report.files_skipped = len(superseded)
    return True


def _has_repeated_keys(spark: SparkSession, silver: SilverTable, key: Sequence[str]) -> bool:
    """Whether a key occurs twice in ``silver`` (a scan of the key columns only)."""
    from pyspark.sql import functions as F

    counts = spark.table(silver.identifier).groupBy(*key).agg(F.count(F.lit(1)).alias("_cdc_rows"))
    return bool(counts.where(F.col("_cdc_rows") > 1).limit(1).collect())


def _full_load_carefully(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], listing: BronzeListing, report: TableReport
) -> None:
    """Count and screen the rows (bad ones to quarantine), keep each key's last row, one replace."""
    silver = engine.silver_table(table)
    superseded: list[BronzeFile] = []
    if files:
        changes, counts = _read_full_load(engine, table, files)
        _screen_bad_rows(engine, table, changes, files, counts, report)
        changes = changes.where(~has_error())
        report.changes_read = counts.total
        superseded = superseded_cdc_files(listing, table, counts.earliest_commit_ts)
    else:
        changes = _empty_changes(engine, table)
    replace_table(engine.spark, silver, _silver_rows(changes, table), [f.key for f in (*files, *superseded)])
    report.files_skipped = len(superseded)


def superseded_cdc_files(listing: BronzeListing, table: TableConfig, watermark: str | None) -> list[BronzeFile]:
    """CDC files a full load already contains: those written before its earliest row was read.

    A CDC file is named by the time DMS wrote it, after every change in it was committed; a file
    written before the load's timestamp (the transfer time, or the task start time with
    UseTaskStartTimeForFullLoadTimestamp) holds only changes the load already reflects. They are
    recorded as applied with the load, so a reload never replays older changes over newer rows.
    Without a timestamp column there is no watermark and no file is superseded.
    """
    if not watermark:
        return []
    digits = "".join(ch for ch in watermark if ch.isdigit())
    stamp = f"{digits[:8]}-{digits[8:18]}"  # the yyyyMMdd-HHmmssffff form of DMS CDC file names
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    return [f for f in cdc if f.sort_key[2] < stamp]


def _empty_changes(engine: Engine, table: TableConfig) -> DataFrame:
    """Change rows with the declared columns and no data (a source table empty at full load)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from cdclake.columns import CORRUPT_RECORD
    from cdclake.dms.layout import headerless_columns

    names = headerless_columns(engine.config.bronze, table, FileKind.FULL_LOAD)
    schema = StructType(
        [StructField(n, StringType(), True) for n in (*names, CORRUPT_RECORD)]
        + [StructField(FILE_INDEX, LongType(), True), StructField(ROW_POSITION, LongType(), True)]
    )
    raw = engine.spark.createDataFrame([], schema)
    changes = with_silver_order(to_changes(raw, engine.config.bronze, table), {}, full_load=True)
    changes = apply_cleaning(changes, table.clean, table.source)
    return flag_missing_keys(changes, table.silver_key())


# ------------------------------------------------------------------------------- CDC


def apply_cdc_batch(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], force: bool = False
) -> TableReport:
    """Apply one batch of CDC files of one table as one Iceberg commit; skip files already applied.

    Keyed tables: the latest change per key is compared with the stored row and the tombstones
    (older changes are ignored and counted), tombstones are upserted for deletes, then one MERGE
    applies the rest and records the files. Bad rows go to ``cdclake_quarantine_rows`` (above
    ``max_bad_row_ratio`` the batch fails instead); unreadable or empty files and batches with an
    incompatible schema change go to ``cdclake_quarantine`` and are held until a replay.
    ``force`` (a replay) applies the files even if the ledger or the quarantine lists them.
    """
    started = time.monotonic()
    silver = engine.silver_table(table)
    report = TableReport(table=table.source, kind="cdc")
    ledger = read_ledger(engine.spark, silver)
    held = frozenset() if force else quarantined_files(engine.spark, silver)
    pending = sorted({f for f in files if force or (f.key not in ledger.applied and f.key not in held)})
    report.files_skipped = len({f.key for f in files} & ledger.applied) if not force else 0
    report.files_held = len({f.key for f in files} & (held - ledger.applied))
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
    batch = _prepare_readable(engine, table, pending, report)
    if batch is None:
        report.seconds = time.monotonic() - started
        return report
    try:
        report.changes_read = batch.counts.total
        _screen_bad_rows(engine, table, batch.changes, batch.files, batch.counts, report)
        _evolve(engine, silver, batch.plan, report)
        keys = [f.key for f in batch.files]
        if table.append_only:
            _append_batch(engine, silver, batch, keys, report)
        else:
            _merge_batch(engine, table, silver, batch, keys, report)
    finally:
        batch.materialized.unpersist()
    if force:
        release_quarantine(engine.spark, silver, [f.key for f in batch.files])
    report.files_applied = len(batch.files)
    report.bytes_applied = sum(f.size for f in batch.files)
    report.seconds = time.monotonic() - started
    log.info(
        "cdc batch done table=%s inserted=%d updated=%d deleted=%d ignored_late=%d quarantined_rows=%d seconds=%.1f",
        table.source, report.inserted, report.updated, report.deleted, report.ignored_late,
        report.rows_quarantined, report.seconds,
    )  # fmt: skip
    return report


@dataclass(frozen=True)
class PreparedBatch:
    """A CDC batch read, classified and materialised once, before anything is committed."""

    changes: DataFrame  # every row read, bad ones too (read again only to quarantine bad rows)
    files: list[BronzeFile]  # the readable files, in apply order (ordinals index this list)
    materialized: DataFrame  # the rows to apply: classified latest changes, or rows to append
    columns: list[str]  # their data columns
    unchanged: dict[str, str]  # column -> flag of values a change did not capture (CsvNoSupValue)
    plan: SchemaPlan
    counts: RowCounts
    effects: dict[str, int]  # rows per effect (append-only: all inserts)
    latest_commit_ts: str | None


def _prepare_readable(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], report: TableReport
) -> PreparedBatch | None:
    """Prepare the batch; if Spark cannot read it, find the unreadable files one by one, hold them
    in quarantine and prepare the rest. None: nothing left to apply (files held or quarantined)."""
    silver = engine.silver_table(table)
    remaining = [f for f in files if f.size != 0]
    if empty := [f for f in files if f.size == 0]:
        _quarantine(engine, silver, empty, "empty file", report)
    for attempt in (1, 2):
        if not remaining:
            return None
        try:
            return _prepare_batch(engine, table, remaining, report)
        except ConfigError:
            raise
        except Exception as failure:
            culprits = _unreadable_files(engine, table, remaining, full_load=False)
            if not culprits or attempt == 2:
                raise failure
            for file, reason in culprits:
                _quarantine(engine, silver, [file], f"unreadable file: {reason}", report)
            remaining = [f for f in remaining if f not in {c for c, _ in culprits}]
    return None


def _prepare_batch(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], report: TableReport
) -> PreparedBatch | None:
    """Plan the schema change, then read, count and classify the batch in one pass over its files
    (the counts are observed while the rows are materialised). None: held for its schema change."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    silver = engine.silver_table(table)
    changes = _prepared_changes(engine, table, files)
    shape = _cdc_rows(changes.where(~has_error()), table)  # for schemas and empty tables only
    if not table_exists(engine.spark, silver):
        ensure_database(engine.spark, engine.catalog, engine.config.database)
        replace_table(engine.spark, silver, _silver_shape(shape).limit(0), [])
    plan = plan_schema_change(
        silver_columns(engine.spark, silver),
        [(f.name, f.dataType.simpleString()) for f in _silver_shape(shape).schema.fields],
        bookkeeping=(SILVER_ORDER,),
    )
    if plan.incompatible:
        _quarantine(engine, silver, files, "; ".join(plan.incompatible), report)
        return None
    # Observations count what the one materialising action below sees; no other action may
    # run on the observed frames first, or it would be the one observed.
    read = Observation("cdclake_read")
    rows = _cdc_rows(changes.observe(read, *RowCounts.columns()).where(~has_error()), table)
    rows = _cast_to_silver(rows, plan.cast)
    applied = Observation("cdclake_effects")
    latest = F.max(COMMIT_TS).alias("_cdc_latest")
    if table.append_only:
        observed = rows.observe(applied, F.count(F.lit(1)).alias(EFFECT_INSERT), latest)
    else:
        ensure_table(engine.spark, tombstones_of(silver), _tombstone_rows(shape, table.silver_key()))
        small = sum(f.size for f in files) <= _SMALL_BATCH_BYTES
        rows = rows.localCheckpoint() if small else rows
        classified = _classified(engine, table, silver, rows, small)
        effects = [F.count_if(F.col(EFFECT) == e).alias(e) for e in EFFECTS]
        observed = classified.observe(applied, *effects, latest)
    # A local checkpoint, not a cache: it also cuts the lineage back to the reader's row ids
    # (monotonically_increasing_id), which a copy-on-write MERGE refuses as non-deterministic.
    materialized = observed.localCheckpoint()
    rows.unpersist()  # a checkpoint of its own above, if any; the materialised rows no longer need it
    stats = applied.get
    return PreparedBatch(
        changes=changes,
        files=list(files),
        materialized=materialized,
        columns=data_columns(rows),
        unchanged=unchanged_flags(rows),
        plan=plan,
        counts=RowCounts.of(read.get),
        effects={e: int(stats[e]) for e in stats if e != "_cdc_latest"},
        latest_commit_ts=stats["_cdc_latest"],
    )


def _evolve(engine: Engine, silver: SilverTable, plan: SchemaPlan, report: TableReport) -> None:
    if plan.changes_table:
        apply_schema_plan(engine.spark, silver, plan)
        record_schema_changes(engine.spark, silver, plan.describe(), datetime.now(UTC))
        for change in plan.describe():
            log.warning("schema change table=%s %s", silver.name, change)
    report.schema_changes = plan.describe()
    report.columns_dropped_at_source = list(plan.absent)


def _quarantine(
    engine: Engine, silver: SilverTable, files: Sequence[BronzeFile], reason: str, report: TableReport
) -> None:
    """Hold a table's batch back (nothing applied, files left pending) and record why."""
    record_quarantine(engine.spark, silver, [f.key for f in files], reason, datetime.now(UTC))
    report.quarantined_files = [f.key for f in files]
    report.note = f"quarantined: {reason}"
    log.error("batch quarantined table=%s files=%d reason=%s", silver.name, len(files), reason)


def _cast_to_silver(rows: DataFrame, casts: dict[str, str]) -> DataFrame:
    from pyspark.sql import functions as F

    for column, type_name in casts.items():
        rows = rows.withColumn(column, F.col(column).cast(type_name))
    return rows


def _append_batch(
    engine: Engine, silver: SilverTable, batch: PreparedBatch, keys: Sequence[str], report: TableReport
) -> None:
    report.inserted, report.latest_commit_ts = batch.effects[EFFECT_INSERT], batch.latest_commit_ts
    rows = _silver_shape(batch.materialized)
    append_rows(engine.spark, silver, rows, ledger_properties(KIND_CDC, keys, batch.latest_commit_ts))


def _classified(
    engine: Engine, table: TableConfig, silver: SilverTable, rows: DataFrame, broadcast_keys: bool
) -> DataFrame:
    """The latest changes with their effect against the stored rows and the tombstones.

    ``broadcast_keys`` (``rows`` materialised): semi-join the stored keys with the batch's keys
    broadcast, so the table's key columns are streamed once instead of shuffled whole, and the
    cost follows the changes more than the table.
    """
    from pyspark.sql import functions as F

    key = table.silver_key()
    stored = engine.spark.table(silver.identifier).select(*key, SILVER_ORDER)
    if broadcast_keys:
        stored = stored.join(F.broadcast(rows.select(*key)), list(key), "left_semi")
    known_deleted = engine.spark.table(tombstones_of(silver).identifier).select(*key, SILVER_ORDER)
    return classify_effects(rows, stored, known_deleted, key)


def _tombstone_rows(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """What a tombstone holds: the deleted key, the delete's order and its commit time."""
    from pyspark.sql import functions as F

    return changes.select(*key, SILVER_ORDER, F.col(COMMIT_TS).alias(TOMBSTONE_DELETED_AT))


def _merge_batch(
    engine: Engine,
    table: TableConfig,
    silver: SilverTable,
    batch: PreparedBatch,
    keys: Sequence[str],
    report: TableReport,
) -> None:
    """Tombstones for the deletes, then one MERGE of the rest that records the batch's files."""
    from pyspark.sql import functions as F

    key = table.silver_key()
    classified, counts = batch.materialized, batch.effects
    report.inserted = counts[EFFECT_INSERT]
    report.updated = counts[EFFECT_UPDATE]
    report.deleted = counts[EFFECT_DELETE]
    report.deleted_missing = counts[EFFECT_DELETE_MISSING]
    report.ignored_late = counts[EFFECT_LATE]
    report.latest_commit_ts = batch.latest_commit_ts
    if report.deleted or report.deleted_missing:
        # Tombstones first: if the MERGE below never commits, re-running rewrites them harmlessly.
        deletes = _tombstone_rows(classified.where(F.col(EFFECT).isin(EFFECT_DELETE, EFFECT_DELETE_MISSING)), key)
        view = f"cdclake_tombstones_{table.target}"
        deletes.createOrReplaceTempView(view)
        engine.spark.sql(tombstone_statement(tombstones_of(silver).identifier, view, key))
        engine.spark.catalog.dropTempView(view)
    applicable = classified.where(F.col(EFFECT).isin(EFFECT_INSERT, EFFECT_UPDATE, EFFECT_DELETE))
    view = f"cdclake_changes_{table.target}"
    applicable.createOrReplaceTempView(view)
    statement = merge_statement(
        silver.identifier, view, key, batch.columns, batch.plan.absent, list(batch.unchanged)
    )  # fmt: skip
    merge_rows(engine.spark, statement, ledger_properties(KIND_CDC, keys, batch.latest_commit_ts))
    engine.spark.catalog.dropTempView(view)


def _cdc_rows(changes: DataFrame, table: TableConfig) -> DataFrame:
    """The MERGE source: the latest change per key with its operation (deletes included)."""
    from pyspark.sql import functions as F

    if table.append_only:
        return changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN, OP, COMMIT_TS
        )
    latest = latest_change_per_key(changes, table.silver_key())
    flags = list(unchanged_flags(latest).values())
    return latest.select(*data_columns(changes), SILVER_ORDER, OP, COMMIT_TS, *flags)


def _silver_shape(rows: DataFrame) -> DataFrame:
    """The columns a silver table stores: the data columns and, for keyed tables, ``_cdc_order``."""
    return rows.select(*data_columns(rows), *([SILVER_ORDER] if SILVER_ORDER in rows.columns else []))


def group_by_table(
    engine: Engine, files: Iterable[BronzeFile], report: RunReport
) -> list[tuple[TableConfig, list[BronzeFile]]]:
    """CDC files per configured table in apply order; others are reported, never dropped silently."""
    grouped: dict[str, tuple[TableConfig, list[BronzeFile]]] = {}
    for file in sorted(files):
        if file.is_multi_table:
            # Which tables a transaction-ordered file holds is known only once it is read:
            # every configured table reads it and keeps its own rows.
            for reader in engine.config.tables:
                if _skip_reason(reader) is None:
                    grouped.setdefault(reader.source, (reader, []))[1].append(file)
            continue
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


def files_from_keys(
    store: BronzeStore,
    keys: Iterable[str],
    transaction_path: str | None = None,
) -> list[BronzeFile]:
    """Turn keys or full URIs (``s3://bucket/prefix/...`` or paths under the store root) into files.

    Sizes come from the store itself (a missing object is an error), never from the caller.
    """
    files = []
    root = store.root.rstrip("/") + "/"
    for key in keys:
        relative = key[len(root) :] if key.startswith(root) else key.lstrip("/")
        size = store.size(relative)
        if size is None:
            raise BronzeError(f"The CDC file {key} is not in bronze ({store.root}).")
        files.append(parse_key(relative, size, transaction_path))
    return files


# ------------------------------------------------------------------------------- whole run


def run(engine: Engine, tables: Sequence[TableConfig] | None = None) -> RunReport:
    """Full load where a table has none yet, then every pending CDC file, in batches."""
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
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
        silver = engine.silver_table(table)
        done = read_ledger(engine.spark, silver).applied | quarantined_files(engine.spark, silver)
        pending = [f for f in files if f.key not in done]
        _apply_in_batches(engine, table, pending, report)
    unconfigured_sources = sorted(
        f"{s}.{t}" for s, t in listing.sources() if engine.config.table_for_source(s, t) is None
    )
    report.unconfigured = sorted(set(report.unconfigured) | set(unconfigured_sources))
    _warn(report)
    return report


def _apply_in_batches(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], report: RunReport, force: bool = False
) -> None:
    size = engine.config.max_files_per_batch
    for start in range(0, len(files), size):
        batch = apply_cdc_batch(engine, table, files[start : start + size], force)
        report.tables.append(batch)
        if batch.quarantined_files and not batch.files_applied:
            break  # a schema change held the whole batch: the next ones would be held the same way


def replay(
    engine: Engine,
    tables: Sequence[TableConfig] | None = None,
    quarantined: bool = False,
    since: str | None = None,
    until: str | None = None,
    keys: Sequence[str] = (),
) -> RunReport:
    """Apply CDC files from bronze again, even if applied or quarantined before, in file order.

    Safe to run at any time: changes older than a stored row or a tombstone are ignored, so only
    what the replayed files add (fixed files, rows that were set aside) changes silver. Selection:
    ``keys``; or the tables' quarantined files; or every CDC file written in [since, until)
    (``YYYY-MM-DDTHH:MM``, compared with the DMS file-name timestamp). Replayed quarantined files
    leave the quarantine.
    """
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
    report = RunReport(unrecognised=list(listing.unrecognised))
    selected = {t.source for t in (tables or engine.config.tables)}
    wanted_keys = set(keys)
    low, high = _stamp(since), _stamp(until)
    for table, files in group_by_table(engine, [f for f in listing.files if f.kind is FileKind.CDC], report):
        if table.source not in selected:
            continue
        held = quarantined_files(engine.spark, engine.silver_table(table)) if quarantined else frozenset()
        chosen = [
            f
            for f in files
            if (not wanted_keys or f.key in wanted_keys)
            and (not quarantined or f.key in held)
            and (low is None or f.sort_key[2] >= low)
            and (high is None or f.sort_key[2] < high)
        ]
        _apply_in_batches(engine, table, chosen, report, force=True)
    _warn(report)
    return report


def _stamp(moment: str | None) -> str | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` -> the ``yyyyMMdd-HHmmss`` prefix DMS CDC file names start with."""
    if moment is None:
        return None
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        raise ConfigError(f"'{moment}' is not a time like 2024-03-01T12:00.") from None
    return parsed.strftime("%Y%m%d-%H%M%S")


def _warn(report: RunReport) -> None:
    for reason in report.skipped_tables:
        log.warning("table skipped: %s", reason)
    for source in report.unconfigured:
        log.warning("bronze holds files for %s, which is not configured: left in place, not applied", source)
    for reason in report.unrecognised:
        log.warning("bronze key is not a DMS data file: %s", reason)
