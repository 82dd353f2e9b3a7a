"""What a source engine brings to ``cdclake verify``: ``SourceDialect``, one small protocol.

A dialect reads the source tables and their columns' Spark types, computes the range sums in its own SQL
(each kind of canonical text, the row number, the range condition: its ``checksums`` module), names the
columns its SQL cannot write exactly (those tables are read row by row, never skipped), streams the typed
rows of given ranges, and may name values the source shows for rows it never logged (PostgreSQL's
``ADD COLUMN ... DEFAULT``). One package per engine: ``verify.postgres`` (psycopg2), ``verify.mysql``
(MariaDB and MySQL, PyMySQL) and ``verify.sqlserver`` (python-tds); ``verify.dialects.open_dialect``
picks one by the ``--source`` URL.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from cdclake.verify.checksum import Sums
from cdclake.verify.checksum_sql import SourceTableShape, Within
from cdclake.verify.live import SourcePosition

TableT = TypeVar("TableT", bound=SourceTableShape)


class SourceDialect(Protocol[TableT]):
    """One source engine's side of verify (module docstring). ``columns`` are (name, kind) pairs of
    ``verify.checksum``; ``types`` maps each column to its configured Spark type."""

    def read_tables(self, schemas: Sequence[str]) -> list[TableT]:
        """The source tables of ``schemas``, with their columns in order."""
        ...

    def sums(self, table: TableT, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]) -> Sums:
        """The source's ``Sums`` of ``table`` (``key`` None: one range, the whole table)."""
        ...

    def rows(
        self, table: TableT, columns: Sequence[str], types: Mapping[str, str], within: Within
    ) -> Generator[tuple[Any, ...], None, None]:
        """The typed values of ``columns`` of the rows ``within`` holds, streamed; closing the
        generator ends the read."""
        ...

    def unlogged_defaults(
        self, table: TableT, columns: Sequence[str], types: Mapping[str, str]
    ) -> dict[str, list[Any]]:
        """Column -> values the source shows for rows no change was logged for (empty: none)."""
        ...

    def inexact(self, table: TableT, columns: Sequence[tuple[str, str]]) -> list[str]:
        """The columns whose canonical text this engine's SQL cannot produce exactly: compared by
        reading them, row by row, never skipped."""
        ...

    def position(self) -> SourcePosition:
        """Where the source stands now: its clock in UTC, and its log position where it has one."""
        ...


def clock_position(conn: Any, query: str) -> SourcePosition:
    """Where a source without a log position to read stands: its clock in UTC, from ``query`` (one value) on a
    DB-API connection."""
    cur = conn.cursor()
    try:
        cur.execute(query)
        (clock,) = cur.fetchone()
    finally:
        cur.close()
    return SourcePosition(clock=clock)
