"""A table's turn: the one way every command works a table.

``run``, ``full-load``, a state machine's manifest, ``replay`` and each round of the follow loop only
choose their works (``TableWork``: the table, the load it asks for, the CDC files it considers);
``run_tables`` works them, tables concurrently (``engine.parallel``), in two passes:

1. **Loads** (works that ask for one): the table's state, then its full load, reload or, in the
   CDC lane, the report that a load is due (its CDC then waits, in order, for the full-load lane).
2. **CDC** (works with files): the state (from the load, or handed in, or read), then the pending
   files in batches, each batch one commit whose new state plans the next.

A table's state is read (``fresh_state``: history caught up with silver first, should a crash have
fallen between their commits, then the ledger and the quarantine) only when the caller hands none
in: the follow loop hands in the states its rounds left, so a round reads no ledger and no
quarantine. A state handed in is as good as read: every commit is validated from the snapshot the
state was taken at, so a table another writer moved since is refused before anything is written
and its state is read again (``apply_batch``). The quarantine journal is read once per call, and
only if some table's state must be read.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind
from cdclake.dms.index import list_from
from cdclake.dms.store import list_bronze
from cdclake.engine.cdc import CdcBatch, apply_cdc_batch
from cdclake.engine.full_load import full_load_table
from cdclake.engine.history_sync import catch_up_history
from cdclake.engine.parallel import TableRun, for_each_table
from cdclake.engine.select import TableState, batches, load_due, look_back_stamp
from cdclake.errors import ConcurrentWriterError, first_line
from cdclake.lake.journals import quarantined_files_by_table
from cdclake.lake.ledger import read_ledger
from cdclake.lake.tables import TableMovedError, is_commit_conflict
from cdclake.report import Outcome, OutcomeKind, Progress, RunReport, TableReport

log = logging.getLogger("cdclake")

HeldFiles = Mapping[str, frozenset[str]]  # silver table name -> bronze keys held in quarantine


class LoadStep(Enum):
    """What a table's turn does about its full load."""

    NONE = "none"  # CDC only (a manifest, a replay)
    IF_DUE = "if due"  # load a table that has none, or whose bronze holds a new load (``run``)
    LANE = "lane"  # the CDC lane: a due load is reported, and holds the table's CDC until loaded
    ASKED = "asked"  # ``full-load``: load if due, and report the table either way
    AGAIN = "again"  # ``full-load --reload``


@dataclass(frozen=True)
class TableWork:
    """What one table's turn is asked to do."""

    table: TableConfig
    load: LoadStep = LoadStep.NONE
    cdc: tuple[BronzeFile, ...] | None = None  # the CDC files considered (None: no CDC pass)
    force: bool = False  # apply them even if the ledger or the quarantine has them (a replay)
    one_batch: bool = False  # all pending files in one commit (a manifest), not in batches
    # ``cdc`` is a listing of the table's folders from its watermarks (``run.list_since``) made at
    # this time (UTC, naive: the listing, or the relisting a follow's index was kept current from):
    # every key bronze held after them then. Only then are the applied keys compacted
    # (``TableState.compacted``), over files named a look-back before it
    listed_at: datetime | None = None


@dataclass
class _Quarantine:
    """The database's quarantine journal, read at most once per ``run_tables``, when first needed."""

    engine: Engine
    lock: threading.Lock = field(default_factory=threading.Lock)
    read: HeldFiles | None = None

    def held(self) -> HeldFiles:
        with self.lock:
            if self.read is None:
                engine = self.engine
                self.read = quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)
            return self.read


def read_state(engine: Engine, table: TableConfig, held: HeldFiles | None = None, whole: bool = False) -> TableState:
    """What the lake says of ``table``: its ledger (table metadata only; ``whole``: every key
    since the full load, past the checkpoints) and its quarantine (``held``: the journal as read
    once for the run; read now when not given)."""
    silver = engine.silver_table(table)
    ledger = read_ledger(engine.spark, silver, whole=whole)
    quarantine = _Quarantine(engine).held() if held is None else held
    keys = quarantine.get(silver.name, frozenset())
    return TableState(
        ledger.full_load_done, ledger.applied, keys, ledger.loaded, ledger.snapshot_id, ledger.cdc_applied
    )


def fresh_state(engine: Engine, table: TableConfig, held: Callable[[], HeldFiles], whole: bool = False) -> TableState:
    """The table's state read from the lake, its history caught up with silver first (the rule:
    every turn that reads a table starts by catching its history up)."""
    catch_up_history(engine, table)
    return read_state(engine, table, held(), whole)


