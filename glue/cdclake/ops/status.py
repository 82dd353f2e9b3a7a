"""Per-table status and ad-hoc queries on the silver catalog (read-only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.dms.files import FileKind
from cdclake.dms.store import list_bronze
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE, SCHEMA_CHANGES_TABLE, tombstones_of
from cdclake.lake.ledger import LATEST_COMMIT_TS_PROPERTY, read_ledger
from cdclake.lake.tables import SilverTable, table_exists
from cdclake.ops.metrics import freshness_lag

if TYPE_CHECKING:
    from cdclake.context import Engine


@dataclass(frozen=True)
class TableStatus:
    source: str
    silver_table: str
    exists: bool
    rows: int | None = None
    snapshots: int | None = None
    files_applied: int | None = None
    last_applied_file: str | None = None
    latest_change: str | None = None  # newest source commit timestamp applied
    lag_seconds: float | None = None  # now - latest_change
    tombstones: int | None = None  # deleted keys remembered so late changes cannot revive them
    schema_changes: int = 0  # entries in cdclake_schema_changes
    last_schema_change: str | None = None
    quarantined_files: int = 0  # entries in cdclake_quarantine
    quarantined_rows: int = 0  # bad rows held in cdclake_quarantine_rows
    pending_files: int = 0  # CDC files in bronze neither applied nor held
    behind: str = ""  # why silver is not up to date with bronze, or "up to date"


def _lag(latest: str | None, now: datetime) -> float | None:
    """Freshness lag in seconds, to a tenth (None when the newest commit time is unknown)."""
    seconds = freshness_lag(latest, now)
    return None if seconds is None else round(seconds, 1)


def _journal_counts(engine: Engine, journal: str, time_column: str, detail: str) -> dict[str, tuple[int, Any]]:
    """Per silver table: how many journal entries, and the newest one's ``detail``."""
    table = SilverTable(engine.catalog, engine.config.database, journal)
    if not table_exists(engine.spark, table):
        return {}
    rows = engine.spark.sql(
        f"SELECT silver_table, count(*) AS n, max_by({detail}, {time_column}) AS last "
        f"FROM {table.identifier} GROUP BY silver_table"
    ).collect()
    return {r["silver_table"]: (r["n"], r["last"]) for r in rows}


def table_statuses(engine: Engine, now: datetime | None = None) -> list[TableStatus]:
    """One status per configured table, read from the Iceberg metadata tables and the journals."""
    now = now or datetime.now(UTC)
    schema_changes = _journal_counts(engine, SCHEMA_CHANGES_TABLE, "changed_at", "change")
    quarantined = _journal_counts(engine, QUARANTINE_TABLE, "quarantined_at", "reason")
    bad_rows = _journal_counts(engine, QUARANTINE_ROWS_TABLE, "quarantined_at", "reason")
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
    statuses = []
    for table in engine.config.tables:
        silver = engine.silver_table(table)
        name = f"{engine.config.database}.{table.target}"
        loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
        cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
        if not table_exists(engine.spark, silver):
            reason = f"not loaded: {len(loads)} full-load and {len(cdc)} CDC files in bronze" if loads or cdc else ""
            statuses.append(TableStatus(table.source, name, exists=False, pending_files=len(cdc), behind=reason))
            continue
        ledger = read_ledger(engine.spark, silver)
        held, last_reason = quarantined.get(table.target, (0, None))
        held_rows, last_row_reason = bad_rows.get(table.target, (0, None))
        pending = [f for f in cdc if f.key not in ledger.applied]
        waiting = len(pending) - held
        rows = engine.spark.table(silver.identifier).count()
        summary = engine.spark.sql(
            f"SELECT count(*) AS n, max(summary['{LATEST_COMMIT_TS_PROPERTY}']) AS latest "
            f"FROM {silver.metadata('snapshots')}"
        ).first()
        latest = summary["latest"] if summary else None
        tombstones = tombstones_of(silver)
        tombstone_count = (
            engine.spark.table(tombstones.identifier).select(*table.silver_key()).distinct().count()
            if table_exists(engine.spark, tombstones)
            else 0
        )
        changes, last_change = schema_changes.get(table.target, (0, None))
        statuses.append(
            TableStatus(
                source=table.source,
                silver_table=name,
                exists=True,
                rows=rows,
                snapshots=summary["n"] if summary else 0,
                files_applied=len(ledger.applied),
                last_applied_file=ledger.last_file,
                latest_change=latest,
                lag_seconds=_lag(latest, now),
                tombstones=tombstone_count,
                schema_changes=changes,
                last_schema_change=last_change,
                quarantined_files=held,
                quarantined_rows=held_rows,
                pending_files=max(waiting, 0),
                behind=_behind(
                    ledger.full_load_done,
                    bool(loads),
                    max(waiting, 0),
                    (held, last_reason),
                    (held_rows, last_row_reason),
                ),
            )
        )
    return statuses


def _behind(
    loaded: bool,
    has_loads: bool,
    waiting: int,
    files: tuple[int, str | None] = (0, None),
    rows: tuple[int, str | None] = (0, None),
) -> str:
    """Why a table is behind bronze, in one phrase (or "up to date"): ``files`` and ``rows`` held
    in quarantine, each with the newest one's reason."""
    held, last_reason = files
    held_rows, last_row_reason = rows
    reasons = []
    if not loaded and has_loads:
        reasons.append("full load not applied")
    if waiting:
        reasons.append(f"{waiting} CDC file(s) not applied yet")
    if held:
        reasons.append(f"{held} file(s) held in quarantine (last: {last_reason}); `cdclake replay --quarantined`")
    if held_rows:
        reasons.append(
            f"{held_rows} row(s) held in quarantine (last: {last_row_reason}); fix them in bronze, then "
            "`cdclake replay --quarantined`"
        )
    return "; ".join(reasons) or "up to date"


def statuses_as_rows(statuses: Sequence[TableStatus]) -> tuple[list[str], list[list[Any]]]:
    columns = list(asdict(statuses[0]).keys()) if statuses else list(TableStatus.__dataclass_fields__)
    return columns, [list(asdict(s).values()) for s in statuses]
