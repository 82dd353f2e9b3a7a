"""Read: bronze files -> typed, ordered, cleaned and checked change rows, their counts, the bad rows.

Reads only. Full load and CDC both start here; what to do with the bad rows is decided by the
caller's plan and written by ``engine.commit``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.columns import (
    APPEND_ONLY_OP_COLUMN,
    COMMIT_TS,
    CORRUPT_RECORD,
    FILE_BLOCK,
    FILE_INDEX,
    HISTORY_PLACE_PREFIX,
    OP,
    RAW_LINE,
    ROW_POSITION,
    SILVER_ORDER,
)
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, FileKind
from cdclake.dms.layout import headerless_columns
from cdclake.dms.reader import csv_records, read_files
from cdclake.engine.changes import (
    apply_cleaning,
    data_columns,
    error_text,
    flag_missing_keys,
    has_error,
    silver_shape,
    to_changes,
    unchanged_flags,
    with_silver_order,
)
from cdclake.engine.effects import latest_change_per_key
from cdclake.errors import BadInputError, ConfigError, first_line, java_cause
from cdclake.lake.batch import TableMetadata
from cdclake.lake.tables import silver_columns
from cdclake.schema import SchemaPlan, plan_schema_change

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# At most this many bad rows are named in the error of a batch above the bad-row limit.
_MAX_REPORTED_ERRORS = 10
_HELD_REASON_ROWS = 3  # a held file's reason names this many of its bad rows


def read_changes(engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool = False) -> DataFrame:
    """The change rows of ``files``: typed, ordered, cleaned, with an error array per row."""
    raw = read_files(engine.spark, engine.store, engine.config.bronze, table, files)
    return changes_of(raw, engine, table, files, full_load)


def changes_of(
    raw: DataFrame, engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool = False
) -> DataFrame:
    """The change rows of ``raw``, ``files`` as a reader gives them (``dms.reader``): typed,
    ordered, cleaned, with an error array per row."""
    csv = any(f.file_format == "csv" for f in files)
    changes = to_changes(raw, engine.config.bronze, table, full_load, csv)
    changes = with_silver_order(changes, {i: f.position for i, f in enumerate(files)}, full_load)
    changes = apply_cleaning(changes, table.clean, table.source)
    return flag_missing_keys(changes, table.silver_key())


def empty_changes(engine: Engine, table: TableConfig) -> DataFrame:
    """Change rows with the declared columns and no data (a source table empty at full load)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    names = headerless_columns(engine.config.bronze, table, FileKind.FULL_LOAD)
    schema = StructType(
        [StructField(n, StringType(), True) for n in (*names, CORRUPT_RECORD)]
        + [StructField(c, LongType(), True) for c in (FILE_INDEX, FILE_BLOCK, ROW_POSITION)]
    )
    raw = engine.spark.createDataFrame([], schema)
    changes = with_silver_order(to_changes(raw, engine.config.bronze, table, full_load=True), {}, full_load=True)
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


def count_rows(changes: DataFrame) -> RowCounts:
    """Count a read in one scan; the scan also surfaces files Spark cannot read."""
    return RowCounts.of(changes.agg(*RowCounts.columns()).collect()[0])


def root_cause(exc: BaseException) -> str:
    """Why a Spark action failed, in the words of its innermost cause and that cause's kind
    (``errors.java_cause``); a Python failure: its first line."""
    cause = java_cause(exc)
    if cause is None:
        return first_line(exc)
    text, kind = cause
    return (f"{text} ({kind})" if text else kind)[:500]


def read_and_count(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool
) -> tuple[DataFrame, RowCounts]:
    """Read and count ``files``; unreadable ones stop the read, named one by one."""
    changes = read_changes(engine, table, files, full_load)
    try:
        return changes, count_rows(changes)
    except ConfigError:
        raise
    except Exception as failure:
        if engine.stopping.is_set():
            raise  # cancelled by a stop (Ctrl-C): no file is to blame
        culprits = unreadable_files(engine, table, files, full_load)
        if not culprits:
            raise failure
        details = "; ".join(f"{f.key}: {reason}" for f, reason in culprits)
        kind = "full-load" if full_load else "CDC"
        raise BadInputError(f"Table {table.source}: {kind} files that cannot be read: {details}.") from None


