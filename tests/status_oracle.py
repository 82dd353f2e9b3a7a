"""The status as it was before it read each database once: the baseline ``bench/status.py`` times and the oracle
``tests/spark/test_status_at_size.py`` compares ``cdclake.ops.status.table_statuses`` with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdclake.context import Engine
    from cdclake.ops.table_status import TableStatus


def per_table_statuses(engine: Engine, now: datetime | None = None) -> list[TableStatus]:
    """The status as it was before it read each database once (the baseline, kept verbatim but for imports): for each
    table, its existence, ledger, a row count, a snapshots query, a tombstone count and its history,
    each a catalog call or a Spark job of its own."""
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze
    from cdclake.engine.select import TableState, unloaded_load_files
    from cdclake.lake.history import HISTORY_SINCE_PROPERTY, history_of, history_started
    from cdclake.lake.journals import (
        QUARANTINE_ROWS_TABLE,
        QUARANTINE_TABLE,
        SCHEMA_CHANGES_TABLE,
        quarantined_files_by_table,
        tombstones_of,
    )
    from cdclake.lake.ledger import read_ledger
    from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY
    from cdclake.lake.tables import SilverTable, table_exists, table_property
    from cdclake.ops.status import _undeclared_columns
    from cdclake.ops.table_status import TableStatus, _behind, _lag, _unloaded, no_files_yet

    def history_note(table: Any, silver: Any, rows: int) -> str:
        if not table.history:
            return ""
        history = history_of(silver)
        if not history_started(engine.spark, history):
            return "history not started: starts from silver's rows with the next batch" if rows else ""
        since = table_property(engine.spark, history, HISTORY_SINCE_PROPERTY)
        return f"history since {since} (started from silver's rows; no versions before)" if since else ""

    def _journal_counts(engine: Engine, journal: str, time_column: str, detail: str) -> dict[str, tuple[int, Any]]:
        table = SilverTable(engine.catalog, engine.config.database, journal)
        if not table_exists(engine.spark, table):
            return {}
        rows = engine.spark.sql(
            f"SELECT silver_table, count(*) AS n, max_by({detail}, {time_column}) AS last "
            f"FROM {table.identifier} GROUP BY silver_table"
        ).collect()
        return {r["silver_table"]: (r["n"], r["last"]) for r in rows}

    now = now or datetime.now(UTC)
    schema_changes = _journal_counts(engine, SCHEMA_CHANGES_TABLE, "changed_at", "change")
    quarantined = _journal_counts(engine, QUARANTINE_TABLE, "quarantined_at", "reason")
    bad_rows = _journal_counts(engine, QUARANTINE_ROWS_TABLE, "quarantined_at", "reason")
    listing = list_bronze(engine.store, transaction_path=engine.config.bronze.transaction_path)
    held_keys = quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database)
    statuses = []
    for table in engine.config.tables:
        silver = engine.silver_table(table)
        name = f"{engine.config.database}.{table.target}"
        loads = listing.for_table(table.source_schema, table.source_table, FileKind.FULL_LOAD)
        cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
        arrived = listing.may_hold(table.source_schema, table.source_table)
        if not table_exists(engine.spark, silver):
            reason = no_files_yet(table, arrived, 0) or (
                f"not loaded: {len(loads)} full-load and {len(cdc)} CDC files in bronze"
            )
            statuses.append(TableStatus(table.source, name, exists=False, pending_files=len(cdc), behind=reason))
            continue
        ledger = read_ledger(engine.spark, silver)
        state = TableState(
            ledger.full_load_done, ledger.applied, frozenset(), ledger.loaded, cdc_since_load=ledger.cdc_applied
        )
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
                pending_files=max(waiting, 0),
                quarantined_rows=held_rows,
                unloaded_load_files=", ".join(f.name for f in unloaded_load_files(state, loads)),
                undeclared_columns=_undeclared_columns(
                    engine, table, [f for f in cdc if f.key in held_keys.get(table.target, ())]
                ),
                history_note=history_note(table, silver, rows),
                behind=no_files_yet(table, arrived, len(ledger.applied))
                or _behind(
                    table.source,
                    ledger.full_load_done,
                    bool(loads),
                    max(waiting, 0),
                    (held, last_reason),
                    (held_rows, last_row_reason),
                    _unloaded(table, state, loads),
                ),
            )
        )
    return statuses
