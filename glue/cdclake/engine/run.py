"""The commands' runs: each lists bronze once and chooses its tables' works (``engine.turn``).

``run`` loads where a load is due and applies every pending CDC file; ``full_load`` loads (or
reloads); ``apply_cdc_files`` applies a state machine's manifest, one commit per table; ``replay``
applies files again. How a table is worked (history caught up, its state read once, its load, its
batches, each commit handing the next its state) is written once, in ``engine.turn.run_tables``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.dms.index import list_from
from cdclake.dms.store import list_bronze
from cdclake.engine.cut import CutRounds
from cdclake.engine.select import ReplaySelection, TableState, files_from_keys, group_by_table, skip_reason
from cdclake.engine.turn import HeldFiles, LoadStep, TableWork, read_states, run_tables
from cdclake.errors import ConfigError
from cdclake.lake.journals import files_with_quarantined_rows, quarantined_files_by_table
from cdclake.lake.tables import table_exists
from cdclake.report import RunReport

log = logging.getLogger("cdclake")


def list_all(engine: Engine) -> BronzeListing:
    return list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)


def listing_starts(
    engine: Engine, tables: Sequence[TableConfig], states: Mapping[str, TableState]
) -> dict[str, str | None]:
    """Where each table's folder is listed from: its watermark (``lake.ledger_record.AppliedKeys``), or
    the whole folder (no state, no watermark). The transaction folder (multi-table files) from the
    least advanced of the tables' watermarks there."""
    starts: dict[str, str | None] = {}
    for table in tables:
        folder = f"{table.source_schema}/{table.source_table}"
        state = states.get(table.source)
        starts[folder] = None if state is None else state.applied.watermarks.get(folder)
    if transaction_path := engine.config.bronze.transaction_path:
        folder = transaction_path.strip("/")
        marks = [s.applied.watermarks.get(folder) for t in tables if (s := states.get(t.source)) is not None]
        starts[folder] = min(marks) if marks and None not in marks and len(marks) == len(tables) else None  # type: ignore[type-var]
    return starts


def list_since(engine: Engine, tables: Sequence[TableConfig], states: Mapping[str, TableState]) -> BronzeListing:
    """Bronze as far as the tables need it: each table's folder after its watermark
    (``listing_starts``; a request per folder and per 1,000 new keys, whatever bronze's age), and
    the files below a watermark that its state keeps as exceptions (not applied) and that are no
    longer held in quarantine (one request each). Keys of unconfigured tables and keys that are not
    DMS files outside these folders are not seen: ``run --sweep`` lists all of bronze."""
    starts = listing_starts(engine, tables, states)
    transaction_path = engine.config.bronze.transaction_path
    listing = list_from(engine.store, starts, transaction_path)
    reopened = sorted({k for s in states.values() for k in s.applied.exceptions if k not in s.held})
    present = [k for k in reopened if engine.store.size(k) is not None]
    extra = files_from_keys(engine.store, present, transaction_path)
    listed = {f.key for f in listing.files}
    return BronzeListing(
        files=tuple(sorted([*listing.files, *(f for f in extra if f.key not in listed)])),
        unrecognised=listing.unrecognised,
    )


def unconfigured_sources(engine: Engine) -> list[str]:
    """The ``schema.table`` folders of bronze that no configured table reads: two levels of folders
    listed (a request per schema and per 1,000 folders, not per key), what a listing from the
    watermarks, which reads only the configured tables' folders, cannot see."""
    transaction = (engine.config.bronze.transaction_path or "").strip("/")
    found = []
    for schema in engine.store.list_folders():
        if schema == transaction:
            continue
        for table in engine.store.list_folders(schema):
            folder = f"{schema}/{table}"
            if folder != transaction and engine.config.table_for_source(schema, table) is None:
                found.append(f"{schema}.{table}")
    return found


