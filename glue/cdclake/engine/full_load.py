"""Full load: a table's LOAD files -> a silver table, replaced atomically and recorded in the ledger."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.columns import COMMIT_TS, OP, SILVER_ORDER
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.engine.changes import has_error
from cdclake.engine.commit import finish_full_load, quarantine_rows, stage_full_load
from cdclake.engine.read import (
    bad_rows,
    empty_changes,
    read_and_count,
    read_changes,
    root_cause,
    stored_rows,
)
from cdclake.engine.select import TableState, load_again, superseded_cdc_files
from cdclake.errors import ConfigError
from cdclake.identifiers import quote
from cdclake.lake.iceberg import Snapshot
from cdclake.lake.tables import added_data, parallel_scan
from cdclake.report import Outcome, OutcomeKind, TableReport
from cdclake.runtime.progress import watch_stages
from cdclake.types import INTEGRAL_TYPES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdclake.lake.tables import SilverTable

log = logging.getLogger("cdclake")

# The one-scan full load fails with this at its first bad row, for the careful path to take over.
_NEEDS_SCREENING = "cdclake: this full load holds rows that need screening"


def full_load_table(
    engine: Engine, table: TableConfig, listing: BronzeListing, state: TableState, reload: bool = False
) -> tuple[TableReport, TableState]:
    """Create (or, with ``reload``, replace) the silver table from the table's LOAD files.

    Idempotent: a table whose ledger (``state``) shows a full load is left alone unless ``reload``
    is set or bronze holds LOAD files that load did not (``select.load_again``: loaded again, or
    LoadFilesConflictError when it cannot tell a late part of the load from a reload), and every
    replace is atomic, so re-running never doubles rows. Returns the report and the table's state
    after the load.

    The common case (every row valid, every key once) takes one scan of the files: the rows are
    written as a staged load, counted from its commit's metadata, and the key check reads only
    the key columns back (the scan observes its earliest commit instant only when bronze holds
    CDC files the load may supersede). A bad row or an unreadable file fails the scan
    before anything is committed; a repeated key is found after the staged commit (readers may
    see that key twice until the next commit). Either sends the load down the careful path:
    count, quarantine, de-duplicate, replace.
    Either path's replace is staged, and recorded as done only after everything the load leaves
    behind (``engine.commit.finish_full_load``): a crash at any step makes the next run load again.
    """
    started = time.monotonic()
    report = TableReport(table=table.source, kind="full-load")
    files = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    if not reload and state.full_load_done:
        why = load_again(table, state, files)
        if why is None:
            report.outcome = Outcome(OutcomeKind.ALREADY_LOADED)
            return report, state
        log.warning("full load again table=%s: %s", table.source, why)
        report.outcome = Outcome(OutcomeKind.LOADED_AGAIN, why)
    folder = f"{table.source_schema}/{table.source_table}"
    if not files and not table.columns:
        report.outcome = Outcome(OutcomeKind.LEFT_TO_CDC, folder)
        return report, state
    if not files:
        report.outcome = Outcome(OutcomeKind.CREATED_EMPTY, folder)
    log.info("full load table=%s files=%d", table.source, len(files))
    with watch_stages(engine.spark, f"full load {table.source}", engine.progress_seconds):
        loaded = _load_in_one_scan(engine, table, files, listing, report) if files else None
        if loaded is None:
            loaded = _load_carefully(engine, table, files, listing, report)
    silver = engine.silver_table(table)
    report.loaded = True
    report.files_applied = len(files)
    report.bytes_applied = sum(f.size for f in files)
    if not report.inserted:  # the careful path (or no LOAD files): count what the replace kept
        report.inserted = engine.spark.table(silver.identifier).count()
    report.seconds = time.monotonic() - started
    log.info("full load done table=%s rows=%d seconds=%.1f", table.source, report.inserted, report.seconds)
    return report, TableState.after_load(loaded.files, state.held, loaded.record.snapshot_id)


@dataclass(frozen=True)
class _Loaded:
    """A finished load: the files recorded as loaded, and the snapshot of its record."""

    files: list[BronzeFile]
    record: Snapshot


def _load_in_one_scan(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], listing: BronzeListing, report: TableReport
) -> _Loaded | None:
    """Load in one scan, assuming valid rows and unique keys. Returns the load (the files recorded
    as loaded), or None (nothing recorded as loaded) when the assumption fails."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    silver = engine.silver_table(table)
    changes = read_changes(engine, table, files, full_load=True)
    # The earliest commit instant of the load's rows (``superseded_cdc_files``'s watermark) is
    # observed only when bronze lists CDC files of the table: without any, nothing is superseded
    # whatever its value. Silver does not store the normalised instant, so it cannot be read back.
    earliest = None
    if listing.for_table(table.source_schema, table.source_table, FileKind.CDC):
        earliest = Observation(f"cdclake_full_load_{uuid.uuid4().hex}")
        changes = changes.observe(earliest, F.min(COMMIT_TS).alias("earliest"))
    key = table.silver_key()
    types = {f.name: f.dataType.simpleString() for f in changes.schema.fields}
    integral = len(key) == 1 and types.get(key[0]) in _INTEGRAL
    # Fail the scan at the first bad row: nothing is committed and the careful path screens them.
    # The check sits in a column the load writes, not in a filter, and the rows and the key's range
    # are read from the staged commit's metadata, not observed (``CollectMetrics`` ends the
    # generated code; only the earliest instant above is observed, and only with CDC files listed).
    # Of the three ways measured, this one costs the least CPU (docs/benchmarks-journal.md,
    # "Figures that were code comments").
    source = OP if table.append_only else SILVER_ORDER
    failing = F.raise_error(F.lit(_NEEDS_SCREENING)).cast("string")
    valid = changes.withColumn(source, F.when(has_error(changes), failing).otherwise(F.col(source)))
    rows = stored_rows(valid, table, deduplicate=False)
    try:
        staged_at = stage_full_load(engine, silver, rows, files)
    except ConfigError:
        raise
    except Exception as failure:
        if engine.stopping.is_set():
            raise  # the scan was cancelled by a stop (Ctrl-C), not failed by the data
        log.info("full load table=%s takes the careful path: %s", table.source, root_cause(failure))
        return None
    staged = staged_facts(engine.spark, silver.identifier, staged_at.snapshot_id, key[0] if integral else None)
    if not table.append_only and _has_repeated_keys(engine, silver, key, staged.rows, staged.key_range):
        log.warning("full load table=%s: a key occurs more than once; keeping each key's last row", table.source)
        return None
    watermark = None if earliest is None else earliest.get["earliest"]
    loaded = [*files, *superseded_cdc_files(listing, table, watermark)]
    record = finish_full_load(engine, table, silver, loaded, staged_at)
    report.changes_read = staged.rows
    report.inserted = staged.rows  # every row valid and every key once: all of them were written
    report.files_skipped = len(loaded) - len(files)
    return _Loaded(loaded, record)


