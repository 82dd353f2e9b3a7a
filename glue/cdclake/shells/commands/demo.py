"""``demo``: the Airbnb hosts example written as DMS files, applied and verified, in its own folder."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.shells.commands import Command
from cdclake.shells.local_engine import open_local_engine
from cdclake.shells.settings import DEFAULT_HOME

if TYPE_CHECKING:
    from cdclake.shells.settings import CliSettings


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir", type=Path, default=DEFAULT_HOME / "demo", help="recreated for the demo (default: %(default)s)"
    )


def _demo(settings: CliSettings) -> int:
    from cdclake.shells.demo import run_demo

    workdir: Path = settings.options.workdir
    on_demo = replace(settings, warehouse=workdir / "warehouse")  # the demo starts from an empty warehouse
    return run_demo(workdir, lambda config, bronze: open_local_engine(on_demo, config, bronze))


COMMANDS = (
    Command(
        "demo",
        "write the Airbnb hosts example as DMS files, apply, verify (in --workdir, with its own configuration, "
        "bronze and warehouse)",
        _configure,
        _demo,
        # its configuration, bronze and warehouse are its own, under --workdir; nothing else writes there
        skip_globals=frozenset({"config", "bronze", "warehouse", "lock_wait"}),
    ),
)
