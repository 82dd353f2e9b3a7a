"""`cdclake status` at database size: 40 small tables, the per-table status (before issue 35) vs now.

    .venv/bin/python -m bench.status --tables 40        # make bench-status

Both sides answer for the same tables in the same session, so the ratio holds on a loaded machine.
The tables go through the engine's real entry points: a full load, then CDC files with deletes
(merge-on-read delete files and tombstones, so row counts are not free from metadata). The old
side, ``per_table_statuses``, is the status as it was: six to eight Spark jobs per table; the
new one is ``cdclake.ops.status.table_statuses``. Each side's answer is checked equal to the other's.
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.many_tables import ManyTables, generate, table_engine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.context import Engine
    from cdclake.ops.status import TableStatus

log = logging.getLogger("bench")


def per_table_statuses(engine: Engine, now: datetime | None = None) -> list[TableStatus]:
    """The status as it was before issue 35 (the baseline, kept verbatim but for imports): for each
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
    from cdclake.lake.ledger import LATEST_COMMIT_TS_PROPERTY, read_ledger
    from cdclake.lake.tables import table_exists, table_property
    from cdclake.ops.status import (
        TableStatus,
        _behind,
        _journal_counts,
        _lag,
        _undeclared_columns,
        _unloaded,
        no_files_yet,
    )

    def history_note(table: Any, silver: Any, rows: int) -> str:
        if not table.history:
            return ""
        history = history_of(silver)
        if not history_started(engine.spark, history):
            return "history not started: starts from silver's rows with the next batch" if rows else ""
        since = table_property(engine.spark, history, HISTORY_SINCE_PROPERTY)
        return f"history since {since} (started from silver's rows; no versions before)" if since else ""

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
        state = TableState(ledger.full_load_done, ledger.applied, frozenset(), ledger.loaded)
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


def measure(spark: SparkSession, work: Path, tables: int, reps: int = 3) -> dict[str, Any]:
    """Build ``tables`` tables (full load + CDC), then time both statuses ``reps`` times, alternating."""
    from cdclake.engine.run import apply_cdc_files, full_load
    from cdclake.ops.status import table_statuses

    data = work / "status"
    shutil.rmtree(data, ignore_errors=True)
    _, many = generate(spark, data, ManyTables(tables, rows=tables * 200, changes=tables * 40, files_per_table=2))
    engine = table_engine(spark, many, tables, "status_bench")
    full_load(engine).checked()
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze

    apply_cdc_files(engine, [f for f in list_bronze(engine.store).files if f.kind is FileKind.CDC]).checked()
    now = datetime.now(UTC)
    timings: dict[str, list[float]] = {"per table (before)": [], "now": []}
    answers: dict[str, list[TableStatus]] = {}
    for _ in range(reps):
        for side, status in (("per table (before)", per_table_statuses), ("now", table_statuses)):
            started = time.perf_counter()
            answers[side] = status(engine, now)
            timings[side].append(time.perf_counter() - started)
            log.info("status %-20s %d tables %6.2f s", side, tables, timings[side][-1])
    if answers["now"] != answers["per table (before)"]:
        raise AssertionError("the two statuses differ")
    best = {side: min(times) for side, times in timings.items()}
    return {
        "tables": tables,
        "seconds": {side: round(seconds, 2) for side, seconds in best.items()},
        "ratio": round(best["per table (before)"] / best["now"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-status")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.workdir, args.tables, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
