"""One table's comparison, as every report of verify reads it (``TableComparison``): its verdict, its differing
keys of each kind with the columns that differ, how it was compared, and, against a live source, where the source
stood and what was lag."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cdclake.verify.checksum_sql import Within
from cdclake.verify.live import SourcePosition

Verdict = Literal["equal", "differing", "lagging", "skipped"]


@dataclass(frozen=True)
class TableComparison:
    """One table's comparison: each step of verify makes a new one (``dataclasses.replace``)."""

    table: str
    source_rows: int = 0
    silver_rows: int = 0
    missing: list[str] = field(default_factory=list)  # keys at the source, not in silver
    unexpected: list[str] = field(default_factory=list)  # keys in silver, not at the source
    different: list[str] = field(default_factory=list)  # keys whose content differs
    differing_columns: dict[str, list[str]] = field(default_factory=dict)  # key -> the columns that differ
    # keys that differ only by NULL in silver where the source shows an ADD COLUMN ... DEFAULT value
    # (rows older than that column and not written since)
    unlogged_defaults: list[str] = field(default_factory=list)
    problem: str = ""  # a reason the table could not be compared (it is skipped)
    # How: "checksums" (key ranges, only differing ranges read row by row) or "rows" (every row read)
    method: str = "rows"
    why_rows: str = ""  # why every row was read (columns without a canonical text), for the report
    ranges: int = 0  # key ranges whose checksums were compared
    ranges_differing: int = 0  # ranges then read row by row
    rows_read: int = 0  # rows read from the two sides to compare them value by value
    # Against a live source (``verify.live``): where the source stood when verify started, the keys that
    # differed at first and not once silver had caught up (lag), and, when silver did not catch up in time,
    # how far behind it was (the table is then lagging: its differing keys are not confirmed).
    source_at: SourcePosition | None = field(default=None, repr=False)
    started: datetime | None = None  # when its comparison started and ended (UTC)
    finished: datetime | None = None
    lag_resolved: int = 0
    unconfirmed: int = 0  # differing keys whose source rows kept moving: neither reported nor lag
    lagging: str = ""
    lag_seconds: float | None = None
    # The rows to read again to confirm a difference (None: nothing to confirm), and each differing key's
    # source row as read (its digest; None: not at the source), to tell whether it moved since
    read_again: Within | None = field(default=None, repr=False)
    source_digests: dict[str, bytes | None] = field(default_factory=dict, repr=False)

    def differing(self) -> list[str]:
        """Every differing key, of every kind."""
        return [*self.missing, *self.unexpected, *self.different, *self.unlogged_defaults]

    @property
    def position(self) -> str:
        """Where the source stood when verify started, for people ("" when it was not reached)."""
        return self.source_at.describe() if self.source_at else ""

    @property
    def differing_keys(self) -> int:
        return len(self.missing) + len(self.unexpected) + len(self.different) + len(self.unlogged_defaults)

    @property
    def equal(self) -> bool:
        return not (self.differing_keys or self.problem or self.lagging)

    @property
    def verdict(self) -> Verdict:
        """equal, differing, lagging (silver had not caught up with the source in time) or skipped."""
        if self.problem:
            return "skipped"
        return "lagging" if self.lagging else "equal" if self.equal else "differing"

    def how(self) -> str:
        """How the table was compared, in a phrase."""
        if self.method == "checksums":
            return f"checksums of {self.ranges} key range(s), {self.ranges_differing} read row by row"
        return self.why_rows or "row by row"

    def as_json(self) -> dict[str, Any]:
        """The comparison for ``--format json``."""
        return {
            "table": self.table,
            "verdict": self.verdict,
            "problem": self.problem or None,
            "source_rows": self.source_rows,
            "silver_rows": self.silver_rows,
            "method": self.method,
            "how": self.how(),
            "ranges": self.ranges,
            "ranges_differing": self.ranges_differing,
            "rows_read": self.rows_read,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "different": {k: self.differing_columns.get(k, []) for k in self.different},
            "default_not_in_silver": self.unlogged_defaults,
            "source_position": self.position or None,
            "lag_resolved": self.lag_resolved,
            "unconfirmed": self.unconfirmed,
            "lagging": self.lagging or None,
            "lag_seconds": self.lag_seconds,
        }
