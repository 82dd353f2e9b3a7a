"""The pure core of the engine: raw DMS rows -> typed, validated, cleaned, de-duplicated changes.

Every function here is ``DataFrame -> DataFrame`` with its parameters passed in; none reads or
writes anything. Bookkeeping columns all start with ``_cdc_`` and never reach silver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdclake.config import BronzeSettings, CleaningRules, TableConfig
from cdclake.errors import ConfigError
from cdclake.layout import DMS_OP_COLUMN
from cdclake.reader import CORRUPT_RECORD, FILE_ORDINAL, ROW_POSITION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

OP = "_cdc_op"
COMMIT_TS = "_cdc_ts"
CHANGE_SEQ = "_cdc_seq"
ERROR = "_cdc_error"
ORDER_COLUMNS = (COMMIT_TS, CHANGE_SEQ, FILE_ORDINAL, ROW_POSITION)
BOOKKEEPING = (OP, *ORDER_COLUMNS, ERROR)
VALID_OPS = ("I", "U", "D")


def data_columns(df: DataFrame) -> list[str]:
    """The columns of ``df`` that describe the source row (everything but bookkeeping)."""
    return [c for c in df.columns if c not in BOOKKEEPING]


def _add_error(df: DataFrame, condition: Column, reason: Column) -> DataFrame:
    """Append ``reason`` to the row's error text where ``condition`` holds."""
    from pyspark.sql import functions as F

    new = F.when(condition, reason)
    return df.withColumn(
        ERROR,
        F.when(F.col(ERROR).isNull(), new).otherwise(
            F.when(new.isNull(), F.col(ERROR)).otherwise(F.concat_ws("; ", F.col(ERROR), new))
        ),
    )


def _excerpt(value: Column, length: int = 40) -> Column:
    """A value short enough to quote in an error message."""
    from pyspark.sql import functions as F

    text = value.cast("string")
    return F.when(F.length(text) > length, F.concat(F.substring(text, 1, length), F.lit("..."))).otherwise(text)


def _checked_cast(df: DataFrame, column: str, type_name: str) -> DataFrame:
    """Cast ``column``; a non-NULL value that does not convert is an error, never a silent NULL."""
    from pyspark.sql import functions as F

    original = F.col(column)
    df = df.withColumn("_cdc_cast", original.cast(type_name))
    df = _add_error(
        df,
        original.isNotNull() & F.col("_cdc_cast").isNull(),
        F.format_string(f"value '%s' of column {column} is not a valid {type_name}", _excerpt(original)),
    )
    return df.withColumn(column, F.col("_cdc_cast")).drop("_cdc_cast")


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
    df = (
        raw.withColumn(OP, op)
        .withColumn(COMMIT_TS, F.col(ts_name).cast("string") if ts_name in columns else F.lit(None).cast("string"))
        .withColumn(CHANGE_SEQ, F.col(seq_name).cast("string") if seq_name in columns else F.lit(None).cast("string"))
        .withColumn(ERROR, F.lit(None).cast("string"))
    )
    df = _add_error(df, F.col(CORRUPT_RECORD).isNotNull(), F.lit("wrong number of fields"))
    known_op = F.coalesce(F.col(OP).isin(*VALID_OPS), F.lit(False))
    df = _add_error(df, ~known_op, F.format_string("unknown Op '%s'", _excerpt(F.col(OP))))
    for column, type_name in table.columns.items():
        if column in columns and column != seq_name:
            df = _checked_cast(df, column, type_name)
    drop = [c for c in (DMS_OP_COLUMN, CORRUPT_RECORD, seq_name) if c and c in columns]
    return df.drop(*drop)


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

    for column, type_name in rules.cast.items():
        require(column, "cast")
        df = _checked_cast(df, column, type_name)
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
        df = df.withColumnRenamed(old, new)
    for column in rules.drop:
        require(column, "drop")
    return df.drop(*rules.drop)


def flag_missing_keys(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Mark rows whose primary key has a NULL part: they cannot be matched to a silver row."""
    from pyspark.sql import functions as F

    for column in key:
        df = _add_error(df, F.col(column).isNull(), F.lit(f"primary key column {column} is NULL"))
    return df


def change_order() -> Column:
    """The apply order of changes: commit timestamp, change sequence, file order, row in file."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(c) for c in ORDER_COLUMNS])


def latest_change_per_key(df: DataFrame, key: Sequence[str]) -> DataFrame:
    """Keep the last change of each key by ``change_order()``; columns are unchanged.

    Ties are impossible: file ordinal and row position make every change unique.
    """
    from pyspark.sql import functions as F

    values = [c for c in df.columns if c not in key]
    latest = df.groupBy(*key).agg(F.max_by(F.struct(*values), change_order()).alias("_cdc_latest"))
    return latest.select(*key, *[F.col(f"_cdc_latest.{c}").alias(c) for c in values])


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def merge_statement(target: str, source_view: str, key: Sequence[str], columns: Sequence[str]) -> str:
    """One MERGE that applies de-duplicated changes (one row per key) to ``target``.

    Deletes remove a matched row and ignore a missing one; inserts and updates both upsert, so an
    insert of an existing key updates it and an update of a missing key inserts it.
    """
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
    non_key = [c for c in columns if c not in key]
    insert_cols = ", ".join(quote(c) for c in columns)
    insert_vals = ", ".join(f"s.{quote(c)}" for c in columns)
    lines = [
        f"MERGE INTO {target} AS t",
        f"USING {source_view} AS s",
        f"ON {on}",
        f"WHEN MATCHED AND s.{OP} = 'D' THEN DELETE",
    ]
    if non_key:
        sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in non_key)
        lines.append(f"WHEN MATCHED THEN UPDATE SET {sets}")
    lines.append(f"WHEN NOT MATCHED AND s.{OP} <> 'D' THEN INSERT ({insert_cols}) VALUES ({insert_vals})")
    return "\n".join(lines)
