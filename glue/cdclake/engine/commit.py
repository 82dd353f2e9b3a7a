"""Commit: every write the engine makes to the lake, from a plan that is already complete.

CDC: quarantine, bad rows, table creation, schema evolution, tombstones, then the one data commit
that also records the batch's files in the ledger, then history (which records the silver snapshot
it reflects). Full load: the staged replace, the reset of what the old load left behind, then the
ledger record that says it is done. Nothing here reads bronze, but for files history lacks besides
the batch's (``engine.history_sync``: another writer's batch, committed without its history).
Each data commit returns the snapshot it made (``lake.committer``): history reflects it, and the
caller plans the table's next batch from it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, assert_never

from cdclake.columns import COMMIT_TS, OP
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.engine.changes import silver_shape
from cdclake.engine.history_sync import BatchHistory, append_batch_history
from cdclake.engine.plan import BatchPlan, ChangeSet, Hold, tombstone_rows
from cdclake.engine.read import BadRows
from cdclake.engine.select import loaded_files
from cdclake.engine.statements import merge_statement
from cdclake.lake.batch import (
    Append,
    DriverAppend,
    DriverRowDelta,
    KeyedBatch,
    KeyedCommit,
    Merge,
    Publish,
    RowDelta,
    read_table_metadata,
)
from cdclake.lake.history import apply_history, create_history, history_of, reflecting, start_history
from cdclake.lake.iceberg import Snapshot
from cdclake.lake.journals import (
    record_quarantine,
    record_quarantined_rows,
    record_schema_changes,
    release_quarantine,
    release_quarantined_rows,
    tombstones_of,
)
from cdclake.lake.layout import apply_layout
from cdclake.lake.ledger import forget_archived_ledger, record_full_load, replace_table, snapshot_ref
from cdclake.lake.ledger_record import KIND_FULL_LOAD, KIND_FULL_LOAD_STAGED, SnapshotRef
from cdclake.lake.tables import (
    SilverTable,
    ensure_database,
    ensure_table,
    evolve_schema,
    table_exists,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger("cdclake")


def commit_batch(engine: Engine, table: TableConfig, plan: BatchPlan, force: bool) -> Snapshot | None:
    """Write a CDC batch's plan: its holds, then (if any rows can be applied) its changes, by the
    way the plan chose. Everything comes from the plan; the caller reports from it. Returns the
    snapshot of the batch's data commit (None: the plan applies nothing).

    ``force`` (a replay): the applied files leave the quarantine.
    """
    silver = engine.silver_table(table)
    for held in plan.holds:
        hold(engine, silver, held)
    if plan.changes is None:
        return None
    changes = plan.changes
    if changes.bad is not None:
        quarantine_rows(engine, silver, changes.bad)
    if changes.creates_table:
        ensure_database(engine.spark, engine.catalog, engine.config.database)
        if changes.history is not None:  # before silver: history is complete from the table's first change
            create_history(engine.spark, history_of(silver), changes.history, table.silver_key())
        # A table that had no rows at full load (no LOAD files) starts from its first CDC batch.
        replace_table(engine.spark, silver, silver_shape(changes.shape), [], kind=KIND_FULL_LOAD)
        apply_layout(engine.spark, silver.identifier, table.silver_key(), table.layout)
    _evolve(engine, silver, changes)
    commit = changes.commit
    if isinstance(commit, Append | DriverAppend):
        planned = commit.metadata
        metadata = planned
        if planned is None or changes.schema.changes_table:
            # Created just above, or evolved: read again, still validated from the snapshot planned at.
            evolved = read_table_metadata(engine.spark, silver)
            metadata = evolved if planned is None else replace(evolved, snapshot_id=planned.snapshot_id)
        assert metadata is not None
        if isinstance(commit, DriverAppend):
            made = engine.committer.driver_append(engine.spark, metadata, commit.rows, commit.properties)
        else:
            rows = silver_shape(commit.rows)
            made = engine.committer.append(engine.spark, metadata, rows, commit.count, commit.properties)
    else:
        planned = commit.batch.metadata
        if changes.schema.changes_table and planned is not None:
            # The new images follow the evolved schema (no snapshot made): read again, still
            # classified against and validated from the snapshot the plan read.
            evolved = read_table_metadata(engine.spark, silver)
            commit = commit.with_metadata(replace(evolved, snapshot_id=planned.snapshot_id))
        made = _apply_keyed(engine, table, silver, changes, commit)
    if force:  # after the data commit: a replay that never commits leaves the quarantine as it was
        replayed = [f.key for f in changes.files]
        release_quarantine(engine.spark, silver, replayed)
        release_quarantined_rows(engine.spark, silver, replayed, changes.bad.rows if changes.bad else None)
    return made


def hold(engine: Engine, silver: SilverTable, held: Hold) -> None:
    """Hold files back in quarantine (nothing applied, files left pending) and record why."""
    keys = [f.key for f in held.files]
    record_quarantine(engine.spark, silver, keys, held.reason, datetime.now(UTC))
    log.error("batch quarantined table=%s files=%d reason=%s", silver.name, len(keys), held.reason)


def quarantine_rows(engine: Engine, silver: SilverTable, bad: BadRows) -> None:
    """Keep the rows that cannot be applied in ``cdclake_quarantine_rows``, with their reasons."""
    from pyspark.sql import functions as F

    record_quarantined_rows(engine.spark, silver, bad.rows.withColumn("quarantined_at", F.lit(datetime.now(UTC))))
    log.warning("rows quarantined table=%s rows=%d", silver.name, bad.count)


def _evolve(engine: Engine, silver: SilverTable, changes: ChangeSet) -> None:
    plan = changes.schema
    if plan.changes_table:
        evolve_schema(engine.spark, silver, plan.add, plan.widen)
        record_schema_changes(engine.spark, silver, plan.describe(), datetime.now(UTC))
        for change in plan.describe():
            log.warning("schema change table=%s %s", silver.name, change)


def _apply_keyed(
    engine: Engine, table: TableConfig, silver: SilverTable, changes: ChangeSet, commit: KeyedCommit
) -> Snapshot:
    """Tombstones for the deletes, then one commit of the rest that records the batch's files, then
    history; returns the data commit's snapshot."""
    with ThreadPoolExecutor(1, thread_name_prefix="cdclake-tombstones") as pool:
        # Tombstones before the data commit: if it never happens, the re-run appends them again
        # harmlessly. Appended, never upserted (one write whose cost follows the deletes): a key
        # may hold several tombstones, and the classification takes its newest (``classify_effects``).
        # Their job runs while the data files are written; the data commit waits for their commit.
        tombstoned = pool.submit(_append_tombstones, engine, silver, changes, commit) if changes.deletes else None
        waited = tombstoned.result if tombstoned else _no_tombstones
        return _commit_keyed(engine, table, changes, commit, waited)


