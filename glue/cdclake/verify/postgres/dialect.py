"""PostgreSQL's side of ``cdclake verify`` (the engine-neutral comparison: ``verify.compare``).

The rows are read typed through psycopg2 (``Decimal``, aware ``datetime``, ``bytes``, ``money`` as
``numeric``, ...); the checksums' SQL is ``verify.postgres.checksums``. Columns typed ``string``
whose source type is not text (inet, cidr, arrays, ranges, intervals, enums, json, uuid,
unconstrained numeric) are read as the type's output text (never a cast to ``text``, which prints
inet's netmask where the output function does not). psycopg2 reads ``±infinity`` dates and
timestamps as ``date.max`` / ``datetime.min`` and so on: the ends capture clamps them to.

A column added with ``ADD COLUMN ... DEFAULT x`` is special: PostgreSQL shows ``x`` for the rows
that existed before (it stores the value once, in the catalog, and logs no change for those rows),
while silver has NULL there until a row is written again. ``PostgresDialect.unlogged_defaults``
names those values (the value stored at ADD COLUMN, or the current default when it is a constant),
so keys whose only differences are such NULLs are reported apart, as ``default not in silver``.

``verify(engine, conn, ...)`` here is the PostgreSQL entry point with a psycopg2 connection.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import quote_pg
from cdclake.sources.postgres.catalog import SourceTable, read_tables
from cdclake.verify.checksum import Sums
from cdclake.verify.checksum_sql import Within
from cdclake.verify.compare import DEFAULT_CHECKSUMS, ChecksumSettings
from cdclake.verify.live import SourcePosition
from cdclake.verify.postgres.checksums import SQL, TEXT_TYPES
from cdclake.verify.result import TableComparison
from cdclake.verify.run import verify as verify_with

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine

_DECIMAL_SCALE_PREFIX = "decimal("


def _value_expression(table: SourceTable, name: str, spark_type: str) -> str:
    """A column the way verify reads it: typed where the Spark type is typed, else as printed
    (the type's output function: ``concat`` calls it, a ``::text`` cast may not). Every query built
    from it runs with parameters (``%`` doubled), none or some."""
    column = table.column(name)
    quoted = SQL.quote(name)
    if column.pg_type == "money" and spark_type.startswith(_DECIMAL_SCALE_PREFIX):
        return f"{quoted}::numeric"  # psycopg2 reads money as its text ($1.25)
    if spark_type == "string" and column.pg_type not in (*TEXT_TYPES, "bytea"):
        return f"CASE WHEN {quoted} IS NULL THEN NULL ELSE concat({quoted}) END"
    return quoted


_CONSTANT = re.compile(r"^(?:'(?:[^']|'')*'|-?[\d.]+(?:e[-+]?\d+)?|true|false)(?:::[\w .\"\[\](),]+)*$")


def _added_defaults(
    conn: Any, table: SourceTable, columns: Sequence[str], types: Mapping[str, str]
) -> dict[str, list[Any]]:
    """Column -> the values PostgreSQL may show for rows older than an ``ADD COLUMN ... DEFAULT``,
    read the way ``_value_expression`` reads the column: the value stored when the column was added
    (``pg_attribute.attmissingval``, until a table rewrite materialises it) and the current
    default when it is a constant (other defaults are never evaluated: they may have effects)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
            "CASE WHEN a.atthasmissing THEN a.attmissingval::text END, pg_get_expr(d.adbin, d.adrelid) "
            "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
            "AND (a.atthasmissing OR d.adbin IS NOT NULL)",
            (f"{quote_pg(table.schema)}.{quote_pg(table.name)}",),  # a parameter's value: no % doubled
        )
        found = [row for row in cur.fetchall() if row[0] in columns]
        defaults: dict[str, list[Any]] = {}
        for name, type_name, missing, default in found:
            read, alias, cast = _value_expression(table, name, types[name]), SQL.quote(name), _doubled(type_name)
            queries: list[tuple[str, tuple[str, ...]]] = []
            if missing is not None:
                queries.append((f"SELECT {read} FROM (SELECT (%s::{cast}[])[1] AS {alias}) s", (missing,)))
            if default is not None and _CONSTANT.match(default.strip()):
                value = _doubled(default)
                queries.append((f"SELECT {read} FROM (SELECT ({value})::{cast} AS {alias}) s", ()))
            for query, parameters in queries:
                cur.execute(query, parameters)  # formatted even when empty: every % is doubled
                defaults.setdefault(name, []).append(cur.fetchone()[0])
    return defaults


