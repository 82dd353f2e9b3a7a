"""The ``cdclake`` command: the local shell around the engine.

Settings are read once here (arguments, then environment defaults) and passed down; nothing
below this module reads the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.config import load_config
from cdclake.errors import CdclakeError, ConcurrentWriterError, UnknownTableError
from cdclake.shells.console import console_logging
from cdclake.shells.query import TABLE_ROWS

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine
    from cdclake.report import RunReport
    from cdclake.sources.postgres.settings import CaptureSettings

DEFAULT_HOME = Path(".cdclake")
DEFAULT_WAREHOUSE = DEFAULT_HOME / "warehouse"


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdclake"


def _row_count(text: str) -> int:
    """``--limit``: a whole number of rows, 0 or more."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"a number of rows (0 or more), not '{text}'")
    return int(text)


def _global_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, defaults: bool) -> None:
    """The options every command takes, before or after its name. On the subcommands they default
    to ``SUPPRESS`` so that one left out there does not overwrite the one given before the command."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--config",
        type=Path,
        default=default(Path("cdclake.yaml")),
        help="table configuration (YAML) (default: cdclake.yaml)",
    )
    parser.add_argument(
        "--bronze", default=default(None), help="bronze root (directory or s3://bucket/prefix); overrides bronze.path"
    )
    parser.add_argument(
        "--warehouse",
        type=Path,
        default=default(None),
        help=f"local Iceberg warehouse directory (default: {DEFAULT_WAREHOUSE} next to the --config file)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=default(_default_cache()),
        help=f"where the relocated Jackson jar is cached (default: {_default_cache()})",
    )
    parser.add_argument(
        "--iceberg-jar",
        type=Path,
        default=default(os.environ.get("CDCLAKE_ICEBERG_JAR") or None),
        help="an official iceberg-spark-runtime jar to use instead of the PyPI one (env CDCLAKE_ICEBERG_JAR)",
    )
    parser.add_argument(
        "--iceberg-packages",
        default=default(os.environ.get("CDCLAKE_ICEBERG_PACKAGES", "")),
        help="Maven coordinates for spark.jars.packages, comma-separated (env CDCLAKE_ICEBERG_PACKAGES)",
    )
    parser.add_argument(
        "--driver-memory", default=default("2g"), help="Spark driver memory for local runs (default: 2g)"
    )
    parser.add_argument(
        "--lock-wait",
        type=float,
        default=default(600.0),
        help="seconds a writing command waits for another one on the same warehouse (default: 600)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="print only results and warnings (Spark logs errors only, no progress)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cdclake",
        description="Mirror AWS DMS full-load and CDC files into Apache Iceberg tables.",
        epilog="The options above are accepted after the command's name too.",
    )
    _global_options(parser, defaults=True)
    shared = argparse.ArgumentParser(add_help=False)
    _global_options(shared.add_argument_group("global options (also accepted before the command)"), defaults=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=description, description=description, parents=[shared])

    def source_option(sub: argparse.ArgumentParser, note: str) -> None:
        # One option and one variable for init, capture and verify; --dsn and CDCLAKE_PG_DSN are
        # the names capture and verify had before.
        sub.add_argument(
            "--source",
            "--dsn",
            dest="source",
            default=os.environ.get("CDCLAKE_SOURCE") or os.environ.get("CDCLAKE_PG_DSN", ""),
            help="the source database: a URL (postgresql://user:password@host:5432/db) or a libpq string "
            f"(host=... port=... dbname=... user=...); {note} (env CDCLAKE_SOURCE; the old names "
            "--dsn and CDCLAKE_PG_DSN work too)",
        )

    def tables_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--table", action="append", help="only this table (repeatable; default: every table)")

    demo = command("demo", "write the Airbnb hosts example as DMS files, apply, verify")
    demo.add_argument(
        "--workdir", type=Path, default=DEFAULT_HOME / "demo", help="recreated for the demo (default: %(default)s)"
    )

    run = command("run", "full load where a table has none yet, then all pending CDC")
    tables_option(run)
    run.add_argument(
        "--follow", action="store_true", help="then keep applying files as they arrive, until Ctrl-C (or --idle-exit)"
    )
    run.add_argument(
        "--poll-interval",
        type=float,
        default=5.0,
        help="with --follow: seconds between looks at bronze (default: %(default)s)",
    )
    run.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="with --follow: end after this many seconds without a new file (default: never)",
    )
    run.add_argument(
        "--max-run", type=float, metavar="SECONDS", help="with --follow: end after this many seconds (default: never)"
    )

    full = command("full-load", "load LOAD files into tables that have no full load yet")
    tables_option(full)
    full.add_argument("--reload", action="store_true", help="replace tables that are already loaded (atomically)")

    apply = command("apply", "apply the given CDC files (keys, paths or s3:// URIs)")
    apply.add_argument("files", nargs="*", help="CDC files; already applied ones are skipped")
    apply.add_argument("--manifest", type=Path, help='a JSON manifest: {"files": [{"key":..., "size":...}]}')

    replay = command("replay", "apply CDC files from bronze again (fixed files, quarantined ones); safe to repeat")
    tables_option(replay)
    replay.add_argument("--quarantined", action="store_true", help="the files held in cdclake_quarantine")
    replay.add_argument("--since", help="files written at or after this time (YYYY-MM-DDTHH:MM)")
    replay.add_argument("--until", help="files written before this time (YYYY-MM-DDTHH:MM)")
    replay.add_argument("--file", action="append", default=[], help="this bronze key (repeatable)")

    quarantine = command("quarantine", "what is held in quarantine and why; dismiss entries whose file was deleted")
    actions = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = actions.add_parser(
        "list",
        help="every held file and bad row: table, file, row, reason, the row as it was, still in bronze",
        parents=[shared],
    )
    tables_option(listed)
    listed.add_argument(
        "--format", choices=("table", "csv", "json"), default="table", help="output format (default: %(default)s)"
    )
    dismiss = actions.add_parser(
        "dismiss",
        help="clear the entries of files no longer in bronze, recorded in cdclake_quarantine_dismissed "
        "(a file still in bronze is fixed and replayed instead: `replay --quarantined`)",
        parents=[shared],
    )
    dismiss.add_argument("--missing", action="store_true", help="every entry whose file is no longer in bronze")
    dismiss.add_argument("--file", action="append", default=[], help="this bronze key only (repeatable)")
    tables_option(dismiss)

    maintain = command(
        "maintain",
        "compact, expire snapshots, remove orphans, prune tombstones: silver, its side tables, the ledger, "
        "journals and marts",
    )
    tables_option(maintain)
    maintain.add_argument(
        "--snapshot-retention-hours", type=int, default=168, help="snapshots older are expired (default: %(default)s)"
    )
    maintain.add_argument("--retain-last", type=int, default=10, help="snapshots always kept (default: %(default)s)")
    maintain.add_argument(
        "--orphan-age-hours",
        type=int,
        default=72,
        help="unreferenced files older are removed (default: %(default)s)",
    )
    maintain.add_argument(
        "--tombstone-retention-days",
        type=int,
        default=7,
        help="deleted keys remembered this long against late changes (default: %(default)s)",
    )
    maintain.add_argument(
        "--changed-only",
        action="store_true",
        help="skip tables with no commit since their last maintenance (what the Glue maintenance job does)",
    )

    status = command("status", "per table: rows, applied and pending files, lag, what needs attention")
    status.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table: for a terminal; csv, json: every field (default: %(default)s)",
    )
    status.add_argument("--wide", action="store_true", help="the table format with every field")

    capture = command("capture", "PostgreSQL logical decoding -> DMS-format full-load and CDC files in --bronze")
    source_option(capture, "empty: the PG* variables")
    capture.add_argument(
        "--slot", default="cdclake", help="replication slot, created with the full load (default: %(default)s)"
    )
    capture.add_argument(
        "--publication",
        default="cdclake",
        help="publication name; keyless tables: NAME_inserts (default: %(default)s)",
    )
    capture.add_argument(
        "--schema",
        action="append",
        help="without a --config file: capture the tables of this schema (repeatable; default: public)",
    )
    capture.add_argument(
        "--table",
        action="append",
        help="only this schema.table (repeatable; default: every table of --config, once there is one)",
    )
    capture.add_argument(
        "--reload",
        action="append",
        metavar="SCHEMA.TABLE",
        help="load this captured table again as it is now (repeatable): new LOAD files, which the next "
        "`cdclake run` loads in place of the table; lifts a hold (after a type change or REPLICA IDENTITY FULL)",
    )
    capture.add_argument(
        "--follow", action="store_true", help="keep capturing until stopped (default: pending changes, then exit)"
    )
    capture.add_argument(
        "--max-batch-interval",
        type=float,
        default=60.0,
        help="seconds before buffered changes are written, CdcMaxBatchInterval (default: %(default)s)",
    )
    capture.add_argument(
        "--min-file-size",
        type=int,
        default=32_000,
        help="KB of one table's changes that write a file at once, CdcMinFileSize (default: %(default)s)",
    )
    capture.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        help="seconds between polls when idle, with --follow (default: %(default)s)",
    )
    capture.add_argument(
        "--state-dir",
        type=Path,
        help=f"where the capture keeps its state (default: {DEFAULT_HOME / 'capture'} next to the --config file)",
    )

    verify = command("verify", "compare every silver table with its PostgreSQL source table")
    source_option(verify, "empty: the PG* variables")
    tables_option(verify)
    verify.add_argument(
        "--show", type=int, default=20, help="differing keys printed per table and kind (default: %(default)s)"
    )

    init = command("init", "write --config from a source database's catalog (or --check drift)")
    source_option(init, "also mysql:// and sqlserver:// URLs")
    init.add_argument(
        "--include", action="append", default=[], help="schema.table glob to take (repeatable; default: all)"
    )
    init.add_argument("--exclude", action="append", default=[], help="schema.table glob to leave out (repeatable)")
    init.add_argument("--force", action="store_true", help="overwrite a configuration that was edited by hand")
    init.add_argument("--add-new", action="store_true", help="add only the tables the configuration lacks")
    init.add_argument("--check", action="store_true", help="print the drift from the catalog; exit 1 on any")
    init.add_argument("--database", help="silver.database (default: the source database's name)")

    gold = command("gold", "refresh the gold marts from silver (one commit per mart)")
    gold.add_argument("--mart", action="append", help="only this mart (repeatable; default: every mart)")

    query = command("query", "run SQL on the silver catalog")
    query.add_argument(
        "sql", help="one Spark SQL statement; tables are silver.<database>.<table> or <database>.<table>"
    )
    query.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help='table: for a terminal; csv: NULL as an empty field, the empty string as ""; json: one object per '
        "line (default: %(default)s)",
    )
    query.add_argument(
        "--limit",
        type=_row_count,
        default=None,
        help=f"at most this many rows, 0 for all (default: all for csv and json, {TABLE_ROWS} for table; "
        "rows left out are always reported on stderr)",
    )
    return parser


def warehouse_of(args: argparse.Namespace) -> Path:
    """``--warehouse``, else ``.cdclake/warehouse`` next to the configuration file: the same
    warehouse whichever directory the command runs from."""
    return Path(args.warehouse) if args.warehouse is not None else args.config.parent / DEFAULT_WAREHOUSE


def _engine(args: argparse.Namespace, config_path: Path, bronze_override: str | None = None) -> Engine:
    from dataclasses import replace

    from cdclake.context import open_engine
    from cdclake.runtime.session import LocalCatalog

    config = load_config(config_path)
    bronze = bronze_override or args.bronze
    if bronze is None:  # bronze.path in the file is relative to the file; the others to the cwd
        bronze = config.bronze.path
        if not bronze.startswith("s3://"):
            bronze = str((config_path.parent / bronze).resolve())
    config = replace(config, bronze=replace(config.bronze, path=bronze))
    warehouse = warehouse_of(args)
    packages = tuple(p.strip() for p in args.iceberg_packages.split(",") if p.strip())
    catalog = LocalCatalog(
        warehouse=warehouse,
        cache_dir=args.cache_dir,
        runtime_jar=args.iceberg_jar,
        maven_packages=packages,
        driver_memory=args.driver_memory,
    )
    return open_engine(
        config, catalog, staging_dir=warehouse.parent / "staging", progress_seconds=args.progress_seconds
    )


def _print_report(report: RunReport) -> int:
    """Print one line per table and batch, then what was set aside and each table that failed;
    the exit code is ``RunReport.exit_code``."""
    for table in report.tables:
        print(table.summary())
    if not report.tables and not report.failures:
        print("nothing to apply")
    if line := report.no_files_line():
        print(line)
    for line in report.problems():
        print(f"cdclake: {line}", file=sys.stderr)
    return report.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()  # a run's time line counts its start-up from here
    args = build_parser().parse_args(argv)
    args.started = started
    with console_logging(args.quiet) as bar:
        # A terminal's bar moves every second; plain log lines come every 30 s at most.
        args.progress_seconds = 1.0 if bar else 30.0
        return _run_command(args)


def _run_command(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except ConcurrentWriterError as exc:
        print(f"cdclake: {exc}", file=sys.stderr)
        return ConcurrentWriterError.exit_code
    except CdclakeError as exc:
        print(f"cdclake: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Every commit is atomic and the ledger says what was applied: a stop loses nothing.
        print(f"cdclake: {INTERRUPTED}", file=sys.stderr)
        return 130


INTERRUPTED = "interrupted; nothing is lost, run it again"


def _stop_on_interrupt(engine: Engine) -> None:
    """Make Ctrl-C stop the run: the engine's stop is set first (a cancelled Spark job is then not
    mistaken for bad input), then KeyboardInterrupt reaches the waiting main thread, which cancels
    the running jobs (``engine.parallel``). Replaces PySpark's handler, which cancels them from
    inside whatever py4j call the main thread is in and breaks its gateway connection."""
    import signal

    def interrupted(_signum: int, _frame: object) -> None:
        engine.stopping.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from cdclake.shells.demo import run_demo

        args.warehouse = args.workdir / "warehouse"  # the demo starts from an empty warehouse
        return run_demo(args.workdir, lambda config, bronze: _engine(args, config, bronze))
    if args.command == "capture":
        return _capture(args)
    if args.command == "init":
        from cdclake.ops.init import cli_init

        return cli_init(args)
    if args.command not in _WRITERS and getattr(args, "action", None) not in _WRITERS:
        return _COMMANDS[args.command](_interruptible(_engine(args, args.config)), args)
    from cdclake.shells.lock import warehouse_lock

    with warehouse_lock(warehouse_of(args), args.command, args.lock_wait):
        return _COMMANDS[args.command](_interruptible(_engine(args, args.config)), args)


def _interruptible(engine: Engine) -> Engine:
    _stop_on_interrupt(engine)
    return engine


def _tables(engine: Engine, args: argparse.Namespace) -> list[TableConfig] | None:
    """The tables named with --table, or None: every configured table."""
    return [engine.config.table(t) for t in args.table] if getattr(args, "table", None) else None


def _run(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.engine.run import run

    if args.follow:
        return _follow(engine, args)
    start_up = time.monotonic() - args.started
    report = run(engine, _tables(engine, args))
    code = _print_report(report)
    print(report.time_line(start_up, time.monotonic() - args.started))
    return code


def _follow(engine: Engine, args: argparse.Namespace) -> int:
    """``run --follow``: the loop the Glue CDC job runs, polling a local (or S3) bronze."""
    from cdclake.engine.follow import FollowSettings, Polling, Round, follow

    settings = FollowSettings(
        poll_seconds=args.poll_interval, idle_seconds=args.idle_exit, max_run_seconds=args.max_run
    )

    def each_round(done: Round) -> None:
        for table in done.report.tables:
            print(table.summary(), flush=True)
        for line in done.report.problems():
            print(f"cdclake: {line}", file=sys.stderr, flush=True)

    outcome = follow(engine, settings, Polling(), _tables(engine, args), on_round=each_round)
    if outcome.stopped_by == "interrupted":
        raise KeyboardInterrupt
    print(f"follow ended ({outcome.stopped_by}): {outcome.rounds} rounds, {outcome.files_applied} files applied")
    for failure in outcome.failures.values():
        print(f"cdclake: {failure.summary()}", file=sys.stderr)
    return outcome.exit_code


def _full_load(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.engine.run import full_load

    start_up = time.monotonic() - args.started
    report = full_load(engine, _tables(engine, args), reload=args.reload)
    code = _print_report(report)
    print(report.time_line(start_up, time.monotonic() - args.started))
    return code if report.failures else 0


def _apply(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.dms.manifest import read_manifest
    from cdclake.engine.run import apply_cdc_files
    from cdclake.engine.select import files_from_keys

    keys = list(args.files)
    if args.manifest:
        keys += [e.key for e in read_manifest(args.manifest.read_text(encoding="utf-8"), str(args.manifest))]
    files = files_from_keys(engine.store, keys, engine.config.bronze.transaction_path)
    return _print_report(apply_cdc_files(engine, files))


def _replay(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.engine.run import replay
    from cdclake.engine.select import ReplaySelection

    selection = ReplaySelection(frozenset(args.file), args.quarantined, args.since, args.until)
    return _print_report(replay(engine, selection, _tables(engine, args)))


def _maintain(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.ops.maintenance import MaintenanceSettings, maintain

    settings = MaintenanceSettings(
        snapshot_retention_hours=args.snapshot_retention_hours,
        retain_last_snapshots=args.retain_last,
        orphan_file_age_hours=args.orphan_age_hours,
        tombstone_retention_days=args.tombstone_retention_days,
        changed_only=args.changed_only,
    )
    run = maintain(engine, settings, _tables(engine, args))
    for done in run.tables:
        print(f"maintain  {done.summary()}")
        for side in done.side_tables:
            print(f"            {side.summary()}")
    for shared in run.shared:
        print(f"maintain  {shared.summary()}")
    return 0


def _status(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.gold.status import mart_statuses
    from cdclake.ops.status import table_statuses
    from cdclake.shells.status_view import status_text
    from cdclake.sources.postgres.state import capture_holds

    marts = mart_statuses(engine) if engine.config.gold.marts else []
    holds = capture_holds(args.config.parent / DEFAULT_HOME / "capture", args.config)
    print(status_text(table_statuses(engine, capture_holds=holds), marts, args.format, args.wide), end="")
    return 0


def _gold(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.shells.marts import gold_command

    return gold_command(engine, args.mart)


def _query(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.shells.query import run_query

    output = run_query(engine.spark, args.sql, args.format, args.limit)
    print(output.text, end="")
    if output.note:
        print(f"cdclake: {output.note}", file=sys.stderr)
    return 0


def _verify(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.sources.catalog.connect import libpq_dsn
    from cdclake.sources.postgres.settings import connect
    from cdclake.sources.postgres.verify import format_comparisons, verify

    conn = connect(libpq_dsn(args.source))
    try:
        results = verify(engine, conn, _tables(engine, args))
    finally:
        conn.close()
    print(format_comparisons(results, args.show), end="")
    return 0 if all(r.equal for r in results) else 1


def _quarantine(engine: Engine, args: argparse.Namespace) -> int:
    from cdclake.ops.quarantine import dismiss_missing, entries_as_rows, quarantine_entries
    from cdclake.shells.output import format_rows

    if args.action == "list":
        columns, rows = entries_as_rows(quarantine_entries(engine, _tables(engine, args)))
        print(format_rows(columns, rows, args.format), end="")
        return 0
    if not args.missing and not args.file:
        raise CdclakeError("Say which entries to dismiss: --missing (every file gone from bronze) or --file KEY.")
    done = dismiss_missing(engine, args.file, _tables(engine, args))
    for d in done:
        print(
            f"dismissed {d.table}: {d.file_key} ({d.files} file entry, {d.rows} row(s)); recorded in "
            "cdclake_quarantine_dismissed"
        )
    if not done:
        print("nothing to dismiss: every file held in quarantine is still in bronze")
    return 0


# Commands (and quarantine actions) that write to the warehouse: one at a time per local warehouse.
_WRITERS = {"run", "full-load", "apply", "replay", "maintain", "gold", "dismiss"}
_COMMANDS: dict[str, Callable[[Engine, argparse.Namespace], int]] = {
    "run": _run,
    "full-load": _full_load,
    "apply": _apply,
    "replay": _replay,
    "maintain": _maintain,
    "status": _status,
    "gold": _gold,
    "query": _query,
    "verify": _verify,
    "quarantine": _quarantine,
}


def _capture(args: argparse.Namespace) -> int:
    import signal

    from cdclake.sources.catalog.connect import libpq_dsn
    from cdclake.sources.postgres.capture import capture
    from cdclake.sources.postgres.settings import CaptureSettings

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a stop between polls: buffered changes are re-read next time
    settings = CaptureSettings(
        dsn=libpq_dsn(args.source),
        bronze=DEFAULT_HOME / "bronze",
        state_dir=args.state_dir or args.config.parent / DEFAULT_HOME / "capture",
        slot=args.slot,
        publication=args.publication,
        schemas=tuple(args.schema or ("public",)),
        tables=tuple(args.table or ()),
        reload=tuple(args.reload or ()),
        follow=args.follow,
        max_batch_interval=args.max_batch_interval,
        min_file_size=args.min_file_size * 1024,
        poll_interval=args.poll_interval,
        config_path=args.config,
    )
    settings = _capture_follows_config(settings, args)
    report = capture(settings)
    print(
        f"capture: full load files={report.load_files} rows={report.load_rows}; cdc files={report.cdc_files} "
        f"changes={report.changes} transactions={report.transactions} already in bronze={report.skipped_changes}; "
        f"slot confirmed at {report.confirmed_lsn}"
    )
    for table, reason in sorted(report.held.items()):
        print(f"capture: table {table} held: {reason}", file=sys.stderr)
    for table in report.removed_tables:
        print(
            f"capture: table {table} is no longer in {args.config}: no longer captured (its files stay in bronze; "
            "put it back with `cdclake init --add-new` and the next capture loads it afresh)",
            file=sys.stderr,
        )
    return 1 if report.held else 0


def _capture_follows_config(settings: CaptureSettings, args: argparse.Namespace) -> CaptureSettings:
    """What capture takes from the configuration file, whichever directory it runs from: bronze
    (``bronze.path``, relative to the file; ``--bronze`` overrides it) and the tables (all of the
    file's, or the ones ``--table`` names, each of which must be in it). Without a file: ``--bronze``
    or ``.cdclake/bronze`` next to where the file will be written, and the tables of ``--schema``."""
    from dataclasses import replace

    path: Path = args.config
    if not path.exists():
        bronze = Path(args.bronze) if args.bronze else path.parent / DEFAULT_HOME / "bronze"
        return replace(settings, bronze=bronze)
    config = load_config(path)
    if args.bronze:
        bronze = Path(args.bronze)
    elif config.bronze.path.startswith("s3://"):
        raise CdclakeError(
            f"{path} has bronze on S3 ({config.bronze.path}): capture writes a local folder, give --bronze."
        )
    else:
        bronze = path.parent / config.bronze.path
    configured = [t.source for t in config.tables]
    unknown = [name for name in (*settings.tables, *settings.reload) if name not in configured]
    if unknown:
        raise UnknownTableError(
            f"Table(s) {', '.join(unknown)} not in {path} (known: {', '.join(configured)}): "
            "add them with cdclake init --add-new, or name configured ones."
        )
    if args.schema:
        raise CdclakeError(f"capture takes its tables from {path}: --schema chooses them only when there is none.")
    return replace(settings, bronze=bronze, tables=settings.tables or tuple(configured), configured=tuple(configured))


if __name__ == "__main__":
    sys.exit(main())
