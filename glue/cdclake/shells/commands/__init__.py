"""The ``cdclake`` commands, one module per group; each command pairs its options with its work.

A module lists its commands in ``COMMANDS``; ``shells/cli.py`` builds the parser from them in
order, parses once into :class:`~cdclake.shells.settings.CliSettings` and runs the one named.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdclake.shells.settings import CliSettings


@dataclass(frozen=True)
class Command:
    """One ``cdclake`` command: ``configure`` adds its own options to its parser (the global ones
    are there already), ``run`` does it with the settings parsed once and returns the exit code."""

    name: str
    description: str  # its line in ``cdclake --help`` and the first line of its own --help
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[CliSettings], int]
    # the global options it has no use for (their destinations): left out of its --help
    skip_globals: frozenset[str] = frozenset()


def seconds_option(
    parser: argparse.ArgumentParser, flag: str, default: float | None, help: str, metavar: str | None = None
) -> None:
    """An option that takes a number of seconds (``default`` None: not given)."""
    parser.add_argument(flag, type=float, default=default, metavar=metavar, help=help)


# The output formats every command that prints rows takes, and the older names still accepted
# (``verify --format text`` before it shared this vocabulary).
FORMATS = ("table", "csv", "json")
FORMAT_ALIASES = {"text": "table"}


def format_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--format {table,csv,json}``, the same for every command that prints rows (default: table)."""

    def name(text: str) -> str:
        return FORMAT_ALIASES.get(text, text)

    parser.add_argument("--format", type=name, choices=FORMATS, default="table", help=f"{help} (default: %(default)s)")


def tables_option(parser: argparse.ArgumentParser) -> None:
    """``--table``, the same for every command that works on some of the tables."""
    parser.add_argument("--table", action="append", help="only this table (repeatable; default: every table)")
