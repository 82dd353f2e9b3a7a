"""``status``: per table, rows, applied and pending files, lag and what needs attention.

On a local warehouse it starts no JVM (``ops.status_local``: the tables' metadata files and
pyiceberg); it starts Spark only where that path says a piece needs it (gold marts, history lag,
equality deletes)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdclake.shells.commands import Command, format_option
from cdclake.shells.local_engine import on_engine

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.lake.cuts import PublishedCut
    from cdclake.ops.table_status import TableStatus
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    format_option(parser, "table: for a terminal; csv, json: every field")
    parser.add_argument("--wide", action="store_true", help="the table format with every field")


def _print(
    statuses: list[TableStatus], cut: PublishedCut | None, settings: CliSettings, engine: Engine | None = None
) -> int:
    from cdclake.gold.status import mart_statuses
    from cdclake.shells.status_view import status_text

    marts = mart_statuses(engine) if engine is not None and engine.config.gold.marts else []
    print(status_text(statuses, marts, settings.options.format, settings.options.wide, cut), end="")
    return 0


def _on_spark(engine: Engine, settings: CliSettings) -> int:
    from cdclake.lake.cuts import latest_cut
    from cdclake.ops.status import table_statuses
    from cdclake.sources.postgres.state import capture_holds

    holds = capture_holds(settings.home / "capture", settings.config)
    statuses = table_statuses(engine, capture_holds=holds)
    return _print(statuses, latest_cut(engine.spark, engine.catalog, engine.config.database), settings, engine)


def _without_jvm(settings: CliSettings) -> tuple[list[TableStatus], PublishedCut | None] | None:
    """The statuses and the latest cut read with no JVM, or None: a piece needs Spark."""
    from cdclake.dms.store import open_store
    from cdclake.ops.status_local import local_cut, local_table_statuses, needs_spark
    from cdclake.shells.local_engine import local_config
    from cdclake.sources.postgres.state import capture_holds

    config = local_config(settings, settings.config)
    if needs_spark(config):
        return None
    store = open_store(config.bronze.path, settings.warehouse.parent / "staging", settings=config.bronze.s3)
    holds = capture_holds(settings.home / "capture", settings.config)
    statuses = local_table_statuses(config, store, settings.warehouse, capture_holds=holds)
    return None if statuses is None else (statuses, local_cut(config, settings.warehouse))


def _status(settings: CliSettings) -> int:
    local = _without_jvm(settings)
    if local is not None:
        return _print(*local, settings)
    return on_engine(settings, _on_spark, writes=False)


COMMANDS = (
    Command("status", "per table: rows, applied and pending files, lag, what needs attention", _configure, _status),
)