def _start_history(
    engine: Engine, batch: KeyedBatch[DataFrame] | KeyedBatch[pa.Table], base: int, changes: DataFrame
) -> None:
    """``history: true`` turned on after the table was loaded: start its history from silver's rows
    as the batch found them (snapshot ``base``), before the batch's ``changes``.

    The start is the batch's first source commit (now, if that is later): on the source's clock,
    as every version is, so a key the batch changes ends its first version where its change
    begins, never before that version started."""
    from pyspark.sql import functions as F

    stored = engine.spark.sql(f"SELECT * FROM {batch.table.identifier} VERSION AS OF {base}")
    # The commit instant in DMS's text (UTC), which sorts as time does.
    first = changes.select(F.min(F.col(COMMIT_TS))).first()
    now = datetime.now(UTC)
    since = now
    if first is not None and first[0]:
        since = min(now, datetime.fromisoformat(str(first[0])).replace(tzinfo=UTC))
    found = reflecting(snapshot_ref(engine.spark, batch.table, base))
    if start_history(engine.spark, history_of(batch.table), stored, batch.key, since, found):
        log.warning(
            "history started from silver's rows table=%s since=%s (no versions before)",
            batch.table.name,
            since.isoformat(),
        )


def _no_tombstones() -> None:
    """A batch without deletes: nothing for its data commit to wait for."""


def _append_tombstones(engine: Engine, silver: SilverTable, changes: ChangeSet, commit: KeyedCommit) -> None:
    tombstones = tombstones_of(silver)
    ensure_table(engine.spark, tombstones, tombstone_rows(changes.shape, commit.batch.key))
    if isinstance(commit, DriverRowDelta):
        engine.committer.append_collected_tombstones(engine.spark, tombstones, commit.tombstones)
    else:
        engine.committer.append_tombstones(engine.spark, tombstones, commit.tombstones)


