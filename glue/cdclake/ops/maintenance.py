"""Table maintenance in the serial lane: compaction, delete-file clean-up, snapshot expiry, orphan
files and tombstone retention, for every table cdclake writes. Run it between CDC batches, never
beside one (the state machine's maintenance step, or ``cdclake maintain`` locally).

* Each silver table: compaction that keeps its key layout, expiry, orphans, old tombstones.
* Its side tables (``__tombstones``, ``__history``): compaction, expiry and orphans alike; in
  history, first, the versions of one change recorded twice are dropped
  (``lake.history.drop_repeated_versions``: written before a change's place was its row index in
  its file).
* Once per run, the tables the silver tables share (the ledger archive ``cdclake_ledger``, the
  journals) and the gold marts: compaction (not the marts: a mart's newest commit records what
  it reflects), expiry and orphans.

Expiry follows the same rules everywhere (older than ``snapshot_retention_hours``, always the last
``retain_last_snapshots``) through Iceberg's ``expire_snapshots``, and orphan removal the same age
through ``remove_orphan_files``: neither removes a file a live snapshot references, and neither
changes a table's rows. Expiring snapshots would forget the applied-files ledger kept in their
summaries (silver's, and history's copy of it), so the entries of the snapshots about to expire are
archived first into ``cdclake_ledger``; a table whose full load was staged and never recorded as
done (a crash) keeps its snapshots until a run loads it. The archive's own expiry loses no row: its
rows are its current snapshot's. The snapshots a gold mart's last refresh reflected are kept, with
every one after them: its next refresh reads the changes since them (and ``cdclake status`` its
lag), and would otherwise recompute in full.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cdclake.columns import TOMBSTONE_DELETED_AT
from cdclake.config import TableConfig, gold_database
from cdclake.dms.horizon import pruned_before_after
from cdclake.identifiers import procedure_table
from cdclake.lake.history import drop_repeated_versions, history_of
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.journals import (
    DISMISSED_TABLE,
    PRUNED_BEFORE_PROPERTY,
    QUARANTINE_ROWS_TABLE,
    QUARANTINE_TABLE,
    SCHEMA_CHANGES_TABLE,
    VERIFY_TABLE,
    tombstones_of,
    tombstones_pruned_before,
)
from cdclake.lake.keep import snapshots_marts_read, snapshots_to_keep
from cdclake.lake.layout import apply_layout
from cdclake.lake.ledger import (
    LEDGER_ARCHIVE_TABLE,
    archive_ledger,
    expiring_snapshots,
)
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from cdclake.context import Engine

log = logging.getLogger("cdclake")

# The tables every silver table of a database shares, maintained once per run.
JOURNALS = (SCHEMA_CHANGES_TABLE, QUARANTINE_TABLE, QUARANTINE_ROWS_TABLE, DISMISSED_TABLE, VERIFY_TABLE)
SILVER, TOMBSTONES, HISTORY, LEDGER_ARCHIVE, JOURNAL, GOLD_MART = (
    "silver", "tombstones", "history", "ledger archive", "journal", "mart"
)  # fmt: skip


@dataclass(frozen=True)
class MaintenanceSettings:
    snapshot_retention_hours: int = 168  # expire snapshots older than this (time travel window)
    retain_last_snapshots: int = 10  # but always keep this many
    orphan_file_age_hours: int = 72  # remove unreferenced files older than this
    # Tombstones of deletes older than this are pruned; the cut is recorded on the tombstone table, and the CDC job
    # holds files written before it in quarantine (cdclake.dms.horizon) instead of reviving a deleted row.
    tombstone_retention_days: int = 7
    # Skip a table whose current snapshot is the one its last maintenance left (no commit since):
    # nothing to compact, and its snapshots and tombstones are no older than the rows they protect.
    # The Glue maintenance job skips them (it runs on a cadence over every table); `cdclake
    # maintain` does everything unless `--changed-only`.
    changed_only: bool = False


# The table property that records the snapshot a table's maintenance left it at.
MAINTAINED_SNAPSHOT_PROPERTY = "cdclake.maintained-snapshot-id"


@dataclass
class MaintenanceReport:
    """What maintenance did to one table: a silver table (``role`` silver, its side tables'
    reports in ``side_tables``), a side table or a shared one."""

    table: str  # a silver table: its source (schema.table); any other: database.name
    role: str  # silver | tombstones | history | ledger archive | journal | mart
    data_files_before: int = 0
    data_files_after: int = 0
    delete_files_before: int = 0
    delete_files_after: int = 0
    snapshots_expired: int = 0
    ledger_entries_archived: int = 0
    orphan_files_removed: int = 0
    tombstones_removed: int = 0
    repeated_versions_removed: int = 0  # history: versions of a change recorded twice (``drop_repeated_versions``)
    seconds: float = 0.0
    side_tables: list[MaintenanceReport] = field(default_factory=list)  # a silver table's tombstones and history
    unchanged: bool = False  # skipped: no commit since its last maintenance (``changed_only``)

    def summary(self) -> str:
        """One line: the files before and after, what expired and was removed, the time taken."""
        if self.unchanged:
            return (
                f"{self.table}{'' if self.role == SILVER else f' ({self.role})'}: unchanged since its last maintenance"
            )
        if self.role != SILVER:
            repeats = (
                f", repeated versions removed {self.repeated_versions_removed}"
                if self.repeated_versions_removed
                else ""
            )
            return (
                f"{self.table} ({self.role}): data files {self.data_files_before} -> {self.data_files_after}, "
                f"snapshots expired {self.snapshots_expired}, orphans removed {self.orphan_files_removed}{repeats} "
                f"({self.seconds:.1f}s)"
            )
        return (
            f"{self.table}: data files {self.data_files_before} -> {self.data_files_after}, "
            f"delete files {self.delete_files_before} -> {self.delete_files_after}, "
            f"snapshots expired {self.snapshots_expired}, orphans removed {self.orphan_files_removed}, "
            f"tombstones removed {self.tombstones_removed} ({self.seconds:.1f}s)"
        )


@dataclass
class MaintenanceRun:
    """One maintenance run: each silver table (with its side tables), then the shared tables and marts."""

    tables: list[MaintenanceReport]
    shared: list[MaintenanceReport]


def _file_counts(engine: Engine, table: SilverTable) -> tuple[int, int]:
    """(data files, delete files) of the current snapshot, from its summary (no Spark job)."""
    totals = ("total-data-files", "total-delete-files")
    current = IcebergTable.latest(engine.spark, table.identifier).current(totals)
    if current is None:
        return 0, 0
    return int(current.summary.get(totals[0], "0")), int(current.summary.get(totals[1], "0"))


def _snapshot_count(engine: Engine, table: SilverTable) -> int:
    return IcebergTable.latest(engine.spark, table.identifier).snapshot_count()


def _call(engine: Engine, procedure: str, arguments: str) -> list[object]:
    return list(engine.spark.sql(f"CALL {engine.catalog}.system.{procedure}({arguments})").collect())


def _procedure_name(table: SilverTable) -> str:
    return procedure_table(table.database, table.name)


def _pruned_before(engine: Engine, tombstones: SilverTable) -> datetime | None:
    return tombstones_pruned_before(engine.spark, tombstones)


def _record_pruned_before(engine: Engine, tombstones: SilverTable, now: datetime, retention_days: int) -> None:
    """Remember the cut: a CDC file written before it may revive a row whose tombstone is gone."""
    cut = pruned_before_after(_pruned_before(engine, tombstones), now, retention_days)
    engine.spark.sql(
        f"ALTER TABLE {tombstones.identifier} SET TBLPROPERTIES ('{PRUNED_BEFORE_PROPERTY}' = '{cut.isoformat()}')"
    )


def _mart_tables(engine: Engine) -> list[SilverTable]:
    gold = gold_database(engine.config)
    return [SilverTable(engine.catalog, gold, mart.name) for mart in engine.config.gold.marts]


def _expiry_cutoff(
    engine: Engine, table: SilverTable, now: datetime, settings: MaintenanceSettings, keep: frozenset[int]
) -> datetime:
    """Snapshots older than this expire: ``snapshot_retention_hours`` before ``now``, or earlier,
    at the oldest of ``table``'s snapshots in ``keep`` (that one and every later one stay)."""
    cutoff = now - timedelta(hours=settings.snapshot_retention_hours)
    if not keep:
        return cutoff
    found = IcebergTable.latest(engine.spark, table.identifier)
    kept = [found.snapshot(snapshot_id) for snapshot_id in keep]  # None: another table's
    times = [snapshot.timestamp_millis for snapshot in kept if snapshot is not None]
    if times:
        oldest = datetime.fromtimestamp(min(times) / 1000, UTC)
        if oldest < cutoff:
            log.info("snapshots kept table=%s since=%s: a gold mart reflects them", table.name, oldest.isoformat())
            return oldest
    return cutoff


