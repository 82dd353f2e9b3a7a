"""``cdclake verify``'s comparison of one table with its source table, whatever the source engine.

Checksums of key ranges first, computed where the data is (``verify.checksum``): an equal table
sends a few numbers; only ranges that differ are read row by row and compared value by value
(``verify.rows``). The source side reads typed values through its engine's driver (``Decimal``,
``datetime``, ``bytes``, ...; its ``SourceDialect``) and the silver side through Spark, so the
comparison does not reuse the text conversion that wrote bronze: a conversion bug shows up as a
difference.

Only the columns the source table has now are compared: a column dropped at the source stays in
silver (NULL from then on) and is not compared. Keys whose only differences are NULLs in silver
where the source shows a value it never logged (``unlogged_defaults``) are reported apart, as
``default not in silver``, and still make the table differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.lake.cuts import PublishedCut
from cdclake.lake.iceberg import IcebergTable
from cdclake.types import TIMESTAMP_TYPES
from cdclake.verify.checksum import KeyRange, kind_of, range_key, search, spark_boundaries, spark_condition, spark_sums
from cdclake.verify.checksum_sql import SourceTableShape, Within
from cdclake.verify.dialect import SourceDialect, TableT
from cdclake.verify.result import TableComparison
from cdclake.verify.rows import RowShape, compare_digests, digest_rows, unlogged_digests

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cdclake.context import Engine


@dataclass(frozen=True)
class SilverSide:
    """Where verify reads silver: every table as it is now, or each at its snapshot in a published cut
    (``verify --cut``; a table the cut does not name had no silver table yet, and is read empty)."""

    engine: Engine
    cut: PublishedCut | None = None

    def exists(self, config: TableConfig) -> bool:
        from cdclake.lake.tables import table_exists

        return table_exists(self.engine.spark, self.engine.silver_table(config))

    def frame(self, config: TableConfig) -> DataFrame:
        table = self.engine.silver_table(config)
        spark = self.engine.spark
        if self.cut is None:
            return spark.table(table.identifier)
        snapshot_id = self.cut.snapshots.get(table.name)
        if snapshot_id is None:
            return spark.table(table.identifier).limit(0)
        IcebergTable.latest(spark, table.identifier)  # a cut newer than the catalog's cached metadata
        return spark.sql(f"SELECT * FROM {table.identifier} VERSION AS OF {int(snapshot_id)}")


def _silver_rows(
    silver: SilverSide, config: TableConfig, columns: Sequence[str], types: Mapping[str, str], where: Column | None
) -> Any:
    from pyspark.sql import functions as F

    frame = silver.frame(config)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        return missing
    if where is not None:
        frame = frame.where(where)
    selected = [
        F.date_format(F.col(c), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(c) if types[c] in TIMESTAMP_TYPES else F.col(c)
        for c in columns
    ]
    return frame.select(*selected).toLocalIterator()


@dataclass(frozen=True)
class ChecksumSettings:
    """How the checksums cut a table: ranges a level, rows a range read row by row, levels."""

    split: int = 64
    row_limit: int = 5000
    depth: int = 4


DEFAULT_CHECKSUMS = ChecksumSettings()


def compare_table(
    silver: SilverSide,
    dialect: SourceDialect[TableT],
    config: TableConfig,
    source: TableT,
    checksums: ChecksumSettings | None = DEFAULT_CHECKSUMS,
) -> TableComparison:
    """Compare one silver table with its source table (the table's configured columns): by
    checksums of key ranges first (``verify.checksum``; ``checksums`` None: every row), then value
    by value in the ranges that differ."""
    result = TableComparison(table=config.source)
    columns, types = _columns_and_types(config, source)
    if not silver.exists(config):
        return replace(result, problem="no silver table")
    key = list(config.primary_key)
    kinds = {c: kind_of(types[c]) for c in columns}
    first_kind = kinds.get(key[0]) if key else None
    range_column = (key[0], first_kind) if key and first_kind is not None and range_key(first_kind) else None
    ranges: list[KeyRange] | None = None  # None: every row
    frame = silver.frame(config)
    if missing := [c for c in columns if c not in frame.columns]:
        return replace(result, problem=f"silver lacks column(s) {', '.join(missing)}")
    unhashable = [f"{c} ({types[c]})" for c in columns if kinds[c] is None]
    hashed = [(c, kinds[c] or "") for c in columns]
    unhashable += [f"{c} ({types[c]}, not exact in the source's SQL)" for c in dialect.inexact(source, hashed)]
    if unhashable:
        result = replace(result, why_rows=f"no canonical text for {', '.join(unhashable)}: compared value by value")
    elif checksums is not None:
        frame = frame.select(*columns)
        found = search(
            dialect.sums(source, range_column, hashed),
            spark_sums(frame, range_column[0] if range_column else None, hashed),
            spark_boundaries(frame, *range_column) if range_column else (lambda whole, parts: []),
            checksums.split,
            checksums.row_limit,
            checksums.depth if range_column else 1,
        )
        result = replace(
            result,
            method="checksums",
            ranges=found.ranges,
            ranges_differing=len(found.differing),
            source_rows=found.source_rows,
            silver_rows=found.silver_rows,
        )
        ranges = found.differing
        if not ranges:
            return result
        if range_column is None:
            ranges = None  # one range, the whole table: every row
    result = _compare_rows(silver, dialect, config, source, columns, types, result, (range_column, ranges))
    return replace(result, read_again=(range_column, ranges)) if result.differing_keys else result


def _columns_and_types(config: TableConfig, source: SourceTableShape) -> tuple[list[str], dict[str, str]]:
    """The columns compared (the source's, as they are now: a column dropped at the source is not
    compared) and the Spark type each is compared as (the configured one, else the source's)."""
    source_types = {c.name: c.spark_type for c in source.columns}
    columns = list(source_types)
    return columns, {c: config.columns.get(c) or source_types[c] for c in columns}


def compare_again(
    silver: SilverSide, dialect: SourceDialect[TableT], config: TableConfig, source: TableT, within: Within
) -> TableComparison:
    """Read the rows of ``within`` from both sides again and compare them value by value."""
    columns, types = _columns_and_types(config, source)
    result = TableComparison(table=config.source, method="rows")
    return _compare_rows(silver, dialect, config, source, columns, types, result, within)


def _compare_rows(
    silver: SilverSide,
    dialect: SourceDialect[TableT],
    config: TableConfig,
    source: TableT,
    columns: Sequence[str],
    types: dict[str, str],
    result: TableComparison,
    within: Within,
) -> TableComparison:
    """Read the rows of both sides (those of ``within``'s ranges, or every row) and compare them
    value by value: ``result`` with what they showed."""
    range_column, ranges = within
    shape = RowShape(columns, types, tuple(config.primary_key))
    defaults = unlogged_digests(shape, dialect.unlogged_defaults(source, columns, types))
    named: dict[bytes, str] = {}  # a keyless row's digest -> its name (``row_name``), for the report
    where = None if range_column is None or ranges is None else spark_condition(range_column[0], ranges)
    silver_digests = digest_rows(shape, _silver_rows(silver, config, columns, types, where), named)
    source_rows = dialect.rows(source, columns, types, within)
    try:
        theirs = digest_rows(shape, source_rows, named)
    finally:
        source_rows.close()  # ends the reading transaction now, also after a failure
    if ranges is None or range_column is None:
        result = replace(result, source_rows=theirs.count, silver_rows=silver_digests.count)
    found = compare_digests(shape, theirs, silver_digests, defaults, named)
    return replace(
        result,
        rows_read=silver_digests.count + theirs.count,
        missing=found.missing,
        unexpected=found.unexpected,
        different=found.different,
        differing_columns=found.differing_columns,
        unlogged_defaults=found.unlogged_defaults,
        source_digests=found.source_digests,
    )
