"""The latest change of each key in a batch, and its effect against the stored rows (pure:
``DataFrame -> DataFrame``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdclake.columns import (
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_LATE,
    EFFECT_UPDATE,
    OP,
    ORDER_COLUMNS,
    SILVER_ORDER,
)
from cdclake.engine.changes import unchanged_flags
from cdclake.identifiers import quote

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def change_order() -> Column:
    """The apply order of changes: commit timestamp, change sequence, file order, row in file."""
    from pyspark.sql import functions as F

    return F.expr(f"struct({', '.join(ORDER_COLUMNS)})")


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
    # The carried values as one struct in SQL text: one call into the JVM, not two per column.
    aggregates = [F.max_by(F.expr(f"struct({', '.join(quote(c) for c in values)})"), order).alias("_cdc_latest")]
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
    carried = [f"_cdc_latest.{quote(c)} AS {quote(c)}" for c in values]
    return latest.selectExpr(*[quote(k) for k in key], *carried, *[quote(c) for c in (*flags, *flags.values())])


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