@dataclass(frozen=True)
class StagedLoad:
    """What the one-scan load wrote, read back from its staged commit: its rows, and the smallest
    and largest key when the key is one integer column (for the key check's bitmaps)."""

    rows: int
    key_range: tuple[int, int] | None


def staged_facts(spark: SparkSession, identifier: str, snapshot_id: int, integer_key: str | None) -> StagedLoad:
    """The rows a replace of ``identifier`` (snapshot ``snapshot_id``: a staged load) wrote (its
    ``added-records``) and ``integer_key``'s range (its new data files' column bounds; where a file
    has none, one aggregate over the snapshot's rows, which are the replace's): exact either way,
    and no Spark job in the common case."""
    from pyspark.sql import functions as F

    added = added_data(spark, identifier, snapshot_id, integer_key)
    if integer_key is None or added.rows == 0:
        return StagedLoad(added.rows, None)
    smallest, largest = added.smallest, added.largest
    if smallest is None or largest is None:
        stored = spark.sql(f"SELECT * FROM {identifier} VERSION AS OF {snapshot_id}")
        bounds = stored.agg(F.min(quote(integer_key)), F.max(quote(integer_key))).first()
        smallest, largest = (bounds[0], bounds[1]) if bounds is not None else (None, None)
    return StagedLoad(added.rows, None if smallest is None or largest is None else (int(smallest), int(largest)))


