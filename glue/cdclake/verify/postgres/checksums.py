"""PostgreSQL's side of the checksums (``verify.checksum``): canonical text, row numbers and range sums in
PostgreSQL's own SQL (``verify.checksum_sql`` builds the queries from the table here), so an equal table
sends a few numbers, not its rows.

A column typed ``string`` whose source type is not text (inet, arrays, ranges, uuid, ...) is its output text
(``concat`` calls the output function), as capture writes it; bytea is hex, as silver holds it; money is
its numeric value; a ``timestamptz`` is moved to UTC. Strings are ordered ``COLLATE "C"``: by code point.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdclake.identifiers import quote_pg as _quote_pg
from cdclake.verify.checksum import HASH_DIGITS, PieceSql
from cdclake.verify.checksum_sql import ChecksumSql, by_types

TEXT_TYPES = ("text", "varchar", "bpchar", "name")
# Microseconds since the epoch: a timestamptz's instant, a timestamp's wall clock as if in UTC (EXTRACT's
# numeric is exact; round, not trunc, would keep it exact were it a double, as before PostgreSQL 14).
TIMESTAMP_MICROS = "round(extract(epoch FROM {column}) * 1000000)::numeric::text"


def quote_pg(name: str) -> str:
    """A quoted name in a query run with parameters (psycopg2 reads a bare ``%`` as a placeholder)."""
    return _quote_pg(name).replace("%", "%%")


def _number(pieces: Sequence[str]) -> str:
    """The first 15 hex digits of the MD5 of the row's text, as a bigint."""
    digest = f"md5(convert_to({' || '.join(pieces)}, 'UTF8'))"
    return f"('x' || substr({digest}, 1, {HASH_DIGITS}))::bit({HASH_DIGITS * 4})::bigint"


SQL = ChecksumSql(
    quote=quote_pg,
    base_type=lambda pg_type: pg_type,  # SourceColumn.pg_type is the base type already
    kinds={
        "text": "concat({column})",
        "integer": "{column}::text",
        "boolean": "CASE WHEN {column} THEN 'true' ELSE 'false' END",
        "decimal": "({column})::numeric(1000,{scale})::text",
        "date": "to_char({column}, 'YYYY-MM-DD')",
        "timestamp": TIMESTAMP_MICROS,
        "binary": "encode({column}, 'hex')",
    },
    by_type={
        **by_types(TEXT_TYPES, "text", "{column}"),
        ("bytea", "text"): "encode({column}, 'hex')",
        ("money", "decimal"): "({column}::numeric)::numeric(1000,{scale})::text",
    },
    pieces=PieceSql(length=lambda value: f"length({value})::text", concat=" || ".join, literal=lambda s: f"'{s}'"),
    number=_number,
    string_key='{text} COLLATE "C"',
    false="false",
    numbered_rows=" OFFSET 0",
)