def _expire(engine: Engine, table: SilverTable, cutoff: datetime, retain_last: int, on_driver: bool) -> int:
    """Expire ``table``'s snapshots older than ``cutoff`` but the last ``retain_last``; how many expired.

    ``on_driver``: through the Iceberg Java API (``Table.expireSnapshots``, the same core operation
    as the procedure, reading the expired snapshots' manifests on the driver: no Spark job, for the
    small tables beside silver); else the Spark procedure, which reads them in Spark jobs.
    """
    before = _snapshot_count(engine, table)
    if before <= retain_last:
        return 0
    # Whole seconds, rounded down: a snapshot committed at the cut-off itself stays.
    whole = cutoff.replace(microsecond=0)
    if on_driver:
        IcebergTable.latest(engine.spark, table.identifier).expire_snapshots(whole, retain_last)
    else:
        stamp = whole.strftime("%Y-%m-%d %H:%M:%S")
        arguments = (
            f"table => {_procedure_name(table)}, older_than => TIMESTAMP '{stamp}', retain_last => {retain_last}"
        )
        _call(engine, "expire_snapshots", arguments)
    return before - _snapshot_count(engine, table)


def _expire_snapshots(
    engine: Engine,
    table: SilverTable,
    now: datetime,
    settings: MaintenanceSettings,
    keep: frozenset[int],
    ledger: bool = True,
    on_driver: bool = False,
) -> tuple[int, int]:
    """Archive the ledger entries of the snapshots about to expire (``ledger``: the table's
    snapshots carry them), then expire them (``on_driver``: see ``_expire``): (entries archived, snapshots expired)."""
    cutoff = _expiry_cutoff(engine, table, now, settings, keep)
    archived = 0
    if ledger:
        expiring = expiring_snapshots(engine.spark, table, cutoff, settings.retain_last_snapshots)
        archived = archive_ledger(engine.spark, table, expiring)
    return archived, _expire(engine, table, cutoff, settings.retain_last_snapshots, on_driver)