def _has_repeated_keys(
    engine: Engine, silver: SilverTable, key: Sequence[str], rows: int, key_range: tuple[int, int] | None = None
) -> bool:
    """Whether a key occurs twice in ``silver`` (a scan of the key columns only) of ``rows`` rows;
    ``key_range``: the smallest and largest value of a key of one integer column, when known.

    A count over a window per key, not a group-by: the keys are nearly all distinct, so a hash
    aggregate's map-side pass reduces nothing and costs more than sorting.
    Up to ``engine.sizes.one_task_keys`` keys are read and sorted in one task: one partition already satisfies
    the window's clustering, so the check is one Spark job instead of a shuffle's two. More keys
    of one integer column within a range of at most ``MAX_KEY_BUCKETS`` bitmaps are counted with
    bitmaps instead (``has_repeated_integers``), faster than the window. The figures:
    docs/benchmarks-journal.md, "Figures that were code comments".
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = parallel_scan(engine.spark, silver.identifier).select(*key)
    if rows <= engine.sizes.one_task_keys:
        keys = keys.coalesce(1)
    elif key_range is not None and key_buckets(*key_range) <= MAX_KEY_BUCKETS:
        return has_repeated_integers(keys, key[0])
    counted = keys.withColumn("_cdc_rows", F.count(F.lit(1)).over(Window.partitionBy(*key)))
    return bool(counted.where(F.col("_cdc_rows") > 1).limit(1).collect())


_INTEGRAL = INTEGRAL_TYPES
# Spark's bitmaps (``bitmap_construct_agg``) hold 32,768 consecutive values each, in 4 KiB. At most
# this many of them per task (16 MiB, 134M consecutive keys); keys spread wider are sorted instead.
BITMAP_KEYS, MAX_KEY_BUCKETS = 32_768, 4_096


def key_buckets(smallest: int | None, largest: int | None) -> int:
    """How many of Spark's bitmaps the integer keys from ``smallest`` to ``largest`` fall in, at
    most (no key: none)."""
    if smallest is None or largest is None:
        return 0
    return (largest - smallest) // BITMAP_KEYS + 2  # the range may straddle one more bucket's edge


def has_repeated_integers(keys: DataFrame, column: str) -> bool:
    """Whether a value of the integer ``column`` occurs twice in ``keys``, exactly: per bitmap's
    range of values, its rows against the bits they set (one Spark job; a NULL sets no bit, so it
    counts as repeated)."""
    from pyspark.sql import functions as F

    value = f"CAST({quote(column)} AS BIGINT)"
    per_bucket = keys.groupBy(F.expr(f"bitmap_bucket_number({value})").alias("_cdc_bucket")).agg(
        (F.count(F.lit(1)) - F.expr(f"bitmap_count(bitmap_construct_agg(bitmap_bit_position({value})))")).alias(
            "_cdc_repeated"
        )
    )
    return bool(per_bucket.agg(F.max("_cdc_repeated")).collect()[0][0] or 0)


def _load_carefully(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], listing: BronzeListing, report: TableReport
) -> _Loaded:
    """Count and screen the rows (bad ones to quarantine), keep each key's last row, one staged
    replace, finished like the one-scan load's (``finish_full_load``)."""
    silver = engine.silver_table(table)
    superseded: list[BronzeFile] = []
    if files:
        changes, counts = read_and_count(engine, table, files, full_load=True)
        bad = bad_rows(engine, table, changes, files, counts)
        if bad is not None:
            quarantine_rows(engine, silver, bad)
            report.rows_quarantined = bad.count
        changes = changes.where(~has_error(changes))
        report.changes_read = counts.total
        superseded = superseded_cdc_files(listing, table, counts.earliest_commit_ts)
    else:
        changes = empty_changes(engine, table)
    loaded = [*files, *superseded]
    staged_at = stage_full_load(engine, silver, stored_rows(changes, table), loaded)
    record = finish_full_load(engine, table, silver, loaded, staged_at)
    report.files_skipped = len(superseded)
    return _Loaded(loaded, record)
