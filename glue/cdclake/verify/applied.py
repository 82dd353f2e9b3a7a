"""How far silver has applied one table, for verify against a live source (``verify.live``): the newest source
commit it applied (``lake.ledger_record.newest_commit_ts``) and its CDC files in bronze neither
applied nor held in quarantine. Table metadata and a bronze listing of the table's folder; no Spark job but the
quarantine journal's read, when it holds rows. Kept apart from ``ops.status`` so the verify Glue job reaches no
local-only reader (``lake.counts`` reads a local warehouse with pyiceberg, which Glue does not install)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from cdclake.dms.files import FileKind
from cdclake.dms.store import list_bronze
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.journals import QUARANTINE_TABLE, quarantined_files_by_table
from cdclake.lake.ledger import read_ledger
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY, newest_commit_ts
from cdclake.lake.tables import table_exists, table_names
from cdclake.verify.live import SilverPosition

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine


def silver_position(engine: Engine, table: TableConfig) -> SilverPosition:
    """How far silver has applied ``table``: its newest applied source commit, and its CDC files waiting."""
    silver = engine.silver_table(table)
    folder = f"{table.source_schema}/{table.source_table}"
    if not table_exists(engine.spark, silver):
        listing = list_bronze(engine.store, folder)
        return SilverPosition(None, len(listing.for_table(table.source_schema, table.source_table, FileKind.CDC)))
    applied = read_ledger(engine.spark, silver).applied
    # from the table's watermark: every key at or below it is applied or an exception (counted below)
    listing = list_bronze(engine.store, folder, start_after=applied.watermarks.get(folder))
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    held: frozenset[str] = frozenset()
    if QUARANTINE_TABLE in table_names(engine.spark, engine.catalog, engine.config.database):
        held = quarantined_files_by_table(engine.spark, engine.catalog, engine.config.database).get(
            table.target, frozenset()
        )
    iceberg = IcebergTable.latest(engine.spark, silver.identifier)
    latest = newest_commit_ts(iceberg.snapshots((LATEST_COMMIT_TS_PROPERTY,)))
    waiting = sum(1 for f in cdc if f.key not in applied and f.key not in held)
    waiting += sum(1 for key in applied.exceptions if key not in held and engine.store.size(key) is not None)
    return SilverPosition(datetime.fromisoformat(latest) if latest else None, waiting)