def _holds_file_older_than(engine: Engine, table: SilverTable, cutoff: datetime) -> bool:
    """Whether a file under ``table``'s location is older than ``cutoff``: only such a file can be
    an orphan to remove. One listing through the table's FileIO, stopped at the first such file
    (a mature table's first page has one); True when the FileIO cannot list."""
    return IcebergTable.load(engine.spark, table.identifier).holds_file_created_before(engine.spark, cutoff)


def _remove_orphans(engine: Engine, table: SilverTable, now: datetime, settings: MaintenanceSettings) -> int:
    """Remove the files under ``table``'s location that no snapshot references and that are
    older than ``orphan_file_age_hours``; how many."""
    # Iceberg refuses an orphan cut-off under 24 hours before its own clock: a file that young may
    # belong to a commit in flight.
    cutoff = min(now - timedelta(hours=settings.orphan_file_age_hours), datetime.now(UTC) - timedelta(days=1))
    cutoff = cutoff.replace(microsecond=0)
    if not _holds_file_older_than(engine, table, cutoff):
        return 0  # a young table: Iceberg's procedure (Spark jobs) would find nothing
    stamp = cutoff.strftime("%Y-%m-%d %H:%M:%S")
    arguments = f"table => {_procedure_name(table)}, older_than => TIMESTAMP '{stamp}'"
    return len(_call(engine, "remove_orphan_files", arguments))


def _compact(engine: Engine, table: SilverTable, data_files: int, delete_files: int) -> None:
    """Bin-pack small files, applying merge-on-read deletes, and merge position delete files
    (each only when there is something to do: a procedure call costs Spark jobs even then)."""
    name = _procedure_name(table)
    if data_files > 1 or delete_files:
        compaction = "map('min-input-files', '2', 'delete-file-threshold', '1')"
        _call(engine, "rewrite_data_files", f"table => {name}, options => {compaction}")
    if _file_counts(engine, table)[1]:
        _call(engine, "rewrite_position_delete_files", f"table => {name}, options => map('rewrite-all', 'true')")


