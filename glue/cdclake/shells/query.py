"""The ``cdclake query`` command: SQL on the silver catalog, printed whole or said to be cut.

Exports (``--format csv`` or ``json``) are whole unless ``--limit`` is given; the table view stops
at ``TABLE_ROWS`` rows by default. Whenever rows were left out, stderr says so and how to get them.
Dates and timestamps are rendered by Spark (cast to string), never converted to Python values, so
a value Python cannot hold (year 10000) prints as Spark writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.errors import CdclakeError, spark_error_sentence
from cdclake.mart_sql import substitute_tables
from cdclake.shells.output import format_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

TABLE_ROWS = 1000  # rows the table view shows when --limit is not given


@dataclass(frozen=True)
class QueryOutput:
    text: str  # the rows in the chosen format
    note: str | None = None  # for stderr: the rows that were left out, and how to get them all


def row_limit(style: str, limit: int | None) -> int | None:
    """How many rows to print: ``--limit`` when given (0: all), else all for an export and
    ``TABLE_ROWS`` for the table view."""
    if limit is not None:
        return limit or None
    return TABLE_ROWS if style == "table" else None


def _has_datetime(data_type: DataType) -> bool:
    from pyspark.sql.types import ArrayType, DateType, MapType, StructType, TimestampNTZType, TimestampType

    if isinstance(data_type, DateType | TimestampType | TimestampNTZType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_datetime(data_type.elementType)
    if isinstance(data_type, MapType):
        return _has_datetime(data_type.keyType) or _has_datetime(data_type.valueType)
    if isinstance(data_type, StructType):
        return any(_has_datetime(f.dataType) for f in data_type.fields)
    return False


def printable_frame(frame: DataFrame) -> DataFrame:
    """``frame`` with every date and timestamp (also inside arrays, maps and structs) cast to
    text by Spark: Python's datetime holds years 1 to 9999 only, Spark's from -290308 to 294247."""
    columns: list[Column] = [
        frame[i].cast("string").alias(field.name) if _has_datetime(field.dataType) else frame[i]
        for i, field in enumerate(frame.schema.fields)
    ]
    return frame.select(*columns)


def run_query(spark: SparkSession, sql: str, style: str, limit: int | None) -> QueryOutput:
    """Run ``sql`` and render its rows in ``style``; a statement Spark refuses or fails to run
    raises ``CdclakeError`` with Spark's reason in one sentence."""
    try:
        frame = printable_frame(spark.sql(sql))
        cap = row_limit(style, limit)
        rows = (frame.limit(cap + 1) if cap else frame).collect()
    except Exception as exc:  # AnalysisException, ParseException, a failed job (Py4JJavaError)
        raise CdclakeError(f"The query failed: {spark_error_sentence(exc)}") from None
    return rendered(frame.columns, [list(r) for r in rows], style, limit, cap)


def rendered(columns: list[str], rows: list[list[Any]], style: str, limit: int | None, cap: int | None) -> QueryOutput:
    """``rows`` (at most ``cap`` + 1 of them, dates and timestamps as text) in ``style``, cut to ``cap``
    with a note saying so; shared by the Spark path and ``shells.query_local``."""
    note = None
    if cap is not None and len(rows) > cap:
        rows = rows[:cap]
        note = (
            f"only the first {cap} rows are printed (--limit {cap}); more rows match"
            if limit
            else f"only the first {cap} rows are printed (the table view's default); --limit 0 prints them all"
        )
    return QueryOutput(format_rows(columns, rows, style), note)


@dataclass(frozen=True)
class CutQuery:
    """A statement rewritten to read every table of a published cut at the cut's snapshot."""

    sql: str
    note: str  # for stderr: which cut was read
    views: tuple[str, ...]  # the temporary views it reads (dropped by ``drop``)


def at_cut(spark: SparkSession, sql: str, catalog: str, database: str, at: str | None) -> CutQuery:
    """``sql`` with each table of the latest cut (``at`` None) or of the newest cut whose source commit
    time is at or before ``at`` read at that cut's snapshot (``lake.cuts``); other tables as they are."""
    from cdclake.identifiers import quote
    from cdclake.lake.cuts import CUTS_TABLE, cut_at_or_before, latest_cut

    cut = latest_cut(spark, catalog, database) if at is None else cut_at_or_before(spark, catalog, database, at)
    if cut is None:
        where = f"{database}.{CUTS_TABLE}"
        raise CdclakeError(
            f"No consistent cut is recorded in {where} yet: `cdclake run` publishes one when bronze proves it "
            "(its last line says why not)"
            if at is None
            else f"No consistent cut in {where} has a source commit time at or before {at}."
        )
    # Each view is named as its table, so the statement's bare table names (``FROM db.t`` with
    # ``t.col``, or ``db.t.col``) still name it; the command's session holds no other temporary view.
    views = {}
    for name, snapshot_id in sorted(cut.snapshots.items()):
        view = quote(name)
        identifier = f"{quote(catalog)}.{quote(database)}.{quote(name)}"
        spark.sql(f"SELECT * FROM {identifier} VERSION AS OF {int(snapshot_id)}").createOrReplaceTempView(view)
        views[f"{database}.{name}"] = view
    note = f"read at the cut {cut.commit_ts} ({cut.position_text})"
    if at is not None and cut.commit_ts != at:
        note += f": the newest cut at or before {at}"
    return CutQuery(substitute_tables(sql, views, catalog), note, tuple(views.values()))
