"""The ``cdclake`` command: the local shell around the engine.

The parser is built from the command modules (``shells/commands/``), the command line parsed once
into a frozen :class:`~cdclake.shells.settings.CliSettings`, and the named command run with it;
user mistakes end here as one sentence and an exit code. Nothing below reads the environment.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Sequence

from cdclake.errors import CdclakeError, ConcurrentWriterError, first_line
from cdclake.shells.commands import Command, demo, gold, maintain, quarantine, query, run, source, status
from cdclake.shells.console import console_logging
from cdclake.shells.settings import CliSettings, cli_settings, global_options, global_options_parent
from cdclake.sources.postgres.problems import DOCS

# In the order of ``cdclake --help``.
COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        *demo.COMMANDS,
        *run.COMMANDS,
        *quarantine.COMMANDS,
        *maintain.COMMANDS,
        *status.COMMANDS,
        *source.COMMANDS,
        *gold.COMMANDS,
        *query.COMMANDS,
    )
}

INTERRUPTED = "interrupted; nothing is lost, run it again"
# The database drivers whose errors are a source's answer to the user's setup, never cdclake's bug.
SOURCE_DRIVERS = frozenset({"psycopg2", "pg8000", "pymysql", "pytds"})


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command: the global options (before or after the command's name), then
    each command's own, added by its module."""
    parser = argparse.ArgumentParser(
        prog="cdclake",
        description="Mirror AWS DMS full-load and CDC files into Apache Iceberg tables.",
        epilog="The options above are accepted after the command's name too.",
    )
    global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        sub = commands.add_parser(
            command.name,
            help=command.description,
            description=command.description,
            parents=[global_options_parent(command.skip_globals)],
        )
        command.configure(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()  # a run's time line counts its start-up from here
    if hasattr(faulthandler, "register") and sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):  # a standard error with no file behind it: no dump
            # `kill -USR1 <pid>`: every thread's Python stack on the process's standard error
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    # SIGINT stops every command, also one started where it is ignored (a script's `cdclake capture --follow &`
    # inherits SIG_IGN, and Python then raises no KeyboardInterrupt): its buffered work is left for the next run
    if threading.current_thread() is threading.main_thread():  # (a caller's thread cannot set handlers)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parsed = build_parser().parse_args(argv)
    with console_logging(parsed.quiet) as bar:
        return run_command(cli_settings(parsed, started, progress_bar=bar))


def run_command(settings: CliSettings) -> int:
    """Run the command ``settings`` name; a user mistake is one sentence on stderr and exit 2 (75
    for a warehouse another command holds, 130 for Ctrl-C)."""
    try:
        return COMMANDS[settings.command].run(settings)
    except ConcurrentWriterError as exc:
        print(f"cdclake: {exc}", file=sys.stderr)
        return ConcurrentWriterError.exit_code
    except CdclakeError as exc:
        print(f"cdclake: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in SOURCE_DRIVERS:
            raise
        # A source database's error the commands did not turn into a sentence of their own.
        print(f"cdclake: The source database refused: {first_line(exc)} (see {DOCS}).", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Every commit is atomic and the ledger says what was applied: a stop loses nothing.
        print(f"cdclake: {INTERRUPTED}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
