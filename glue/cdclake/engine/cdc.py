"""CDC: apply one batch of one table's change files: prepare the plan, then commit it."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cdclake.columns import EFFECT_DELETE, EFFECT_DELETE_MISSING, EFFECT_INSERT, EFFECT_LATE, EFFECT_UPDATE
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.engine.commit import commit_batch
from cdclake.engine.plan import BatchPlan
from cdclake.engine.prepare import prepare_batch
from cdclake.engine.select import TableState
from cdclake.errors import FullLoadPendingError
from cdclake.report import Outcome, OutcomeKind, TableReport

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class CdcBatch:
    """One batch of one table's CDC files, and how to apply it."""

    table: TableConfig
    files: Sequence[BronzeFile]
    loads_pending: bool = False  # bronze holds LOAD files of the table (not applied yet: an error)
    force: bool = False  # a replay: apply the files even if the ledger or the quarantine lists them


def apply_cdc_batch(engine: Engine, batch: CdcBatch, state: TableState) -> tuple[TableReport, TableState]:
    """Apply one batch of CDC files of one table as one Iceberg data commit; skip files already
    applied (``state``, the ledger) and held in quarantine. Returns the report and the new state.

    Keyed tables: the latest change per key is compared with the stored row and the tombstones
    (older changes are ignored and counted), tombstones are appended for deletes, then one data
    commit applies the rest and records the files (``lake.batch.CommitWay``: written files and
    one RowDelta where the table allows it, else a MERGE or a branch-staged RowDelta). Bad rows go
    to ``cdclake_quarantine_rows`` (a file above ``max_bad_row_ratio`` is held whole instead);
    unreadable or empty files and batches with an incompatible schema change go to
    ``cdclake_quarantine`` and are held until a replay.
    """
    table, files, force = batch.table, batch.files, batch.force
    started = time.monotonic()
    keys = {f.key for f in files}
    pending = state.pending(files, force)
    skipped = 0 if force else sum(1 for k in keys if k in state.applied)
    held_before = 0 if force else sum(1 for k in keys if k in state.held and k not in state.applied)
    if not pending:
        report = TableReport(table=table.source, kind="cdc", files_skipped=skipped, files_held=held_before)
        report.outcome = Outcome(OutcomeKind.NOTHING_NEW)
        return report, state
    if not state.full_load_done and batch.loads_pending:
        # Creating the table from CDC alone would mark it loaded and its LOAD files would never
        # be applied; only a table that had no rows at full load (no LOAD files) starts from CDC.
        raise FullLoadPendingError(
            f"Table {table.source} has full-load files in bronze that are not applied yet: "
            "run the full load before its CDC files."
        )
    log.info("cdc batch table=%s files=%d first=%s last=%s", table.source, len(pending), pending[0].name,
             pending[-1].name)  # fmt: skip
    plan = prepare_batch(
        engine,
        table,
        pending,
        replay=force,
        ledger_snapshot=state.snapshot_id,
        checkpoint=state.checkpoint().properties() if state.full_load_done else None,
    )
    try:
        made = commit_batch(engine, table, plan, force)
    finally:
        if plan.changes is not None:
            plan.changes.commit.release()
    report = batch_report(table, plan, skipped, held_before, time.monotonic() - started)
    log.info("cdc batch done %s", report.summary())
    applied = [f.key for f in plan.changes.files] if plan.changes else []
    held = [f.key for h in plan.holds for f in h.files]
    # The snapshot of this batch's data commit, from which the table's next batch is planned.
    committed = None if made is None else made.snapshot_id
    after = state.after(applied=applied, held=held, released=applied if force else (), snapshot_id=committed)
    if plan.changes is not None and plan.changes.creates_table:  # created as loaded with no LOAD files
        after = replace(after, full_load_done=True)
    return report, after


def batch_report(table: TableConfig, plan: BatchPlan, skipped: int, held_before: int, seconds: float) -> TableReport:
    """What a committed batch did, from its plan: the one place a CDC batch's report is made."""
    report = TableReport(table=table.source, kind="cdc", files_skipped=skipped, files_held=held_before)
    report.seconds = seconds
    for held in plan.holds:
        report.quarantined_files.extend(f.key for f in held.files)
        report.outcome = Outcome.held(held.reason, held.type_change)
    changes = plan.changes
    if changes is None:
        return report
    effects = changes.effects
    report.changes_read = changes.counts.total
    report.rows_quarantined = changes.bad.count if changes.bad is not None else 0
    report.schema_changes = changes.schema.describe()
    report.columns_dropped_at_source = list(changes.schema.absent)
    report.latest_commit_ts = changes.latest_commit_ts
    report.inserted = effects.get(EFFECT_INSERT, 0)
    report.updated = effects.get(EFFECT_UPDATE, 0)
    report.deleted = effects.get(EFFECT_DELETE, 0)
    report.deleted_missing = effects.get(EFFECT_DELETE_MISSING, 0)
    report.ignored_late = effects.get(EFFECT_LATE, 0)
    report.files_applied = len(changes.files)
    report.applied_files = [f.key for f in changes.files]
    report.bytes_applied = sum(f.size for f in changes.files)
    return report
