"""What a run did, per table and batch: the business outcome every shell prints, logs or publishes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar

from cdclake.errors import CdclakeError, ConcurrentWriterError, TablesFailedError
from cdclake.schema import type_change_advice


class OutcomeKind(Enum):
    """What became of one table's full load or CDC batch."""

    DONE = "done"  # the work ran: the table loaded, or the batch applied (in part: rows may be quarantined)
    NOTHING_NEW = "nothing new"  # every file of the batch was applied or held already
    ALREADY_LOADED = "already loaded"  # the table is loaded and bronze holds no new load
    LOAD_PENDING = "load pending"  # a load is due, left to the full-load lane; the table's CDC waits for it
    LOADED_AGAIN = "loaded again"  # a loaded table was loaded again
    CREATED_EMPTY = "created empty"  # no LOAD files: created empty from its declared columns
    LEFT_TO_CDC = "left to CDC"  # no LOAD files, no declared columns: its first CDC batch creates it
    QUARANTINED = "quarantined"  # files held in quarantine until a replay
    TYPE_CHANGE = "type change"  # files held for a type change no widening covers: held until a reload


_HELD = (OutcomeKind.QUARANTINED, OutcomeKind.TYPE_CHANGE)


@dataclass(frozen=True)
class Outcome:
    """An outcome and its reason (why a load is due or was taken again, why files were held; for
    a load without LOAD files, the bronze folder it found empty). Code branches on ``kind``; the
    sentence (``note``) is made from both, for people only."""

    kind: OutcomeKind = OutcomeKind.DONE
    reason: str = ""

    @classmethod
    def load_pending(cls, why: str) -> Outcome:
        return cls(OutcomeKind.LOAD_PENDING, why)

    @classmethod
    def held(cls, reason: str, type_change: bool = False) -> Outcome:
        """Files held in quarantine for ``reason`` (``type_change``: a type change silver cannot take)."""
        return cls(OutcomeKind.TYPE_CHANGE if type_change else OutcomeKind.QUARANTINED, reason)

    @property
    def is_held(self) -> bool:
        """Files were held in quarantine (for any reason)."""
        return self.kind in _HELD

    @property
    def note(self) -> str:
        """The outcome in words: what ``TableReport.summary`` ends with ("" when the work simply ran)."""
        kind, reason = self.kind, self.reason
        if kind in _HELD:
            return f"quarantined: {reason}"
        if kind is OutcomeKind.LOAD_PENDING:
            return f"load pending in the full-load lane, CDC held until then: {reason}"
        if kind in (OutcomeKind.CREATED_EMPTY, OutcomeKind.LEFT_TO_CDC):
            then = (
                "created empty, its CDC files apply to it"
                if kind is OutcomeKind.CREATED_EMPTY
                else "without declared columns the table is created by its first CDC batch"
            )
            return (
                f"nothing loaded: bronze has no LOAD file under {reason}/ (a table empty at the source gets none); "
                + then
            )
        if kind is OutcomeKind.LOADED_AGAIN:
            return reason
        return "" if kind is OutcomeKind.DONE else kind.value


@dataclass
class TableReport:
    """The outcome of one full load or CDC batch for one table (the business metrics)."""

    table: str
    kind: str
    files_applied: int = 0
    files_skipped: int = 0  # already in the ledger
    bytes_applied: int = 0
    changes_read: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    deleted_missing: int = 0  # deletes of keys silver does not hold (tombstoned all the same)
    ignored_late: int = 0  # changes older than the stored row or the key's tombstone
    schema_changes: list[str] = field(default_factory=list)
    columns_dropped_at_source: list[str] = field(default_factory=list)
    quarantined_files: list[str] = field(default_factory=list)
    applied_files: list[str] = field(default_factory=list)  # the CDC files a batch applied (its keys)
    rows_quarantined: int = 0
    latest_commit_ts: str | None = None  # the newest source commit this batch applied
    files_held: int = 0  # in quarantine from an earlier run: applied only by a replay
    loaded: bool = False  # a full load that (re)loaded the table in this run: its silver table was replaced
    seconds: float = 0.0
    outcome: Outcome = Outcome()

    @property
    def note(self) -> str:
        """The outcome in words (``Outcome.note``)."""
        return self.outcome.note

    @property
    def load_pending(self) -> str | None:
        """Why a (re)load is due and left to the full-load lane (the CDC lane never loads), the
        table's CDC waiting for it; None when none is."""
        return self.outcome.reason if self.outcome.kind is OutcomeKind.LOAD_PENDING else None

    def summary(self) -> str:
        """One line: what the CLI prints, the jobs log and the engine logs when a batch is done."""
        note = f" ({self.note})" if self.note else ""
        return (
            f"{self.kind:9} {self.table}: files={self.files_applied} skipped={self.files_skipped} "
            f"inserted={self.inserted} updated={self.updated} deleted={self.deleted} "
            f"ignored_late={self.ignored_late} rows_quarantined={self.rows_quarantined} "
            f"files_quarantined={len(self.quarantined_files)} {self.seconds:.1f}s{note}"
        )