class BronzeFolders:
    """``unconfigured_sources``, listed at most once: a run, or a follow loop, asks for it when a
    configured table has no file (``refuse_lookalikes``) and for its report, every round."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._unconfigured: list[str] | None = None

    def unconfigured(self) -> list[str]:
        if self._unconfigured is None:
            self._unconfigured = unconfigured_sources(self.engine)
        return self._unconfigured


def selected_tables(engine: Engine, tables: Sequence[TableConfig] | None = None) -> list[TableConfig]:
    """The tables of a run that can be mirrored (``skip_reason``)."""
    return [t for t in (engine.config.tables if tables is None else tables) if skip_reason(t) is None]


def run(engine: Engine, tables: Sequence[TableConfig] | None = None, sweep: bool = False) -> RunReport:
    """Full load where a table has none yet, then every pending CDC file, in batches; tables
    concurrently. The tables' states are read first, and bronze is listed from their watermarks
    (``list_since``): a run costs what is new, not bronze's age. ``sweep``: the full
    reconciliation instead: all of bronze listed, every ledger read whole (past its checkpoints),
    so a file that landed later than the look-back below a watermark, and unconfigured tables,
    are found."""
    selected = selected_tables(engine, tables)
    states = read_states(engine, selected, whole=sweep)
    listed_at = datetime.now(UTC).replace(tzinfo=None)
    # ... up to the cut's bound (``engine.cut``): its record read first, then bronze listed; then the cut the
    # run ended at, published
    cuts = CutRounds(engine)
    bound = cuts.bound(lambda: list_all(engine) if sweep else list_since(engine, selected, states))
    folders = BronzeFolders(engine)
    report, after = apply_pending(engine, bound.listing, tables, states=states, listed_at=listed_at, folders=folders)
    cuts.settled(report, bound, after)
    if not sweep:
        report.unconfigured = sorted(set(report.unconfigured) | set(folders.unconfigured()))
    warn(report)
    return report


def apply_pending(
    engine: Engine,
    listing: BronzeListing,
    tables: Sequence[TableConfig] | None = None,
    loads: bool = True,
    states: dict[str, TableState] | None = None,
    listed_at: datetime | None = None,
    folders: BronzeFolders | None = None,
) -> tuple[RunReport, dict[str, TableState]]:
    """What ``run`` does with a listing it is given: the report, and the state each table was left
    in (by source; a table that failed is absent). ``states``: the tables' states as an earlier
    round left them (the follow loop), used instead of reading them again. ``listed_at``: when the
    listing was made (UTC; None: now), from which the applied keys are compacted
    (``TableWork.listed_at``). ``folders``: bronze's unconfigured folders as the run or loop listed
    them (None: listed here if needed).

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
    known = states or {}
    # No file listed and none applied: with listings from the watermarks, a table whose files are all applied
    # and older than the look-back lists nothing and is not "without files".
    without_files = [
        t
        for t in selected
        if not listing.may_hold(t.source_schema, t.source_table)
        and not ((state := known.get(t.source)) is not None and state.applied)
    ]
    refuse_lookalikes(engine, without_files, listing, folders or BronzeFolders(engine))
    report.no_files = [t.source for t in without_files]
    cdc_files = [f for f in listing.files if f.kind is FileKind.CDC]
    files_of = {t.source: tuple(fs) for t, fs in group_by_table(engine.config, cdc_files, report)}
    step = LoadStep.IF_DUE if loads else LoadStep.LANE
    listed_at = listed_at or datetime.now(UTC).replace(tzinfo=None)
    # A table bronze holds no file of gets no silver table until its first file arrives: an empty
    # table would say "the source is empty" with nothing to show for it, and a mistyped name would
    # leave one behind. One that has a silver table keeps its turn (its history may be behind).
    skipped = {t.source for t in without_files if not table_exists(engine.spark, engine.silver_table(t))}
    works = [
        TableWork(t, step, files_of.get(t.source), listed_at=listed_at) for t in selected if t.source not in skipped
    ]
    report, left = run_tables(engine, works, listing, states, report)
    unconfigured = {f"{s}.{t}" for s, t in listing.sources() if engine.config.table_for_source(s, t) is None}
    report.unconfigured = sorted(set(report.unconfigured) | unconfigured)
    return report, left


def refuse_lookalikes(
    engine: Engine, without_files: Sequence[TableConfig], listing: BronzeListing, folders: BronzeFolders
) -> None:
    """Stop before anything is applied when a configured table bronze holds no file of looks like a
    source bronze holds files of and no table configures (``app.prodcuts`` beside ``app/products/``):
    a mistyped name, which would otherwise wait forever for files that arrive under the other one.
    Bronze's folders are listed for it (``folders``) only when a table has no file: a listing from
    the watermarks holds only the configured tables' folders."""
    import difflib

    if not without_files:
        return
    config = engine.config
    listed = {f"{s}.{t}" for s, t in listing.sources() if config.table_for_source(s, t) is None}
    unconfigured = sorted(listed | set(folders.unconfigured()))
    mistyped = [
        f"{table.source} (bronze has files of {match[0]}, which no table configures)"
        for table in without_files
        if (match := difflib.get_close_matches(table.source, unconfigured, n=1, cutoff=0.8))
    ]
    if mistyped:
        raise ConfigError(
            f"No file in bronze for the configured table(s) {'; '.join(mistyped)}: a mistyped name? Fix it in the "
            "configuration; nothing was applied."
        )


def full_load(engine: Engine, tables: Sequence[TableConfig] | None = None, reload: bool = False) -> RunReport:
    """Full load of the tables (all configured ones by default), concurrently; loaded tables are
    left alone unless ``reload``. The tables named (a reload lane's) have their folders listed whole
    (a load records every CDC file it supersedes), not all of bronze."""
    if tables is None:
        listing = list_all(engine)
    else:
        starts: dict[str, str | None] = {f"{t.source_schema}/{t.source_table}": None for t in tables}
        if transaction_path := engine.config.bronze.transaction_path:
            starts[transaction_path.strip("/")] = None
        listing = list_from(engine.store, starts, transaction_path)
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