def read_states(engine: Engine, tables: Sequence[TableConfig], whole: bool = False) -> dict[str, TableState]:
    """The tables' states read from the lake (``fresh_state``), concurrently, the quarantine
    journal read once: what a run lists bronze from (``run.list_since``). A table whose read
    failed is absent: its turn reads it again and reports the failure."""
    quarantine = _Quarantine(engine)

    def read(table_run: TableRun) -> None:
        table_run.state = fresh_state(engine, table_run.table, quarantine.held, whole)

    runs = for_each_table(engine, tables, "state", read)
    return {r.table.source: r.state for r in runs if r.failure is None and r.state is not None}


def run_tables(
    engine: Engine,
    works: Sequence[TableWork],
    listing: BronzeListing | None,
    states: Mapping[str, TableState] | None = None,
    report: RunReport | None = None,
    held: HeldFiles | None = None,
) -> tuple[RunReport, dict[str, TableState]]:
    """Work every table of ``works`` (tables concurrently): the report (``report``, if given, is
    added to), and the state each table was left in, by source (a table that failed is absent:
    its state is read again on its next turn). ``listing``: bronze as listed for the run (None: a
    manifest, whose tables' folders are listed only when a table has no full load yet). ``states``:
    the tables' states as a previous turn left them (the follow loop), not read again. ``held``:
    the quarantine journal as the caller already read it (else read here, once, if needed)."""
    report = RunReport() if report is None else report
    turns = _Turns(engine, listing, {w.table.source: w for w in works}, dict(states or {}))
    turns.quarantine.read = held
    left: dict[str, TableState] = {}
    loading = [w.table for w in works if w.load is not LoadStep.NONE]
    if loading:
        started = time.monotonic()
        loaded = for_each_table(engine, loading, "full-load", turns.load)
        report.phase_seconds["full loads"] = time.monotonic() - started
        _collect(report, loaded, left)
        turns.states |= left
    # A table whose load pass failed or left no state (a load pending in the CDC lane) has no CDC pass.
    cdc = [w for w in works if w.cdc is not None and (w.load is LoadStep.NONE or w.table.source in left)]
    if cdc:
        turns.progress = Progress(0, 0, time.monotonic(), total_tables=len(cdc))
        for work in cdc:
            if (known := turns.states.get(work.table.source)) is not None:
                pending = known.pending(work.cdc or (), work.force)
                turns.progress.total_files += len(pending)
                turns.progress.total_bytes += sum(f.size for f in pending)
        started = time.monotonic()
        applied = for_each_table(engine, [w.table for w in cdc], "cdc", turns.apply)
        report.phase_seconds["CDC"] = time.monotonic() - started
        _collect(report, applied, left)
    return report, left


