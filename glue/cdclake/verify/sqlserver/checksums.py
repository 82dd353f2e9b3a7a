"""SQL Server's side of the checksums (``verify.checksum``): canonical text, row numbers and range
sums in T-SQL (``verify.checksum_sql`` builds the queries from the table here). Written from
Microsoft's documentation and checked by unit tests (golden SQL, and the canonical text rules shared with
the other engines: tests/unit/test_verify_dialects.py); no server runs here, so none of it has run
against a live SQL Server.

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
timestamp      ``DATEDIFF_BIG(microsecond, '1970-01-01', CAST(x AS datetime2(6)))`` printed; a
               DATETIMEOFFSET first moved to UTC (``SWITCHOFFSET(x, '+00:00')``)
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

from cdclake.sources.catalog.dms_types import SQLSERVER_BYTES
from cdclake.verify.checksum import HASH_DIGITS, PieceSql
from cdclake.verify.checksum_sql import ChecksumSql, by_types

UTF8 = "Latin1_General_100_CI_AS_SC_UTF8"
CODE_POINT_ORDER = "Latin1_General_100_BIN2"
# Types whose canonical text T-SQL cannot produce exactly for their configured kind (module docstring).
INEXACT = {"datetime2": "timestamp", "datetimeoffset": "timestamp", "datetime": "timestamp"}
# Microseconds since the epoch: between two datetime2(6) values, DATEDIFF_BIG's microsecond boundaries crossed
# are their exact difference.
TIMESTAMP_TEXT = (
    "CAST(DATEDIFF_BIG(microsecond, CAST('1970-01-01' AS datetime2(6)), CAST({value} AS datetime2(6))) AS nvarchar(20))"
)


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


def _number(pieces: Sequence[str]) -> str:
    """The first 15 hex digits of the MD5 of the row's UTF-8 text, as a decimal(38,0)."""
    # ``+``, not CONCAT (at most 254 arguments): no part is NULL
    row_text = " + ".join(["CAST(N'' AS nvarchar(max))", *pieces])
    digest = f"HASHBYTES('MD5', CONVERT(varchar(max), ({row_text}) COLLATE {UTF8}))"
    # 15 hex digits behind a 0: 8 bytes, a positive bigint
    hexadecimal = f"'0' + LEFT(CONVERT(varchar(32), {digest}, 2), {HASH_DIGITS})"
    return f"CAST(CAST(CONVERT(varbinary(8), {hexadecimal}, 2) AS bigint) AS decimal(38,0))"


SQL = ChecksumSql(
    quote=quote_tsql,
    base_type=base_type,
    kinds={
        "text": "CAST({column} AS nvarchar(max))",
        "integer": "CAST({column} AS nvarchar(20))",
        "boolean": "CASE WHEN {column} = 1 THEN N'true' ELSE N'false' END",
        "decimal": "CAST(CAST({column} AS decimal(38,{scale})) AS nvarchar(50))",
        "date": "CONVERT(nvarchar(10), {column}, 23)",
        "timestamp": TIMESTAMP_TEXT.format(value="{column}"),
        "binary": "CAST(LOWER(CONVERT(varchar(max), {column}, 2)) AS nvarchar(max))",
    },
    by_type={
        **by_types(SQLSERVER_BYTES, "text", "CAST(CONVERT(varchar(max), {column}, 2) AS nvarchar(max))"),
        ("time", "text"): "CAST(CAST({column} AS time(6)) AS nvarchar(15))",
        ("datetimeoffset", "timestamp"): TIMESTAMP_TEXT.format(value="SWITCHOFFSET({column}, '+00:00')"),
    },
    # LEN ignores trailing spaces: the length of the text and one more character, less one
    pieces=PieceSql(
        length=lambda value: f"CAST(LEN({value} COLLATE {UTF8} + N'x') - 1 AS nvarchar(20))",
        concat=lambda texts: f"CONCAT({', '.join(texts)})",
        literal=lambda s: f"N'{s}'",
    ),
    number=_number,
    string_key=f"{{text}} COLLATE {CODE_POINT_ORDER}",
    false="1 = 0",
    numbered_rows="",
    count="COUNT_BIG(*)",
)
