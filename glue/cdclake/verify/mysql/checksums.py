"""MariaDB's and MySQL's side of the checksums (``verify.checksum``): canonical text, row numbers and
range sums in their SQL (``verify.checksum_sql`` builds the queries from the table here), so an equal
table sends a few numbers, not its rows.

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
timestamp      ``TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ...)`` in a session whose
               ``time_zone`` is ``+00:00``: a TIMESTAMP is an instant DMS writes in UTC (silver:
               ``timestamp``); a DATETIME is a wall-clock value written as stored (silver:
               ``timestamp_ntz``), which the session's zone does not change
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

from cdclake.sources.catalog.dms_types import MYSQL_BYTES
from cdclake.verify.checksum import HASH_DIGITS, PieceSql
from cdclake.verify.checksum_sql import ChecksumSql, by_types

CHARACTER_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json")
TIME_FORMAT = "%%H:%%i:%%s.%%f"  # ``%`` doubled: PyMySQL formats every query with ``%``
DATE_FORMAT = "%%Y-%%m-%%d"


def quote_mysql(name: str) -> str:
    """A quoted name in a query run with parameters (PyMySQL formats with ``%``: a ``%`` is doubled)."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def base_type(column_type: str) -> str:
    """``int(10) unsigned`` -> ``int``, ``decimal(12,2)`` -> ``decimal``."""
    return column_type.lower().split("(")[0].split(" ")[0]


def stored_bytes(column: str, column_type: str) -> str:
    """The stored bytes (a BIT's ``HEX`` would drop its leading zero digits)."""
    return f"CAST({column} AS BINARY)" if base_type(column_type) == "bit" else column


def _number(pieces: Sequence[str]) -> str:
    """The first 15 hex digits of the MD5 of the row's utf8mb4 text, as an unsigned integer."""
    digest = f"MD5(CONVERT(CONCAT({', '.join(pieces)}) USING utf8mb4))"
    return f"CAST(CONV(SUBSTRING({digest}, 1, {HASH_DIGITS}), 16, 10) AS UNSIGNED)"


SQL = ChecksumSql(
    quote=quote_mysql,
    base_type=base_type,
    kinds={
        "text": "CAST({column} AS CHAR)",
        "integer": "CAST({column} AS CHAR)",
        "boolean": "CASE WHEN {column} <> 0 THEN 'true' ELSE 'false' END",
        "decimal": "CAST(CAST({column} AS DECIMAL(65,{scale})) AS CHAR)",
        "date": f"DATE_FORMAT({{column}}, '{DATE_FORMAT}')",
        "timestamp": "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {column}) AS CHAR)",
        "binary": "LOWER(HEX({column}))",
    },
    by_type={
        **by_types(MYSQL_BYTES, "text", "HEX({column})"),
        **by_types(CHARACTER_TYPES, "text", "CONVERT({column} USING utf8mb4)"),
        ("bit", "text"): "HEX(CAST({column} AS BINARY))",
        ("bit", "binary"): "LOWER(HEX(CAST({column} AS BINARY)))",
        ("time", "text"): f"TIME_FORMAT({{column}}, '{TIME_FORMAT}')",
    },
    pieces=PieceSql(
        length=lambda value: f"CHAR_LENGTH({value})",
        concat=lambda texts: f"CONCAT({', '.join(texts)})",
        literal=lambda s: f"'{s}'",
    ),
    number=_number,
    string_key="CAST({text} AS BINARY)",
    false="FALSE",
)
