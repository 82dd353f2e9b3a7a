"""The pure core of the engine: raw DMS rows -> typed, validated, cleaned, de-duplicated changes.

Every function here is ``DataFrame -> DataFrame`` with its parameters passed in; none reads or
writes anything. Bookkeeping columns all start with ``_cdc_`` and never reach silver.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING

from cdclake.columns import (
    BOOKKEEPING,
    CHANGE_SEQ,
    COMMIT_TS,
    CORRUPT_RECORD,
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_LATE,
    EFFECT_UPDATE,
    ERROR,
    FILE_INDEX,
    OP,
    ORDER_COLUMNS,
    RAW_LINE,
    SILVER_ORDER,
    UNCHANGED_PREFIX,
)
from cdclake.config import BronzeSettings, CleaningRules, TableConfig
from cdclake.dms.layout import DMS_OP_COLUMN
from cdclake.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_TS_WIDTH, _SEQ_WIDTH = 32, 48
VALID_OPS = ("I", "U", "D")


def data_columns(df: DataFrame) -> list[str]:
    """The columns of ``df`` that describe the source row (everything but bookkeeping)."""
    return [c for c in df.columns if c not in BOOKKEEPING and c != SILVER_ORDER and not c.startswith(UNCHANGED_PREFIX)]


def _add_error(df: DataFrame, condition: Column, reason: Column) -> DataFrame:
    """Append ``reason`` to the row's error text where ``condition`` holds."""
    from pyspark.sql import functions as F

    # The error column is referenced once, so expressions stay linear when Spark collapses the
    # projections of many columns (twice would double the expression with every column).
    return df.withColumn(ERROR, F.concat(F.col(ERROR), F.array(F.when(condition, reason))))


def has_error() -> Column:
    """True for rows with at least one error."""
    from pyspark.sql import functions as F

    # Joining skips the NULL entries and no reason is empty; unlike a lambda over the array,
    # this compiles into Spark's generated code.
    return F.array_join(F.col(ERROR), "") != ""


def error_text() -> Column:
    """The row's errors as one text (NULL entries skipped)."""
    from pyspark.sql import functions as F

    return F.concat_ws("; ", F.col(ERROR))


def _excerpt(value: Column, length: int = 40) -> Column:
    """A value short enough to quote in an error message."""
    from pyspark.sql import functions as F

    text = value.cast("string")
    return F.when(F.length(text) > length, F.concat(F.substring(text, 1, length), F.lit("..."))).otherwise(text)


def _checked_casts(df: DataFrame, casts: dict[str, str]) -> DataFrame:
    """Cast columns; a non-NULL value that does not convert is an error, never a silent NULL.

    One projection for all columns and one append to the error array (an append per column
    would copy the array once per column, on every row).
    """
    from pyspark.sql import functions as F

    if not casts:
        return df
    reasons = [
        F.when(
            F.col(column).isNotNull() & F.col(column).cast(type_name).isNull(),
            F.format_string(f"value '%s' of column {column} is not a valid {type_name}", _excerpt(F.col(column))),
        )
        for column, type_name in casts.items()
    ]
    df = df.withColumn(ERROR, F.concat(F.col(ERROR), F.array(*reasons)))
    return df.withColumns({column: F.col(column).cast(type_name) for column, type_name in casts.items()})


