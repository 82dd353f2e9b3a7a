"""What a run leaves, in a form two runs can be compared by (the driver and the Spark path of
``engine.prepare`` must leave the same): every table's silver, history and tombstones, the
quarantine journals, and the run's table reports without their times."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cdclake.context import Engine
from cdclake.lake.history import history_of
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE, tombstones_of
from cdclake.report import RunReport, TableReport

# Columns that say when a run wrote a row, not what it holds.
_WRITE_TIMES = ("deleted_at", "valid_from", "valid_to", "quarantined_at", "held_at", "noted_at")


def run_state(engine: Engine) -> dict[str, Any]:
    """Every row of the tables a run writes, by table and part, each part sorted."""
    spark, state = engine.spark, {}
    parts: dict[str, str] = {}
    for table in engine.config.tables:
        silver = engine.silver_table(table)
        parts[f"{table.source} silver"] = silver.identifier
        parts[f"{table.source} tombstones"] = tombstones_of(silver).identifier
        if table.history:
            parts[f"{table.source} history"] = history_of(silver).identifier
    for journal in (QUARANTINE_TABLE, QUARANTINE_ROWS_TABLE):
        parts[journal] = f"silver.{engine.config.database}.{journal}"
    for part, identifier in parts.items():
        rows = spark.table(identifier).collect() if spark.catalog.tableExists(identifier) else []
        kept = [{k: v for k, v in r.asDict().items() if k not in _WRITE_TIMES} for r in rows]
        state[part] = sorted(kept, key=repr)
    return state


def table_reports(report: RunReport) -> list[TableReport]:
    """The run's table reports without the time each took, in a fixed order."""
    return sorted((replace(t, seconds=0.0) for t in report.tables), key=repr)
