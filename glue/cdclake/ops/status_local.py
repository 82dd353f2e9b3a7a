"""``cdclake status`` on a local warehouse with no JVM: the same ``TableStatus`` list as
``ops.status.table_statuses``, read from the tables' metadata files and, where rows are needed (the
journals, the ledger archive, row counts with delete files, tombstone keys), by pyiceberg.

A cold command pays 8-14 s to start Spark; this path answers in about a second. It answers only
where it says exactly what the Spark path says, and returns None (the caller starts Spark) for:

- a table with ``history: true``: its history lag reads silver's lineage against the history's
  recorded snapshot through ledger functions that take a Spark session (``engine.history_sync``);
- a table whose row count needs equality deletes applied (cdclake writes none; a foreign writer may);
- gold marts (``gold.status`` reads their refresh commits through the engine): the caller checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdclake.columns import TOMBSTONE_SUFFIX
from cdclake.config import DEFAULT_CATALOG, PipelineConfig, TableConfig
from cdclake.dms.files import FileKind
from cdclake.dms.store import BronzeStore, list_bronze
from cdclake.engine.select import TableState, unloaded_load_files
from cdclake.lake.counts import distinct_keys, live_rows
from cdclake.lake.cuts import CUTS_TABLE, PublishedCut, latest_local_cut
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE, SCHEMA_CHANGES_TABLE
from cdclake.lake.ledger import (
    CHECKPOINT_PROPERTY,
    KIND_CDC,
    KIND_FULL_LOAD,
    KIND_FULL_LOAD_STAGED,
    LEDGER_ARCHIVE_TABLE,
    AppliedKeys,
    LedgerCheckpoint,
    LedgerRecord,
    LedgerState,
    LoadedFile,
    newest_commit_ts,
)
from cdclake.lake.local_tables import LocalTable, LocalWarehouse
from cdclake.lake.tables import SilverTable
from cdclake.ops.status import (
    NOT_CONFIGURED,
    TableStatus,
    _behind,
    _held,
    _lag,
    _unloaded,
    no_files_yet,
    stray_tables,
    undeclared_columns,
)


class NeedsSpark(Exception):
    """A piece of this status that only the Spark path reads exactly."""


def needs_spark(config: PipelineConfig) -> str | None:
    """Why ``config``'s status needs Spark before anything is read (None: it does not)."""
    if config.gold.marts:
        return "gold marts are configured"
    if any(t.history for t in config.tables):
        return "a table keeps history (its lag is read through Spark)"
    return None


def local_table_statuses(
    config: PipelineConfig,
    store: BronzeStore,
    warehouse: Path,
    now: datetime | None = None,
    capture_holds: Mapping[str, str] | None = None,
) -> list[TableStatus] | None:
    """``table_statuses`` of ``config`` on the local warehouse ``warehouse``, with no JVM; None where
    a piece needs Spark (the module's docstring says which)."""
    if needs_spark(config):
        return None
    try:
        return _statuses(config, store, LocalWarehouse(warehouse), now or datetime.now(UTC), capture_holds or {})
    except NeedsSpark:
        return None


def local_cut(config: PipelineConfig, warehouse: Path) -> PublishedCut | None:
    """``lake.cuts.latest_cut`` of ``config``'s database on the local warehouse ``warehouse``, with no JVM."""
    return latest_local_cut(LocalWarehouse(warehouse).table(config.database, CUTS_TABLE))


def _statuses(
    config: PipelineConfig, store: BronzeStore, warehouse: LocalWarehouse, now: datetime, holds: Mapping[str, str]
) -> list[TableStatus]:
    database = config.database
    existing = warehouse.table_names(database)
    tables = {name: t for name in existing if (t := warehouse.table(database, name)) is not None}
    facts = _Facts(
        existing=frozenset(existing),
        tables=tables,
        schema_changes=_journal_counts(tables.get(SCHEMA_CHANGES_TABLE), "changed_at", "change"),
        quarantined=_journal_counts(tables.get(QUARANTINE_TABLE), "quarantined_at", "reason"),
        bad_rows=_journal_counts(tables.get(QUARANTINE_ROWS_TABLE), "quarantined_at", "reason"),
        held_keys=_held_keys(tables.get(QUARANTINE_TABLE)),
        archive=_archive(tables.get(LEDGER_ARCHIVE_TABLE)),
    )
    listing = list_bronze(store, transaction_path=config.bronze.transaction_path)
    statuses = [_status_of(config, store, listing, table, facts, now) for table in config.tables]
    statuses = [_held(s, holds[s.source]) if s.source in holds else s for s in statuses]
    return statuses + [_stray(database, name, tables.get(name)) for name in stray_tables(config, existing)]