def to_changes(raw: DataFrame, settings: BronzeSettings, table: TableConfig) -> DataFrame:
    """Raw file rows -> change rows.

    In: the reader's columns (the DMS ``Op`` column when present). Out: the data columns, typed
    as ``table.columns`` declares, plus ``_cdc_op`` (I/U/D; full-load rows without ``Op`` are
    inserts), ``_cdc_ts`` (commit timestamp text), ``_cdc_seq`` (change sequence text),
    ``_cdc_file``, ``_cdc_row`` and ``_cdc_error`` (NULL, or why the row cannot be applied).
    The timestamp column stays a data column (as in the first seed's silver table); the change
    sequence does not.
    """
    from pyspark.sql import functions as F

    columns = set(raw.columns)
    op = F.upper(F.trim(F.col(DMS_OP_COLUMN))) if DMS_OP_COLUMN in columns else F.lit("I")
    ts_name, seq_name = settings.timestamp_column, settings.change_sequence_column
    known_op = F.coalesce(F.col(OP).isin(*VALID_OPS), F.lit(False))
    reasons = [
        F.when(F.col(CORRUPT_RECORD).isNotNull(), F.lit("wrong number of fields")),
        F.when(~known_op, F.format_string("unknown Op '%s'", _excerpt(F.col(OP)))),
    ]
    text = [f.name for f in raw.schema.fields if f.dataType.simpleString() == "string" and f.name != CORRUPT_RECORD]
    if text and settings.format == "csv":
        # Spark decodes CSV bytes that are not UTF-8 as U+FFFD instead of failing; say so per row.
        replaced = reduce(or_, [F.coalesce(F.col(c).contains("\ufffd"), F.lit(False)) for c in text])
        reasons.insert(1, F.when(replaced, F.lit("bytes that are not valid UTF-8")))
    df = (
        raw.withColumn(OP, op)
        .withColumn(COMMIT_TS, F.col(ts_name).cast("string") if ts_name in columns else F.lit(None).cast("string"))
        .withColumn(CHANGE_SEQ, F.col(seq_name).cast("string") if seq_name in columns else F.lit(None).cast("string"))
        .withColumn(ERROR, F.array(*reasons))
    )
    df = _checked_casts(df, {c: type_name for c, type_name in table.columns.items() if c in columns and c != seq_name})
    df = df.withColumnRenamed(CORRUPT_RECORD, RAW_LINE)
    drop = [c for c in (DMS_OP_COLUMN, seq_name) if c and c in columns]
    df = df.drop(*drop)
    if settings.csv_no_sup_value is not None:
        df = _mark_unchanged(df, settings.csv_no_sup_value, exclude={ts_name or "", *table.primary_key})
    return df


def _mark_unchanged(df: DataFrame, marker: str, exclude: set[str]) -> DataFrame:
    """DMS writes CsvNoSupValue for a column an update did not capture (e.g. a LOB): "unchanged".

    The value becomes NULL and ``_cdc_unchanged_<column>`` records that it must not overwrite
    the stored value. Only text columns can hold the marker.
    """
    from pyspark.sql import functions as F

    text_columns = [f.name for f in df.schema.fields if f.dataType.simpleString() == "string"]
    for column in data_columns(df):
        if column in exclude or column not in text_columns:
            continue
        unchanged = F.coalesce(F.col(column) == marker, F.lit(False))
        df = df.withColumn(UNCHANGED_PREFIX + column, unchanged).withColumn(
            column, F.when(F.col(UNCHANGED_PREFIX + column), F.lit(None).cast("string")).otherwise(F.col(column))
        )
    return df


def unchanged_flags(df: DataFrame) -> dict[str, str]:
    """Data column -> its ``_cdc_unchanged_`` flag column, for columns that can be "not captured"."""
    return {c[len(UNCHANGED_PREFIX) :]: c for c in df.columns if c.startswith(UNCHANGED_PREFIX)}


def apply_cleaning(df: DataFrame, rules: CleaningRules, table_name: str) -> DataFrame:
    """Apply the declared cleaning in order: cast, derive, rename, drop (bookkeeping untouched).

    A cast that fails on a non-NULL value marks the row with an error. A rule naming a column
    the data does not have is a configuration error.
    """
    from pyspark.sql import functions as F

    def require(column: str, rule: str) -> None:
        if column not in df.columns:
            raise ConfigError(
                f"Table {table_name}: the {rule} rule names column '{column}', which the data does not have "
                f"(columns: {', '.join(data_columns(df))})."
            )

    for column in rules.cast:
        require(column, "cast")
    df = _checked_casts(df, dict(rules.cast))
    for column, expression in rules.derive.items():
        try:
            df = df.withColumn(column, F.expr(expression))
        except Exception as exc:  # AnalysisException / ParseException: report the bad expression
            raise ConfigError(
                f"Table {table_name}: the derived column '{column}' has an invalid expression "
                f"'{expression}': {str(exc).splitlines()[0]}"
            ) from None
    for old, new in rules.rename.items():
        require(old, "rename")
        df = df.withColumnRenamed(old, new).withColumnRenamed(UNCHANGED_PREFIX + old, UNCHANGED_PREFIX + new)
    for column in rules.drop:
        require(column, "drop")
    return df.drop(*rules.drop, *[UNCHANGED_PREFIX + c for c in rules.drop])


