"""MariaDB's and MySQL's side of ``cdclake verify`` (the comparison itself: ``verify.compare``).

The tables and their Spark types are ``init``'s (``sources.catalog.readers``); the checksums' SQL is
``verify.mysql.checksums``. Rows are streamed through PyMySQL (an unbuffered cursor), in a session
whose ``time_zone`` is UTC, so a TIMESTAMP reads as the UTC wall-clock DMS writes and a DATETIME as
stored. Values are read typed (``Decimal``, ``datetime``, ``date``, ``int``, ``bytes``) where the
configured Spark type is typed; a column silver holds as text is read as the text DMS writes of it
(upper-case hex for bytes, six fraction digits for TIME: the checksums' canonical text).

Not compared exactly by SQL (so read row by row): FLOAT and DOUBLE (no canonical text in any
engine). Untested, because only MariaDB runs here: MySQL 8's binary JSON (``CAST(... AS CHAR)``
prints it normalised: equal to DMS's text only if DMS prints it alike), spatial types (``HEX`` of
MySQL's internal SRID + WKB bytes), zero dates (``0000-00-00``, which Spark cannot hold). A column
added with ``ADD COLUMN ... DEFAULT`` shows its default in rows the binlog never logged; MySQL's
catalog does not say which rows those are, so such keys are reported as differing, not apart.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdclake.sources.catalog.model import CatalogTable
from cdclake.sources.catalog.readers import MYSQL_COLUMNS_SQL, MYSQL_KEYS_SQL, mysql_tables
from cdclake.verify.checksum import Sums, kind_of
from cdclake.verify.checksum_sql import Within
from cdclake.verify.dialect import clock_position
from cdclake.verify.live import SourcePosition
from cdclake.verify.mysql.checksums import SQL, stored_bytes

STREAM_ROWS = 5000  # rows fetched from the server at a time


def read_value(table: CatalogTable, name: str, spark_type: str) -> str:
    """A column the way verify reads it: typed where its Spark type is typed, else as DMS's text."""
    column = SQL.quote(name)
    kind = kind_of(spark_type)
    if kind == "text":
        return SQL.text(table.column(name).source_type, name, kind)
    if kind == "boolean":
        return f"({column} <> 0)"
    if kind == "binary":
        return stored_bytes(column, table.column(name).source_type)
    return column


@dataclass(frozen=True)
class MysqlDialect:
    """MariaDB or MySQL as ``verify.dialect``'s ``SourceDialect``, over a PyMySQL connection."""

    conn: Any

    def __post_init__(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP values in UTC, as DMS writes them

    def read_tables(self, schemas: Sequence[str]) -> list[CatalogTable]:
        with self.conn.cursor() as cur:
            cur.execute(MYSQL_COLUMNS_SQL)
            column_rows = [row for row in cur.fetchall() if _text(row[0]) in schemas]
            cur.execute(MYSQL_KEYS_SQL)
            key_rows = [row for row in cur.fetchall() if _text(row[0]) in schemas]
        return mysql_tables(column_rows, key_rows)

    def sums(self, table: CatalogTable, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
        return SQL.source_sums(self.conn, table, key, columns)

    def rows(
        self, table: CatalogTable, columns: Sequence[str], types: Mapping[str, str], within: Within
    ) -> Generator[tuple[Any, ...], None, None]:
        import pymysql.cursors

        query, parameters = SQL.select_within(table, [read_value(table, name, types[name]) for name in columns], within)
        cur = self.conn.cursor(pymysql.cursors.SSCursor)  # streamed: the rows are not held in memory
        try:
            cur.execute(query, tuple(parameters))
            while batch := cur.fetchmany(STREAM_ROWS):
                yield from batch
        finally:
            cur.close()  # reads and drops what a reader that stopped early left

    def unlogged_defaults(
        self, table: CatalogTable, columns: Sequence[str], types: Mapping[str, str]
    ) -> dict[str, list[Any]]:
        return {}  # the catalog does not say which rows predate an added column (module docstring)

    def inexact(self, table: CatalogTable, columns: Sequence[tuple[str, str]]) -> list[str]:
        return []  # every kind is written exactly (module docstring)

    def position(self) -> SourcePosition:
        """The server's clock in UTC (a binary log position needs privileges verify does not ask for)."""
        return clock_position(self.conn, "SELECT UTC_TIMESTAMP(6)")


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else str(value)