@dataclass(frozen=True)
class TableFailure:
    """A table whose work stopped with an error; the run's other tables went on."""

    table: str
    kind: str  # "full-load" or "cdc"
    error: Exception

    @property
    def exit_code(self) -> int:
        """75: another writer kept winning (run it again later); 2: a problem the user can fix; 1: a fault."""
        if isinstance(self.error, ConcurrentWriterError):
            return ConcurrentWriterError.exit_code
        return 2 if isinstance(self.error, CdclakeError) else 1

    def summary(self) -> str:
        lines = str(self.error).strip().splitlines() or [type(self.error).__name__]
        return f"{self.kind:9} {self.table}: failed: {lines[0]}"


@dataclass(frozen=True)
class Backlog:
    """What bronze holds that silver has not applied yet after a round (the follow loop counts it)."""

    files: int
    bytes: int

    def __post_init__(self) -> None:
        if self.files < 0 or self.bytes < 0:
            raise ValueError(f"a backlog cannot be negative: files={self.files} bytes={self.bytes}")


@dataclass
class RunReport:
    """Every table report of one run, the tables that failed, and what the run found in bronze but
    did not apply."""

    tables: list[TableReport] = field(default_factory=list)
    failures: list[TableFailure] = field(default_factory=list)
    skipped_tables: list[str] = field(default_factory=list)  # reasons
    unconfigured: list[str] = field(default_factory=list)  # bronze sources with no configuration
    unrecognised: list[str] = field(default_factory=list)  # bronze keys that are not DMS files
    no_files: list[str] = field(default_factory=list)  # configured tables bronze holds no file of
    # wall-clock seconds of the run's phases that ran ("full loads", "CDC", "gold"), in order
    phase_seconds: dict[str, float] = field(default_factory=dict)
    cut: str | None = None  # the consistent cut the run ended at, or why none (``engine.cut``)
    cut_commit_ts: str | None = None  # the source commit time T of the latest cut after the run (moved or not)

    def time_line(self, start_up: float, total: float) -> str:
        """Where the run's time went, in one line: ``start-up`` (the process until the engine was
        ready), each phase that ran with how many tables it worked on, the rest (listing bronze,
        reading the tables' states: ``other``), and the ``total`` wall-clock seconds."""
        tables = {
            phase: len({t.table for t in self.tables if t.kind == kind})
            for phase, kind in (("full loads", "full-load"), ("CDC", "cdc"))
        }
        parts = [f"start-up {start_up:.1f} s"]
        for phase, seconds in self.phase_seconds.items():
            count = f" ({tables[phase]} table{'' if tables[phase] == 1 else 's'})" if phase in tables else ""
            parts.append(f"{phase} {seconds:.1f} s{count}")
        other = total - start_up - sum(self.phase_seconds.values())
        if other >= 0.05:
            parts.append(f"other {other:.1f} s")
        return f"time: {', '.join(parts)}; total {total:.1f} s"

    def no_files_line(self) -> str | None:
        """What the CLI says about tables nothing has arrived for (or None): silver holds nothing of
        them, and an empty table there is no evidence that the source table is empty."""
        if not self.no_files:
            return None
        return (
            f"no files yet for {', '.join(self.no_files)}: bronze holds no LOAD or CDC file of "
            f"{'it' if len(self.no_files) == 1 else 'them'}, so nothing was loaded and no silver table created until "
            "one arrives (a table empty at the source "
            "gets none; otherwise check that `cdclake capture` or the DMS task includes it)"
        )

    @property
    def loads_pending(self) -> dict[str, str]:
        """Tables whose (re)load is due and left to the full-load lane, with why (source -> reason)."""
        return {t.table: t.load_pending for t in self.tables if t.load_pending is not None}

    @property
    def quarantined(self) -> list[TableReport]:
        """Batches that set files or rows aside."""
        return [t for t in self.tables if t.quarantined_files or t.rows_quarantined]

    def of_table(self, source: str) -> RunReport:
        """The part of this report about one table (what ``cdclake run --table`` would report)."""
        return RunReport(
            tables=[t for t in self.tables if t.table == source],
            failures=[f for f in self.failures if f.table == source],
        )

    @property
    def exit_code(self) -> int:
        """A failed table's code (1: a fault, else 2: a problem to fix, else 75: another writer
        kept winning), else 1 when files or rows were set aside in quarantine, else 0."""
        if self.failures:
            codes = {failure.exit_code for failure in self.failures}
            return next(code for code in (1, 2, ConcurrentWriterError.exit_code) if code in codes)
        return 1 if self.quarantined else 0

    def problems(self) -> list[str]:
        """One sentence per table that set something aside (what, why, and the next command), then
        one per failed table: what the CLI prints on standard error."""
        lines = []
        for source in dict.fromkeys(t.table for t in self.quarantined):
            batches = [t for t in self.quarantined if t.table == source]
            if files := [f for t in batches for f in t.quarantined_files]:
                reasons = list(dict.fromkeys(t.outcome.reason for t in batches if t.outcome.is_held))
                advice = (
                    type_change_advice(source)
                    if any(t.outcome.kind is OutcomeKind.TYPE_CHANGE for t in batches)
                    else "fix them in bronze, then `cdclake replay --quarantined`"
                )
                lines.append(
                    f"{source}: {len(files)} file(s) held in quarantine ({'; '.join(reasons)}); {advice} "
                    "(`cdclake quarantine list` shows them)"
                )
            if rows := sum(t.rows_quarantined for t in batches):
                lines.append(
                    f"{source}: {rows} row(s) held in quarantine, the rest applied; `cdclake quarantine list` shows "
                    "them and why; fix them in bronze, then `cdclake replay --quarantined`"
                )
        lines += [f"{failure.table}: {failure.error}" for failure in self.failures]
        return lines

    def checked(self) -> RunReport:
        """This report when every table finished; else raise what stopped a table: its own error
        when one table failed, ``TablesFailedError`` naming each when several did."""
        if len(self.failures) == 1:
            raise self.failures[0].error
        if self.failures:
            raise TablesFailedError(
                f"{len(self.failures)} tables failed; the others were applied: "
                + "; ".join(f.summary().split(None, 1)[1] for f in self.failures)
            ) from self.failures[0].error
        return self


