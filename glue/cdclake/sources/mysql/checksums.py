"""MariaDB's and MySQL's side of the checksums (``sources.checksum``): canonical text, row numbers and
range sums in their SQL, so an equal table sends a few numbers, not its rows.

Each kind of canonical text, written to match what silver holds from DMS's files
(``sources.catalog.dms_types``):

=============  ===========================================================================
kind           MySQL SQL
=============  ===========================================================================
text           character types, ENUM, SET, JSON: the value in utf8mb4; binary types
               (BINARY, VARBINARY, BLOBs, BIT(n > 1), spatial): ``HEX()``, upper case, as
               DMS's CSV holds bytes; TIME: ``TIME_FORMAT(..., '%H:%i:%s.%f')``, six fraction
               digits, hours past 24 and a sign kept; other types: ``CAST(... AS CHAR)``
integer        ``CAST(... AS CHAR)`` (YEAR included)
boolean        ``true`` unless 0 (BIT(1), or TINYINT(1) configured as boolean)
decimal:S      ``CAST(CAST(... AS DECIMAL(65,S)) AS CHAR)``: S digits, no exponent
date           ``DATE_FORMAT(..., '%Y-%m-%d')``
timestamp      ``DATE_FORMAT(..., '%Y-%m-%d %H:%i:%s.%f')`` in a session whose ``time_zone`` is
               ``+00:00``: a TIMESTAMP is an instant DMS writes in UTC (silver: ``timestamp``); a
               DATETIME is a wall-clock value written as stored (silver: ``timestamp_ntz``),
               which the session's zone does not change
binary         ``LOWER(HEX(...))`` (Parquet bronze: silver holds the bytes)
=============  ===========================================================================

A value's length in front of it is ``CHAR_LENGTH`` (characters, as Spark's ``length``; ``LENGTH``
counts bytes), and the MD5 is over the utf8mb4 bytes of the row's text. The row number is
``CAST(CONV(SUBSTRING(MD5(...), 1, 15), 16, 10) AS UNSIGNED)``; its sum is a DECIMAL, exact.

Ranges of a string key are compared as the bytes of its UTF-8 text (``CAST(... AS BINARY)``): the
order of code points, as Spark orders strings. A collation would not do: the ``_bin`` collations
of MariaDB and of MySQL 5.7 ignore trailing spaces (PAD SPACE), the ``_ci`` ones fold case. The
cast keeps the key's index out of use: each range of a string-keyed table is a scan of the table
(integer, decimal and date keys use their index).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdclake.sources.catalog.model import CatalogTable
from cdclake.sources.checksum import (
    HASH_DIGITS,
    KeyRange,
    PieceSql,
    RangeSum,
    Sums,
    bucket_of,
    row_pieces,
    where_in_ranges,
)

BINARY_TYPES = frozenset(
    {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point", "linestring"}
    | {"polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection"}
)
CHARACTER_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"})
TIME_FORMAT = "%H:%i:%s.%f"
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%i:%s.%f"


def quote_mysql(name: str) -> str:
    """A quoted name in a query run with parameters (PyMySQL formats with ``%``: a ``%`` is doubled)."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def base_type(column_type: str) -> str:
    """``int(10) unsigned`` -> ``int``, ``decimal(12,2)`` -> ``decimal``."""
    return column_type.lower().split("(")[0].split(" ")[0]


def stored_bytes(column: str, column_type: str) -> str:
    """The stored bytes (a BIT's ``HEX`` would drop its leading zero digits)."""
    return f"CAST({column} AS BINARY)" if base_type(column_type) == "bit" else column


