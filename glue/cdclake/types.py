"""The one table of column types: each type a table can hold, as Spark names it (``simpleString``
without its parameters), with what each reader needs to know of it.

A new type is a row here, its source spellings in ``sources/catalog/dms_types.py`` and, where the
driver cannot write it yet, the writer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnType:
    """One column type: its Spark name, its Arrow and Iceberg names, and what may handle it."""

    spark: str
    arrow: str
    iceberg: str
    # Its rank in a widening family (a column may move up the family, never down), or None.
    family: str | None = None
    rank: int = 0
    integral: bool = False
    # The driver collects it to Arrow and back without loss (``driver_write.collectable``).
    driver_write: bool = True
    # Spark writes its Parquet form exactly as Iceberg's writer does (``row_delta``'s plain path).
    row_delta_plain: bool = True


COLUMN_TYPES: tuple[ColumnType, ...] = (
    ColumnType("boolean", "bool", "boolean"),
    ColumnType("tinyint", "int8", "int", family="integral", rank=1, integral=True),
    ColumnType("smallint", "int16", "int", family="integral", rank=2, integral=True),
    ColumnType("int", "int32", "int", family="integral", rank=3, integral=True),
    ColumnType("bigint", "int64", "long", family="integral", rank=4, integral=True),
    ColumnType("float", "float32", "float", family="floating", rank=1),
    ColumnType("double", "float64", "double", family="floating", rank=2),
    ColumnType("decimal", "decimal128", "decimal"),
    ColumnType("date", "date32", "date"),
    ColumnType("timestamp", "timestamp[us, tz=UTC]", "timestamptz"),
    ColumnType("timestamp_ntz", "timestamp[us]", "timestamp"),
    ColumnType("string", "string", "string"),
    ColumnType("binary", "binary", "binary"),
)

BY_SPARK = {t.spark: t for t in COLUMN_TYPES}
INTEGRAL_TYPES = tuple(t.spark for t in COLUMN_TYPES if t.integral)
DRIVER_WRITE_TYPES = frozenset(t.spark for t in COLUMN_TYPES if t.driver_write)
ROW_DELTA_PLAIN_ICEBERG_TYPES = frozenset(t.iceberg for t in COLUMN_TYPES if t.row_delta_plain)


def widens(old: str, new: str) -> bool:
    """Whether a column of Spark type ``old`` may become ``new`` (the same family, not narrower)."""
    before, after = BY_SPARK.get(old), BY_SPARK.get(new)
    if before is None or after is None or before.family is None:
        return old == new
    return before.family == after.family and after.rank >= before.rank
