"""Reload requests: how the CDC lane asks the full-load lane for the (re)loads it leaves alone.

The Glue CDC job never runs a (re)load (``engine.run.apply_pending(loads=False)``): a table whose
load is due is reported and its CDC waits. The job writes the tables it found so (with why) to one
small JSON object whenever that set changes; the state machine's work check reads it and starts the
full-load job for them, beside the CDC loop, and tells when a reload keeps failing.

The object (``ReloadRequest.to_json``): ``{"tables": ["s.a", ...], "reasons": {"s.a": "..."},
"updated": "2024-01-02T03:04:05Z"}``; an empty ``tables`` means nothing is pending. The full-load
job loads exactly the tables whose load is due (``select.load_due``), so a stale request costs a
job run that finds nothing to do, never a wrong load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class ReloadRequest:
    """The tables whose (re)load the CDC lane left to the full-load lane, with why."""

    reasons: Mapping[str, str] = field(default_factory=dict)  # source (schema.table) -> why its load is due

    @property
    def tables(self) -> list[str]:
        return sorted(self.reasons)

    def to_json(self, now: datetime | None = None) -> str:
        updated = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json.dumps({"tables": self.tables, "reasons": dict(sorted(self.reasons.items())), "updated": updated})

    @classmethod
    def from_json(cls, text: str) -> ReloadRequest:
        document = json.loads(text)
        reasons = document.get("reasons") or {}
        return cls({table: str(reasons.get(table, "")) for table in document.get("tables", [])})


@dataclass
class ReloadRequester:
    """Writes the CDC lane's reload request whenever the set of pending tables changes (and once at
    the start, so a request a reload has answered is cleared by the next run's first round)."""

    write: Callable[[str], None]  # stores the JSON text (an S3 object on AWS)
    last: frozenset[str] | None = None

    def offer(self, pending: Mapping[str, str]) -> bool:
        """Record ``pending`` (source -> why) when it differs from what was written last; whether it wrote."""
        tables = frozenset(pending)
        if tables == self.last:
            return False
        self.write(ReloadRequest(dict(pending)).to_json())
        self.last = tables
        return True