def unreadable_files(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], full_load: bool
) -> list[tuple[BronzeFile, str]]:
    """Read each file alone; the ones that fail, with why (a Java failure: its innermost cause)."""
    culprits = []
    for file in files:
        try:
            count_rows(read_changes(engine, table, [file], full_load))
        except ConfigError:
            raise
        except Exception as exc:
            if engine.stopping.is_set():
                raise
            culprits.append((file, root_cause(exc)))
    return culprits


@dataclass(frozen=True)
class BadRows:
    """The rows of a read that cannot be applied: file_key, row_number (1-based), raw, reason."""

    rows: DataFrame
    count: int


class TooManyBadRowsError(BadInputError):
    """A read with more bad rows than ``quarantine.max_bad_row_ratio`` allows: nothing of it may be
    applied. ``culprits``: each file above the ratio on its own, with the reason to hold it for (a
    CDC batch holds those files and applies the others; a full load fails)."""

    def __init__(self, message: str, culprits: Mapping[str, str]) -> None:
        super().__init__(message)
        self.culprits = dict(culprits)


def bad_rows(
    engine: Engine, table: TableConfig, changes: DataFrame, files: Sequence[BronzeFile], counts: RowCounts
) -> BadRows | None:
    """The bad rows of ``changes`` (a read of ``files``) to quarantine, None if there are none.

    Above ``quarantine.max_bad_row_ratio`` nothing of the read may be applied:
    ``TooManyBadRowsError`` names the first bad rows, and the files above the ratio on their own.
    """
    if counts.bad == 0:
        return None
    rows = _locate_bad_rows(changes, files)
    limit = engine.config.max_bad_row_ratio
    if counts.bad > limit * counts.total:
        sample = rows.orderBy("file_key", "row_number").limit(_MAX_REPORTED_ERRORS).collect()
        details = "; ".join(f"{r['file_key']} data row {r['row_number']}: {r['reason']}" for r in sample)
        raise TooManyBadRowsError(
            f"Table {table.source}: rows that cannot be applied: {details} ({counts.bad} of {counts.total} "
            f"rows, above quarantine.max_bad_row_ratio {limit:g}); nothing of this batch was applied. Fix the rows "
            "in bronze and run again (`cdclake run`), or raise quarantine.max_bad_row_ratio to apply the good rows "
            "and hold the bad ones in quarantine (then fix them and `cdclake replay --quarantined`).",
            _files_above(changes, files, rows, limit),
        )
    rows = _with_original_records(engine, rows.localCheckpoint(), files)
    return BadRows(rows, counts.bad)


def _files_above(changes: DataFrame, files: Sequence[BronzeFile], located: DataFrame, limit: float) -> dict[str, str]:
    """The files whose own share of bad rows is above ``limit``, each with the reason to hold it:
    its counts, its first bad rows and the two ways on. (A read above the limit has at least one.)"""
    from pyspark.sql import functions as F

    per_file = changes.groupBy(FILE_INDEX).agg(F.count(F.lit(1)).alias("total"), F.count_if(has_error()).alias("bad"))
    above = {int(r[FILE_INDEX]): (int(r["bad"]), int(r["total"])) for r in per_file.collect()}
    above = {i: (bad, total) for i, (bad, total) in above.items() if bad > limit * total}
    keys = {files[i].key: counted for i, counted in above.items()}
    first: dict[str, list[str]] = {}
    sample = located.where(F.col("file_key").isin(list(keys))).orderBy("file_key", "row_number")
    for r in sample.limit(_HELD_REASON_ROWS * max(1, len(keys))).collect():
        if len(first.setdefault(r["file_key"], [])) < _HELD_REASON_ROWS:
            first[r["file_key"]].append(f"data row {r['row_number']}: {r['reason']}")
    return {
        key: (
            f"{bad} of {total} rows cannot be applied ({'; '.join(first.get(key, []))}), above "
            f"quarantine.max_bad_row_ratio {limit:g}: the file is held and the table's other files go on. Fix the "
            "file in bronze and run `cdclake replay --quarantined`, or raise quarantine.max_bad_row_ratio to apply "
            "its good rows and hold only the bad ones"
        )
        for key, (bad, total) in keys.items()
    }


