"""Table maintenance in the serial lane: compaction, delete-file clean-up, snapshot expiry, orphan
files and tombstone retention. Run it between CDC batches, never beside one (the state machine's
maintenance step, or ``cdclake maintain`` locally).

Expiring snapshots would forget the applied-files ledger kept in their summaries, so the entries
of the snapshots about to expire are archived first into ``cdclake_ledger``; a table whose full
load was staged and never recorded as done (a crash) keeps its snapshots until a run loads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cdclake.columns import TOMBSTONE_DELETED_AT
from cdclake.config import TableConfig
from cdclake.dms.horizon import pruned_before_after
from cdclake.identifiers import procedure_table
from cdclake.lake.journals import PRUNED_BEFORE_PROPERTY, tombstones_of, tombstones_pruned_before
from cdclake.lake.layout import apply_layout
from cdclake.lake.ledger import archive_ledger, expiring_snapshots, full_load_unfinished
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from cdclake.context import Engine

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class MaintenanceSettings:
    snapshot_retention_hours: int = 168  # expire snapshots older than this (time travel window)
    retain_last_snapshots: int = 10  # but always keep this many
    orphan_file_age_hours: int = 72  # remove unreferenced files older than this
    # Tombstones of deletes older than this are pruned; the cut is recorded on the tombstone table, and the CDC job
    # holds files written before it in quarantine (cdclake.dms.horizon) instead of reviving a deleted row.
    tombstone_retention_days: int = 7


@dataclass
class MaintenanceReport:
    table: str
    data_files_before: int = 0
    data_files_after: int = 0
    delete_files_before: int = 0
    delete_files_after: int = 0
    snapshots_expired: int = 0
    ledger_entries_archived: int = 0
    orphan_files_removed: int = 0
    tombstones_removed: int = 0
    seconds: float = 0.0


def _file_counts(engine: Engine, table: SilverTable) -> tuple[int, int]:
    """(data files, delete files) of the current snapshot."""
    rows = engine.spark.sql(f"SELECT content, count(*) AS n FROM {table.metadata('files')} GROUP BY content").collect()
    counts = {r["content"]: r["n"] for r in rows}
    return counts.get(0, 0), counts.get(1, 0) + counts.get(2, 0)


def _snapshot_count(engine: Engine, table: SilverTable) -> int:
    return int(engine.spark.table(table.metadata("snapshots")).count())


def _call(engine: Engine, procedure: str, arguments: str) -> list[object]:
    return list(engine.spark.sql(f"CALL {engine.catalog}.system.{procedure}({arguments})").collect())


def _pruned_before(engine: Engine, tombstones: SilverTable) -> datetime | None:
    return tombstones_pruned_before(engine.spark, tombstones)


def _record_pruned_before(engine: Engine, tombstones: SilverTable, now: datetime, retention_days: int) -> None:
    """Remember the cut: a CDC file written before it may revive a row whose tombstone is gone."""
    cut = pruned_before_after(_pruned_before(engine, tombstones), now, retention_days)
    engine.spark.sql(
        f"ALTER TABLE {tombstones.identifier} SET TBLPROPERTIES ('{PRUNED_BEFORE_PROPERTY}' = '{cut.isoformat()}')"
    )


def _expire_snapshots(
    engine: Engine,
    silver: SilverTable,
    name: str,
    now: datetime,
    settings: MaintenanceSettings,
    report: MaintenanceReport,
) -> None:
    """Archive the ledger entries of the snapshots about to expire, then expire them."""
    cutoff = now - timedelta(hours=settings.snapshot_retention_hours)
    expiring = expiring_snapshots(engine.spark, silver, cutoff, settings.retain_last_snapshots)
    report.ledger_entries_archived = archive_ledger(engine.spark, silver, expiring)
    stamp = cutoff.strftime("%Y-%m-%d %H:%M:%S")
    before = _snapshot_count(engine, silver)
    retain = settings.retain_last_snapshots
    _call(engine, "expire_snapshots", f"table => {name}, older_than => TIMESTAMP '{stamp}', retain_last => {retain}")
    report.snapshots_expired = before - _snapshot_count(engine, silver)


def maintain_table(
    engine: Engine, table: TableConfig, settings: MaintenanceSettings, now: datetime | None = None
) -> MaintenanceReport | None:
    """Maintain one silver table and its tombstones; None when the table does not exist yet."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    silver = engine.silver_table(table)
    if not table_exists(engine.spark, silver):
        return None
    report = MaintenanceReport(table=table.source)
    name = procedure_table(engine.config.database, table.target)
    report.data_files_before, report.delete_files_before = _file_counts(engine, silver)
    # Compaction also applies merge-on-read deletes to the files it rewrites.
    compaction = "map('min-input-files', '2', 'delete-file-threshold', '1')"
    # Keyed tables keep their layout: the compaction sorts by the key (the table's sort order).
    apply_layout(engine.spark, silver.identifier, table.silver_key(), table.layout)
    strategy = "strategy => 'sort', " if table.layout == "sorted" else ""
    _call(engine, "rewrite_data_files", f"table => {name}, {strategy}options => {compaction}")
    _call(engine, "rewrite_position_delete_files", f"table => {name}, options => map('rewrite-all', 'true')")
    if full_load_unfinished(engine.spark, silver):
        # Expiring the staged load's snapshot would archive the old load's ledger past it, and
        # the archive would then call the half-finished load done.
        log.warning("snapshots kept table=%s: its full load is unfinished; the next run loads it again", table.source)
    else:
        _expire_snapshots(engine, silver, name, now, settings, report)
    # Iceberg refuses an orphan cut-off under 24 hours before its own clock: a file that young may
    # belong to a commit in flight.
    orphan_cutoff = min(now - timedelta(hours=settings.orphan_file_age_hours), datetime.now(UTC) - timedelta(days=1))
    orphan_stamp = orphan_cutoff.strftime("%Y-%m-%d %H:%M:%S")
    removed = _call(engine, "remove_orphan_files", f"table => {name}, older_than => TIMESTAMP '{orphan_stamp}'")
    report.orphan_files_removed = len(removed)
    tombstones = tombstones_of(silver)
    if table_exists(engine.spark, tombstones):
        horizon = (now - timedelta(days=settings.tombstone_retention_days)).strftime("%Y-%m-%d %H:%M:%S.%f")
        before = engine.spark.table(tombstones.identifier).count()
        engine.spark.sql(f"DELETE FROM {tombstones.identifier} WHERE {TOMBSTONE_DELETED_AT} < '{horizon}'")
        report.tombstones_removed = before - engine.spark.table(tombstones.identifier).count()
        if report.tombstones_removed:
            _record_pruned_before(engine, tombstones, now, settings.tombstone_retention_days)
    report.data_files_after, report.delete_files_after = _file_counts(engine, silver)
    report.seconds = time.monotonic() - started
    log.info(
        "maintained table=%s data_files=%d->%d delete_files=%d->%d snapshots_expired=%d tombstones_removed=%d",
        table.source, report.data_files_before, report.data_files_after, report.delete_files_before,
        report.delete_files_after, report.snapshots_expired, report.tombstones_removed,
    )  # fmt: skip
    return report


def maintain(
    engine: Engine,
    settings: MaintenanceSettings,
    tables: Sequence[TableConfig] | None = None,
    now: datetime | None = None,
) -> list[MaintenanceReport]:
    """Maintain every configured (or the given) table that exists."""
    reports = []
    for table in tables or engine.config.tables:
        report = maintain_table(engine, table, settings, now)
        if report is not None:
            reports.append(report)
    return reports
