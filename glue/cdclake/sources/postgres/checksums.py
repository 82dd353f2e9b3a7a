"""PostgreSQL's side of the checksums (``sources.checksum``): canonical text, row numbers and range sums in
PostgreSQL's own SQL, so an equal table sends a few numbers, not its rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdclake.identifiers import quote_pg as _quote_pg
from cdclake.sources.checksum import END, HASH_DIGITS, NULL_PIECE, NULL_TEXT, KeyRange, RangeSum, Sums
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


def row_number(table: SourceTable, columns: Sequence[tuple[str, str]]) -> str:
    """A row's number in PostgreSQL's SQL: the first 15 hex digits of the MD5 of its canonical text."""
    parts = []
    for name, kind in columns:
        value = text(table, name, kind)
        if kind == "text":
            piece, null = f"length({value})::text || ':' || {value}", NULL_TEXT
        else:
            piece, null = f"{value} || '{END}'", NULL_PIECE
        parts.append(f"CASE WHEN {quote_pg(name)} IS NULL THEN '{null}' ELSE {piece} END")
    digest = f"md5(convert_to({' || '.join(parts)}, 'UTF8'))"
    return f"('x' || substr({digest}, 1, {HASH_DIGITS}))::bit({HASH_DIGITS * 4})::bigint"


def key_text(name: str, kind: str) -> str:
    """The key column as compared with range boundaries: strings by code point, as Spark does."""
    return f'{quote_pg(name)} COLLATE "C"' if kind == "text" else quote_pg(name)


def range_condition(key: tuple[str, str] | None, ranges: Sequence[KeyRange] | None) -> tuple[str, list[Any]]:
    """A WHERE condition (and its parameters) for the rows in one of ``ranges``: "" for every row
    (no ranges, no key, or an unbounded range), "false" for none."""
    if ranges is None or key is None:
        return ("" if ranges is None or ranges else "false"), []
    column = key_text(*key)
    conditions, parameters = [], []
    for part in ranges:
        bounds = []
        if part.low is not None:
            bounds.append(f"{column} >= %s")
            parameters.append(part.low)
        if part.high is not None:
            bounds.append(f"{column} < %s")
            parameters.append(part.high)
        if not bounds:
            return "", []
        conditions.append("(" + " AND ".join(bounds) + ")")
    return (" OR ".join(conditions) or "false"), parameters


def sums_query(
    table: SourceTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]], whole: KeyRange, cuts: int
) -> tuple[str, list[Any]]:
    """The query (and its parameters, boundaries after the range's ends) of ``cuts`` + 1 buckets' sums."""
    where, parameters = range_condition(key, [whole])
    bucket = "0"
    if key is not None and cuts:
        column = key_text(*key)
        bucket = "CASE " + " ".join(f"WHEN {column} < %s THEN {i}" for i in range(cuts)) + f" ELSE {cuts} END"
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