@dataclass(frozen=True)
class _Facts:
    existing: frozenset[str]
    tables: Mapping[str, LocalTable]
    schema_changes: dict[str, tuple[int, Any]]
    quarantined: dict[str, tuple[int, Any]]
    bad_rows: dict[str, tuple[int, Any]]
    held_keys: Mapping[str, frozenset[str]]
    archive: Mapping[str, Sequence[Mapping[str, Any]]]


def _filled(table: LocalTable | None) -> bool:
    """Whether a shared table exists and may hold rows (its metadata does not say it is empty)."""
    return table is not None and table.exact_rows() != 0


def _rows(table: LocalTable, columns: Sequence[str]) -> list[dict[str, Any]]:
    if not table.files().counted_here:
        raise NeedsSpark(f"{table.metadata_location}: equality deletes")
    return table.rows(columns)


def _journal_counts(journal: LocalTable | None, time_column: str, detail: str) -> dict[str, tuple[int, Any]]:
    """Per silver table: how many journal entries, and the newest one's ``detail`` (Spark's
    ``count(*)`` and ``max_by(detail, time_column)``: nulls in ``time_column`` are skipped)."""
    if journal is None or not _filled(journal):
        return {}
    counts: dict[str, int] = {}
    newest: dict[str, tuple[Any, Any]] = {}
    for row in _rows(journal, ("silver_table", time_column, detail)):
        name = row["silver_table"]
        counts[name] = counts.get(name, 0) + 1
        at = row[time_column]
        if at is not None and (name not in newest or at > newest[name][0]):
            newest[name] = (at, row[detail])
    return {name: (n, newest[name][1] if name in newest else None) for name, n in counts.items()}


def _held_keys(journal: LocalTable | None) -> dict[str, frozenset[str]]:
    if journal is None or not _filled(journal):
        return {}
    held: dict[str, set[str]] = {}
    for row in _rows(journal, ("silver_table", "file_key")):
        held.setdefault(row["silver_table"], set()).add(row["file_key"])
    return {name: frozenset(keys) for name, keys in held.items()}


def _archive(archive: LocalTable | None) -> dict[str, list[dict[str, Any]]]:
    if archive is None or not _filled(archive):
        return {}
    columns = [f["name"] for f in _schema_fields(archive)]
    entries: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(archive, columns):
        entries.setdefault(row["silver_table"], []).append(row)
    return entries


def _schema_fields(table: LocalTable) -> list[dict[str, Any]]:
    schemas = table.metadata.get("schemas") or [table.metadata.get("schema")]
    wanted = table.metadata.get("current-schema-id")
    schema = next((s for s in schemas if s.get("schema-id") == wanted), schemas[-1])
    return list(schema["fields"])


def read_local_ledger(table: LocalTable, archived: Iterable[Mapping[str, Any]]) -> LedgerState:
    """``lake.ledger.read_ledger`` of a local table: its lineage back to the newest checkpoint or the
    last full load, then the archived entries of expired snapshots (``archived``: the table's rows of
    ``cdclake_ledger``). tests/spark/test_status_without_jvm.py keeps it equal to the Spark path's."""
    applied: set[str] = set()
    loaded: dict[str, LoadedFile] = {}
    last_file: str | None = None
    full_load_done = False
    cdc_seen = False
    head: int | None = None
    for snapshot in table.lineage():
        head = snapshot.snapshot_id if head is None else head
        record = LedgerRecord.from_summary(snapshot.summary)
        kind = None if record is None else record.kind
        recorded = () if record is None else record.files
        if kind == KIND_FULL_LOAD_STAGED:
            return LedgerState(False, AppliedKeys.of(applied), last_file, snapshot_id=head)
        applied.update(f.key for f in recorded)
        if last_file is None and recorded:
            last_file = max(f.key for f in recorded)
        cdc_seen = cdc_seen or (kind == KIND_CDC and bool(recorded))
        checkpoint = LedgerCheckpoint.from_summary(snapshot.summary.get(CHECKPOINT_PROPERTY))
        if checkpoint is not None:
            return LedgerState(
                checkpoint.full_load_done,
                checkpoint.applied | applied,
                last_file,
                checkpoint.loaded,
                snapshot_id=head,
                cdc_applied=checkpoint.cdc_applied or cdc_seen,
            )
        if kind == KIND_FULL_LOAD:
            loaded = {f.key: f for f in recorded}
            full_load_done = True
            break
    if not full_load_done:
        for entry in archived:
            full_load_done = full_load_done or entry["kind"] == KIND_FULL_LOAD
            if entry["file_key"]:
                applied.add(entry["file_key"])
                if entry["kind"] == KIND_FULL_LOAD:
                    loaded[entry["file_key"]] = LoadedFile(
                        entry["file_key"], entry.get("file_size"), entry.get("file_version") or None
                    )
    cdc_applied = bool(applied - loaded.keys())
    return LedgerState(
        full_load_done, AppliedKeys.of(applied), last_file, loaded, snapshot_id=head, cdc_applied=cdc_applied
    )