def _unchanged(engine: Engine, table: SilverTable) -> bool:
    """Whether ``table``'s current snapshot is the one its last maintenance recorded."""
    iceberg = IcebergTable.latest(engine.spark, table.identifier)
    current = iceberg.current_snapshot_id
    recorded = iceberg.property(MAINTAINED_SNAPSHOT_PROPERTY)
    return current is not None and recorded is not None and recorded == str(current)


def _record_maintained(engine: Engine, table: SilverTable) -> None:
    """Record the snapshot maintenance left ``table`` at (a metadata change: no snapshot made)."""
    iceberg = IcebergTable.latest(engine.spark, table.identifier)
    current = iceberg.current_snapshot_id
    if current is not None:
        iceberg.set_property(MAINTAINED_SNAPSHOT_PROPERTY, str(current))


def maintain_beside(
    engine: Engine,
    table: SilverTable,
    role: str,
    settings: MaintenanceSettings,
    now: datetime,
    keep: frozenset[int] = frozenset(),
) -> MaintenanceReport | None:
    """Maintain a table beside the silver tables (``role``: tombstones, history, ledger archive,
    journal or mart): compaction (not a mart's), expiry with its ledger archived, orphans. None
    when the table does not exist."""
    if not table_exists(engine.spark, table):
        return None
    started = time.monotonic()
    upkeep = MaintenanceReport(table=f"{table.database}.{table.name}", role=role)
    if settings.changed_only and _unchanged(engine, table):
        upkeep.unchanged = True
        return upkeep
    upkeep.data_files_before, delete_files = _file_counts(engine, table)
    if role != GOLD_MART:
        # A mart's newest commit records the snapshots it reflects; a compaction commit after it
        # could push it out of the retained ones. Marts are rewritten by their refreshes anyway.
        _compact(engine, table, upkeep.data_files_before, delete_files)
    # History's commits carry the batch's files like silver's (its ledger), kept the same way.
    expired = _expire_snapshots(engine, table, now, settings, keep, ledger=role == HISTORY, on_driver=True)
    upkeep.ledger_entries_archived, upkeep.snapshots_expired = expired
    upkeep.orphan_files_removed = _remove_orphans(engine, table, now, settings)
    upkeep.data_files_after = _file_counts(engine, table)[0]
    _record_maintained(engine, table)
    upkeep.seconds = time.monotonic() - started
    log.info(
        "maintained table=%s role=%s data_files=%d->%d snapshots_expired=%d orphans_removed=%d",
        upkeep.table, role, upkeep.data_files_before, upkeep.data_files_after, upkeep.snapshots_expired,
        upkeep.orphan_files_removed,
    )  # fmt: skip
    return upkeep


def _prune_tombstones(engine: Engine, tombstones: SilverTable, now: datetime, settings: MaintenanceSettings) -> int:
    """Delete the tombstones past their retention and record the cut; how many."""
    horizon = (now - timedelta(days=settings.tombstone_retention_days)).strftime("%Y-%m-%d %H:%M:%S.%f")
    before = engine.spark.table(tombstones.identifier).count()
    engine.spark.sql(f"DELETE FROM {tombstones.identifier} WHERE {TOMBSTONE_DELETED_AT} < '{horizon}'")
    removed = int(before - engine.spark.table(tombstones.identifier).count())
    if removed:
        _record_pruned_before(engine, tombstones, now, settings.tombstone_retention_days)
    return removed


def _compact_in_layout(engine: Engine, silver: SilverTable, table: TableConfig) -> None:
    """Rewrite the silver table's data files, in its key layout, and its position delete files."""
    name = _procedure_name(silver)
    # Compaction also applies merge-on-read deletes to the files it rewrites.
    compaction = "map('min-input-files', '2', 'delete-file-threshold', '1')"
    # Keyed tables keep their layout: the compaction sorts by the key (the table's sort order).
    apply_layout(engine.spark, silver.identifier, table.silver_key(), table.layout)
    strategy = "strategy => 'sort', " if table.layout == "sorted" else ""
    _call(engine, "rewrite_data_files", f"table => {name}, {strategy}options => {compaction}")
    _call(engine, "rewrite_position_delete_files", f"table => {name}, options => map('rewrite-all', 'true')")