def _source_rows(
    conn: Any, table: SourceTable, columns: Sequence[str], types: Mapping[str, str], where: tuple[str, list[Any]]
) -> Generator[tuple[Any, ...], None, None]:
    """``_rows_in_transaction`` in a transaction of its own, ended when the rows are read (or the read stops)."""
    conn.autocommit = False  # a named (server-side) cursor streams rows inside a transaction
    try:
        yield from _rows_in_transaction(conn, table, columns, types, where)
        conn.commit()
    finally:
        if conn.status != 1:  # still in a transaction: an error (or a reader that stopped early)
            conn.rollback()
        conn.autocommit = True


def _rows_in_transaction(
    conn: Any, table: SourceTable, columns: Sequence[str], types: Mapping[str, str], where: tuple[str, list[Any]]
) -> Generator[tuple[Any, ...], None, None]:
    """The rows ``where`` selects, streamed by a named cursor in the transaction ``conn`` is in (with ``at``:
    the one held at a snapshot, ``verify.postgres.at_cut``), which the read neither begins nor ends."""
    condition, parameters = where
    values = [_value_expression(table, name, types[name]) for name in columns]
    with conn.cursor(name="cdclake_verify") as cur:
        cur.itersize = 5000
        cur.execute(SQL.select(table, values, condition), parameters)  # formatted even when empty
        yield from cur


def _doubled(text: str) -> str:
    """``text`` in a query run with parameters: every ``%`` doubled."""
    return text.replace("%", "%%")


@dataclass(frozen=True)
class PostgresDialect:
    """PostgreSQL as ``verify.dialect``'s ``SourceDialect``, over a psycopg2 connection; with ``at``, one held
    in a transaction at the snapshot of that source position (``verify.postgres.at_cut``): every read is made in it."""

    conn: Any
    at: SourcePosition | None = None

    def read_tables(self, schemas: Sequence[str]) -> list[SourceTable]:
        with self.conn.cursor() as cur:
            return read_tables(cur, list(schemas))

    def sums(self, table: SourceTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
        return SQL.source_sums(self.conn, table, key, columns)

    def rows(
        self, table: SourceTable, columns: Sequence[str], types: Mapping[str, str], within: Within
    ) -> Generator[tuple[Any, ...], None, None]:
        read = _source_rows if self.at is None else _rows_in_transaction
        return read(self.conn, table, columns, types, SQL.range_condition(table, *within))

    def unlogged_defaults(
        self, table: SourceTable, columns: Sequence[str], types: Mapping[str, str]
    ) -> dict[str, list[Any]]:
        return _added_defaults(self.conn, table, columns, types)

    def inexact(self, table: SourceTable, columns: Sequence[tuple[str, str]]) -> list[str]:
        return []  # every kind is written exactly (module docstring)

    def position(self) -> SourcePosition:
        """The server's clock and its WAL position (on a standby: the position replayed); with ``at``, that."""
        if self.at is not None:
            return self.at
        with self.conn.cursor() as cur:
            cur.execute(POSITION_SQL)
            clock, lsn = cur.fetchone()
        if self.conn.status != 1:  # not autocommit: end the transaction the query opened
            self.conn.rollback()
        return SourcePosition(clock=clock, log_position=lsn)


POSITION_SQL = (
    "SELECT clock_timestamp() AT TIME ZONE 'UTC', (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END)::text"
)


def verify(
    engine: Engine,
    conn: Any,
    tables: Sequence[TableConfig] | None = None,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
) -> list[TableComparison]:
    """``verify.run.verify`` against the PostgreSQL database behind the psycopg2 ``conn``."""
    return verify_with(engine, PostgresDialect(conn), tables, checksums)
