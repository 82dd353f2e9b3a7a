"""A whole run: list bronze once, read the tables' states, full loads, then CDC batches.

Each table's work starts by catching its history up with silver (``engine.history_sync``), should
a crash have fallen between silver's commit and history's.

Tables are worked on concurrently (``engine.parallel``): each table's full load, or its batches
one after the other, is one unit of work. Each commit hands back the table's new state, from which
the next batch's pending files follow: no table's ledger is read twice and bronze is never listed
again during a run. A table that fails is in the report's ``failures``; the others go on.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.dms.store import list_bronze
from cdclake.engine.cdc import apply_cdc_batch
from cdclake.engine.full_load import full_load_table
from cdclake.engine.history_sync import catch_up_history
from cdclake.engine.parallel import TableRun, for_each_table
from cdclake.engine.select import ReplaySelection, TableState, batches, group_by_table, load_due, skip_reason
from cdclake.errors import ConcurrentWriterError, first_line
from cdclake.lake.journals import files_with_quarantined_rows, quarantined_files_by_table
from cdclake.lake.ledger import read_ledger
from cdclake.lake.tables import is_commit_conflict
from cdclake.report import Progress, RunReport, TableReport
from cdclake.schema import is_type_change

log = logging.getLogger("cdclake")

HeldFiles = dict[str, frozenset[str]]  # silver table name -> bronze keys held in quarantine


def held_files(engine: Engine) -> HeldFiles:
    """Every table's quarantined files, in one read of the database's quarantine journal."""
    return quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)


def read_state(engine: Engine, table: TableConfig, held: HeldFiles | None = None) -> TableState:
    """What the lake says of ``table``: its ledger (table metadata only) and its quarantine
    (``held``, read once for the run; read now when not given)."""
    silver = engine.silver_table(table)
    ledger = read_ledger(engine.spark, silver)
    quarantine = held_files(engine) if held is None else held
    keys = quarantine.get(silver.name, frozenset())
    return TableState(ledger.full_load_done, ledger.applied, keys, ledger.loaded, ledger.snapshot_id)


def list_all(engine: Engine) -> BronzeListing:
    return list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)


def run(engine: Engine, tables: Sequence[TableConfig] | None = None) -> RunReport:
    """Full load where a table has none yet, then every pending CDC file, in batches; tables
    concurrently."""
    listing = list_all(engine)
    report, _ = apply_pending(engine, listing, tables)
    warn(report)
    return report


def apply_pending(
    engine: Engine, listing: BronzeListing, tables: Sequence[TableConfig] | None = None, loads: bool = True
) -> tuple[RunReport, dict[str, TableState]]:
    """What ``run`` does with a listing it is given: the report, and the state each table was left
    in (by source name; a table that failed before its state was read is absent).

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
    held = held_files(engine)

    def load(table_run: TableRun) -> None:
        table = table_run.table
        catch_up_history(engine, table)
        state = read_state(engine, table, held)
        if not loads:
            files = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
            if why := load_due(table, state, files):
                pending = TableReport(table=table.source, kind="full-load", load_pending=why)
                pending.note = f"load pending in the full-load lane, CDC held until then: {why}"
                table_run.reports.append(pending)
                return  # no state: its CDC files stay pending
        done, table_run.state = full_load_table(engine, table, listing, state)
        if done.note != "already loaded":
            table_run.reports.append(done)

    started = time.monotonic()
    loaded = for_each_table(engine, selected, "full-load", load)
    report.phase_seconds["full loads"] = time.monotonic() - started
    _collect(report, loaded)
    states = {r.table.source: r.state for r in loaded if r.state is not None}
    cdc_files = [f for f in listing.files if f.kind is FileKind.CDC]
    grouped = [(t, fs) for t, fs in group_by_table(engine.config, cdc_files, report) if t.source in states]
    files_of = {t.source: fs for t, fs in grouped}
    pending = [f for t, fs in grouped for f in states[t.source].pending(fs)]
    progress = Progress(len(pending), sum(f.size for f in pending), time.monotonic(), total_tables=len(grouped))
    lock = threading.Lock()

    def apply(table_run: TableRun) -> None:
        table = table_run.table
        table_run.state = states[table.source]
        _apply_in_batches(
            engine, table_run, files_of[table.source], listing, table_run.state, progress=(progress, lock)
        )
        with lock:
            progress.tables += 1

    started = time.monotonic()
    applied = for_each_table(engine, [t for t, _ in grouped], "cdc", apply)
    report.phase_seconds["CDC"] = time.monotonic() - started
    _collect(report, applied)
    states |= {r.table.source: r.state for r in applied if r.state is not None}
    unconfigured = {f"{s}.{t}" for s, t in listing.sources() if engine.config.table_for_source(s, t) is None}
    report.unconfigured = sorted(set(report.unconfigured) | unconfigured)
    return report, states


def full_load(engine: Engine, tables: Sequence[TableConfig] | None = None, reload: bool = False) -> RunReport:
    """Full load of the tables (all configured ones by default), concurrently; loaded tables are
    left alone unless ``reload``."""
    listing = list_all(engine)
    report = RunReport(unrecognised=list(listing.unrecognised))
    held = held_files(engine)

    def load(table_run: TableRun) -> None:
        catch_up_history(engine, table_run.table)
        state = read_state(engine, table_run.table, held)
        loaded, table_run.state = full_load_table(engine, table_run.table, listing, state, reload)
        table_run.reports.append(loaded)

    started = time.monotonic()
    loads = for_each_table(engine, list(tables or engine.config.tables), "full-load", load)
    report.phase_seconds["full loads"] = time.monotonic() - started
    _collect(report, loads)
    warn(report)
    return report


