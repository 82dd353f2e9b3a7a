"""PostgreSQL's side of the checksums (``sources.checksum``): canonical text, row numbers and range sums in
PostgreSQL's own SQL, so an equal table sends a few numbers, not its rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdclake.identifiers import quote_pg as _quote_pg
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
from cdclake.sources.postgres.catalog import SourceTable

_TEXT_TYPES = {"text", "varchar", "bpchar", "name"}


def quote_pg(name: str) -> str:
    """A quoted name in a query run with parameters (psycopg2 reads a bare ``%`` as a placeholder)."""
    return _quote_pg(name).replace("%", "%%")


def text(table: SourceTable, name: str, kind: str) -> str:
    """A column's canonical text (``sources.checksum``'s kinds) in PostgreSQL's SQL."""
    column = quote_pg(name)
    pg_type = table.column(name).pg_type
    if kind == "text":
        # bytea as silver holds it (hex); another type without text form as its output text
        # (``concat`` calls the output function), as capture writes it.
        if pg_type == "bytea":
            return f"encode({column}, 'hex')"
        return column if pg_type in _TEXT_TYPES else f"concat({column})"
    if kind == "integer":
        return f"{column}::text"
    if kind == "boolean":
        return f"CASE WHEN {column} THEN 'true' ELSE 'false' END"
    if kind.startswith("decimal:"):
        scale = int(kind.split(":")[1])
        value = f"{column}::numeric" if pg_type == "money" else column
        return f"({value})::numeric(1000,{scale})::text"
    if kind == "date":
        return f"to_char({column}, 'YYYY-MM-DD')"
    if kind == "timestamp":
        at = f"{column} AT TIME ZONE 'UTC'" if pg_type == "timestamptz" else column
        return f"to_char({at}, 'YYYY-MM-DD HH24:MI:SS.US')"
    if kind == "binary":
        return f"encode({column}, 'hex')"
    raise ValueError(f"no canonical text for kind {kind}")


PIECES = PieceSql(length=lambda value: f"length({value})::text", concat=" || ".join, literal=lambda s: f"'{s}'")


def row_number(table: SourceTable, columns: Sequence[tuple[str, str]]) -> str:
    """A row's number in PostgreSQL's SQL: the first 15 hex digits of the MD5 of its canonical text."""
    parts = row_pieces(columns, lambda name, kind: text(table, name, kind), quote_pg, PIECES)
    digest = f"md5(convert_to({' || '.join(parts)}, 'UTF8'))"
    return f"('x' || substr({digest}, 1, {HASH_DIGITS}))::bit({HASH_DIGITS * 4})::bigint"


def key_text(name: str, kind: str) -> str:
    """The key column as compared with range boundaries: strings by code point, as Spark does."""
    return f'{quote_pg(name)} COLLATE "C"' if kind == "text" else quote_pg(name)


def range_condition(key: tuple[str, str] | None, ranges: Sequence[KeyRange] | None) -> tuple[str, list[Any]]:
    """A WHERE condition (and its parameters) for the rows in one of ``ranges``: "" for every row
    (no ranges, no key, or an unbounded range), "false" for none."""
    return where_in_ranges(key_text(*key) if key else None, ranges, "false")


def sums_query(
    table: SourceTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]], whole: KeyRange, cuts: int
) -> tuple[str, list[Any]]:
    """The query (and its parameters, boundaries after the range's ends) of ``cuts`` + 1 buckets' sums."""
    where, parameters = range_condition(key, [whole])
    bucket = bucket_of(key_text(*key) if key else None, cuts)
    name = f"{quote_pg(table.schema)}.{quote_pg(table.name)}"
    query = (
        f"SELECT {bucket} AS bucket, count(*), coalesce(sum({row_number(table, columns)}), 0) "
        f"FROM {name}{' WHERE ' + where if where else ''} GROUP BY 1"
    )
    return query, parameters


def source_sums(conn: Any, table: SourceTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
    """PostgreSQL's ``Sums`` of ``table`` (``key`` None: one range, the whole table)."""

    def sums(whole: KeyRange, cuts: Sequence[Any]) -> dict[int, RangeSum]:
        query, parameters = sums_query(table, key, columns, whole, len(cuts))
        bucket_parameters = list(cuts)
        # The CASE's boundaries come first in the SELECT list, the range's ends in the WHERE clause after.
        with conn.cursor() as cur:
            cur.execute(query, [*bucket_parameters, *parameters])
            return {int(b): RangeSum(int(n), int(total)) for b, n, total in cur.fetchall()}

    return sums