def _commit_keyed(
    engine: Engine,
    table: TableConfig,
    changes: ChangeSet,
    commit: KeyedCommit,
    tombstones_committed: Callable[[], None],
) -> Snapshot:
    """The data commit the plan chose, which waits for ``tombstones_committed`` first, then history
    (reflecting the snapshot the data commit made); returns that snapshot.

    Silver first, history after it: a crash in between leaves history behind silver, never ahead
    (its versions never show a change silver does not hold), and the next run catches it up from
    the batch's files (``engine.history_sync``). A history started from silver's rows is started
    before the data commit: from the rows the batch found."""
    batch = commit.batch
    if changes.history is not None and batch.base_snapshot_id is not None:
        _start_history(engine, batch, batch.base_snapshot_id, changes.history)
    log.debug("commit table=%s path=%s", batch.table.name, commit.way)
    match commit:
        case RowDelta():
            made = engine.committer.row_delta(engine.spark, commit.batch, before_commit=tombstones_committed)
        case DriverRowDelta():
            made = engine.committer.driver_row_delta(engine.spark, commit.batch, before_commit=tombstones_committed)
        case Merge():
            tombstones_committed()

            # The same semantics as the other paths (tests/spark/test_publish.py).
            def statement(target: str, view: str) -> str:
                return merge_statement(target, view, batch.written)

            made = engine.committer.merge(engine.spark, commit.batch, statement)
        case Publish():
            tombstones_committed()
            made = engine.committer.publish(engine.spark, commit.batch)
        case _:
            assert_never(commit)
    if changes.history is not None:
        committed = SnapshotRef(made.snapshot_id, made.sequence_number)
        files = tuple(f.key for f in changes.files)
        append_batch_history(engine, table, BatchHistory(files, changes.history, batch.properties, committed))
    return made


# ------------------------------------------------------------------------------- full load


def stage_full_load(
    engine: Engine,
    silver: SilverTable,
    rows: DataFrame,
    loaded: Sequence[BronzeFile],
) -> Snapshot:
    """Create or atomically replace the silver table with a full load's rows, recorded as a staged
    load of ``loaded`` (its LOAD files, with their sizes and versions, and any CDC files it
    supersedes): the ledger says "not loaded" until ``finish_full_load`` records it done. Returns
    the staged replace's snapshot."""
    ensure_database(engine.spark, engine.catalog, engine.config.database)
    return replace_table(engine.spark, silver, rows, loaded_files(loaded), KIND_FULL_LOAD_STAGED)


def _history_of_full_load(engine: Engine, table: TableConfig, silver: SilverTable, staged: SnapshotRef) -> None:
    """Every loaded row's first version: an insert, valid from its timestamp (or the load time),
    in a commit that reflects the staged load (snapshot ``staged``)."""
    from pyspark.sql import functions as F

    loaded = engine.spark.sql(f"SELECT * FROM {silver.identifier} VERSION AS OF {staged.snapshot_id}")
    stamp = engine.config.bronze.timestamp_column
    valid_from = F.col(stamp) if stamp and stamp in loaded.columns else F.current_timestamp()
    rows = loaded.withColumn(OP, F.lit("I")).withColumn(COMMIT_TS, valid_from.cast("string"))
    apply_history(engine.spark, history_of(silver), rows, table.silver_key(), reflecting(staged))


# The steps that finish a staged full load, in the order they are taken: everything the load
# leaves behind, then the record that says it is done, last.
FULL_LOAD_STEPS = ("layout", "history", "forget-ledger-archive", "forget-tombstones", "record")


def finish_full_load(
    engine: Engine,
    table: TableConfig,
    silver: SilverTable,
    loaded: Sequence[BronzeFile],
    staged: Snapshot,
) -> Snapshot:
    """Finish a staged load (its replace made snapshot ``staged``): give the table its layout for
    the writes to come (the replace reset it), write every loaded row's first version to history,
    forget what the old load left (its archived ledger and its tombstones: the new load is the
    truth now), and only then record the load of ``loaded`` as done (its LOAD files, with their
    sizes and versions, and the CDC files it superseded).

    One step or none: until the record, the ledger says "not loaded" (the staged commit), so a
    crash at any step makes the next run load the table again and take every step again; each
    is idempotent (a layout the table has is kept, history adds a version once, the forgetting
    deletes what is there). Each step (``FULL_LOAD_STEPS``) is taken through
    ``engine.committer.full_load_step``. Returns the record's snapshot."""
    recorded: list[Snapshot] = []

    def history() -> None:
        if table.history:
            _history_of_full_load(engine, table, silver, SnapshotRef(staged.snapshot_id, staged.sequence_number))

    def forget_tombstones() -> None:
        tombstones = tombstones_of(silver)
        if table_exists(engine.spark, tombstones):
            engine.spark.sql(f"DELETE FROM {tombstones.identifier}")

    steps: dict[str, Callable[[], None]] = {
        "layout": lambda: apply_layout(engine.spark, silver.identifier, table.silver_key(), table.layout),
        "history": history,
        "forget-ledger-archive": lambda: forget_archived_ledger(engine.spark, silver),
        "forget-tombstones": forget_tombstones,
        "record": lambda: recorded.append(record_full_load(engine.spark, silver, loaded_files(loaded))),
    }
    for step in FULL_LOAD_STEPS:
        engine.committer.full_load_step(step, steps[step])
    if not recorded:
        raise RuntimeError(f"{silver.identifier}: the full load's record step was not taken")
    return recorded[-1]