def apply_cdc_files(engine: Engine, files: Sequence[BronzeFile]) -> RunReport:
    """Apply an explicit set of CDC files (a state-machine manifest): one commit per table, tables
    concurrently."""
    report = RunReport()
    grouped = group_by_table(engine.config, files, report)
    files_of = {t.source: fs for t, fs in grouped}
    held = held_files(engine) if grouped else {}

    def apply(table_run: TableRun) -> None:
        table = table_run.table
        catch_up_history(engine, table)
        state = read_state(engine, table, held)
        listing = (
            None if state.full_load_done else list_bronze(engine.store, f"{table.source_schema}/{table.source_table}")
        )
        applied, table_run.state = apply_batch(
            engine, table, files_of[table.source], state, _loads_pending(table, listing)
        )
        table_run.reports.append(applied)

    started = time.monotonic()
    applied = for_each_table(engine, [t for t, _ in grouped], "cdc", apply)
    report.phase_seconds["CDC"] = time.monotonic() - started
    _collect(report, applied)
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
    files_of = {t.source: fs for t, fs in grouped}
    held = held_files(engine)
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

    def apply(table_run: TableRun) -> None:
        catch_up_history(engine, table_run.table)
        state = read_state(engine, table_run.table, held)
        in_quarantine = quarantined.get(engine.silver_table(table_run.table).name, frozenset())
        chosen = selection.choose(files_of[table_run.table.source], in_quarantine)
        _apply_in_batches(engine, table_run, chosen, listing, state, force=True)

    _collect(report, for_each_table(engine, [t for t, _ in grouped], "cdc", apply))
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


def _collect(report: RunReport, runs: Sequence[TableRun]) -> None:
    """The tables' reports in table order (each table's batches in apply order), then the failures."""
    for table_run in runs:
        report.tables.extend(table_run.reports)
        if table_run.failure is not None:
            report.failures.append(table_run.failure)


def apply_batch(
    engine: Engine,
    table: TableConfig,
    files: Sequence[BronzeFile],
    state: TableState,
    loads_pending: bool = False,
    force: bool = False,
) -> tuple[TableReport, TableState]:
    """Apply one batch; when another writer commits to the table first, read the table's state
    again and retry (the ledger makes that safe: what the other writer applied is skipped), a
    bounded number of times with growing pauses, then give up with ConcurrentWriterError."""
    for attempt in range(1, engine.commit_attempts + 1):
        try:
            return apply_cdc_batch(engine, table, files, state, loads_pending, force)
        except Exception as failure:
            if not is_commit_conflict(failure):
                raise
            if attempt == engine.commit_attempts:
                raise ConcurrentWriterError(
                    f"Table {table.source}: another writer committed to {engine.silver_table(table).identifier} "
                    f"{attempt} times while this batch was applied (a second cdclake run, a Glue job or "
                    "maintenance on the same catalog); nothing of this batch is lost: run it again later."
                ) from None
            pause = engine.commit_backoff_seconds * 2 ** (attempt - 1) * (1 + random.random())
            log.warning("commit conflict table=%s attempt=%d retry_in=%.1fs: %s", table.source, attempt, pause,
                        first_line(failure))  # fmt: skip
            time.sleep(pause)
            # The conflict may have been history's, after silver's commit: history catches up first.
            catch_up_history(engine, table)
            state = read_state(engine, table)
    raise AssertionError("unreachable")


def _loads_pending(table: TableConfig, listing: BronzeListing | None) -> bool:
    return bool(listing and listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD))


def _apply_in_batches(
    engine: Engine,
    table_run: TableRun,
    files: Sequence[BronzeFile],
    listing: BronzeListing,
    state: TableState,
    force: bool = False,
    progress: tuple[Progress, threading.Lock] | None = None,
) -> None:
    table = table_run.table
    pending = state.pending(files, force)
    loads_pending = _loads_pending(table, listing)
    for batch in batches(pending, engine.config.max_files_per_batch, engine.config.max_batch_bytes):
        if table_run.stopping.is_set():
            return
        applied, state = apply_batch(engine, table, batch, state, loads_pending, force)
        table_run.reports.append(applied)
        table_run.state = state
        if progress is not None:
            run_progress, lock = progress
            with lock:
                line = run_progress.advance(applied, time.monotonic())
            if run_progress.total_files > len(batch):
                log.info("progress %s", line.text, extra={"progress": line.fraction})
        if (
            applied.quarantined_files
            and not applied.files_applied
            and is_type_change(applied.note.removeprefix("quarantined: "))
        ):
            break  # a type change held the whole batch: the next ones would be held the same way


def warn(report: RunReport) -> None:
    """Log what a run found and did not apply: skipped tables, unconfigured sources, other keys."""
    for reason in report.skipped_tables:
        log.warning("table skipped: %s", reason)
    for source in report.unconfigured:
        log.warning("bronze holds files for %s, which is not configured: left in place, not applied", source)
    for reason in report.unrecognised:
        log.warning("bronze key is not a DMS data file: %s", reason)
