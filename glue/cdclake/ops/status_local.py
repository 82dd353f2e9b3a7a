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
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdclake.columns import TOMBSTONE_SUFFIX
from cdclake.config import DEFAULT_CATALOG, PipelineConfig, TableConfig
from cdclake.dms.files import BronzeListing
from cdclake.dms.store import BronzeStore, list_bronze
from cdclake.lake.counts import Count, TableFiles, count_all
from cdclake.lake.cuts import CUTS_TABLE, PublishedCut, latest_local_cut
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE, SCHEMA_CHANGES_TABLE
from cdclake.lake.ledger import LEDGER_ARCHIVE_TABLE, LedgerState, ledger_state
from cdclake.lake.ledger_record import lineage_entries, newest_commit_ts
from cdclake.lake.local_tables import LocalTable, LocalWarehouse
from cdclake.lake.tables import SilverTable
from cdclake.ops.table_status import (
    Journals,
    SilverReading,
    TableStatus,
    absent_status,
    existing_status,
    held_by_capture,
    held_files,
    stray_status,
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
        journals=Journals(
            schema_changes=_journal_counts(tables.get(SCHEMA_CHANGES_TABLE), "changed_at", "change"),
            quarantined=_journal_counts(tables.get(QUARANTINE_TABLE), "quarantined_at", "reason"),
            bad_rows=_journal_counts(tables.get(QUARANTINE_ROWS_TABLE), "quarantined_at", "reason"),
            held_keys=_held_keys(tables.get(QUARANTINE_TABLE)),
        ),
        archive=_archive(tables.get(LEDGER_ARCHIVE_TABLE)),
        counts=_counts(config, tables),
    )
    listing = list_bronze(store, transaction_path=config.bronze.transaction_path)
    statuses = [_status_of(config, store, listing, table, facts, now) for table in config.tables]
    statuses = [held_by_capture(s, holds[s.source]) if s.source in holds else s for s in statuses]
    return statuses + [_stray(database, name, tables.get(name)) for name in stray_tables(config, existing)]


@dataclass(frozen=True)
class _Facts:
    existing: frozenset[str]
    tables: Mapping[str, LocalTable]
    journals: Journals
    archive: Mapping[str, Sequence[Mapping[str, Any]]]
    counts: Mapping[tuple[str, str], int]  # ("rows" | "tombstones", target) -> count (``_counts``)


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
    """``lake.ledger.read_ledger`` of a local table: the same walk (``ledger_state``) of its lineage,
    then the archived entries of expired snapshots (``archived``: the table's rows of
    ``cdclake_ledger``). tests/spark/test_status_without_jvm.py keeps it equal to the Spark path's."""
    return ledger_state(lineage_entries(table.lineage()), lambda: archived)


def _status_of(
    config: PipelineConfig,
    store: BronzeStore,
    listing: BronzeListing,
    table: TableConfig,
    facts: _Facts,
    now: datetime,
) -> TableStatus:
    name = f"{config.database}.{table.target}"
    silver = facts.tables.get(table.target)
    if silver is None:
        return absent_status(table, name, listing)
    snapshots = silver.snapshots()
    rows = silver.exact_rows()
    reading = SilverReading(
        ledger=read_local_ledger(silver, facts.archive.get(table.target, ())),
        rows=rows if rows is not None else facts.counts[("rows", table.target)],
        snapshots=len(snapshots),
        latest_change=newest_commit_ts(snapshots),
        tombstones=facts.counts.get(("tombstones", table.target), 0),
    )  # history's lag and note: tables with history take the Spark path (needs_spark)
    status = existing_status(table, name, listing, facts.journals, reading, now)
    held_here = held_files(table, listing, facts.journals)
    return replace(status, undeclared_columns=undeclared_columns(config, store, table, held_here))


def _counts(config: PipelineConfig, tables: Mapping[str, LocalTable]) -> dict[tuple[str, str], int]:
    """The counts the configured tables' metadata does not say, read at once (``lake.counts.count_all``):
    ``("rows", target)``, a table's live rows where delete files apply; ``("tombstones", target)``,
    the distinct keys its tombstones hold, where it has any."""
    wanted: dict[tuple[str, str], Count] = {}
    for table in config.tables:
        silver = tables.get(table.target)
        if silver is None:
            continue
        if silver.exact_rows() is None:
            wanted[("rows", table.target)] = Count(_countable(silver, f"{config.database}.{table.target}"))
        kept = tables.get(f"{table.target}{TOMBSTONE_SUFFIX}")
        if kept is not None and kept.exact_rows() != 0:
            files = _countable(kept, f"{table.target} tombstones")
            wanted[("tombstones", table.target)] = Count(files, tuple(table.silver_key()))
    return dict(zip(wanted, count_all(list(wanted.values())), strict=True))


def _countable(table: LocalTable, name: str) -> TableFiles:
    files = table.files()
    if not files.counted_here:
        raise NeedsSpark(f"{name}: equality deletes")
    return files


def _stray(database: str, name: str, table: LocalTable | None) -> TableStatus:
    """``ops.status._stray`` from the table's metadata file."""
    return stray_status(SilverTable(DEFAULT_CATALOG, database, name), None if table is None else table.exact_rows())
