"""``gold``: refresh the gold marts from silver."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdclake.shells.local_engine import engine_command

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mart", action="append", help="only this mart (repeatable; default: every mart)")


@engine_command("gold", "refresh the gold marts from silver (one commit per mart)", _configure, writes=True)
def _gold(engine: Engine, settings: CliSettings) -> int:
    from cdclake.shells.marts import gold_command

    return gold_command(engine, settings.options.mart)


COMMANDS = (_gold,)