def _status_of(
    config: PipelineConfig,
    store: BronzeStore,
    listing: Any,
    table: TableConfig,
    facts: _Facts,
    now: datetime,
) -> TableStatus:
    name = f"{config.database}.{table.target}"
    loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    arrived = listing.may_hold(table.source_schema, table.source_table)
    silver = facts.tables.get(table.target)
    if silver is None:
        reason = (
            no_files_yet(table, arrived, 0) or f"not loaded: {len(loads)} full-load and {len(cdc)} CDC files in bronze"
        )
        return TableStatus(table.source, name, exists=False, pending_files=len(cdc), behind=reason)
    snapshots = silver.snapshots()
    latest = newest_commit_ts(snapshots)
    ledger = read_local_ledger(silver, facts.archive.get(table.target, ()))
    state = TableState(ledger.full_load_done, ledger.applied, frozenset(), ledger.loaded)
    held, last_reason = facts.quarantined.get(table.target, (0, None))
    held_rows, last_row_reason = facts.bad_rows.get(table.target, (0, None))
    waiting = max(len([f for f in cdc if f.key not in ledger.applied]) - held, 0)
    rows = silver.exact_rows()
    if rows is None:
        files = silver.files()
        if not files.counted_here:
            raise NeedsSpark(f"{name}: equality deletes")
        rows = live_rows(files)
    changes, last_change = facts.schema_changes.get(table.target, (0, None))
    held_here = [f for f in cdc if f.key in facts.held_keys.get(table.target, ())]
    behind = no_files_yet(table, arrived, len(ledger.applied)) or _behind(
        table.source,
        ledger.full_load_done,
        bool(loads),
        waiting,
        (held, last_reason),
        (held_rows, last_row_reason),
        _unloaded(table, state, loads),
        None,
    )
    return TableStatus(
        source=table.source,
        silver_table=name,
        exists=True,
        rows=rows,
        snapshots=len(snapshots),
        files_applied=len(ledger.applied),
        last_applied_file=ledger.last_file,
        latest_change=latest,
        lag_seconds=_lag(latest, now),
        tombstones=_tombstones(table, facts),
        schema_changes=changes,
        last_schema_change=last_change,
        quarantined_files=held,
        pending_files=waiting,
        quarantined_rows=held_rows,
        unloaded_load_files=", ".join(f.name for f in unloaded_load_files(state, loads)),
        undeclared_columns=undeclared_columns(config, store, table, held_here),
        history_note="",  # tables with history take the Spark path (needs_spark)
        behind=behind,
    )


def _tombstones(table: TableConfig, facts: _Facts) -> int:
    kept = facts.tables.get(f"{table.target}{TOMBSTONE_SUFFIX}")
    if kept is None or kept.exact_rows() == 0:
        return 0
    files = kept.files()
    if not files.counted_here:
        raise NeedsSpark(f"{table.target} tombstones: equality deletes")
    return distinct_keys(files, table.silver_key())


def _stray(database: str, name: str, table: LocalTable | None) -> TableStatus:
    """``ops.status._stray`` from the table's metadata file."""
    identifier = SilverTable(DEFAULT_CATALOG, database, name).identifier
    return TableStatus(
        name,
        f"{database}.{name}",
        exists=True,
        rows=None if table is None else table.exact_rows(),
        behind=f"{NOT_CONFIGURED}: no configured table writes this silver table (a renamed or mistyped table's "
        f"leftover?); drop it once you are sure: DROP TABLE {identifier}",
        not_configured=NOT_CONFIGURED,
    )