def flag_missing_keys(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Mark rows whose primary key has a NULL part: they cannot be matched to a silver row."""
    from pyspark.sql import functions as F

    for column in key:
        df = _add_error(df, F.col(column).isNull(), F.lit(f"primary key column {column} is NULL"))
    return df


def with_silver_order(changes: DataFrame, file_positions: dict[int, str], full_load: bool) -> DataFrame:
    """Add ``_cdc_order``: commit time, change sequence and file position as one sortable text.

    Full-load rows order before every CDC change whatever their timestamp: CDC changes carry
    whole after-images, so replaying every change captured during the load over it converges,
    whichever way the full-load/CDC overlap falls. Their order is the empty text, below every
    change's (which is never empty), and costs nothing to store.
    """
    from pyspark.sql import functions as F

    if full_load:
        return changes.withColumn(SILVER_ORDER, F.lit(""))
    if file_positions:
        mapping = F.create_map(*[x for o, p in file_positions.items() for x in (F.lit(o), F.lit(p))])
        position = F.element_at(mapping, F.col(FILE_INDEX))
    else:
        position = F.lit("")
    ts = F.coalesce(F.col(COMMIT_TS), F.lit(""))
    seq = F.coalesce(F.col(CHANGE_SEQ), F.lit(""))
    order = F.concat(F.rpad(ts, _TS_WIDTH, " "), F.lpad(seq, _SEQ_WIDTH, "0"), position)
    return changes.withColumn(SILVER_ORDER, order)


def change_order() -> Column:
    """The apply order of changes: commit timestamp, change sequence, file order, row in file."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(c) for c in ORDER_COLUMNS])


def latest_change_per_key(
    df: DataFrame, key: Sequence[str], columns: Sequence[str] | None = None, valid: Column | None = None
) -> DataFrame:
    """Keep the last change of each key by ``change_order()``.

    Out: ``key``, then ``columns`` (default: every other column of ``df``) and the unchanged flags.
    Naming the columns a caller needs keeps the aggregate narrow: Spark sorts and compares the
    carried values as one struct per row, and cannot drop unused fields of it afterwards (the
    error array and the raw line alone doubled the cost of 1M changes). ``valid``: rows where it
    is false do not compete (as if filtered out first, without a filter that Spark would push
    below the typing and so compute every cast twice); a key with no valid row is dropped.
    Ties are impossible: file ordinal and row position make every change unique.
    """
    from pyspark.sql import functions as F

    flags = unchanged_flags(df)
    values = [
        c
        for c in (columns if columns is not None else df.columns)
        if c not in key and c not in flags and c not in flags.values()
    ]
    ok = F.lit(True) if valid is None else valid
    order = F.when(ok, change_order())
    aggregates = [F.max_by(F.struct(*values), order).alias("_cdc_latest")]
    for column, flag in flags.items():
        # The newest captured value in the batch; unchanged only if no valid change captured it.
        captured_order = F.when(ok & ~F.col(flag), change_order())
        aggregates += [
            F.max_by(F.col(column), captured_order).alias(column),
            (~F.coalesce(F.max(F.when(ok, ~F.col(flag))), F.lit(False))).alias(flag),
        ]
    latest = df.groupBy(*key).agg(*aggregates)
    if valid is not None:
        latest = latest.where(F.col("_cdc_latest").isNotNull())
    return latest.select(*key, *[F.col(f"_cdc_latest.{c}").alias(c) for c in values], *flags, *flags.values())


def classify_effects(latest: DataFrame, stored: DataFrame, tombstones: DataFrame, key: Sequence[str]) -> DataFrame:
    """Add ``_cdc_effect`` to each latest change: insert, update, delete, delete-missing or late.

    ``stored`` and ``tombstones`` hold ``key`` + ``_cdc_order`` of silver rows and of deleted keys;
    a key may have several tombstones (they are appended), its newest counts. A change is late
    when the stored row, or the newest tombstone of a deleted key, is newer: it must not
    overwrite newer data nor bring a deleted row back.
    """
    from pyspark.sql import functions as F

    stored_order, tomb_order = "_cdc_stored_order", "_cdc_tomb_order"
    newest = tombstones.groupBy(*key).agg(F.max(SILVER_ORDER).alias(tomb_order))
    joined = latest.join(stored.withColumnRenamed(SILVER_ORDER, stored_order), list(key), "left").join(
        newest, list(key), "left"
    )
    order, is_delete = F.col(SILVER_ORDER), F.col(OP) == "D"
    matched = F.col(stored_order).isNotNull()
    effect = (
        F.when(matched & (order < F.col(stored_order)), F.lit(EFFECT_LATE))
        .when(matched & is_delete, F.lit(EFFECT_DELETE))
        .when(matched, F.lit(EFFECT_UPDATE))
        .when(F.col(tomb_order).isNotNull() & (order < F.col(tomb_order)), F.lit(EFFECT_LATE))
        .when(is_delete, F.lit(EFFECT_DELETE_MISSING))
        .otherwise(F.lit(EFFECT_INSERT))
    )
    return joined.withColumn(EFFECT, effect).drop(stored_order, tomb_order)


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