class _Turns:
    """The tables' turns of one ``run_tables``: what they share (the listing, the states handed in,
    the quarantine journal read at most once, the progress) and the two passes' work per table."""

    def __init__(
        self, engine: Engine, listing: BronzeListing | None, works: dict[str, TableWork], states: dict[str, TableState]
    ) -> None:
        self.engine, self.listing, self.works, self.states = engine, listing, works, states
        self.quarantine = _Quarantine(engine)
        self.progress = Progress(0, 0, time.monotonic())
        self.lock = threading.Lock()
        self.whole: dict[str, BronzeListing] = {}  # by source: the folders listed whole for a (re)load

    def whole_folder(self, table: TableConfig) -> BronzeListing:
        """The table's folder (and the transaction folder) listed whole, kept for its CDC pass."""
        transaction_path = self.engine.config.bronze.transaction_path
        starts: dict[str, str | None] = {f"{table.source_schema}/{table.source_table}": None}
        if transaction_path:
            starts[transaction_path.strip("/")] = None
        listing = list_from(self.engine.store, starts, transaction_path)
        with self.lock:
            self.whole[table.source] = listing
        return listing

    def state_of(self, table: TableConfig) -> TableState:
        """The state handed in (or left by the table's load), else read."""
        known = self.states.get(table.source)
        return known if known is not None else fresh_state(self.engine, table, self.quarantine.held)

    def load(self, table_run: TableRun) -> None:
        """The load pass of one table: its state, then the load its work asks for."""
        table, work = table_run.table, self.works[table_run.table.source]
        state = self.state_of(table)
        listing = self.listing
        assert listing is not None, "a load needs the run's listing"
        if work.load is LoadStep.LANE:
            files = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
            if why := load_due(table, state, files):
                pending = TableReport(table=table.source, kind="full-load", outcome=Outcome.load_pending(why))
                table_run.reports.append(pending)
                return  # no state: its CDC files stay pending
        if state.applied.watermarks and (
            work.load is LoadStep.AGAIN
            or load_due(table, state, listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD))
        ):
            # Listed from its watermark: a (re)load records every CDC file it supersedes and leaves the
            # later ones pending, below the watermark too, so it and its CDC pass see the whole folder.
            listing = self.whole_folder(table)
        done, table_run.state = full_load_table(self.engine, table, listing, state, work.load is LoadStep.AGAIN)
        if work.load in (LoadStep.ASKED, LoadStep.AGAIN) or done.outcome.kind is not OutcomeKind.ALREADY_LOADED:
            table_run.reports.append(done)

    def apply(self, table_run: TableRun) -> None:
        """The CDC pass of one table: its pending files in batches (a manifest's in one), each
        batch's commit handing the next its state."""
        table, work = table_run.table, self.works[table_run.table.source]
        table_run.state = self.state_of(table)
        listing = self.listing
        if listing is None and not table_run.state.full_load_done:
            listing = list_bronze(self.engine.store, f"{table.source_schema}/{table.source_table}")
        loads_pending = bool(listing and listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD))
        if (whole := self.whole.get(table.source)) is not None and work.cdc is not None:
            # loaded from its whole folder (above): its CDC files from that listing too
            work = replace(work, cdc=tuple(f for f in whole.files if f.kind is FileKind.CDC))
        look_back = self.engine.config.bronze.look_back_seconds
        below = look_back_stamp(work.listed_at or datetime.now(UTC).replace(tzinfo=None), look_back)
        pending = table_run.state.pending(work.cdc or (), work.force)
        if work.one_batch:
            chosen = [list(work.cdc or ())]
        else:
            engine_config = self.engine.config
            chosen = batches(pending, engine_config.max_files_per_batch, engine_config.max_batch_bytes)
        counted = False  # the table's turn is counted done with its last batch, in that batch's line
        for number, files in enumerate(chosen, start=1):
            if table_run.stopping.is_set():
                break
            if work.listed_at is not None:  # compacted before each batch: its commit records the checkpoint
                table_run.state = table_run.state.compacted(work.cdc or (), below)
            batch = CdcBatch(table, files, loads_pending, work.force)
            applied, table_run.state = apply_batch(self.engine, batch, table_run.state, self.quarantine.held)
            table_run.reports.append(applied)
            # a type change held the whole batch: the next ones would be held the same way
            held_whole = (
                bool(applied.quarantined_files)
                and not applied.files_applied
                and applied.outcome.kind is OutcomeKind.TYPE_CHANGE
            )
            counted = number == len(chosen) or held_whole
            self._advance(applied, len(files), table_done=counted)
            if held_whole:
                break
        if not counted:  # no batch, or stopped: its turn ends all the same
            with self.lock:
                self.progress.tables += 1

    def _advance(self, applied: TableReport, files: int, table_done: bool) -> None:
        with self.lock:
            line = self.progress.advance(applied, time.monotonic(), table_done)
        if self.progress.total_files > files:
            log.info("progress %s", line.text, extra={"progress": line.fraction})


def apply_batch(
    engine: Engine, batch: CdcBatch, state: TableState, held: Callable[[], HeldFiles] | None = None
) -> tuple[TableReport, TableState]:
    """Apply one batch; when another writer commits to the table first, read the table's state
    again and retry (the ledger makes that safe: what the other writer applied is skipped), a
    bounded number of times with growing pauses, then give up with ConcurrentWriterError.

    A table found moved before anything was written (``TableMovedError``: the state was handed in
    from an earlier turn, or read before another writer's commit) is planned again at once."""
    table = batch.table
    quarantine = _Quarantine(engine).held if held is None else held
    conflicts, replanned = 0, False
    while True:
        try:
            return apply_cdc_batch(engine, batch, state)
        except Exception as failure:
            if not is_commit_conflict(failure):
                raise
            if isinstance(failure, TableMovedError) and not replanned:
                replanned = True  # nothing written yet: planned again at once, from a fresh state
                log.info("table moved table=%s: %s; its state is read again", table.source, first_line(failure))
            else:
                conflicts += 1
                if conflicts == engine.commits.attempts:
                    raise ConcurrentWriterError(
                        f"Table {table.source}: another writer committed to "
                        f"{engine.silver_table(table).identifier} {conflicts} times while this batch was applied "
                        "(a second cdclake run, a Glue job or maintenance on the same catalog); nothing of this "
                        "batch is lost: run it again later."
                    ) from None
                pause = engine.commits.backoff_seconds * 2 ** (conflicts - 1) * (1 + random.random())
                log.warning("commit conflict table=%s attempt=%d retry_in=%.1fs: %s", table.source, conflicts,
                            pause, first_line(failure))  # fmt: skip
                time.sleep(pause)
            # The conflict may have been history's, after silver's commit: history catches up first.
            state = fresh_state(engine, table, quarantine)


def _collect(report: RunReport, runs: Sequence[TableRun], states: dict[str, TableState]) -> None:
    """The tables' reports in table order (each table's batches in apply order), then the failures;
    the states of the tables that did not fail."""
    for table_run in runs:
        report.tables.extend(table_run.reports)
        if table_run.failure is not None:
            report.failures.append(table_run.failure)
            states.pop(table_run.table.source, None)
        elif table_run.state is not None:
            states[table_run.table.source] = table_run.state