def _drop_history_repeats(engine: Engine, history: SilverTable, table: TableConfig) -> int:
    """The versions history holds of one change twice, dropped (``lake.history.drop_repeated_versions``);
    how many (0: no history table)."""
    repeats = (
        drop_repeated_versions(engine.spark, history, table.silver_key()) if table_exists(engine.spark, history) else 0
    )
    if repeats:
        log.warning("history repeats removed table=%s versions=%d", table.source, repeats)
    return repeats


def maintain_table(
    engine: Engine,
    table: TableConfig,
    settings: MaintenanceSettings,
    now: datetime | None = None,
    keep: frozenset[int] | None = None,
) -> MaintenanceReport | None:
    """Maintain one silver table, its tombstones and its history; None when the table does not
    exist yet. ``keep``: the snapshot ids gold marts read (None: read them); what else stays is
    ``lake.keep``'s to say."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    keep = snapshots_marts_read(engine.spark, _mart_tables(engine)) if keep is None else keep
    silver = engine.silver_table(table)
    if not table_exists(engine.spark, silver):
        return None
    report = MaintenanceReport(table=table.source, role=SILVER)
    if settings.changed_only and _unchanged(engine, silver):
        # Its tombstones and history change only with its commits: they are unchanged too.
        report.unchanged = True
        return report
    report.data_files_before, report.delete_files_before = _file_counts(engine, silver)
    _compact_in_layout(engine, silver, table)
    kept = snapshots_to_keep(engine.spark, silver, keep)
    if not kept.silver_expires:
        log.warning("snapshots kept table=%s: its full load is unfinished; the next run loads it again", table.source)
    else:
        report.ledger_entries_archived, report.snapshots_expired = _expire_snapshots(
            engine, silver, now, settings, keep
        )
    report.orphan_files_removed = _remove_orphans(engine, silver, now, settings)
    tombstones = tombstones_of(silver)
    if table_exists(engine.spark, tombstones):
        report.tombstones_removed = _prune_tombstones(engine, tombstones, now, settings)
    history = history_of(silver)
    # Before its compaction, which then takes the repair's deletes in.
    repeats = _drop_history_repeats(engine, history, table)
    for side, role, side_keep in (
        (tombstones, TOMBSTONES, kept.marts_read),
        (history, HISTORY, kept.history),
    ):
        upkeep = maintain_beside(engine, side, role, settings, now, side_keep)
        if upkeep is not None:
            upkeep.repeated_versions_removed = repeats if role == HISTORY else 0
            report.side_tables.append(upkeep)
    report.data_files_after, report.delete_files_after = _file_counts(engine, silver)
    _record_maintained(engine, silver)
    report.seconds = time.monotonic() - started
    log.info(
        "maintained table=%s data_files=%d->%d delete_files=%d->%d snapshots_expired=%d tombstones_removed=%d",
        table.source, report.data_files_before, report.data_files_after, report.delete_files_before,
        report.delete_files_after, report.snapshots_expired, report.tombstones_removed,
    )  # fmt: skip
    return report


def shared_tables(engine: Engine) -> list[tuple[SilverTable, str]]:
    """The tables every silver table shares and the gold marts, with their roles: the ledger
    archive, the journals, then each configured mart."""
    catalog, database = engine.catalog, engine.config.database
    shared = [(SilverTable(catalog, database, LEDGER_ARCHIVE_TABLE), LEDGER_ARCHIVE)]
    shared += [(SilverTable(catalog, database, journal), JOURNAL) for journal in JOURNALS]
    shared += [(mart, GOLD_MART) for mart in _mart_tables(engine)]
    return shared


def maintain(
    engine: Engine,
    settings: MaintenanceSettings,
    tables: Sequence[TableConfig] | None = None,
    now: datetime | None = None,
) -> MaintenanceRun:
    """Maintain every configured (or the given) silver table that exists with its side tables,
    then the shared tables and the marts (after the silver tables: their expiry archives ledger
    entries into ``cdclake_ledger``)."""
    now = now or datetime.now(UTC)
    keep = snapshots_marts_read(engine.spark, _mart_tables(engine))
    reports = []
    for table in tables or engine.config.tables:
        report = maintain_table(engine, table, settings, now, keep)
        if report is not None:
            reports.append(report)
    shared = []
    for beside, role in shared_tables(engine):
        upkeep = maintain_beside(engine, beside, role, settings, now, keep)
        if upkeep is not None:
            shared.append(upkeep)
    return MaintenanceRun(reports, shared)
