"""One cut of the whole database: every silver table at one source moment, and why it is one.

After each ``run`` and each round of ``run --follow`` the engine looks for the newest source
position P — with T, the commit time of the newest source transaction at or before P — such that
**every** configured silver table holds every change committed at or before P and none after, and
publishes it (``lake.cuts``: the ``cdclake_cuts`` record, then a ``cdclake_cut`` tag per table).
A table's snapshot is "at P" when the changes it holds are exactly those of the transactions at or
before P; a quiet table's snapshot from long ago is at P as much as a busy table's newest one, as long
as nothing of it was committed between the two. What proves that depends on what wrote bronze.

**cdclake's own PostgreSQL capture** (``cdclake capture``). PostgreSQL decodes transactions in commit
order (commit LSN order), whole. Capture buffers whole transactions and writes *every* table's buffer
at a flush, so at a flush all changes of the transactions up to the last one decoded (commit LSN ≤ P)
are in bronze, and no file holds a change after P. Only then it writes the progress record
(``dms.progress``): P, T, and for every captured table — changed or not — its newest CDC file N(t).
Each table's files are named with their last commit LSN and their names increase, so the files of t
at or before N(t) hold exactly t's changes committed at or before P (its LOAD files hold those before
its load position, which is ≤ P, or the table is not at P). The engine reads the record *before* it
lists bronze (the files it names were written before it, so the listing holds them; the follow loop
adds any its index lacks) and a round applies, per table, only files at or before N(t): **each
round's batches are cut at the bound**, files after it wait for the next round (``CutBound.admits``).
After the round, a table t is at P when its ledger holds N(t) (files are applied in name order, so
every earlier one is applied too, or held in quarantine: then t is not at P), holds no CDC file after
N(t) (another writer could have applied one: then t is past P), its load was taken at or before P,
and capture neither holds t (an unlogged TOAST value) nor is loading it again. A quiet table is
covered by the same argument: P says there is no change of it in (its last file, P]. If every table
is at P, the cut is (P, T, each table's snapshot); else there is no new cut and the report names
the tables and why. P only moves forward (a record whose P is not past the published one is not
published), and T with it, on the assumption below.
Assumption, stated: T is the commit time of the newest transaction at or before P; PostgreSQL takes
a commit's time just before it writes the commit record, so two concurrent commits can carry times
out of their LSN order by microseconds. The cut is exact in commit order (whole transactions, every
table); "every change committed at or before T" holds up to that skew.

**DMS with PreserveTransactions** (``bronze.transaction_path``: the endpoint's CdcPath). DMS writes
the transactions of every table, in commit order, into one folder of files named by write time: the
files are one total order, and a listing of the folder is a prefix of it (DMS writes the files one
after another, and S3 lists a completed object strongly consistently). Every table reads every
transaction file (``select.group_by_table``), so after a round in which every table applied every
listed file — the newest one, F, included, and none held — all tables hold exactly the transactions
of the prefix ending at F: the cut is P = F, T the newest source commit time any table's ledger
records (``cdclake.latest-commit-ts``). Assumption: the full load is complete and DMS's cached
changes are in the transaction files (the LOAD files of DMS are not one snapshot; each table is read at
its own moment and caught up with the transactions after it).

**Plain per-table DMS files.** Each table's files are written on the table's own clock, and nothing in
bronze says a quiet table has no change up to a moment: a table's newest file proves its changes up
to that file only. There is no cut, and the report says so and names what would prove one
(``NO_PROOF``): PreserveTransactions with a CdcPath, or a capture that writes a progress record. A
heartbeat table plus the endpoint's ``CdcMaxBatchInterval`` would bound how stale a quiet table's
folder can be only if DMS flushed every table's buffer at each interval, which its documentation
does not say.

Not covered: rows a batch set aside as bad (``cdclake_quarantine_rows``) are not in silver, so a cut
is exact for the rows silver accepted; ``__history`` tables are not part of the record (each history
commit names the silver snapshot it reflects).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdclake.config import TableConfig
from cdclake.dms.cut_request import read_request
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, UnrecognisedKey, parse_key
from cdclake.dms.progress import CaptureProgress, read_progress
from cdclake.engine.select import TableState, skip_reason
from cdclake.errors import first_line
from cdclake.lake.cuts import Cut

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.report import RunReport

log = logging.getLogger("cdclake")

CAPTURE = "capture"  # bounded by a capture's progress record
TRANSACTIONS = "transactions"  # bounded by the transaction-ordered files (PreserveTransactions)
NONE = "none"  # nothing proves a cut

NO_PROOF = (
    "bronze has per-table DMS files and no progress record: nothing proves a quiet table complete up to "
    "a moment. Turn on the S3 endpoint's PreserveTransactions with a CdcPath (bronze.transaction_path), "
    "or capture with `cdclake capture`, which writes one"
)


@dataclass(frozen=True)
class CutBound:
    """What a round may apply so that it can end at a cut, read before bronze is listed."""

    kind: str  # CAPTURE, TRANSACTIONS or NONE
    position: str = ""  # fixed width: text order is source order
    position_text: str = ""  # as people read it (an LSN, a file)
    commit_ts: str | None = None  # T (CAPTURE; TRANSACTIONS: known only after the round)
    progress: CaptureProgress | None = None
    newest_file: BronzeFile | None = None  # TRANSACTIONS: the newest transaction file listed
    transaction_path: str | None = None
    why_none: str = ""
    # a ``verify --cut`` request stands at this position (``dms.cut_request``): the cut is recorded even when it
    # is the previous cut's state (nothing changed since), so a cut exists at exactly the position asked for
    asked: bool = False
    listing: BronzeListing = field(default_factory=lambda: BronzeListing((), ()))  # what the round may apply

    def admits(self, file: BronzeFile) -> bool:
        """Whether a round may apply ``file``: everything but a captured table's CDC file past its
        newest file at the position (written after the record, it waits for the next round)."""
        if self.progress is None or file.kind is FileKind.FULL_LOAD or file.is_multi_table:
            return True
        table = self.progress.tables.get(file.source)
        if table is None:
            return True  # not captured: such a table is not at the cut anyway (``table_at``)
        if table.newest_file is None:
            return False
        return file.sort_key <= _sort_key(table.newest_file, self.transaction_path)

    def within(self, listing: BronzeListing) -> BronzeListing:
        """``listing`` without the files the round may not apply."""
        if self.progress is None:
            return listing
        return BronzeListing(tuple(f for f in listing.files if self.admits(f)), listing.unrecognised)


def _sort_key(key: str, transaction_path: str | None) -> tuple[str, int, str, str]:
    return parse_key(key, 0, transaction_path).sort_key


def cut_bound(progress: CaptureProgress | None, transaction_path: str | None, listing: BronzeListing) -> CutBound:
    """The bound of a round: the capture's progress record (read before ``listing``), else the
    transaction-ordered files of ``listing``, else none (``NO_PROOF``); with the files of
    ``listing`` the round may apply."""
    bound = _bound(progress, transaction_path, listing)
    return replace(bound, listing=bound.within(listing))


def _bound(progress: CaptureProgress | None, transaction_path: str | None, listing: BronzeListing) -> CutBound:
    if progress is not None:
        return CutBound(
            CAPTURE, f"{progress.position:020d}", f"LSN {progress.position_text}", progress.commit_ts, progress,
            transaction_path=transaction_path,
        )  # fmt: skip
    if transaction_path:
        multi = [f for f in listing.files if f.is_multi_table and f.kind is FileKind.CDC]
        newest = max(multi, default=None)
        if newest is None:
            return CutBound(NONE, why_none="no transaction file in bronze yet", transaction_path=transaction_path)
        return CutBound(TRANSACTIONS, newest.position, newest.key, None, None, newest, transaction_path)
    return CutBound(NONE, why_none=NO_PROOF)


def table_at(bound: CutBound, table: TableConfig, state: TableState | None) -> str | None:
    """Why ``table`` (in ``state``, after the round) is not at the bound's position; None: it is."""
    if bound.kind == NONE:
        return bound.why_none
    if state is None:
        return "the round left it without a state (it failed, or its load is pending)"
    loads = bound.listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    if loads and not state.full_load_done:
        return "its full load is not applied yet"
    transaction_path = bound.transaction_path
    if bound.progress is not None:
        captured = bound.progress.tables.get(table.source)
        if captured is None:
            return "not in the capture's progress record (not captured)"
        if captured.held:
            return f"held by capture: {captured.held}"
        if captured.reloading:
            return "capture is loading it again"
        if captured.loaded_at > bound.progress.position:
            return "its LOAD files were taken after the position"
        newest = captured.newest_file
    else:
        assert bound.newest_file is not None
        newest = bound.newest_file.key
    bound_key = None if newest is None else _sort_key(newest, transaction_path)
    if newest is not None and newest not in state.applied:
        return f"{newest} is not applied yet"
    # No silver table yet (empty at its load, no change up to the position): empty at the cut, and
    # not in the record, which names snapshots.
    # The keys a watermark covers are older than the look-back behind a listing: never after the position.
    for key in state.applied.keys | state.held:
        try:
            file = parse_key(key, 0, transaction_path)
        except UnrecognisedKey:
            continue
        if file.kind is not FileKind.CDC:
            continue
        if key in state.applied and key not in state.loaded and (bound_key is None or file.sort_key > bound_key):
            return f"{key} is applied and lies after the position (another writer applied it)"
        if key in state.held and bound_key is not None and file.sort_key <= bound_key:
            return f"{key} is held in quarantine"
    return None


