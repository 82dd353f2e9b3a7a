"""A table that goes silent: no CDC file for longer than its cadence while the task runs, or a DMS table error.

When DMS suspends one table (a table error while the task keeps running), no file comes for it and nothing
else fails: the pipeline's freshness alarm hears the busy tables, and the silent one's lag is never reported.
The watch here looks at what the follow loop already holds (the index of bronze: each table's newest CDC
file, named by its write time) and, where the shell gives it, DMS's table statistics, and says which tables
are silent while the others keep writing, each once per silence (and once when it speaks again).

A table's cadence is its ``silent_after_minutes`` setting, or derived from its own recent files
(``expected_gap``): a table that changes every few seconds is silent after a few minutes, one that changes
hourly after several hours, and one with too little history is not judged until it has some. ``0`` turns the
watch off for a table that rarely changes. Files of a transaction-ordered folder (PreserveTransactions) hold
every table's rows, so there only DMS's table states can tell a silent table.

``expected_gap`` and ``silent_tables`` are pure; ``SilenceWatch`` keeps the episodes and sends the alerts.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cdclake.alerts import Alerts
from cdclake.config import TableConfig
from cdclake.dms.files import BronzeFile, FileKind

log = logging.getLogger("cdclake")

# An automatic cadence: this many times the 90th percentile gap between the table's recent files, at
# least FLOOR, judged only once the table has MIN_GAPS gaps (fewer: too little history to tell).
GAP_FACTOR = 6
FLOOR = timedelta(minutes=15)
MIN_GAPS = 12
RECENT_FILES = 200  # the newest files the cadence is derived from
# DMS table states (DescribeTableStatistics' TableState) that mean DMS stopped capturing the table.
FAILED_TABLE_STATES = frozenset({"Table error", "Table cancelled"})

DmsTableStates = Callable[[], Mapping[str, str]]  # "schema.table" -> TableState, read at the edge


@dataclass(frozen=True)
class Silence:
    """One silent table and why, in a sentence a person acts on."""

    table: str  # schema.table
    why: str


def write_time(file: BronzeFile) -> datetime | None:
    """A CDC file's write time, from its DMS name (``YYYYMMDD-HHMMSSmmm``); None for a LOAD file."""
    if file.kind is not FileKind.CDC:
        return None
    stamp = file.sort_key[2]  # the seconds, then their fraction (capture's names add the commit LSN after it)
    moment = datetime.strptime(stamp[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    return moment.replace(microsecond=int(stamp[15:21].ljust(6, "0")))


def expected_gap(times: Sequence[datetime]) -> timedelta | None:
    """How long the table may stay quiet, from its recent files' write times (any order): ``GAP_FACTOR``
    times the 90th percentile gap, at least ``FLOOR``; None with fewer than ``MIN_GAPS`` gaps."""
    ordered = sorted(times)[-RECENT_FILES:]
    gaps = sorted(b - a for a, b in itertools.pairwise(ordered))
    if len(gaps) < MIN_GAPS:
        return None
    p90 = gaps[min(len(gaps) - 1, int(len(gaps) * 0.9))]
    return max(FLOOR, p90 * GAP_FACTOR)


def _allowed(table: TableConfig, times: Sequence[datetime]) -> timedelta | None:
    if table.silent_after_minutes is not None:
        return None if table.silent_after_minutes == 0 else timedelta(minutes=table.silent_after_minutes)
    return expected_gap(times)


def silent_tables(
    tables: Sequence[TableConfig],
    write_times: Mapping[str, Sequence[datetime]],
    dms_states: Mapping[str, str],
    now: datetime,
) -> list[Silence]:
    """The tables silent at ``now``: a DMS state in ``FAILED_TABLE_STATES``, or a newest CDC file older than
    the table's allowed quiet (its setting, or ``expected_gap`` of its ``write_times``: source -> times).

    Quiet is measured up to the newest file of any table (at most ``now``): a table is silent while the
    others keep writing. When every table is quiet, the task is stopped or the source is (a night of a
    bursty source): that is the DMS task rule's and the freshness alarm's to tell, not one alert per table;
    and a loop replaying old files judges them against each other, not against today. A table with no CDC
    file yet is not judged by its files (a new table starts quiet)."""
    newest = max((max(times) for times in write_times.values() if times), default=None)
    reference = now if newest is None else min(now, newest)
    silent = []
    for table in tables:
        state = dms_states.get(table.source)
        if state in FAILED_TABLE_STATES:
            silent.append(Silence(table.source, f"DMS reports '{state}' for it: DMS stopped capturing the table"))
            continue
        times = write_times.get(table.source, ())
        allowed = _allowed(table, times)
        if allowed is None or not times:
            continue
        quiet = reference - max(times)
        if quiet > allowed:
            silent.append(
                Silence(
                    table.source,
                    f"no CDC file for {_minutes(quiet)} (it is expected at least every {_minutes(allowed)})",
                )
            )
    return silent


def _minutes(span: timedelta) -> str:
    minutes = span.total_seconds() / 60
    return f"{minutes / 60:.1f} h" if minutes >= 120 else f"{minutes:.0f} min"


def write_times_by_table(files: Iterable[BronzeFile]) -> dict[str, list[datetime]]:
    """source -> the write times of its CDC files (per-table folders only)."""
    times: dict[str, list[datetime]] = {}
    for file in files:
        if file.is_multi_table or (at := write_time(file)) is None:
            continue
        times.setdefault(file.source, []).append(at)
    return times


@dataclass(frozen=True)
class SilenceEdges:
    """What a shell gives the watch: DMS's table states, the tables an earlier run alerted as silent, and
    where to record that set when it changes (None each: not read, nothing alerted before, not recorded)."""

    dms_states: DmsTableStates | None = None
    alerted: frozenset[str] = frozenset()
    remember: Callable[[frozenset[str]], None] | None = None

    def watch(self, tables: Sequence[TableConfig], alerts: Alerts) -> SilenceWatch:
        return SilenceWatch(tables, alerts, self.dms_states, alerted=set(self.alerted), remember=self.remember)


@dataclass
class SilenceWatch:
    """Alerts once when a table goes silent and once when it speaks again; looks at most every
    ``every_seconds`` (a look is cheap; DMS's statistics are one paginated call per task).

    ``alerted`` starts as the tables an earlier run alerted (the shell reads them back) and ``remember``
    is told the set whenever it changes, so a silence is alerted once across runs, not once a run."""

    tables: Sequence[TableConfig]
    alerts: Alerts
    dms_states: DmsTableStates | None = None
    every_seconds: float = 300.0
    alerted: set[str] = field(default_factory=set)  # tables in a silence episode (alerted)
    remember: Callable[[frozenset[str]], None] | None = None
    last_look: float | None = None
    # source -> the write times of its newest files seen so far: the loop's index forgets applied files but
    # each folder's newest, so the watch keeps the history a derived cadence needs
    seen: dict[str, list[datetime]] = field(default_factory=dict)

    def due(self, monotonic_now: float) -> bool:
        return self.last_look is None or monotonic_now - self.last_look >= self.every_seconds

    def look(self, files: Iterable[BronzeFile], now: datetime, monotonic_now: float) -> list[Silence]:
        """Judge every table now; alert the tables that went silent or spoke again; the silent ones."""
        first = self.last_look is None
        self.last_look = monotonic_now
        states: Mapping[str, str] = {}
        if self.dms_states is not None:
            try:
                states = self.dms_states()
            except Exception as error:  # no permission, throttled: the file-based judgement still holds
                log.warning("DMS table statistics not read (%s): silent tables judged by their files only", error)
        for source, times in write_times_by_table(files).items():
            self.seen[source] = sorted(set(self.seen.get(source, [])) | set(times))[-RECENT_FILES:]
        found = silent_tables(self.tables, self.seen, states, now)
        current = {s.table: s for s in found}
        watched = {t.source for t in self.tables}
        for table in sorted(current.keys() - self.alerted):
            self.alerts.send(
                f"table {table} is silent",
                f"{table}: {current[table].why}. Its silver table is not being updated. Check the DMS task's "
                "table statistics (a table error suspends one table while the task keeps running) and reload "
                "the table in DMS; set silent_after_minutes for a table that rarely changes (0: not watched).",
            )
        for table in sorted((self.alerted & watched) - current.keys()):
            self.alerts.send(f"table {table} speaks again", f"{table}: CDC files arrive again.")
        before = None if first else frozenset(self.alerted)
        # Tables no longer configured leave the set quietly.
        self.alerted = set(current)
        # Recorded when it changes, and at a run's first look (the record then says what this run found).
        if self.remember is not None and frozenset(self.alerted) != before:
            try:
                self.remember(frozenset(self.alerted))
            except Exception as error:  # the alerts went out; at worst the next run alerts them again
                log.warning("the silent tables were not recorded (%s): a next run may alert them again", error)
        return found