# Bad rows are shown as they were in their CSV file when the file is at most this big (it is read
# whole, on the driver) and for this many rows of a batch at most; the others (and Parquet rows)
# as their values in JSON.
_ORIGINAL_RECORD_FILE_BYTES = 256 * 1024 * 1024
_MAX_ORIGINAL_RECORDS = 10_000


def _with_original_records(engine: Engine, rows: DataFrame, files: Sequence[BronzeFile]) -> DataFrame:
    """The bad rows (materialised) with ``raw`` the record as it was in its CSV file, not the
    values after typing and cleaning (``2`` where the file said ``2.7``)."""
    import gzip

    from pyspark.sql import functions as F

    readable = {
        f.key: f
        for f in files
        if f.file_format == "csv" and not f.is_multi_table and f.size <= _ORIGINAL_RECORD_FILE_BYTES
    }
    if not readable:
        return rows
    wanted: dict[str, set[int]] = {}
    located = rows.where(F.col("file_key").isin(list(readable))).select("file_key", "row_number")
    for r in located.limit(_MAX_ORIGINAL_RECORDS).collect():
        wanted.setdefault(r["file_key"], set()).add(int(r["row_number"]))
    originals = []
    for key, numbers in wanted.items():
        data = engine.store.read_head(key, readable[key].size)
        if readable[key].compressed:
            data = gzip.decompress(data)
        records = csv_records(data, numbers, skip_header=engine.config.bronze.csv_header)
        originals += [(key, number, text) for number, text in records.items()]
    if not originals:
        return rows
    found = engine.spark.createDataFrame(originals, "file_key string, row_number long, _cdc_original string")
    return rows.join(F.broadcast(found), ["file_key", "row_number"], "left").select(
        "file_key", "row_number", F.coalesce("_cdc_original", "raw").alias("raw"), "reason"
    )


def _locate_bad_rows(changes: DataFrame, files: Sequence[BronzeFile]) -> DataFrame:
    from pyspark.sql import functions as F

    values = F.to_json(F.struct(*[F.col(c) for c in data_columns(changes)]))
    located = F.struct(
        F.col(ROW_POSITION).alias("position"),
        F.coalesce(F.col(RAW_LINE), values).alias("raw"),
        error_text().alias("reason"),
    )
    # One aggregate per file: its bad rows. No filter and no join over ``changes``: for those,
    # Spark infers constraints through every projection that types and checks the row, which grows
    # exponentially with the columns (a wide table's plan takes minutes or runs out of memory: the
    # journal's "Figures that were code comments"); aggregates are spared. The row's index in its
    # file (``dms.reader``) is its row number less one.
    per_file = changes.groupBy(FILE_INDEX).agg(
        F.collect_list(F.when(has_error(), located)).alias("_cdc_bad")  # NULLs (good rows) are skipped
    )
    keys = F.create_map(*[x for i, f in enumerate(files) for x in (F.lit(i), F.lit(f.key))])
    bad = per_file.select(FILE_INDEX, F.explode("_cdc_bad").alias("_cdc_row"))
    return bad.select(
        F.element_at(keys, F.col(FILE_INDEX)).alias("file_key"),
        (F.col("_cdc_row.position") + 1).alias("row_number"),
        F.col("_cdc_row.raw").alias("raw"),
        F.col("_cdc_row.reason").alias("reason"),
    )


def stored_rows(changes: DataFrame, table: TableConfig, deduplicate: bool = True) -> DataFrame:
    """Changes -> the rows a silver table stores after a full load (append-only tables keep the
    operation); ``deduplicate`` keeps each key's last change, which a caller that checks the keys
    afterwards can skip."""
    from pyspark.sql import functions as F

    if table.append_only:
        return changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN
        )
    columns = [*data_columns(changes), SILVER_ORDER, OP]
    latest = latest_change_per_key(changes, table.silver_key(), columns) if deduplicate else changes
    return latest.where(F.col(OP) != "D").select(*data_columns(changes), SILVER_ORDER)


