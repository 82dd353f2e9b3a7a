"""SQL Server's side of the checksums (``sources.checksum``): canonical text, row numbers and range
sums in T-SQL. Written from Microsoft's documentation and checked by unit tests (golden SQL, and the
canonical text rules shared with the other engines: tests/unit/test_verify_dialects.py); no server
runs here, so none of it has run against a live SQL Server.

Each value's text is built as ``nvarchar`` and the row's whole text is converted once to UTF-8
(``varchar`` under ``Latin1_General_100_CI_AS_SC_UTF8``, SQL Server 2019 and later) before
``HASHBYTES('MD5', ...)``: the bytes Spark hashes. A value's length is ``LEN(value + N'x') - 1`` (LEN
ignores trailing spaces) under an ``_SC`` collation, which counts a surrogate pair as one character,
as Spark counts code points.

=============  ===========================================================================
kind           T-SQL
=============  ===========================================================================
text           binary types (BINARY, VARBINARY, IMAGE, ROWVERSION): upper-case hex,
               ``CONVERT(varchar(max), x, 2)``; TIME: ``CAST(x AS time(6))`` printed
               (``hh:mm:ss.ffffff``); everything else ``CAST(x AS nvarchar(max))``
integer        ``CAST(x AS nvarchar(20))``
boolean        ``true`` when 1
decimal:S      ``CAST(CAST(x AS decimal(38,S)) AS nvarchar(50))``: S digits, no exponent
date           ``CONVERT(nvarchar(10), x, 23)``
timestamp      ``CONVERT(nvarchar(26), CAST(x AS datetime2(6)), 121)``; a DATETIMEOFFSET first
               moved to UTC (``SWITCHOFFSET(x, '+00:00')``)
binary         ``LOWER(CONVERT(varchar(max), x, 2))``
=============  ===========================================================================

Not exact, named (``INEXACT``): DATETIME2(7) and DATETIMEOFFSET(7) keep 100 ns, which the cast to
six digits rounds (silver's microseconds are what DMS wrote); DATETIME counts in 1/300 s (``.003``
becomes ``.003333``); FLOAT and REAL (no canonical text anywhere). Columns of those types are
compared row by row. Strings keyed ranges order by ``Latin1_General_100_BIN2`` over ``nvarchar``:
UTF-16 code units, which is code-point order except that characters past U+FFFF sort before
U+E000..U+FFFF (a key range may then differ in membership on both sides: such keys are read row by
row, never skipped). Before SQL Server 2016, ``HASHBYTES`` takes at most 8,000 bytes.
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

BINARY_TYPES = frozenset({"binary", "varbinary", "image", "timestamp", "rowversion"})
UTF8 = "Latin1_General_100_CI_AS_SC_UTF8"
CODE_POINT_ORDER = "Latin1_General_100_BIN2"
# Types whose canonical text T-SQL cannot produce exactly for their configured kind (module docstring).
INEXACT = {"datetime2": "timestamp", "datetimeoffset": "timestamp", "datetime": "timestamp"}


def quote_tsql(name: str) -> str:
    """A bracketed name in a query run with parameters (python-tds formats with ``%``)."""
    return "[" + name.replace("]", "]]").replace("%", "%%") + "]"


def base_type(column_type: str) -> str:
    """``nvarchar(40)`` -> ``nvarchar``."""
    return column_type.lower().split("(")[0].strip()


def inexact(column_type: str, kind: str) -> bool:
    """Whether T-SQL's text of this column for ``kind`` may differ from silver's where both are right."""
    base = base_type(column_type)
    if INEXACT.get(base) != kind:
        return False
    return base == "datetime" or not column_type.endswith(("(0)", "(1)", "(2)", "(3)", "(4)", "(5)", "(6)"))


def text(column_type: str, name: str, kind: str) -> str:
    """A column's canonical text (``sources.checksum``'s kinds) in T-SQL, as ``nvarchar``."""
    column = quote_tsql(name)
    base = base_type(column_type)
    if kind == "text":
        if base in BINARY_TYPES:
            return f"CAST(CONVERT(varchar(max), {column}, 2) AS nvarchar(max))"
        if base == "time":
            return f"CAST(CAST({column} AS time(6)) AS nvarchar(15))"
        return f"CAST({column} AS nvarchar(max))"
    if kind == "integer":
        return f"CAST({column} AS nvarchar(20))"
    if kind == "boolean":
        return f"CASE WHEN {column} = 1 THEN N'true' ELSE N'false' END"
    if kind.startswith("decimal:"):
        scale = int(kind.split(":")[1])
        return f"CAST(CAST({column} AS decimal(38,{scale})) AS nvarchar(50))"
    if kind == "date":
        return f"CONVERT(nvarchar(10), {column}, 23)"
    if kind == "timestamp":
        value = f"SWITCHOFFSET({column}, '+00:00')" if base == "datetimeoffset" else column
        return f"CONVERT(nvarchar(26), CAST({value} AS datetime2(6)), 121)"
    if kind == "binary":
        return f"CAST(LOWER(CONVERT(varchar(max), {column}, 2)) AS nvarchar(max))"
    raise ValueError(f"no canonical text for kind {kind}")


# LEN ignores trailing spaces: the length of the text and one more character, less one
PIECES = PieceSql(
    length=lambda value: f"CAST(LEN({value} COLLATE {UTF8} + N'x') - 1 AS nvarchar(20))",
    concat=lambda texts: f"CONCAT({', '.join(texts)})",
    literal=lambda s: f"N'{s}'",
)


def row_number(table: CatalogTable, columns: Sequence[tuple[str, str]]) -> str:
    """A row's number in T-SQL: the first 15 hex digits of the MD5 of its UTF-8 canonical text."""

    def value(name: str, kind: str) -> str:
        return text(table.column(name).source_type, name, kind)

    parts = row_pieces(columns, value, quote_tsql, PIECES)
    # ``+``, not CONCAT (at most 254 arguments): no part is NULL
    row_text = " + ".join(["CAST(N'' AS nvarchar(max))", *parts])
    digest = f"HASHBYTES('MD5', CONVERT(varchar(max), ({row_text}) COLLATE {UTF8}))"
    # 15 hex digits behind a 0: 8 bytes, a positive bigint
    hexadecimal = f"'0' + LEFT(CONVERT(varchar(32), {digest}, 2), {HASH_DIGITS})"
    return f"CAST(CAST(CONVERT(varbinary(8), {hexadecimal}, 2) AS bigint) AS decimal(38,0))"


