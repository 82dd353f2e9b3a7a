"""Applying bronze to silver: ``run`` (and ``run --follow``), ``full-load``, ``apply``, ``replay``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.shells.commands import seconds_option, tables_option
from cdclake.shells.local_engine import engine_command, selected_tables

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.report import RunReport
    from cdclake.shells.settings import CliSettings


def cut_line(report: RunReport) -> str:
    """The cut a run or round ended at, and how long settling it took (its ``cut`` phase)."""
    seconds = report.phase_seconds.get("cut")
    return f"cut: {report.cut}" + ("" if seconds is None else f"; settled in {seconds:.2f} s")


def print_report(report: RunReport) -> int:
    """Print one line per table and batch, then what was set aside and each table that failed;
    the exit code is ``RunReport.exit_code``."""
    for table in report.tables:
        print(table.summary())
    if not report.tables and not report.failures:
        print("nothing to apply")
    if line := report.no_files_line():
        print(line)
    if report.cut:
        print(cut_line(report))
    for line in report.problems():
        print(f"cdclake: {line}", file=sys.stderr)
    return report.exit_code


def _configure_run(parser: argparse.ArgumentParser) -> None:
    tables_option(parser)
    parser.add_argument(
        "--follow", action="store_true", help="then keep applying files as they arrive, until Ctrl-C (or --idle-exit)"
    )
    seconds_option(
        parser,
        "--poll-interval",
        5.0,
        "with --follow: seconds between looks at bronze (default: %(default)s)",
    )
    seconds_option(
        parser,
        "--idle-exit",
        None,
        "with --follow: end after this many seconds without a new file (default: never)",
        metavar="SECONDS",
    )
    parser.add_argument(
        "--max-run", type=float, metavar="SECONDS", help="with --follow: end after this many seconds (default: never)"
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="list all of bronze and read every ledger whole (default: each table's folder after its watermark): "
        "finds files that landed later than bronze.look_back_minutes and unconfigured tables",
    )


@engine_command("run", "full load where a table has none yet, then all pending CDC", _configure_run, writes=True)
def _run(engine: Engine, settings: CliSettings) -> int:
    from cdclake.engine.run import run

    if settings.options.follow:
        return _follow(engine, settings)
    start_up = time.monotonic() - settings.started
    report = run(engine, selected_tables(engine, settings.options), sweep=settings.options.sweep)
    code = print_report(report)
    print(report.time_line(start_up, time.monotonic() - settings.started))
    return code


def _follow(engine: Engine, settings: CliSettings) -> int:
    """``run --follow``: the loop the Glue CDC job runs, polling a local (or S3) bronze."""
    from cdclake.dms.notices import Polling
    from cdclake.engine.follow import FollowSettings, follow
    from cdclake.report import Round

    options = settings.options
    pace = FollowSettings(
        poll_seconds=options.poll_interval,
        idle_seconds=options.idle_exit,
        max_run_seconds=options.max_run,
        sweep=options.sweep,
    )

    said_cut = [""]

    def each_round(done: Round) -> None:
        for table in done.report.tables:
            print(table.summary(), flush=True)
        if done.report.cut and done.report.cut != said_cut[-1]:  # said once, not every idle round
            print(cut_line(done.report), flush=True)
            said_cut.append(done.report.cut)
        for line in done.report.problems():
            print(f"cdclake: {line}", file=sys.stderr, flush=True)

    outcome = follow(engine, pace, Polling(), selected_tables(engine, options), on_round=each_round)
    if outcome.stopped_by == "interrupted":
        raise KeyboardInterrupt
    print(f"follow ended ({outcome.stopped_by}): {outcome.rounds} rounds, {outcome.files_applied} files applied")
    for failure in outcome.failures.values():
        print(f"cdclake: {failure.summary()}", file=sys.stderr)
    return outcome.exit_code


def _configure_full_load(parser: argparse.ArgumentParser) -> None:
    tables_option(parser)
    parser.add_argument("--reload", action="store_true", help="replace tables that are already loaded (atomically)")


@engine_command(
    "full-load", "load LOAD files into tables that have no full load yet", _configure_full_load, writes=True
)
def _full_load(engine: Engine, settings: CliSettings) -> int:
    from cdclake.engine.run import full_load

    start_up = time.monotonic() - settings.started
    report = full_load(engine, selected_tables(engine, settings.options), reload=settings.options.reload)
    code = print_report(report)
    print(report.time_line(start_up, time.monotonic() - settings.started))
    return code if report.failures else 0


def _configure_apply(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", help="CDC files; already applied ones are skipped")
    parser.add_argument("--manifest", type=Path, help='a JSON manifest: {"files": [{"key":..., "size":...}]}')


@engine_command("apply", "apply the given CDC files (keys, paths or s3:// URIs)", _configure_apply, writes=True)
def _apply(engine: Engine, settings: CliSettings) -> int:
    from cdclake.dms.manifest import read_manifest
    from cdclake.engine.run import apply_cdc_files
    from cdclake.engine.select import files_from_keys

    keys = list(settings.options.files)
    manifest: Path | None = settings.options.manifest
    if manifest:
        keys += [e.key for e in read_manifest(manifest.read_text(encoding="utf-8"), str(manifest))]
    files = files_from_keys(engine.store, keys, engine.config.bronze.transaction_path)
    return print_report(apply_cdc_files(engine, files))


def _configure_replay(parser: argparse.ArgumentParser) -> None:
    tables_option(parser)
    parser.add_argument("--quarantined", action="store_true", help="the files held in cdclake_quarantine")
    parser.add_argument("--since", help="files written at or after this time (YYYY-MM-DDTHH:MM)")
    parser.add_argument("--until", help="files written before this time (YYYY-MM-DDTHH:MM)")
    parser.add_argument("--file", action="append", default=[], help="this bronze key (repeatable)")


@engine_command(
    "replay",
    "apply CDC files from bronze again (fixed files, quarantined ones); safe to repeat",
    _configure_replay,
    writes=True,
)
def _replay(engine: Engine, settings: CliSettings) -> int:
    from cdclake.engine.run import replay
    from cdclake.engine.select import ReplaySelection

    options = settings.options
    selection = ReplaySelection(frozenset(options.file), options.quarantined, options.since, options.until)
    return print_report(replay(engine, selection, selected_tables(engine, options)))


COMMANDS = (_run, _full_load, _apply, _replay)