def latest_changes(changes: DataFrame, table: TableConfig, valid: Column | None = None) -> DataFrame:
    """What a batch applies: the latest change per key with its operation (deletes included);
    append-only tables: every change, with its operation kept in a column. ``valid``: rows where
    it is false are left out."""
    from pyspark.sql import functions as F

    if table.append_only:
        kept = changes if valid is None else changes.where(valid)
        return kept.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN, OP, COMMIT_TS
        )
    columns = [*data_columns(changes), SILVER_ORDER, OP, COMMIT_TS]
    latest = latest_change_per_key(changes, table.silver_key(), columns, valid)
    flags = list(unchanged_flags(latest).values())
    return latest.select(*data_columns(changes), SILVER_ORDER, OP, COMMIT_TS, *flags)


def incoming_schema(changes: DataFrame, table: TableConfig, metadata: TableMetadata) -> tuple[DataFrame, SchemaPlan]:
    """The latest changes' columns (a frame with no rows: no Spark job) and the schema change they
    bring to silver as ``metadata`` read it (none for a table the batch creates)."""
    shape = latest_changes(changes, table).limit(0)
    return shape, schema_change(shape, metadata)


def schema_change(shape: DataFrame, metadata: TableMetadata) -> SchemaPlan:
    """The schema change latest changes of ``shape``'s columns bring to silver as ``metadata`` read it
    (none for a table the batch creates)."""
    if not metadata.exists:
        return SchemaPlan()
    incoming = [(f.name, f.dataType.simpleString()) for f in silver_shape(shape).schema.fields]
    return plan_schema_change(metadata.columns, incoming, bookkeeping=(SILVER_ORDER,))


def cast_columns(rows: DataFrame, casts: dict[str, str]) -> DataFrame:
    from pyspark.sql import functions as F

    if not casts:
        return rows
    return rows.withColumns({column: F.col(column).cast(type_name) for column, type_name in casts.items()})


def history_rows(valid: DataFrame) -> DataFrame:
    """Every valid change as history takes it: data columns, ``_cdc_order``, ``_cdc_op``, ``_cdc_ts``.

    History's ``_cdc_order`` is silver's with the change's place in its file after it:
    ``<silver order>#<20 zeros><row index, 20 digits>``. Changes of one key at one instant in one
    file with no change sequence (a transaction that updates then deletes a row) share silver's
    order text, and history keeps each as a version of its own, in file order. The place is the
    row's index in its file (``dms.reader``), a function of the file and the row alone, so a re-read
    of the same file in any company and any splits gives the same text (history adds a change once).
    The 20 zeros stand where the split's start stood when the place counted from it: the text keeps
    its width and its order, and a file read whole (first in Spark's first partition) keeps the
    text it always had."""
    from pyspark.sql import functions as F

    place = F.lpad(F.coalesce(F.col(ROW_POSITION), F.lit(0)).cast("string"), 20, "0")
    order = F.concat(F.col(SILVER_ORDER), F.lit(HISTORY_PLACE_PREFIX), place)
    return valid.select(*data_columns(valid), order.alias(SILVER_ORDER), OP, COMMIT_TS)


def history_changes(engine: Engine, table: TableConfig, files: Sequence[BronzeFile]) -> DataFrame:
    """Every valid change of ``files`` (CDC files silver has applied), typed as silver stores them,
    as a batch's history takes them (``BatchPlan.changes.history``): what history lacks when a crash
    fell between silver's data commit and history's. Bad rows are left out, as the batch left them
    out (quarantined; a replay adds them to both)."""
    silver = engine.silver_table(table)
    changes = read_changes(engine, table, files)
    incoming = [(f.name, f.dataType.simpleString()) for f in silver_shape(latest_changes(changes, table)).schema.fields]
    schema = plan_schema_change(silver_columns(engine.spark, silver), incoming, bookkeeping=(SILVER_ORDER,))
    return history_rows(cast_columns(changes.where(~has_error()), schema.cast)).localCheckpoint()