def key_text(table: CatalogTable, name: str, kind: str) -> str:
    """The key column as compared with range boundaries: strings by code unit, as module says."""
    if kind == "text":
        return f"{text(table.column(name).source_type, name, kind)} COLLATE {CODE_POINT_ORDER}"
    return quote_tsql(name)


def range_condition(
    table: CatalogTable, key: tuple[str, str] | None, ranges: Sequence[KeyRange] | None
) -> tuple[str, list[Any]]:
    """A WHERE condition (and its parameters) for the rows in one of ``ranges``: "" for every row
    (no ranges, no key, or an unbounded range), ``1 = 0`` for none."""
    return where_in_ranges(key_text(table, *key) if key else None, ranges, "1 = 0")


def table_name(table: CatalogTable) -> str:
    return f"{quote_tsql(table.schema)}.{quote_tsql(table.name)}"


def sums_query(
    table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]], whole: KeyRange, cuts: int
) -> tuple[str, list[Any]]:
    """The query of ``cuts`` + 1 buckets' sums and the parameters of the range's ends; the
    boundaries' parameters go before them. T-SQL groups by no position nor by an expression with
    parameters: the buckets are computed in a derived table."""
    where, parameters = range_condition(table, key, [whole])
    bucket = bucket_of(key_text(table, *key) if key else None, cuts)
    numbered = (
        f"SELECT {bucket} AS bucket, {row_number(table, columns)} AS number "
        f"FROM {table_name(table)}{' WHERE ' + where if where else ''}"
    )
    query = f"SELECT bucket, COUNT_BIG(*), COALESCE(SUM(number), 0) FROM ({numbered}) AS numbered GROUP BY bucket"
    return query, parameters


def source_sums(
    conn: Any, table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]
) -> Sums:
    """SQL Server's ``Sums`` of ``table`` over a python-tds connection (``key`` None: one range)."""

    def sums(whole: KeyRange, cuts: Sequence[Any]) -> dict[int, RangeSum]:
        query, parameters = sums_query(table, key, columns, whole, len(cuts))
        cur = conn.cursor()
        try:
            cur.execute(query, [*cuts, *parameters])
            return {int(b): RangeSum(int(n), int(total)) for b, n, total in cur.fetchall()}
        finally:
            cur.close()

    return sums