@dataclass(frozen=True)
class ProgressLine:
    """Where a long run stands: ``key=value`` text for logs, and the share done for a bar."""

    text: str
    fraction: float  # 0.0 .. 1.0


@dataclass
class Progress:
    """How far a run is through the files it selected: counts, rates and the time left.

    The time left (``eta_s``) is the time so far scaled by the share still to do, once at least
    ``ETA_BATCHES`` batches and ``ETA_SHARE`` of the work are done (``?`` before: the first batch
    carries the run's warm-up and one table's fixed costs, and an estimate from it alone is off by
    orders of magnitude). The share done is the mean of the files' and the bytes' shares: a batch
    costs per file (a table's turn, a commit) as well as per byte."""

    total_files: int
    total_bytes: int
    started: float  # time.monotonic() at the start
    total_tables: int = 1
    files: int = 0
    bytes: int = 0
    rows: int = 0
    tables: int = 0  # tables whose turn has ended (every batch done, or stopped)
    batches: int = 0

    ETA_BATCHES: ClassVar[int] = 2
    ETA_SHARE: ClassVar[float] = 0.05

    def share_done(self) -> float:
        """The share of the run done, 0.0 .. 1.0: the mean of the files' and the bytes' shares."""
        shares = [done / total for done, total in ((self.files, self.total_files), (self.bytes, self.total_bytes))
                  if total > 0]  # fmt: skip
        return min(sum(shares) / len(shares), 1.0) if shares else 0.0

    def advance(self, batch: TableReport, now: float, table_done: bool = False) -> ProgressLine:
        """Count a finished batch (the last of its table's turn when ``table_done``); one line
        saying where the run stands."""
        self.files += batch.files_applied + len(batch.quarantined_files)
        self.bytes += batch.bytes_applied
        self.rows += batch.changes_read
        self.batches += 1
        self.tables += table_done
        elapsed = max(now - self.started, 1e-9)
        rate = self.bytes / elapsed
        share = self.share_done()
        known = self.batches >= self.ETA_BATCHES and share >= self.ETA_SHARE
        left = f"{elapsed * (1 - share) / share:.0f}" if known else "?"
        tables = f"tables={self.tables}/{self.total_tables} " if self.total_tables > 1 else ""
        text = (
            f"{tables}files={self.files}/{self.total_files} mb={self.bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} "
            f"rows={self.rows} rows_per_s={self.rows / elapsed:.0f} mb_per_s={rate / 1e6:.2f} "
            f"eta_s={left}"
        )
        return ProgressLine(text, share)


@dataclass(frozen=True)
class Round:
    """One round's outcome, as the shells report it."""

    number: int
    report: RunReport
    backlog: Backlog
    seconds: float
    # The tables with CDC files still to apply after the round that are not failing (a batch bound, a load due)
    waiting: frozenset[str] = frozenset()
    silent: tuple[str, ...] = ()  # the tables silent as of this round (``engine.silence``)


@dataclass
class FollowReport:
    """What a follow did in all: its rounds, why it ended, the tables still failing at the end."""

    rounds: int = 0
    files_applied: int = 0
    bytes_applied: int = 0
    listings: int = 0
    stopped_by: str = ""  # "idle", "max run time", "interrupted", or the reason ``until`` gave
    failures: dict[str, TableFailure] = field(default_factory=dict)  # by source, as of the last round

    @property
    def exit_code(self) -> int:
        if self.stopped_by == "interrupted":
            return 130
        return max((f.exit_code for f in self.failures.values()), default=0)
