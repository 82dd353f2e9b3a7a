"""``query``: one Spark SQL statement on the silver catalog, printed for a terminal, as CSV or JSON."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from cdclake.shells.commands import Command, format_option
from cdclake.shells.local_engine import on_engine
from cdclake.shells.query import TABLE_ROWS

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.shells.query import QueryOutput
    from cdclake.shells.settings import CliSettings


def _row_count(text: str) -> int:
    """``--limit``: a whole number of rows, 0 or more."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"a number of rows (0 or more), not '{text}'")
    return int(text)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sql", help="one Spark SQL statement; tables are silver.<database>.<table> or <database>.<table>"
    )
    format_option(
        parser, 'table: for a terminal; csv: NULL as an empty field, the empty string as ""; json: one object per line'
    )
    parser.add_argument(
        "--cut",
        nargs="?",
        const="",
        metavar="T",
        help="read every table of the silver database at its latest consistent cut (cdclake_cuts), or at the "
        "newest cut whose source commit time is at or before T (yyyy-MM-dd HH:mm:ss.ffffff, UTC)",
    )
    parser.add_argument(
        "--limit",
        type=_row_count,
        default=None,
        help=f"at most this many rows, 0 for all (default: all for csv and json, {TABLE_ROWS} for table; "
        "rows left out are always reported on stderr)",
    )


def _print(output: QueryOutput) -> int:
    print(output.text, end="")
    if output.note:
        print(f"cdclake: {output.note}", file=sys.stderr)
    return 0


def _query(settings: CliSettings) -> int:
    """The statement read with no JVM where ``shells.query_local`` renders it exactly, else on Spark."""
    from cdclake.shells.query_local import query_without_jvm

    options = settings.options
    if options.cut is None:
        output = query_without_jvm(settings.warehouse, options.sql, options.format, options.limit)
        if output is not None:
            return _print(output)
    return on_engine(settings, _on_spark, writes=False)


def _on_spark(engine: Engine, settings: CliSettings) -> int:
    from cdclake.shells.query import run_query

    options = settings.options
    sql: str = options.sql
    views: tuple[str, ...] = ()
    if options.cut is not None:
        from cdclake.shells.query import at_cut

        rewritten = at_cut(engine.spark, sql, engine.catalog, engine.config.database, options.cut or None)
        sql, views = rewritten.sql, rewritten.views
        print(f"cdclake: {rewritten.note}", file=sys.stderr)
    try:
        output = run_query(engine.spark, sql, options.format, options.limit)
    finally:
        for view in views:
            engine.spark.catalog.dropTempView(view)
    return _print(output)


COMMANDS = (Command("query", "run SQL on the silver catalog", _configure, _query),)
