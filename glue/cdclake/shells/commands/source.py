"""The source database: ``capture`` (PostgreSQL into DMS-format files), ``verify`` (silver against
the source) and ``init`` (the configuration from the source's catalog)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.config import load_config
from cdclake.errors import CdclakeError, UnknownTableError
from cdclake.shells.commands import Command, format_option, seconds_option, tables_option
from cdclake.shells.local_engine import on_engine, selected_tables
from cdclake.shells.settings import DEFAULT_HOME, SPARK_OPTIONS

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.ops.init import InitSettings
    from cdclake.shells.settings import CliSettings
    from cdclake.sources.postgres.settings import CaptureSettings
    from cdclake.verify.dialect import SourceDialect
    from cdclake.verify.result import TableComparison


def source_option(parser: argparse.ArgumentParser, note: str) -> None:
    # One option and one variable for init, capture and verify; --dsn and CDCLAKE_PG_DSN are
    # the names capture and verify had before.
    parser.add_argument(
        "--source",
        "--dsn",
        dest="source",
        default=os.environ.get("CDCLAKE_SOURCE") or os.environ.get("CDCLAKE_PG_DSN", ""),
        help="the source database: a URL (postgresql://user:password@host:5432/db) or a libpq string "
        f"(host=... port=... dbname=... user=...); {note} (env CDCLAKE_SOURCE; the old names "
        "--dsn and CDCLAKE_PG_DSN work too)",
    )


# --------------------------------------------------------------------------- capture
def _configure_capture(parser: argparse.ArgumentParser) -> None:
    source_option(parser, "empty: the PG* variables")
    parser.add_argument(
        "--slot", default="cdclake", help="replication slot, created with the full load (default: %(default)s)"
    )
    parser.add_argument(
        "--publication",
        default="cdclake",
        help="publication name; keyless tables: NAME_inserts (default: %(default)s)",
    )
    parser.add_argument(
        "--schema",
        action="append",
        help="without a --config file: capture the tables of this schema (repeatable; default: public)",
    )
    parser.add_argument(
        "--table",
        action="append",
        help="only this schema.table (repeatable; default: every table of --config, once there is one)",
    )
    parser.add_argument(
        "--reload",
        action="append",
        metavar="SCHEMA.TABLE",
        help="load this captured table again as it is now (repeatable): new LOAD files, which the next "
        "`cdclake run` loads in place of the table; lifts a hold (after a type change or REPLICA IDENTITY FULL)",
    )
    parser.add_argument(
        "--follow", action="store_true", help="keep capturing until stopped (default: pending changes, then exit)"
    )
    seconds_option(
        parser,
        "--max-batch-interval",
        60.0,
        "seconds before buffered changes are written, CdcMaxBatchInterval (default: %(default)s)",
    )
    parser.add_argument(
        "--min-file-size",
        type=int,
        default=32_000,
        help="KB of one table's changes that write a file at once, CdcMinFileSize (default: %(default)s)",
    )
    seconds_option(
        parser,
        "--poll-interval",
        1.0,
        "seconds between polls when idle, with --follow (default: %(default)s)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help=f"where the capture keeps its state (default: {DEFAULT_HOME / 'capture'} next to the --config file)",
    )


def _capture(settings: CliSettings) -> int:
    import signal

    from cdclake.sources.catalog.connect import libpq_dsn
    from cdclake.sources.postgres.capture import capture
    from cdclake.sources.postgres.settings import CaptureSettings

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a stop between polls: buffered changes are re-read next time
    options = settings.options
    captured = CaptureSettings(
        dsn=libpq_dsn(options.source),
        bronze=DEFAULT_HOME / "bronze",
        state_dir=options.state_dir or settings.home / "capture",
        slot=options.slot,
        publication=options.publication,
        schemas=tuple(options.schema or ("public",)),
        tables=tuple(options.table or ()),
        reload=tuple(options.reload or ()),
        follow=options.follow,
        max_batch_interval=options.max_batch_interval,
        min_file_size=options.min_file_size * 1024,
        poll_interval=options.poll_interval,
        config_path=settings.config,
    )
    captured = _capture_follows_config(captured, settings)
    report = capture(captured)
    print(
        f"capture: full load files={report.load_files} rows={report.load_rows}; cdc files={report.cdc_files} "
        f"changes={report.changes} transactions={report.transactions} already in bronze={report.skipped_changes}; "
        f"slot confirmed at {report.confirmed_lsn}"
    )
    for table, reason in sorted(report.held.items()):
        print(f"capture: table {table} held: {reason}", file=sys.stderr)
    for table in report.removed_tables:
        print(
            f"capture: table {table} is no longer in {settings.config}: no longer captured (its files stay in "
            "bronze; put it back with `cdclake init --add-new` and the next capture loads it afresh)",
            file=sys.stderr,
        )
    return 1 if report.held else 0


def _capture_follows_config(captured: CaptureSettings, settings: CliSettings) -> CaptureSettings:
    """What capture takes from the configuration file, whichever directory it runs from: bronze
    (``bronze.path``, relative to the file; ``--bronze`` overrides it) and the tables (all of the
    file's, or the ones ``--table`` names, each of which must be in it). Without a file: ``--bronze``
    or ``.cdclake/bronze`` next to where the file will be written, and the tables of ``--schema``."""
    from dataclasses import replace

    path = settings.config
    if not path.exists():
        bronze = Path(settings.bronze) if settings.bronze else settings.home / "bronze"
        return replace(captured, bronze=bronze)
    config = load_config(path)
    if settings.bronze:
        bronze = Path(settings.bronze)
    elif config.bronze.path.startswith("s3://"):
        raise CdclakeError(
            f"{path} has bronze on S3 ({config.bronze.path}): capture writes a local folder, give --bronze."
        )
    else:
        bronze = path.parent / config.bronze.path
    configured = [t.source for t in config.tables]
    unknown = [name for name in (*captured.tables, *captured.reload) if name not in configured]
    if unknown:
        raise UnknownTableError(
            f"Table(s) {', '.join(unknown)} not in {path} (known: {', '.join(configured)}): "
            "add them with cdclake init --add-new, or name configured ones."
        )
    if settings.options.schema:
        raise CdclakeError(f"capture takes its tables from {path}: --schema chooses them only when there is none.")
    return replace(captured, bronze=bronze, tables=captured.tables or tuple(configured), configured=tuple(configured))


# --------------------------------------------------------------------------- verify
def _configure_verify(parser: argparse.ArgumentParser) -> None:
    source_option(parser, "also mysql:// and sqlserver:// URLs; empty: the PG* variables")
    tables_option(parser)
    parser.add_argument(
        "--show", type=int, default=20, help="differing keys printed per table and kind (default: %(default)s)"
    )
    format_option(
        parser,
        "table: a line a table, then its differing keys (`text`, its older name, works too); csv: a row a table; "
        "json: one document with every key",
    )
    parser.add_argument(
        "--rows", action="store_true", help="read every row of both sides instead of comparing key-range checksums"
    )
    parser.add_argument(
        "--cut",
        action="store_true",
        help="PostgreSQL with `cdclake capture`: read the source at one log position, have capture stop there "
        "and the next run publish the cut there, then compare every table at that cut: no lag, no waiting for "
        "tables to catch up (capture and a run must run meanwhile; --wait bounds the wait for the cut)",
    )
    seconds_option(
        parser,
        "--wait",
        300.0,
        "a live source: how long differing tables may take to catch up with where the source stood when "
        "verify started before they are reported as lagging; their differing rows are then read again and "
        "only keys that still differ are reported (0: report at once; with --cut: how long to wait for the "
        "cut; default: %(default)s)",
        metavar="SECONDS",
    )
    seconds_option(
        parser,
        "--delivery",
        90.0,
        "the longest a committed change takes to reach bronze (DMS's CdcMaxBatchInterval or capture's "
        "--max-batch-interval, plus writing): a quiet table has caught up once nothing waits and this has "
        "passed (default: %(default)s)",
        metavar="SECONDS",
    )


def _verify_command(settings: CliSettings) -> int:
    """``verify``: the source is opened and asked whether this user may read the tables before Spark
    starts, so a wrong password or a missing grant is said at once."""
    import psycopg2

    from cdclake.sources.postgres.problems import SourceAccessError, read_problems, source_problem
    from cdclake.verify.dialects import open_dialect
    from cdclake.verify.postgres.dialect import PostgresDialect

    args = settings.options
    config = load_config(settings.config)
    tables = [config.table(name) for name in args.table] if args.get("table") else list(config.tables)
    with open_dialect(args.source) as dialect:
        if args.cut and not isinstance(dialect, PostgresDialect):
            raise CdclakeError(
                "verify --cut reads the source at the position `cdclake capture` stops at: PostgreSQL only."
            )
        if not isinstance(dialect, PostgresDialect):
            return on_engine(settings, lambda engine, s: _verify(engine, s, dialect), writes=False)
        try:
            if (problem := read_problems(dialect.conn, [t.source for t in tables], at_cut=args.cut)) is not None:
                raise SourceAccessError(problem)
            if args.cut:
                return on_engine(settings, lambda engine, s: _verify_at_cut(engine, s), writes=False)
            return on_engine(settings, lambda engine, s: _verify(engine, s, dialect), writes=False)
        except psycopg2.Error as exc:  # a table's own failure is reported with it; this is the rest
            raise SourceAccessError(source_problem(exc, dialect.conn.info.user, dialect.conn.info.dbname)) from None


def _verify(engine: Engine, settings: CliSettings, dialect: SourceDialect[Any]) -> int:
    from cdclake.verify.compare import ChecksumSettings
    from cdclake.verify.run import LiveCheck, verify

    args = settings.options
    live = None
    if args.wait > 0:
        from cdclake.verify.applied import silver_position
        from cdclake.verify.live import LiveSettings

        waits = LiveSettings(wait_seconds=args.wait, delivery_seconds=args.delivery)
        live = LiveCheck(waits, lambda table: silver_position(engine, table))
    checksums = None if args.rows else ChecksumSettings()
    results = verify(engine, dialect, selected_tables(engine, args), checksums, live)
    print(_verify_output(results, args.format, args.show), end="")
    return 0 if all(r.equal for r in results) else 1


def _verify_at_cut(engine: Engine, settings: CliSettings) -> int:
    from cdclake.sources.catalog.connect import libpq_dsn
    from cdclake.verify.compare import ChecksumSettings
    from cdclake.verify.postgres.at_cut import CutWait, verify_at_cut

    args = settings.options
    checksums = None if args.rows else ChecksumSettings()
    waits = CutWait(wait_seconds=args.wait or CutWait.wait_seconds)
    cut, results = verify_at_cut(engine, libpq_dsn(args.source), selected_tables(engine, args), checksums, waits)
    at = f"at {cut.commit_ts}" if cut.commit_ts else "at the first full load"
    print(f"verify at the cut {at} ({cut.position_text}): silver at the cut's snapshots, the source at its "
          f"position", file=sys.stderr)  # fmt: skip
    print(_verify_output(results, args.format, args.show), end="")
    return 0 if all(r.equal for r in results) else 1


def _verify_output(results: list[TableComparison], style: str, show: int) -> str:
    """``verify``'s output in the ``--format`` every command shares: ``table`` (a line a table, then its differing
    keys), ``csv`` (a row a table: the counts, the keys' lists left to json) or ``json`` (one document with every
    key)."""
    from cdclake.shells.output import csv_lines
    from cdclake.verify.report import comparisons_csv, comparisons_json, format_comparisons

    if style == "json":
        return comparisons_json(results)
    if style == "csv":
        return csv_lines(*comparisons_csv(results))
    return format_comparisons(results, show)


# --------------------------------------------------------------------------- init
def _configure_init(parser: argparse.ArgumentParser) -> None:
    source_option(parser, "also mysql:// and sqlserver:// URLs")
    parser.add_argument(
        "--include", action="append", default=[], help="schema.table glob to take (repeatable; default: all)"
    )
    parser.add_argument("--exclude", action="append", default=[], help="schema.table glob to leave out (repeatable)")
    parser.add_argument("--force", action="store_true", help="overwrite a configuration that was edited by hand")
    parser.add_argument("--add-new", action="store_true", help="add only the tables the configuration lacks")
    parser.add_argument("--check", action="store_true", help="print the drift from the catalog; exit 1 on any")
    parser.add_argument("--database", help="silver.database (default: the source database's name)")


def init_settings(settings: CliSettings) -> InitSettings:
    """``cdclake init``'s settings from the command line's."""
    from cdclake.ops.init import InitSettings
    from cdclake.sources.catalog.plan import BronzeDefaults

    options = settings.options
    return InitSettings(
        source_url=options.source,
        config_path=settings.config,
        include=tuple(options.include),
        exclude=tuple(options.exclude),
        force=options.force,
        add_new=options.add_new,
        check=options.check,
        database=options.database,
        bronze=BronzeDefaults(path=settings.bronze) if settings.bronze else BronzeDefaults(),
    )


def _init(settings: CliSettings) -> int:
    from cdclake.ops.init import init

    return init(init_settings(settings))


COMMANDS = (
    Command(
        "capture",
        "PostgreSQL logical decoding -> DMS-format full-load and CDC files in --bronze",
        _configure_capture,
        _capture,
        skip_globals=SPARK_OPTIONS,
    ),
    Command(
        "verify",
        "compare every silver table with its source table (PostgreSQL, MariaDB/MySQL, SQL Server)",
        _configure_verify,
        _verify_command,
    ),
    Command(
        "init",
        "write --config from a source database's catalog (or --check drift)",
        _configure_init,
        _init,
        skip_globals=SPARK_OPTIONS,
    ),
)