def cut_after_round(
    bound: CutBound,
    tables: Sequence[TableConfig],
    states: Mapping[str, TableState],
    silver_name: Callable[[TableConfig], str],
    newest_commit_ts: Callable[[TableConfig, int], str | None],
) -> tuple[Cut | None, list[str]]:
    """The cut the round ended at, or None and why not (one reason per table that is not at it).
    ``states``: every table's state after the round, by source; ``newest_commit_ts``: the newest
    source commit time a table's lineage records up to a snapshot (for TRANSACTIONS)."""
    if bound.kind == NONE:
        return None, [bound.why_none]
    reasons = [f"{t.source}: {why}" for t in tables if (why := table_at(bound, t, states.get(t.source)))]
    if reasons:
        return None, reasons
    snapshots = {silver_name(t): states[t.source].snapshot_id for t in tables}  # None: no silver table yet
    commit_ts = bound.commit_ts
    if bound.kind == TRANSACTIONS:
        stamps = [newest_commit_ts(t, sid) for t in tables if (sid := states[t.source].snapshot_id) is not None]
        commit_ts = max((s for s in stamps if s), default=None)
    return Cut(bound.kind, bound.position, bound.position_text, commit_ts,
               {name: sid for name, sid in snapshots.items() if sid is not None}), []  # fmt: skip


