"""SQL Server's side of ``cdclake verify`` (the comparison itself: ``verify.compare``), through
python-tds. The tables and their Spark types are ``init``'s (``sources.catalog.readers``); the
checksums' T-SQL is ``verify.sqlserver.checksums``, which also says what is not exact. Rows are
read typed (``Decimal``, ``datetime``, ``date``, ``bool``, ``bytes``) where the configured Spark
type is typed, else as the canonical text. Untested against a live server (none runs here).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdclake.sources.catalog.model import CatalogTable
from cdclake.sources.catalog.readers import SQLSERVER_COLUMNS_SQL, SQLSERVER_KEYS_SQL, sqlserver_tables
from cdclake.verify.checksum import Sums, kind_of
from cdclake.verify.checksum_sql import Within
from cdclake.verify.dialect import clock_position
from cdclake.verify.live import SourcePosition
from cdclake.verify.sqlserver.checksums import SQL, base_type, inexact

STREAM_ROWS = 5000


def read_value(table: CatalogTable, name: str, spark_type: str) -> str:
    """A column the way verify reads it: typed where its Spark type is typed, else as its text."""
    column = SQL.quote(name)
    kind = kind_of(spark_type)
    source_type = table.column(name).source_type
    if kind == "text":
        return SQL.text(source_type, name, kind)
    if kind == "timestamp" and base_type(source_type) == "datetimeoffset":
        return f"CAST(SWITCHOFFSET({column}, '+00:00') AS datetime2(6))"
    return column


def select_rows(
    table: CatalogTable, columns: Sequence[str], types: Mapping[str, str], within: Within
) -> tuple[str, list[Any]]:
    """The query (and its parameters) of the rows ``within`` holds."""
    return SQL.select_within(table, [read_value(table, name, types[name]) for name in columns], within)


@dataclass(frozen=True)
class SqlServerDialect:
    """SQL Server as ``verify.dialect``'s ``SourceDialect``, over a python-tds connection."""

    conn: Any

    def read_tables(self, schemas: Sequence[str]) -> list[CatalogTable]:
        cur = self.conn.cursor()
        try:
            cur.execute(SQLSERVER_COLUMNS_SQL)
            column_rows = [row for row in cur.fetchall() if str(row[0]) in schemas]
            cur.execute(SQLSERVER_KEYS_SQL)
            key_rows = [row for row in cur.fetchall() if str(row[0]) in schemas]
        finally:
            cur.close()
        return sqlserver_tables(column_rows, key_rows)

    def sums(self, table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
        return SQL.source_sums(self.conn, table, key, columns)

    def rows(
        self, table: CatalogTable, columns: Sequence[str], types: Mapping[str, str], within: Within
    ) -> Generator[tuple[Any, ...], None, None]:
        query, parameters = select_rows(table, columns, types, within)
        cur = self.conn.cursor()
        try:
            cur.execute(query, parameters)
            while batch := cur.fetchmany(STREAM_ROWS):
                yield from (tuple(row) for row in batch)
        finally:
            cur.close()

    def unlogged_defaults(
        self, table: CatalogTable, columns: Sequence[str], types: Mapping[str, str]
    ) -> dict[str, list[Any]]:
        return {}  # ADD COLUMN ... DEFAULT on a NULL column leaves old rows NULL; NOT NULL ones are logged

    def inexact(self, table: CatalogTable, columns: Sequence[tuple[str, str]]) -> list[str]:
        return [name for name, kind in columns if inexact(table.column(name).source_type, kind)]

    def position(self) -> SourcePosition:
        """The server's clock in UTC."""
        return clock_position(self.conn, "SELECT SYSUTCDATETIME()")
