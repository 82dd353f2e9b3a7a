"""Per-mart status: rows, last refresh, path, the silver snapshots reflected and the lag behind silver."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.gold.pinned import mart_sources
from cdclake.gold.refresh import last_refresh, mart_table
from cdclake.gold.snapshots import current_snapshot, snapshots_after
from cdclake.lake.tables import table_exists

if TYPE_CHECKING:
    from cdclake.context import Engine


@dataclass(frozen=True)
class MartStatus:
    mart: str  # gold_database.name
    exists: bool
    rows: int | None = None
    last_refresh: str | None = None  # commit time of the last refresh (UTC)
    path: str | None = None  # incremental | full
    full_reason: str | None = None  # why the last refresh was full (keyed marts)
    silver_snapshots: str | None = None  # JSON {"database.table": snapshot id} the mart reflects
    silver_commits_behind: int | None = None  # silver commits since, over all tables it reads
    lag_seconds: float | None = None  # now - the oldest silver commit the mart does not reflect (0: current)
    consistent_at: str | None = None  # consistent marts: the source commit time computed at


def _utc(text: str) -> datetime:
    """Iceberg commit times read as text in the session's time zone, UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def mart_statuses(engine: Engine, now: datetime | None = None) -> list[MartStatus]:
    """One status per configured mart, read from the gold and silver Iceberg metadata tables."""
    now = now or datetime.now(UTC)
    statuses = []
    for mart in engine.config.gold.marts:
        target = mart_table(engine, mart)
        label = f"{target.database}.{target.name}"
        previous = last_refresh(engine.spark, target)
        if previous is None or not table_exists(engine.spark, target):
            statuses.append(MartStatus(label, exists=False))
            continue
        behind, oldest_missing = 0, None
        for name, table in mart_sources(engine, mart):
            reflected = previous.sources.get(name)
            if reflected is None or current_snapshot(engine.spark, table) is None:
                continue
            later = snapshots_after(engine.spark, table, reflected)
            behind += len(later)
            if later:
                first = _utc(later[0]["committed_at"])
                oldest_missing = first if oldest_missing is None else min(oldest_missing, first)
        statuses.append(
            MartStatus(
                mart=label,
                exists=True,
                rows=engine.spark.table(target.identifier).count(),
                last_refresh=_utc(previous.committed_at).isoformat(timespec="seconds"),
                path=previous.path,
                full_reason=previous.reason,
                silver_snapshots=json.dumps(previous.sources, sort_keys=True),
                silver_commits_behind=behind,
                lag_seconds=0.0 if oldest_missing is None else round((now - oldest_missing).total_seconds(), 1),
                consistent_at=previous.cut,
            )
        )
    return statuses


def mart_statuses_as_rows(statuses: Sequence[MartStatus]) -> tuple[list[str], list[list[Any]]]:
    columns = list(MartStatus.__dataclass_fields__)
    return columns, [list(asdict(s).values()) for s in statuses]
