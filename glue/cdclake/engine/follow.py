"""Follow bronze: apply everything pending, then keep applying files as they arrive.

One loop for both shells: ``cdclake run --follow`` on a laptop and the Glue CDC job on AWS. A round
is ``apply_pending`` over the tables that have something new (or left pending, or failed and due
again), with a listing the loop keeps current (``dms.index``): bronze is listed whole at the start
and every ``relist_seconds``; between, a table folder is listed after its newest key. Each round's
tables keep their states, so a key's fate (applied, held, pending) is known without reading again.

Where files come from is a ``Notices``: locally nothing announces them (``Polling``: every round
looks at every table folder); on AWS the S3 events in the SQS queue announce them
(``dms.notices.QueueNotices``): a round looks at bronze only when events arrived or the last round
found work. The index is the list of work; an event only wakes the loop and names a key: the key
goes into the index as soon as its event is received, and the event is deleted then (as is one of
a file applied, gone or not ours). So no event waits in the queue for its file, which may wait
rounds (a failing table, a batch bound), and none is in flight when the loop ends, however it
ends (idle, the maximum run time, interrupted, an error).

A table that fails is tried again after growing pauses while the others go on, and alerted once
per failure episode (from the round it fails after being healthy to the round that applies it
again), with its reason, and once when the episode ends; files a round sets aside in quarantine
are alerted once each, with theirs (``alerts``).

Exactly once holds as in a single run: every commit records its files in the table's ledger in the
same Iceberg commit, and a file is pending only while the ledger lacks it. A loop that dies leaves
committed batches committed and the rest pending; the next run (its first round lists all of
bronze) applies the rest. Two loops on one table race as two runs do: the loser's commit conflicts,
it reads the ledger again and skips what the other applied (``turn.apply_batch``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cdclake.alerts import Alerts, FailureEpisodes, LoggedAlerts
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.dms.index import BronzeIndex, folder_of
from cdclake.dms.notices import Notices
from cdclake.engine.cut import CutRounds
from cdclake.engine.failure_alerts import FailureAlerts
from cdclake.engine.run import BronzeFolders, apply_pending, listing_starts, warn
from cdclake.engine.select import TableState, skip_reason
from cdclake.engine.silence import SilenceEdges
from cdclake.engine.turn import read_states
from cdclake.report import Backlog, FollowReport, Round, RunReport

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class FollowSettings:
    """How the loop paces itself; every figure in seconds."""

    poll_seconds: float = 5.0  # a round starts at most this often (bronze looked at, events read)
    idle_seconds: float | None = None  # end after this long without a new file; None: until stopped
    max_run_seconds: float | None = None  # end after this long even while busy (a Glue run's length)
    relist_seconds: float = 3600.0  # list all of bronze this often: new tables, events that never came
    # With announcements, a round looks only at folders that were announced or had a new file this
    # recently (so a request finds about one new file); other folders wait for an event or the relist.
    active_seconds: float = 600.0
    retry_cap_seconds: float = 600.0  # a failed table is tried again after poll x 2^n, up to this
    # False: the CDC lane (the Glue CDC job), which never runs a (re)load: a table whose load is due
    # is reported (``RunReport.loads_pending``) and waits for the full-load lane (``run.apply_pending``)
    loads: bool = True
    # True: the first listing is all of bronze and the first states are read whole (``run --sweep``);
    # else each table's folder is listed from its watermark, at the start and every ``relist_seconds``
    sweep: bool = False


# What a round runs: ``run.apply_pending`` over the due tables, with the states the loop carries (a
# seam: the loop's tests give it tables that fail).
ApplyPending = Callable[
    [Engine, BronzeListing, Sequence[TableConfig], Mapping[str, TableState]], tuple[RunReport, dict[str, TableState]]
]


def follow(
    engine: Engine,
    settings: FollowSettings,
    notices: Notices,
    tables: Sequence[TableConfig] | None = None,
    on_round: Callable[[Round], None] | None = None,
    alerts: Alerts | None = None,
    apply: ApplyPending | None = None,
    episodes: FailureEpisodes | None = None,
    until: Callable[[Round], str] | None = None,
    silence: SilenceEdges | None = None,
) -> FollowReport:
    """Apply every pending file of ``tables`` (default: every configured one), then keep applying
    new files round after round until stopped (``engine.stopping``), idle or at the maximum run time.
    Failing tables (once per failure episode, and once when it ends) and quarantined files are reported
    to ``alerts`` (default: logged at ERROR). ``episodes``: where the failure episodes are kept (default:
    in this process only). ``apply``: what a round runs (default: ``run.apply_pending``, loading only
    with ``settings.loads``). ``until``: asked after each round (after ``on_round``); a reason it returns
    ends the loop there (``FollowReport.stopped_by``), "" goes on. A table silent for longer than its
    cadence (or in a failed DMS state, where the shell reads them: ``silence``) is alerted once per
    silence (``engine.silence``).
    """
    follower = Follower(engine, settings, notices, tables, alerts or LoggedAlerts(), apply, episodes, silence)
    return follower.run(on_round, until)


class Follower:
    """The loop and what it carries from round to round: the index of bronze, the tables' states,
    the tables due again after a failure, when it last listed bronze and last found a file.

    A round hands the states the earlier rounds left to ``apply_pending``, so it reads no ledger and
    no quarantine journal. A table's state is read again only when the loop cannot vouch for it: the
    table failed (its state may be behind silver), its load is due (another lane loads it), or bronze
    was listed whole again (``relist_seconds``: what other processes did in the meantime, such as a
    quarantine entry dismissed). A commit by another writer is found by the commit itself: each is
    validated from the snapshot its state was taken at (``turn.apply_batch`` reads the state again).
    """

    def __init__(
        self,
        engine: Engine,
        settings: FollowSettings,
        notices: Notices,
        tables: Sequence[TableConfig] | None,
        alerts: Alerts,
        apply: ApplyPending | None = None,
        episodes: FailureEpisodes | None = None,
        silence: SilenceEdges | None = None,
    ) -> None:
        config = engine.config
        self.engine, self.settings, self.notices = engine, settings, notices
        self.apply = apply or self._apply_pending
        # bronze's unconfigured folders, listed once a loop (a table empty at the source has no file any round)
        self.bronze_folders = BronzeFolders(engine)
        self.selected = [t for t in (config.tables if tables is None else tables) if skip_reason(t) is None]
        self.by_source = {t.source: t for t in self.selected}
        self.transaction_path = config.bronze.transaction_path
        self.folders = {f"{t.source_schema}/{t.source_table}" for t in self.selected} | (
            {self.transaction_path.strip("/")} if self.transaction_path else set()
        )
        self.index = BronzeIndex(engine.store, self.transaction_path)
        self.states: dict[str, TableState] = {}  # by source: the last state each table was left in
        self.unvouched: set[str] = set()  # tables whose state the next round reads again
        self.gone: set[str] = set()  # announced keys no longer in bronze
        self.arrived: set[str] = set()  # keys their events added to the index since the last round
        # source -> keys below its watermark found late (``note``): pending until a round applies them,
        # also across a state read again (the ledger's watermark covers them)
        self.reopened: dict[str, set[str]] = {}
        self.retry_at: dict[str, tuple[float, int]] = {}  # source -> (when tried again, failures in a row)
        # folder -> when a new file was last found in it. Empty at the start: the first listing saw every
        # folder, and the folders with files still to apply are looked at anyway; a new run that marked
        # every folder active would list all of them every round for its first ``active_seconds``.
        self.active: dict[str, float] = {}
        self.episodes = FailureAlerts(alerts, settings.retry_cap_seconds, episodes)
        self.silence = (silence or SilenceEdges()).watch(self.selected, alerts)
        self.silent: tuple[str, ...] = ()
        self.outcome = FollowReport()
        self.started = self.last_relist = self.last_news = time.monotonic()
        # when the index was last relisted (UTC): what the rounds compact the applied keys over (a look
        # between relists starts after each folder's newest key, so it cannot show a file that landed
        # late below it)
        self.relisted_at = datetime.now(UTC).replace(tzinfo=None)
        # each round's bound, and the cut it ended at (``engine.cut``), its tags moved while the next round works
        self.cuts = CutRounds(engine, tags_behind=True)

    def run(
        self, on_round: Callable[[Round], None] | None = None, until: Callable[[Round], str] | None = None
    ) -> FollowReport:
        """Rounds until stopped, idle or at the maximum run time."""
        try:
            # The states first: bronze is listed from their watermarks (``run.list_since``).
            self.states = self.first_states()
            self.relisted_at = datetime.now(UTC).replace(tzinfo=None)
            self.index.relist(None if self.settings.sweep else self._starts())
            due: Sequence[TableConfig] = self.selected
            while True:
                round_started = time.monotonic()
                unapplied, done = self.round(due, on_round)
                if stop := self._stop_now(busy=True) or (until(done) if until is not None else ""):
                    break
                announced = self.notices.wait(
                    round_started + self.settings.poll_seconds, self.engine.stopping, self.note
                )
                if stop := self._stop_now(busy=False):
                    break
                new = self.look(announced, set(unapplied))
                if new:
                    self.last_news = time.monotonic()
                elif self._idle():
                    stop = "idle"
                    break
                due = self.due(new, set(unapplied))
            self.outcome.stopped_by = stop
        finally:
            # Every exit: no event stays in flight for a key the index holds (only one whose key could
            # not be indexed, when reading bronze failed: it comes back after its visibility timeout);
            # the last cut's tags in place.
            self.notices.settle(self.known)
            self.cuts.close()
        self.outcome.listings = self.index.requests
        return self.outcome

    def round(
        self, due: Sequence[TableConfig], on_round: Callable[[Round], None] | None
    ) -> tuple[dict[str, list[int]], Round]:
        """Work the due tables with the states the loop vouches for; what is left unapplied after it, and the
        round's outcome."""
        started = time.monotonic()
        vouched = {s: state for s, state in self.states.items() if s not in self.unvouched}
        bound = self.cuts.bound(self.index.listing, self._index_named)
        report, touched = self.apply(self.engine, bound.listing, due, vouched)
        self.states.update(touched)
        for table in report.tables:
            self.reopened.get(table.table, set()).difference_update(table.applied_files)
        for source, keys in self.reopened.items():
            if keys and source in self.states:
                self.states[source] = self.states[source].reopened(keys)
        self.unvouched -= touched.keys()
        self.unvouched |= {f.table for f in report.failures} | {t.table for t in report.tables if t.load_pending}
        self.cuts.settled(report, bound, {s: st for s, st in self.states.items() if s not in self.unvouched})
        self.index.forget_applied(self.applied)
        if self.outcome.rounds == 0:
            if not self.settings.sweep and self.apply == self._apply_pending:
                report.unconfigured = sorted(set(report.unconfigured) | set(self.bronze_folders.unconfigured()))
            warn(report)
        worked_on = {t.source for t in due}
        self._record(report, worked_on, started)
        self.episodes.report(report, worked_on)
        unapplied = _unapplied(self.index, self.states)  # after the round: what is pending, once per round
        backlog = Backlog(
            sum(len(sizes) for source, sizes in unapplied.items() if source in self.by_source),
            sum(sum(sizes) for source, sizes in unapplied.items() if source in self.by_source),
        )
        if self.silence.due(time.monotonic()):
            found = self.silence.look(self.index.files.values(), datetime.now(UTC), time.monotonic())
            self.silent = tuple(s.table for s in found)
        waiting = frozenset(s for s in unapplied if s in self.by_source and s not in self.outcome.failures)
        done = Round(self.outcome.rounds, report, backlog, time.monotonic() - started, waiting, self.silent)
        if on_round is not None:
            on_round(done)
        if any(t.files_applied for t in report.tables):
            self.last_news = time.monotonic()
        return unapplied, done

    def look(self, announced: set[str], unapplied: set[str]) -> set[str]:
        """The keys new to the index since the last round: announced, found in the folders worth
        looking at, or found by a whole listing (every ``relist_seconds``, and for a reload)."""
        new = set(self.arrived)
        self.arrived.clear()
        now = time.monotonic()
        if now - self.last_relist >= self.settings.relist_seconds:
            new |= self._relist()
        elif not self.notices.announces:
            new |= self.index.look(self.folders)
        else:
            recent = {f for f, at in self.active.items() if now - at <= self.settings.active_seconds}
            announced_folders = {folder_of(self.index.files[k]) for k in announced if k in self.index.files}
            worth = recent | announced_folders | _folders_of(self.index, unapplied)
            new |= self.index.look(worth & self.folders)
        if any(self.index.files[k].kind is FileKind.FULL_LOAD for k in new if k in self.index.files):
            # A reload: its full load records the CDC files it supersedes, so it needs them all listed.
            new |= self._relist()
        for key in new:
            if key in self.index.files:
                self.active[folder_of(self.index.files[key])] = time.monotonic()
        return new

    def first_states(self) -> dict[str, TableState]:
        """The tables' states before the first listing (read whole for a sweep); none when the rounds
        are not the engine's (``apply`` given: a seam whose rounds hand the states back)."""
        if self.apply != self._apply_pending:
            return {}
        return read_states(self.engine, self.selected, whole=self.settings.sweep)

    def _index_named(self, keys: list[str]) -> None:
        """Index the files a cut's bound names that the index lacks and no table applied yet."""
        missing = [
            k for k in keys if k not in self.index.files and not any(k in s.applied for s in self.states.values())
        ]
        if missing:
            self.index.announce(missing)

    def _relist(self) -> set[str]:
        """List bronze from the tables' watermarks again (what other processes did meanwhile, events
        that never came); the tables' states are read again by the next round that works them."""
        self.last_relist = time.monotonic()
        self.relisted_at = datetime.now(UTC).replace(tzinfo=None)
        self.unvouched |= self.states.keys()
        return self.index.relist(self._starts())

    def _starts(self) -> dict[str, str | None]:
        """Each folder's start: its tables' watermarks (``run.listing_starts``)."""
        starts = listing_starts(self.engine, self.selected, self.states)
        return {folder: start for folder, start in starts.items() if folder in self.folders}

    def due(self, new: set[str], pending: set[str]) -> list[TableConfig]:
        """The tables the next round works on: new files (``new``), files left pending (``pending``: a
        batch bound, a load due), failures due again."""
        now = time.monotonic()
        news = {self.index.files[k].source for k in new if k in self.index.files}
        multi = any(self.index.files[k].is_multi_table for k in new if k in self.index.files)
        chosen = []
        for table in self.selected:
            if table.source in self.retry_at:
                if self.retry_at[table.source][0] <= now:
                    chosen.append(table)
            elif multi or table.source in news or table.source in pending or table.source not in self.states:
                chosen.append(table)
        return chosen

    def _record(self, report: RunReport, worked_on: set[str], now: float) -> None:
        """Add a round to the totals; a table's failure stands until a later round applies it, and is
        tried again after poll x 2^n seconds, up to the retry cap."""
        outcome, settings = self.outcome, self.settings
        outcome.rounds += 1
        outcome.files_applied += sum(t.files_applied for t in report.tables)
        outcome.bytes_applied += sum(t.bytes_applied for t in report.tables)
        failed = {f.table: f for f in report.failures}
        for table in worked_on - failed.keys():
            outcome.failures.pop(table, None)
            self.retry_at.pop(table, None)
        for source, failure in failed.items():
            outcome.failures[source] = failure
            count = self.retry_at.get(source, (0.0, 0))[1] + 1
            wait = min(settings.retry_cap_seconds, settings.poll_seconds * 2 ** (count - 1))
            self.retry_at[source] = (now + wait, count)

    def _idle(self) -> bool:
        """Whether the loop has seen no new file for ``idle_seconds`` (None: never idle)."""
        idle = self.settings.idle_seconds
        return idle is not None and time.monotonic() - self.last_news >= idle

    def _stop_now(self, busy: bool) -> str:
        """Why the loop ends now ("" to go on): stopped, or (after a round) its maximum run time."""
        if self.engine.stopping.is_set():
            return "interrupted"
        limit = self.settings.max_run_seconds
        if busy and limit is not None and time.monotonic() - self.started >= limit:
            return "max run time"
        return ""

    def _apply_pending(
        self, engine: Engine, listing: BronzeListing, due: Sequence[TableConfig], states: Mapping[str, TableState]
    ) -> tuple[RunReport, dict[str, TableState]]:
        return apply_pending(
            engine,
            listing,
            due,
            loads=self.settings.loads,
            states=dict(states),
            listed_at=self.relisted_at,
            folders=self.bronze_folders,
        )

    def applied(self, file: BronzeFile) -> bool:
        return file.source in self.states and file.key in self.states[file.source].applied

    def done(self, key: str) -> bool:
        """Whether ``key`` needs no listing: applied, held, gone or not ours."""
        try:
            file = parse_key(key, 0, self.transaction_path)
        except ValueError:
            return True
        if key in self.gone or file.kind is FileKind.FULL_LOAD:
            return True  # LOAD files are listed by every round that looks at their folder
        readers = list(self.by_source) if file.is_multi_table else [file.source]
        if not file.is_multi_table and file.source not in self.by_source:
            return True  # not a table this loop applies (unconfigured, keyless, or not selected)
        states = self.states
        return all(r in states and (key in states[r].applied or key in states[r].held) for r in readers)

    def known(self, key: str) -> bool:
        """Whether an announcement of ``key`` needs nothing more: its key is in the index, or done."""
        return key in self.index.files or self.done(key)

    def note(self, key: str) -> bool:
        """Index an announced key (its size read from bronze when no listing showed it). A key its
        table's watermark covers, written later than the look-back after the time in its name, was
        never listed, so never applied: it is pending again (``TableState.reopened``), not taken for
        applied."""
        self._reopen_if_late(key)
        if not self.known(key):
            added, missing = self.index.announce([key])
            self.arrived.update(added)
            self.gone.update(missing)
        return self.known(key)

    def _reopen_if_late(self, key: str) -> None:
        try:
            file = parse_key(key, 0, self.transaction_path)
        except ValueError:
            return
        state = self.states.get(file.source)
        if state is None or file.kind is not FileKind.CDC or file.is_multi_table:
            return
        applied = state.applied
        if key in applied.keys or key in applied.exceptions or not applied.covered(key):
            return
        written = self.engine.store.modified(key)
        named = datetime.strptime(file.sort_key[2][:15], "%Y%m%d-%H%M%S")
        if written is not None and written - named > timedelta(seconds=self.engine.config.bronze.look_back_seconds):
            log.warning(
                "late file table=%s key=%s: written %s, later than the look-back after the time in its name and "
                "below the table's watermark; it was never listed, so it is applied now",
                file.source,
                key,
                written.isoformat(timespec="seconds"),
            )
            self.states[file.source] = state.reopened([key])
            self.reopened.setdefault(file.source, set()).add(key)


def _unapplied(index: BronzeIndex, states: dict[str, TableState]) -> dict[str, list[int]]:
    """The sizes of each loaded table's CDC files that are neither applied nor held, by source."""
    done = {source: state.applied | state.held for source, state in states.items()}
    found: dict[str, list[int]] = {}
    for file in index.files.values():
        if file.kind is FileKind.CDC and file.source in done and file.key not in done[file.source]:
            found.setdefault(file.source, []).append(file.size)
    return found


def _folders_of(index: BronzeIndex, sources: set[str]) -> set[str]:
    """The folders of these tables' files (tables with files still to apply: a batch bound, a failure)."""
    return {folder_of(f) for f in index.files.values() if f.source in sources}
