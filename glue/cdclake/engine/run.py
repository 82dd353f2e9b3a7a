"""The commands' runs: each lists bronze once and chooses its tables' works (``engine.turn``).

``run`` loads where a load is due and applies every pending CDC file; ``full_load`` loads (or
reloads); ``apply_cdc_files`` applies a state machine's manifest, one commit per table; ``replay``
applies files again. How a table is worked (history caught up, its state read once, its load, its
batches, each commit handing the next its state) is written once, in ``engine.turn.run_tables``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.dms.store import list_bronze
from cdclake.engine.cut import CutRounds
from cdclake.engine.select import ReplaySelection, TableState, group_by_table, skip_reason
from cdclake.engine.turn import HeldFiles, LoadStep, TableWork, run_tables
from cdclake.lake.journals import files_with_quarantined_rows, quarantined_files_by_table
from cdclake.report import RunReport

log = logging.getLogger("cdclake")


def list_all(engine: Engine) -> BronzeListing:
    return list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)


def run(engine: Engine, tables: Sequence[TableConfig] | None = None) -> RunReport:
    """Full load where a table has none yet, then every pending CDC file up to the cut's bound, in
    batches; tables concurrently; then the consistent cut it ended at (``engine.cut``)."""
    cuts = CutRounds(engine)
    bound = cuts.bound(lambda: list_all(engine))  # its record read first, then bronze listed
    report, states = apply_pending(engine, bound.listing, tables)
    report.cut = cuts.settle(bound, states)
    report.cut_commit_ts = cuts.commit_ts
    warn(report)
    return report


def apply_pending(
    engine: Engine,
    listing: BronzeListing,
    tables: Sequence[TableConfig] | None = None,
    loads: bool = True,
    states: dict[str, TableState] | None = None,
) -> tuple[RunReport, dict[str, TableState]]:
    """What ``run`` does with a listing it is given: the report, and the state each table was left
    in (by source; a table that failed is absent). ``states``: the tables' states as an earlier
    round left them (the follow loop), used instead of reading them again.

    ``loads`` False: the CDC lane (the Glue CDC job's loop), which never runs a (re)load: a table
    whose load is due is reported (``TableReport.load_pending``, ``RunReport.loads_pending``) and
    its CDC waits, its files pending in their order, until the full-load lane has loaded it."""
    report = RunReport(unrecognised=list(listing.unrecognised))
    selected = []
    for table in engine.config.tables if tables is None else tables:
        if reason := skip_reason(table):
            report.skipped_tables.append(reason)
        else:
            selected.append(table)
    report.no_files = [t.source for t in selected if not listing.may_hold(t.source_schema, t.source_table)]
    cdc_files = [f for f in listing.files if f.kind is FileKind.CDC]
    files_of = {t.source: tuple(fs) for t, fs in group_by_table(engine.config, cdc_files, report)}
    step = LoadStep.IF_DUE if loads else LoadStep.LANE
    works = [TableWork(t, step, files_of.get(t.source)) for t in selected]
    report, left = run_tables(engine, works, listing, states, report)
    unconfigured = {f"{s}.{t}" for s, t in listing.sources() if engine.config.table_for_source(s, t) is None}
    report.unconfigured = sorted(set(report.unconfigured) | unconfigured)
    return report, left


def full_load(engine: Engine, tables: Sequence[TableConfig] | None = None, reload: bool = False) -> RunReport:
    """Full load of the tables (all configured ones by default), concurrently; loaded tables are
    left alone unless ``reload``."""
    listing = list_all(engine)
    step = LoadStep.AGAIN if reload else LoadStep.ASKED
    works = [TableWork(t, step) for t in tables or engine.config.tables]
    report, _ = run_tables(engine, works, listing, report=RunReport(unrecognised=list(listing.unrecognised)))
    warn(report)
    return report


def apply_cdc_files(engine: Engine, files: Sequence[BronzeFile]) -> RunReport:
    """Apply an explicit set of CDC files (a state-machine manifest): one commit per table, tables
    concurrently."""
    report = RunReport()
    works = [TableWork(t, cdc=tuple(fs), one_batch=True) for t, fs in group_by_table(engine.config, files, report)]
    report, _ = run_tables(engine, works, None, report=report)
    warn(report)
    return report


def replay(engine: Engine, selection: ReplaySelection, tables: Sequence[TableConfig] | None = None) -> RunReport:
    """Apply CDC files from bronze again, even if applied or quarantined before, in file order.

    Safe to run at any time: changes older than a stored row or a tombstone are ignored, so only
    what the replayed files add (fixed files, rows that were set aside) changes silver. With
    ``selection.quarantined``: the held files and the files with quarantined rows (not of an
    append-only table: its applied rows would be appended again); once committed, their entries
    are resolved, except rows still bad. Entries whose file is gone from bronze are named.
    """
    listing = list_all(engine)
    report = RunReport(unrecognised=list(listing.unrecognised))
    selected = {t.source for t in (tables or engine.config.tables)}
    grouped = [
        (t, fs)
        for t, fs in group_by_table(engine.config, [f for f in listing.files if f.kind is FileKind.CDC], report)
        if t.source in selected
    ]
    held = quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)
    # Files whose bad rows were set aside were applied; replaying them applies the fixed rows.
    with_rows = files_with_quarantined_rows(engine.spark, engine.catalog, engine.config.database)
    for table in tables or engine.config.tables:
        name = engine.silver_table(table).name
        if table.append_only and selection.quarantined and with_rows.get(name):
            # Its applied rows would be appended a second time: only whole held files are replayed.
            log.warning(
                "table %s: %d file(s) with quarantined rows are not replayed: the table is append-only, so "
                "the rows applied from them would be appended again; put the fixed rows alone in a new CDC "
                "file in bronze and run `cdclake run`",
                table.source,
                len(with_rows.pop(name)),
            )
    quarantined = {t: held.get(t, frozenset()) | with_rows.get(t, frozenset()) for t in {*held, *with_rows}}
    if selection.quarantined:
        _warn_missing(engine, [t for t in (tables or engine.config.tables)], listing, quarantined)
    works = [
        TableWork(
            t, cdc=tuple(selection.choose(fs, quarantined.get(engine.silver_table(t).name, frozenset()))), force=True
        )
        for t, fs in grouped
    ]
    report, _ = run_tables(engine, works, listing, report=report, held=held)
    warn(report)
    return report


def _warn_missing(
    engine: Engine, tables: Sequence[TableConfig], listing: BronzeListing, quarantined: HeldFiles
) -> None:
    """Say which quarantine entries no replay can resolve: their file is no longer in bronze."""
    present = {f.key for f in listing.files}
    for table in tables:
        for key in sorted(quarantined.get(engine.silver_table(table).name, frozenset()) - present):
            log.warning(
                "table %s: %s is held in quarantine but no longer in bronze; restore it and replay, or "
                "record that it is gone: `cdclake quarantine dismiss --missing`",
                table.source,
                key,
            )


def warn(report: RunReport) -> None:
    """Log what a run found and did not apply: skipped tables, unconfigured sources, other keys."""
    for reason in report.skipped_tables:
        log.warning("table skipped: %s", reason)
    for source in report.unconfigured:
        log.warning("bronze holds files for %s, which is not configured: left in place, not applied", source)
    for reason in report.unrecognised:
        log.warning("bronze key is not a DMS data file: %s", reason)
