"""CDC: apply one batch of one table's change files: prepare the plan, then commit it."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.engine.commit import commit_batch
from cdclake.engine.prepare import prepare_batch
from cdclake.engine.select import TableState
from cdclake.errors import FullLoadPendingError
from cdclake.report import TableReport

log = logging.getLogger("cdclake")


def apply_cdc_batch(
    engine: Engine,
    table: TableConfig,
    files: Sequence[BronzeFile],
    state: TableState,
    loads_pending: bool = False,
    force: bool = False,
) -> tuple[TableReport, TableState]:
    """Apply one batch of CDC files of one table as one Iceberg data commit; skip files already
    applied (``state``, the ledger) and held in quarantine. Returns the report and the new state.

    Keyed tables: the latest change per key is compared with the stored row and the tombstones
    (older changes are ignored and counted), tombstones are appended for deletes, then one data
    commit applies the rest and records the files (``engine.commit.commit_path``: written files and
    one RowDelta where the table allows it, else a MERGE or a branch-staged RowDelta). Bad rows go
    to ``cdclake_quarantine_rows`` (above ``max_bad_row_ratio`` the batch fails instead);
    unreadable or empty files and batches with an incompatible schema change go to
    ``cdclake_quarantine`` and are held until a replay.
    ``loads_pending``: bronze holds LOAD files of the table. ``force`` (a replay) applies the files
    even if the ledger or the quarantine lists them.
    """
    started = time.monotonic()
    report = TableReport(table=table.source, kind="cdc")
    keys = {f.key for f in files}
    pending = state.pending(files, force)
    report.files_skipped = 0 if force else len(keys & state.applied)
    report.files_held = 0 if force else len(keys & (state.held - state.applied))
    if not pending:
        report.note = "nothing new"
        return report, state
    if not state.full_load_done and loads_pending:
        # Creating the table from CDC alone would mark it loaded and its LOAD files would never
        # be applied; only a table that had no rows at full load (no LOAD files) starts from CDC.
        raise FullLoadPendingError(
            f"Table {table.source} has full-load files in bronze that are not applied yet: "
            "run the full load before its CDC files."
        )
    log.info("cdc batch table=%s files=%d first=%s last=%s", table.source, len(pending), pending[0].name,
             pending[-1].name)  # fmt: skip
    plan = prepare_batch(engine, table, pending)
    try:
        commit_batch(engine, table, plan, report, force)
    finally:
        if plan.changes is not None:
            plan.changes.rows.unpersist()
    applied = [f.key for f in plan.changes.files] if plan.changes else []
    held = [f.key for h in plan.holds for f in h.files]
    report.seconds = time.monotonic() - started
    log.info("cdc batch done %s", report.summary())
    after = state.after(applied=applied, held=held, released=applied if force else ())
    if plan.changes is not None and plan.changes.creates_table:  # created as loaded with no LOAD files
        after = TableState(full_load_done=True, applied=after.applied, held=after.held)
    return report, after
