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
    from cdclake.ops.status import TableStatus
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    format_option(parser, "table: for a terminal; csv, json: every field")
    parser.add_argument("--wide", action="store_true", help="the table format with every field")


def _print(statuses: list[TableStatus], settings: CliSettings, engine: Engine | None = None) -> int:
    from cdclake.gold.status import mart_statuses
    from cdclake.shells.status_view import status_text

    marts = mart_statuses(engine) if engine is not None and engine.config.gold.marts else []
    print(status_text(statuses, marts, settings.options.format, settings.options.wide), end="")
    return 0


def _on_spark(engine: Engine, settings: CliSettings) -> int:
    from cdclake.ops.status import table_statuses
    from cdclake.sources.postgres.state import capture_holds

    holds = capture_holds(settings.home / "capture", settings.config)
    return _print(table_statuses(engine, capture_holds=holds), settings, engine)


def _without_jvm(settings: CliSettings) -> list[TableStatus] | None:
    """The statuses read with no JVM, or None: a piece needs Spark."""
    from cdclake.dms.store import open_store
    from cdclake.ops.status_local import local_table_statuses, needs_spark
    from cdclake.shells.local_engine import local_config
    from cdclake.sources.postgres.state import capture_holds

    config = local_config(settings, settings.config)
    if needs_spark(config):
        return None
    store = open_store(config.bronze.path, settings.warehouse.parent / "staging", settings=config.bronze.s3)
    holds = capture_holds(settings.home / "capture", settings.config)
    return local_table_statuses(config, store, settings.warehouse, capture_holds=holds)


def _status(settings: CliSettings) -> int:
    statuses = _without_jvm(settings)
    if statuses is not None:
        return _print(statuses, settings)
    return on_engine(settings, _on_spark, writes=False)


COMMANDS = (
    Command("status", "per table: rows, applied and pending files, lag, what needs attention", _configure, _status),
)