def text(column_type: str, name: str, kind: str) -> str:
    """A column's canonical text (``sources.checksum``'s kinds) in MySQL's SQL; ``%`` doubled."""
    column = quote_mysql(name)
    base = base_type(column_type)
    if kind == "text":
        if base in BINARY_TYPES or base == "bit":
            return f"HEX({stored_bytes(column, column_type)})"
        if base == "time":
            return f"TIME_FORMAT({column}, '{TIME_FORMAT.replace('%', '%%')}')"
        if base in CHARACTER_TYPES:
            return f"CONVERT({column} USING utf8mb4)"
        return f"CAST({column} AS CHAR)"
    if kind == "integer":
        return f"CAST({column} AS CHAR)"
    if kind == "boolean":
        return f"CASE WHEN {column} <> 0 THEN 'true' ELSE 'false' END"
    if kind.startswith("decimal:"):
        scale = int(kind.split(":")[1])
        return f"CAST(CAST({column} AS DECIMAL(65,{scale})) AS CHAR)"
    if kind == "date":
        return f"DATE_FORMAT({column}, '%%Y-%%m-%%d')"
    if kind == "timestamp":
        return f"DATE_FORMAT({column}, '{TIMESTAMP_FORMAT.replace('%', '%%')}')"
    if kind == "binary":
        return f"LOWER(HEX({stored_bytes(column, column_type)}))"
    raise ValueError(f"no canonical text for kind {kind}")


PIECES = PieceSql(
    length=lambda value: f"CHAR_LENGTH({value})",
    concat=lambda texts: f"CONCAT({', '.join(texts)})",
    literal=lambda s: f"'{s}'",
)


def row_number(table: CatalogTable, columns: Sequence[tuple[str, str]]) -> str:
    """A row's number in MySQL's SQL: the first 15 hex digits of the MD5 of its canonical text."""
    parts = row_pieces(
        columns, lambda name, kind: text(table.column(name).source_type, name, kind), quote_mysql, PIECES
    )
    digest = f"MD5(CONVERT(CONCAT({', '.join(parts)}) USING utf8mb4))"
    return f"CAST(CONV(SUBSTRING({digest}, 1, {HASH_DIGITS}), 16, 10) AS UNSIGNED)"


def key_text(table: CatalogTable, name: str, kind: str) -> str:
    """The key column as compared with range boundaries: strings by their UTF-8 bytes (code points)."""
    if kind == "text":
        return f"CAST({text(table.column(name).source_type, name, kind)} AS BINARY)"
    return quote_mysql(name)


def range_condition(
    table: CatalogTable, key: tuple[str, str] | None, ranges: Sequence[KeyRange] | None
) -> tuple[str, list[Any]]:
    """A WHERE condition (and its parameters) for the rows in one of ``ranges``: "" for every row
    (no ranges, no key, or an unbounded range), "FALSE" for none."""
    return where_in_ranges(key_text(table, *key) if key else None, ranges, "FALSE")


def table_name(table: CatalogTable) -> str:
    return f"{quote_mysql(table.schema)}.{quote_mysql(table.name)}"


def sums_query(
    table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]], whole: KeyRange, cuts: int
) -> tuple[str, list[Any]]:
    """The query of ``cuts`` + 1 buckets' sums and the parameters of the range's ends; the
    boundaries' parameters go before them (the CASE comes first)."""
    where, parameters = range_condition(table, key, [whole])
    bucket = bucket_of(key_text(table, *key) if key else None, cuts)
    query = (
        f"SELECT {bucket} AS bucket, COUNT(*), COALESCE(SUM({row_number(table, columns)}), 0) "
        f"FROM {table_name(table)}{' WHERE ' + where if where else ''} GROUP BY 1"
    )
    return query, parameters


def source_sums(
    conn: Any, table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]
) -> Sums:
    """MySQL's ``Sums`` of ``table`` over a PyMySQL connection (``key`` None: one range)."""

    def sums(whole: KeyRange, cuts: Sequence[Any]) -> dict[int, RangeSum]:
        query, parameters = sums_query(table, key, columns, whole, len(cuts))
        with conn.cursor() as cur:
            cur.execute(query, (*cuts, *parameters))
            return {int(b): RangeSum(int(n), int(total)) for b, n, total in cur.fetchall()}

    return sums
