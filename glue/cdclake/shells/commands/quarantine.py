"""``quarantine list`` and ``quarantine dismiss``: what is held and why; entries whose file is gone."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cdclake.errors import CdclakeError
from cdclake.shells.commands import Command, format_option, tables_option
from cdclake.shells.local_engine import on_engine, selected_tables
from cdclake.shells.settings import global_options_parent

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.shells.settings import CliSettings

# The action that writes to the warehouse (and so holds it): ``list`` only reads.
WRITING_ACTIONS = frozenset({"dismiss"})


def _configure(parser: argparse.ArgumentParser) -> None:
    shared = global_options_parent()
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = "every held file and bad row: table, file, row, reason, the row as it was, still in bronze"
    listed = actions.add_parser("list", help=listing, description=listing, parents=[shared])
    tables_option(listed)
    format_option(listed, "table: for a terminal; csv, json: every field")
    dismissing = (
        "clear the entries of files no longer in bronze, recorded in cdclake_quarantine_dismissed "
        "(a file still in bronze is fixed and replayed instead: `replay --quarantined`)"
    )
    dismiss = actions.add_parser("dismiss", help=dismissing, description=dismissing, parents=[shared])
    dismiss.add_argument("--missing", action="store_true", help="every entry whose file is no longer in bronze")
    dismiss.add_argument("--file", action="append", default=[], help="this bronze key only (repeatable)")
    tables_option(dismiss)


def quarantine(engine: Engine, settings: CliSettings) -> int:
    """List the quarantine, or dismiss the entries of files no longer in bronze."""
    from cdclake.ops.quarantine import dismiss_missing, entries_as_rows, quarantine_entries
    from cdclake.shells.output import format_rows

    options = settings.options
    if options.action == "list":
        columns, rows = entries_as_rows(quarantine_entries(engine, selected_tables(engine, options)))
        print(format_rows(columns, rows, options.format), end="")
        return 0
    if not options.missing and not options.file:
        raise CdclakeError("Say which entries to dismiss: --missing (every file gone from bronze) or --file KEY.")
    done = dismiss_missing(engine, options.file, selected_tables(engine, options))
    for d in done:
        print(
            f"dismissed {d.table}: {d.file_key} ({d.files} file entry, {d.rows} row(s)); recorded in "
            "cdclake_quarantine_dismissed"
        )
    if not done:
        print("nothing to dismiss: every file held in quarantine is still in bronze")
    return 0


COMMANDS = (
    Command(
        "quarantine",
        "what is held in quarantine and why; dismiss entries whose file was deleted",
        _configure,
        lambda settings: on_engine(settings, quarantine, writes=settings.options.action in WRITING_ACTIONS),
    ),
)
