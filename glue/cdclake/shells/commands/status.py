"""``status``: per table, rows, applied and pending files, lag and what needs attention."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdclake.shells.commands import format_option
from cdclake.shells.local_engine import engine_command

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    format_option(parser, "table: for a terminal; csv, json: every field")
    parser.add_argument("--wide", action="store_true", help="the table format with every field")


@engine_command(
    "status", "per table: rows, applied and pending files, lag, what needs attention", _configure, writes=False
)
def _status(engine: Engine, settings: CliSettings) -> int:
    from cdclake.gold.status import mart_statuses
    from cdclake.ops.status import table_statuses
    from cdclake.shells.status_view import status_text
    from cdclake.sources.postgres.state import capture_holds

    marts = mart_statuses(engine) if engine.config.gold.marts else []
    holds = capture_holds(settings.home / "capture", settings.config)
    statuses = table_statuses(engine, capture_holds=holds)
    print(status_text(statuses, marts, settings.options.format, settings.options.wide), end="")
    return 0


COMMANDS = (_status,)