class CutRounds:
    """What ``run`` and each follow round do about the cut: the bound, read before the round's
    listing, and after the round the cut it ended at, published (``lake.cuts``).

    ``tags_behind``: the follow loop's way. The record is written in the round (it is the cut);
    the tables' tags are moved after it in a thread of their own while the next round works, each
    a metadata commit that would otherwise hold the round (on AWS a catalog call and an S3 write
    per table). The next round waits for them before it settles its own cut, so tags never move
    out of order, and a failure among them has the next settle check every tag again; ``close``
    waits for the last ones."""

    def __init__(self, engine: Engine, tags_behind: bool = False) -> None:
        self.engine = engine
        self.tagger = ThreadPoolExecutor(1, thread_name_prefix="cdclake-cut-tags") if tags_behind else None
        self.tagging: Future[list[str]] | None = None  # the tags of the last cut, moving
        # every table of the database takes part, also those a ``--tables`` run leaves alone
        self.tables = [t for t in engine.config.tables if skip_reason(t) is None]
        self.tags_checked = False  # the tags were found at the latest record (once per loop, or after a failure)
        # T of the latest published cut after the last round, whether that round moved it or not (the cut's lag,
        # ``CutLagSeconds``, grows while it stalls); None: there is none, or the round could not say
        self.commit_ts: str | None = None
        self.published: str | None = None  # T of the latest cut this loop published or read

    def bound(
        self, listing: Callable[[], BronzeListing], announce: Callable[[list[str]], object] | None = None
    ) -> CutBound:
        """Read the progress record, then list (``listing``); ``announce``: hands the files the
        record names to an index that may not have listed them yet (the follow loop's)."""
        store = self.engine.store
        progress = read_progress(store)
        asked = False
        if progress is not None:
            asked = (request := read_request(store)) is not None and request.position == progress.position
            if announce is not None:
                announce(bound_files(progress))
        return replace(cut_bound(progress, self.engine.config.bronze.transaction_path, listing()), asked=asked)

    def settle(self, bound: CutBound, states: Mapping[str, TableState]) -> str:
        """Publish the cut the round ended at, if it is a new one; the report's line. A table the
        round did not work (``--tables``) is judged by its state read now. Never raises: a cut not
        published leaves the previous one standing, and the line says why."""
        self.commit_ts = None
        if bound.kind == NONE:
            return f"none: {bound.why_none}"
        started = time.monotonic()
        try:
            line = self._settle(bound, states)
            log.debug("cut settled seconds=%.2f: %s", time.monotonic() - started, line)
            return line
        except Exception as exc:  # the tables' commits stand; the previous cut stays the latest
            self.tags_checked = False
            log.warning("cut not published: %s", first_line(exc))
            return f"not published: {first_line(exc)}"

    def settled(self, report: RunReport, bound: CutBound, states: Mapping[str, TableState]) -> None:
        """``settle``, into ``report``: its line, T of the latest cut, and its seconds as the
        run's ``cut`` phase (what a round pays for its cut; none where bronze proves no cut)."""
        started = time.monotonic()
        report.cut = self.settle(bound, states)
        report.cut_commit_ts = self.commit_ts
        if bound.kind != NONE:
            report.phase_seconds["cut"] = time.monotonic() - started

    def _settle(self, bound: CutBound, states: Mapping[str, TableState]) -> str:
        from cdclake.engine.turn import read_state
        from cdclake.lake.cuts import CutPublisher, CutTags, PublishedCut, latest_cut, newest_commit_ts

        engine = self.engine
        spark, catalog, database = engine.spark, engine.catalog, engine.config.database
        publisher = CutPublisher(
            spark, catalog, database, engine.committer, CutTags(keep_days=engine.config.cut_tag_days)
        )
        self._tags_moved()
        known = dict(states)
        for table in self.tables:
            if table.source not in known:
                known[table.source] = read_state(engine, table)
        cut, reasons = cut_after_round(
            bound, self.tables, known, lambda t: engine.silver_table(t).name,
            lambda t, sid: newest_commit_ts(spark, engine.silver_table(t), sid),
        )  # fmt: skip
        latest = latest_cut(spark, catalog, database) if cut is not None or not self.tags_checked else None
        if latest is not None and not self.tags_checked:
            publisher.repair(latest)  # mends a crash among the tags
        # from here on the latest record's tags are in place (a failure sets tags_checked back)
        if latest is not None:
            self.published = latest.commit_ts
        self.tags_checked = True
        if cut is None:
            self.commit_ts = self.published  # the cut stands where it was: its lag keeps growing
            log.info("no new cut: %s", "; ".join(reasons))
            return "no new cut: " + "; ".join(reasons)
        new = PublishedCut.of(cut)
        if latest is not None and latest.kind == new.kind:
            if new.position < latest.position:
                self.commit_ts = latest.commit_ts
                return f"no new cut: {new.position_text} is before the published cut's {latest.position_text}"
            if new.position == latest.position or (
                not bound.asked and new.commit_ts == latest.commit_ts and new.snapshots == latest.snapshots
            ):
                self.commit_ts = latest.commit_ts
                return f"at {latest.commit_ts} ({latest.position_text}), unchanged"
        publisher.record(new)
        if self.tagger is None:
            publisher.repair(new, tagged=latest)
        else:
            self.tagging = self.tagger.submit(publisher.repair, new, latest)
        self.commit_ts = self.published = new.commit_ts
        log.info("cut published commit_ts=%s position=%s tables=%d", new.commit_ts, new.position_text,
                 len(new.snapshots))  # fmt: skip
        return f"at {new.commit_ts} ({new.position_text}): {len(new.snapshots)} tables"

    def _tags_moved(self) -> None:
        """Wait for the last cut's tags; if moving them failed, the next settle checks every tag."""
        tagging, self.tagging = self.tagging, None
        if tagging is None:
            return
        try:
            tagging.result()
        except Exception as exc:
            self.tags_checked = False
            log.warning("cut tags not all moved (the next round moves them): %s", first_line(exc))

    def close(self) -> None:
        """Wait for the last cut's tags to be in place (a failure is logged: the next run mends it)."""
        self._tags_moved()
        if self.tagger is not None:
            self.tagger.shutdown()
            self.tagger = None  # a settle after this moves its tags itself


def bound_files(progress: CaptureProgress) -> list[str]:
    """The files a progress record names (each captured table's newest at its position)."""
    return sorted(t.newest_file for t in progress.tables.values() if t.newest_file)
