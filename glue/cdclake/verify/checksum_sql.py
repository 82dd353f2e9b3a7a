"""The checksums' SQL at a source (``verify.checksum`` defines what it computes), written once for every engine.

An engine is a table, ``ChecksumSql``: how it quotes a name, how it writes each kind of canonical text (a
template over ``{column}``, and ``{scale}`` for decimals), where one of its own types is written otherwise,
how a row's pieces are joined and hashed, how a string key is compared by code point, and its ``false``.
The queries are built from that table here: the range condition, the buckets' sums and the rows' select.
PostgreSQL's table is in ``verify/postgres/checksums.py``, MariaDB/MySQL's in ``verify/mysql/checksums.py``,
SQL Server's in ``verify/sqlserver/checksums.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol

from cdclake.verify.checksum import KeyRange, PieceSql, RangeSum, Sums, bucket_of, row_pieces, where_in_ranges

# The rows to read: the key column as (name, kind) and the ranges of it (None: every row).
Within = tuple[tuple[str, str] | None, list[KeyRange] | None]


class SourceColumnShape(Protocol):
    """What verify and its SQL need of a source column: its name, its type at the source and the Spark type
    its values map to."""

    @property
    def name(self) -> str: ...

    @property
    def source_type(self) -> str: ...

    @property
    def spark_type(self) -> str: ...


class SourceTableShape(Protocol):
    """What verify and its SQL need of a source table: its names and its columns as they are now."""

    @property
    def schema(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def qualified(self) -> str: ...

    @property
    def columns(self) -> Sequence[SourceColumnShape]: ...

    def column(self, name: str) -> SourceColumnShape: ...


@dataclass(frozen=True)
class ChecksumSql:
    """One source engine's SQL for the checksums (module docstring)."""

    quote: Callable[[str], str]  # a quoted name, ``%`` doubled (every driver here formats with ``%s``)
    base_type: Callable[[str], str]  # the engine's type text without its modifiers: ``varchar(40)`` -> ``varchar``
    kinds: Mapping[str, str]  # kind (``decimal`` for ``decimal:S``) -> its text's template
    by_type: Mapping[tuple[str, str], str]  # (base type, kind) -> the template where that type is written otherwise
    pieces: PieceSql
    number: Callable[[Sequence[str]], str]  # a row's pieces -> its number (``verify.checksum``: 60 bits of MD5)
    string_key: str  # a string key's text as compared by code point, a template over ``{text}``
    false: str
    # None: the buckets are grouped by position (``GROUP BY 1``) over the table's rows; else the rows are numbered
    # in a derived table first, ended by this text: T-SQL groups by no position nor by an expression with
    # parameters; PostgreSQL's ``OFFSET 0`` keeps the derived table whole, so its planner numbers the rows in
    # its parallel workers and sums few groups after them, instead of sorting every row by a bucket it cannot
    # estimate and numbering them all in one process (docs/benchmarks-journal.md).
    numbered_rows: str | None = None
    count: str = "COUNT(*)"  # a range's rows (T-SQL's COUNT is an int)

    def text(self, column_type: str, name: str, kind: str) -> str:
        """A column's canonical text (``verify.checksum``'s kinds) in this engine's SQL."""
        family, _, scale = kind.partition(":")
        template = self.by_type.get((self.base_type(column_type), family), self.kinds.get(family))
        if template is None:
            raise ValueError(f"no canonical text for kind {kind}")
        return template.format(column=self.quote(name), scale=scale)

    def row_number(self, table: SourceTableShape, columns: Sequence[tuple[str, str]]) -> str:
        """A row's number over ``columns`` as (name, kind)."""

        def value(name: str, kind: str) -> str:
            return self.text(table.column(name).source_type, name, kind)

        return self.number(row_pieces(columns, value, self.quote, self.pieces))

    def key_text(self, table: SourceTableShape, name: str, kind: str) -> str:
        """The key column as compared with range boundaries: a string by code point, as Spark orders it."""
        if kind == "text":
            return self.string_key.format(text=self.text(table.column(name).source_type, name, kind))
        return self.quote(name)

    def range_condition(
        self, table: SourceTableShape, key: tuple[str, str] | None, ranges: Sequence[KeyRange] | None
    ) -> tuple[str, list[Any]]:
        """A WHERE condition (and its parameters) for the rows in one of ``ranges``: "" for every row
        (no ranges, no key, or an unbounded range), ``false`` for none."""
        return where_in_ranges(self.key_text(table, *key) if key else None, ranges, self.false)

    def table_name(self, table: SourceTableShape) -> str:
        return f"{self.quote(table.schema)}.{self.quote(table.name)}"

    def select(self, table: SourceTableShape, values: Sequence[str], where: str) -> str:
        """``SELECT values FROM table`` with its WHERE condition when there is one."""
        return f"SELECT {', '.join(values)} FROM {self.table_name(table)}{' WHERE ' + where if where else ''}"

    def select_within(self, table: SourceTableShape, values: Sequence[str], within: Within) -> tuple[str, list[Any]]:
        """The query (and its parameters) of ``values`` of the rows ``within`` holds: (key, ranges)."""
        where, parameters = self.range_condition(table, *within)
        return self.select(table, values, where), parameters

    def sums_query(
        self,
        table: SourceTableShape,
        key: tuple[str, str] | None,
        columns: Sequence[tuple[str, str]],
        whole: KeyRange,
        cuts: Sequence[Any],
    ) -> tuple[str, list[Any]]:
        """The query of the sums of the buckets ``whole`` is cut into at ``cuts``, and its parameters in order
        (the bucket's cuts, then the range's ends)."""
        where, bounds = self.range_condition(table, key, [whole])
        bucket, parameters = bucket_of(self.key_text(table, *key) if key else None, cuts)
        number = self.row_number(table, columns)
        if self.numbered_rows is None:
            totals = f"{bucket} AS bucket, {self.count}, COALESCE(SUM({number}), 0)"
            return f"{self.select(table, [totals], where)} GROUP BY 1", [*parameters, *bounds]
        numbered = self.select(table, [f"{bucket} AS bucket", f"{number} AS number"], where) + self.numbered_rows
        query = f"SELECT bucket, {self.count}, COALESCE(SUM(number), 0) FROM ({numbered}) AS numbered GROUP BY bucket"
        return query, [*parameters, *bounds]

    def source_sums(
        self, conn: Any, table: SourceTableShape, key: tuple[str, str] | None, columns: Sequence[tuple[str, str]]
    ) -> Sums:
        """The source's ``Sums`` of ``table`` over a DB-API connection (``key`` None: one range, the whole table)."""

        def sums(whole: KeyRange, cuts: Sequence[Any]) -> dict[int, RangeSum]:
            query, parameters = self.sums_query(table, key, columns, whole, cuts)
            with closing(conn.cursor()) as cur:
                cur.execute(query, parameters)
                return {int(b): RangeSum(int(n), int(total)) for b, n, total in cur.fetchall()}

        return sums


def by_types(types: Sequence[str], kind: str, template: str) -> dict[tuple[str, str], str]:
    """``ChecksumSql.by_type`` entries: every one of ``types`` writes ``kind`` by ``template``."""
    return {(name, kind): template for name in types}
