"""The one table of column types: each type a table can hold, as Spark names it (``simpleString``
without its parameters), with what each reader needs to know of it.

A new type is a row here and the spellings that reach it in ``sources/catalog/dms_types.py`` (a
source engine's type -> DMS type); the configuration's names (``normalise_type``), the widening rules
(``compare_types``), the casts' numeric and timestamp sets, the DMS type -> Spark map, verify's
integer kind and the driver's and RowDelta's sets all read this table. docs/architecture.md ("A new
DMS column type") lists the places a type may also need, by what the type is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


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
    # Other spellings the configuration accepts for it.
    aliases: tuple[str, ...] = ()
    # DMS's own data types (CHAP_Reference.DataTypes) whose output is read as this type.
    dms: tuple[str, ...] = ()
    # A value as DMS writes it in a CSV file (tests/spark/test_every_type.py takes each type from here)
    example: str = ""


COLUMN_TYPES: tuple[ColumnType, ...] = (
    ColumnType("boolean", "bool", "boolean", dms=("BOOLEAN",), example="true"),
    ColumnType("tinyint", "int8", "int", family="integral", rank=1, integral=True, dms=("INT1",), example="-7"),
    ColumnType("smallint", "int16", "int", family="integral", rank=2, integral=True, dms=("INT2", "UINT1"),
               example="-1234"),
    ColumnType("int", "int32", "int", family="integral", rank=3, integral=True, aliases=("integer",),
               dms=("INT4", "UINT2"), example="123456789"),
    ColumnType("bigint", "int64", "long", family="integral", rank=4, integral=True, aliases=("long",),
               dms=("INT8", "UINT4"), example="-1234567890123"),
    ColumnType("float", "float32", "float", family="floating", rank=1, dms=("REAL4",), example="1.5"),
    ColumnType("double", "float64", "double", family="floating", rank=2, dms=("REAL8",), example="-2.25"),
    # Its precision and scale follow its name: decimal(p,s), widening within one scale.
    ColumnType("decimal", "decimal128", "decimal", family="decimal", example="12345678.91"),
    ColumnType("date", "date32", "date", dms=("DATE",), example="2024-02-29"),
    ColumnType("timestamp", "timestamp[us, tz=UTC]", "timestamptz", example="2024-01-02 03:04:05.123456"),
    ColumnType("timestamp_ntz", "timestamp[us]", "timestamp", example="1999-12-31 23:59:59.999999"),
    # Spark has no time-of-day type: TIME is its text.
    ColumnType("string", "string", "string", dms=("STRING", "WSTRING", "CLOB", "NCLOB", "TIME"), example="héllo wörld"),
    ColumnType("binary", "binary", "binary", example="raw bytes"),
)  # fmt: skip

BY_SPARK = {t.spark: t for t in COLUMN_TYPES}
INTEGRAL_TYPES = tuple(t.spark for t in COLUMN_TYPES if t.integral)
# The types whose values a cast to an integer or decimal may lose digits of.
NUMERIC_TYPES = tuple(t.spark for t in COLUMN_TYPES if t.family is not None)
TIMESTAMP_TYPES = tuple(t.spark for t in COLUMN_TYPES if t.arrow.startswith("timestamp"))
DRIVER_WRITE_TYPES = frozenset(t.spark for t in COLUMN_TYPES if t.driver_write)
ROW_DELTA_PLAIN_ICEBERG_TYPES = frozenset(t.iceberg for t in COLUMN_TYPES if t.row_delta_plain)
SPARK_BY_DMS = {dms: t.spark for t in COLUMN_TYPES for dms in t.dms}

MAX_DECIMAL_PRECISION = 38
_PARAMETERISED = {t.spark for t in COLUMN_TYPES if t.family == "decimal"}
_BY_NAME = {name: t.spark for t in COLUMN_TYPES if t.spark not in _PARAMETERISED for name in (t.spark, *t.aliases)}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")

TypeChange = Literal["same", "widen", "narrower", "incompatible"]


def normalise_type(type_name: str) -> str:
    """Canonical Spark SQL spelling of a configured type name, or ``ValueError``."""
    lowered = type_name.strip().lower()
    if lowered in _BY_NAME:
        return _BY_NAME[lowered]
    match = _DECIMAL.match(lowered)
    if match and 1 <= int(match.group(1)) <= MAX_DECIMAL_PRECISION and int(match.group(2)) <= int(match.group(1)):
        return f"decimal({match.group(1)},{match.group(2)})"
    raise ValueError(f"unknown type '{type_name}' (use one of {', '.join(sorted(_BY_NAME))} or decimal(p,s))")


def fraction_digits(type_name: str) -> int | None:
    """How many fraction digits a (normalised) integer or decimal type stores; None for others."""
    if type_name in INTEGRAL_TYPES:
        return 0
    match = _DECIMAL.match(type_name)
    return int(match.group(2)) if match else None


def compare_types(stored: str, incoming: str) -> TypeChange:
    """How a column of (normalised) type ``stored`` takes values of type ``incoming``: ``same``,
    ``widen`` (promote the column), ``narrower`` (cast the values) or ``incompatible``. Types widen
    up their family; decimals of one scale by precision."""
    if stored == incoming:
        return "same"
    old, new = _family_rank(stored), _family_rank(incoming)
    if old is None or new is None or old[0] != new[0]:
        return "incompatible"
    return "widen" if new[1] > old[1] else "narrower"


def _family_rank(type_name: str) -> tuple[str, int] | None:
    """A type's widening family and its rank there; a decimal's family holds its scale."""
    match = _DECIMAL.match(type_name)
    if match:
        return f"decimal scale {match.group(2)}", int(match.group(1))
    column_type = BY_SPARK.get(type_name)
    if column_type is None or column_type.family is None or column_type.family == "decimal":
        return None
    return column_type.family, column_type.rank


def types_table() -> str:
    """docs/configuration.md's table of the column types (between its ``types`` markers): each
    type's name, the other names the configuration takes, the DMS types read as it and what it
    widens to."""
    lines = ["| type | also written | DMS types read as it | a column of it widens to |", "|---|---|---|---|"]
    for t in COLUMN_TYPES:
        name = "decimal(p,s)" if t.family == "decimal" else t.spark
        wider = [u.spark for u in COLUMN_TYPES if t.family not in (None, "decimal") and u.family == t.family
                 and u.rank > t.rank]  # fmt: skip
        widens = "a larger precision, the same scale" if t.family == "decimal" else ", ".join(wider) or "—"
        aliases = ", ".join(f"`{a}`" for a in t.aliases) or "—"
        dms = ", ".join(t.dms) or "those with parameters (the engines' map)"
        lines.append(f"| `{name}` | {aliases} | {dms} | {widens} |")
    return "\n".join(lines)
