"""Prepare: one CDC batch of one table -> a plan of everything its commit must write (reads only).

The plan holds the files to quarantine and why (empty, unreadable, an incompatible schema
change), the bad rows, the schema change, and the batch's rows read, classified against the
stored rows and the tombstones, and materialised once. ``engine.commit`` writes it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdclake.columns import (
    APPEND_ONLY_OP_COLUMN,
    COMMIT_TS,
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_UPDATE,
    EFFECTS,
    FILE_BLOCK,
    OP,
    ROW_POSITION,
    SILVER_ORDER,
    STORED_FILE,
    STORED_POS,
    TOMBSTONE_DELETED_AT,
)
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.dms.horizon import beyond_horizon
from cdclake.dms.reader import HeldFileError
from cdclake.engine.changes import classify_effects, data_columns, has_error, latest_change_per_key, unchanged_flags
from cdclake.engine.read import BadRows, RowCounts, TooManyBadRowsError, bad_rows, read_changes, unreadable_files
from cdclake.errors import CdclakeError, ConfigError
from cdclake.identifiers import quote
from cdclake.lake.batch import (
    Append,
    CommitWay,
    DataCommit,
    DriverAppend,
    DriverRowDelta,
    KeyedBatch,
    Merge,
    Publish,
    RowDelta,
    Rows,
    TableMetadata,
    read_table_metadata,
)
from cdclake.lake.driver_write import collect_rows, collectable
from cdclake.lake.journals import tombstones_of
from cdclake.lake.ledger import LedgerRecord
from cdclake.lake.row_delta import append_blocker
from cdclake.lake.row_delta import blocker as row_delta_blocker
from cdclake.lake.tables import TableMovedError, silver_columns
from cdclake.runtime.session import interpreted_expressions
from cdclake.schema import SchemaPlan, plan_schema_change

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class Hold:
    """Files to keep in quarantine (not applied, held until a replay), and why."""

    files: list[BronzeFile]
    reason: str


@dataclass(frozen=True)
class ChangeSet:
    """A batch's rows to apply, read, classified and materialised once."""

    files: list[BronzeFile]  # the readable files, in apply order (file indexes point into this list)
    shape: DataFrame  # no rows: the columns of the latest changes (silver's and the tombstones' shape)
    schema: SchemaPlan
    creates_table: bool  # silver does not exist yet: the commit creates it
    counts: RowCounts
    effects: dict[str, int]  # rows per effect (append-only: all inserts)
    latest_commit_ts: str | None
    bad: BadRows | None  # the bad rows, materialised (the commit never reads bronze again)
    history: DataFrame | None  # every valid change, materialised (tables with ``history: true``)
    # The data commit, by the way the plan chose, with its rows: the classified latest changes
    # (keyed tables; collected into the driver for ``DriverRowDelta``), or the rows to append.
    commit: DataCommit

    @property
    def deletes(self) -> int:
        """Keys the batch deletes, whether silver holds them or not: each gets a tombstone."""
        return self.effects.get(EFFECT_DELETE, 0) + self.effects.get(EFFECT_DELETE_MISSING, 0)


@dataclass
class BatchPlan:
    """Everything one CDC batch's commit writes; ``changes`` is None when nothing can be applied."""

    holds: list[Hold] = field(default_factory=list)
    changes: ChangeSet | None = None


def prepare_batch(
    engine: Engine,
    table: TableConfig,
    files: Sequence[BronzeFile],
    replay: bool = False,
    *,
    ledger_snapshot: int | None,
) -> BatchPlan:
    """Plan a batch, the plan's only author. The table's metadata is read once (``TableMetadata``)
    and every decision is taken from it. A file written before the tombstone horizon is held
    (``dms.horizon``: it could revive a deleted row) unless a person ``replay``s it; empty files
    are held without reading them; if Spark cannot read the batch, the unreadable files are found
    one by one, planned to be held, and the rest prepared. A batch of at most
    ``Engine.interpreted_batch_bytes`` is evaluated by Spark's interpreter (``interpreted_expressions``).

    ``ledger_snapshot``: the snapshot at which the caller read the table's ledger (which chose
    ``files``); a table elsewhere now (another writer committed) raises ``TableMovedError``, a
    commit conflict: the caller reads the ledger again. The plan's commit is validated from it."""
    metadata = read_table_metadata(engine.spark, engine.silver_table(table))
    if metadata.snapshot_id != ledger_snapshot:
        raise TableMovedError(
            f"{metadata.table.identifier} is at snapshot {metadata.snapshot_id}; its ledger was read at "
            f"{ledger_snapshot}: another writer committed to it"
        )
    plan = BatchPlan()
    late = beyond_horizon(files, metadata.tombstones_pruned_before, replay=replay)
    if late:
        held_late = {x.file for x in late}
        files = [f for f in files if f not in held_late]
    small = 0 < sum(f.size for f in files) <= engine.interpreted_batch_bytes
    with interpreted_expressions(engine.spark) if small else nullcontext():
        _prepare(engine, table, files, metadata, plan)
    plan.holds.extend(Hold([x.file], x.reason) for x in late)
    return plan


def _prepare(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], metadata: TableMetadata, plan: BatchPlan
) -> BatchPlan:
    remaining = [f for f in files if f.size != 0]
    if empty := [f for f in files if f.size == 0]:
        plan.holds.append(Hold(empty, "empty file"))
    failures = 0
    while remaining:
        try:
            return _prepare_readable(engine, table, remaining, metadata, plan)
        except ConfigError:
            raise
        except TooManyBadRowsError as too_many:
            # Above the bad-row ratio: the files to blame are held with their reason (one garbled
            # file must not stop its table for good, nor fail the run), the others prepared again.
            blamed = [f for f in remaining if f.key in too_many.culprits]
            if not blamed:
                raise
            plan.holds.extend(Hold([f], too_many.culprits[f.key]) for f in blamed)
            remaining = [f for f in remaining if f not in blamed]
        except HeldFileError as refused:
            # Readable, but not to be applied as it is (no Op column, a header that contradicts
            # the declared columns): held with its own reason, found before any Spark job.
            file = next(f for f in remaining if f.key == refused.key)
            plan.holds.append(Hold([file], str(refused)))
            remaining.remove(file)
        except Exception as failure:
            if engine.stopping.is_set():
                raise  # cancelled by a stop (Ctrl-C): no file is to blame
            failures += 1
            culprits = unreadable_files(engine, table, remaining, full_load=False)
            if not culprits or failures == 2:
                raise failure
            plan.holds.extend(Hold([file], f"unreadable file: {reason}") for file, reason in culprits)
            remaining = [f for f in remaining if f not in {c for c, _ in culprits}]
    return plan


def _prepare_readable(
    engine: Engine, table: TableConfig, files: Sequence[BronzeFile], metadata: TableMetadata, plan: BatchPlan
) -> BatchPlan:
    """Plan the schema change, then read, count and classify the batch in one pass over its files
    (the counts are observed while the rows are materialised)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    silver = engine.silver_table(table)
    batch_bytes = sum(f.size for f in files)
    changes = read_changes(engine, table, files)
    if _one_task(engine, len(files), batch_bytes):
        # One partition: Spark plans the latest-per-key aggregate and the classification's joins
        # (their other side broadcast) without a shuffle.
        changes = changes.coalesce(1)
    shape = latest_changes(changes, table).limit(0)
    creates_table = not metadata.exists
    stored = metadata.columns
    incoming = [(f.name, f.dataType.simpleString()) for f in silver_shape(shape).schema.fields]
    schema = SchemaPlan() if creates_table else plan_schema_change(stored, incoming, bookkeeping=(SILVER_ORDER,))
    if schema.incompatible:
        plan.holds.append(Hold(list(files), "; ".join(schema.incompatible)))
        return plan
    # Observations count what the one materialising action below sees; no other action may
    # run on the observed frames first, or it would be the one observed.
    read = Observation(f"cdclake_read_{uuid.uuid4().hex}")
    observed_read = changes.observe(read, *RowCounts.columns())
    history, keys = None, 0
    if table.history:
        # Every valid change is kept, not only the latest per key: materialise the read once
        # (this action is the observed one) and take both the history and the latest from it.
        valid = _cast(observed_read.where(~has_error()), schema.cast).localCheckpoint()
        history = _history_rows(valid)
        rows = latest_changes(valid, table)
    else:
        rows = _cast(latest_changes(observed_read, table, valid=~has_error()), schema.cast)
    applied = Observation(f"cdclake_effects_{uuid.uuid4().hex}")
    keys_seen = Observation(f"cdclake_keys_{uuid.uuid4().hex}")
    latest = F.max(COMMIT_TS).alias("_cdc_latest")
    if table.append_only:
        observed = rows.observe(applied, F.count(F.lit(1)).alias(EFFECT_INSERT), latest)
    else:
        # Materialised once (the classification reads it two or three times), counted on the way.
        rows = rows.observe(keys_seen, F.count(F.lit(1)).alias("keys")).localCheckpoint()
        keys, heap = int(keys_seen.get["keys"]), driver_heap_bytes(engine)
        small = batch_bytes <= engine.broadcast_batch_bytes and broadcast_fits(
            keys, heap, engine.parallel_tables, engine.broadcast_heap_share
        )
        log.debug("classify table=%s keys=%d heap=%d broadcast=%s", table.source, keys, heap, small)
        classified = _classify(engine, table, rows, shape, metadata, small)
        observed = classified.observe(applied, *[F.count_if(F.col(EFFECT) == e).alias(e) for e in EFFECTS], latest)
    columns, unchanged = data_columns(rows), unchanged_flags(rows)
    way = choose_commit_way(engine, table, metadata, columns, schema.absent, unchanged)
    # Small enough to collect into the driver (``Engine.driver_write_bytes``)? The one point where
    # the batch's rows leave Spark or stay: the commit's type says which from here on.
    collected: pa.Table | None = None
    materialized = observed
    driver_way = way == "row-delta" or (way == "append" and not creates_table and append_blocker(metadata) is None)
    if driver_way and batch_bytes <= engine.driver_write_bytes and collectable(observed):
        collected = collect_rows(observed)  # its files are written by the driver, no Spark job
    else:
        # A local checkpoint, not a cache: it also cuts the lineage back to the reader's row ids
        # (monotonically_increasing_id), which a copy-on-write MERGE refuses as non-deterministic.
        materialized = observed.localCheckpoint()
    rows.unpersist()  # a checkpoint of its own above, if any; the materialised rows no longer need it
    stats = applied.get
    counts = RowCounts.of(read.get)
    effects = {e: int(stats[e]) for e in stats if e != "_cdc_latest"}
    if not table.append_only and sum(effects.values()) != keys:
        raise CdclakeError(
            f"Table {table.source}: silver table {silver.identifier} holds some of this batch's keys more "
            f"than once ({sum(effects.values()) - keys} extra rows); a mirror holds each key "
            "once. Reload the table (`cdclake full-load --reload`) to rebuild it from bronze."
        )
    bad = bad_rows(engine, table, changes, files, counts)
    if bad is not None:  # a few rows: read from bronze once, here, not again by the commit
        bad = replace(bad, rows=bad.rows.localCheckpoint())
    properties = LedgerRecord.batch([f.key for f in files], stats["_cdc_latest"]).properties()

    key = table.silver_key()

    def keyed(changes: Rows) -> KeyedBatch[Rows]:
        return KeyedBatch(
            table=silver,
            changes=changes,
            key=key,
            columns=columns,
            properties=properties,
            metadata=None if creates_table else metadata,
            absent=schema.absent,
            unchanged=unchanged,
            image_count=effects[EFFECT_INSERT] + effects[EFFECT_UPDATE],
            replaced_count=effects[EFFECT_UPDATE] + effects[EFFECT_DELETE],
        )

    commit: DataCommit
    if table.append_only and collected is not None:
        commit = DriverAppend(collected, properties, metadata)
    elif table.append_only:
        commit = Append(materialized, properties, effects[EFFECT_INSERT], None if creates_table else metadata)
    elif collected is not None:
        tombstones = collected_tombstone_rows(collected_with_effects(collected, TOMBSTONED), key)
        commit = DriverRowDelta(keyed(collected_with_effects(collected, APPLIED)), tombstones)
    else:
        deletes = tombstone_rows(with_effects(materialized, TOMBSTONED), key)
        commit = _IN_SPARK[way](keyed(with_effects(materialized, APPLIED)), deletes, materialized)
    plan.changes = ChangeSet(
        files=list(files),
        shape=shape,
        schema=schema,
        creates_table=creates_table,
        counts=counts,
        effects=effects,
        latest_commit_ts=stats["_cdc_latest"],
        bad=bad,
        history=history,
        commit=commit,
    )
    return plan


def _history_rows(valid: DataFrame) -> DataFrame:
    """Every valid change as history takes it: data columns, ``_cdc_order``, ``_cdc_op``, ``_cdc_ts``.

    History's ``_cdc_order`` is silver's with the change's place in its file after it: changes of
    one key at one instant in one file with no change sequence (a transaction that updates then
    deletes a row) share silver's order text, and history keeps each as a version of its own, in
    file order. A re-read of the same file gives the same text (history adds a change once)."""
    from pyspark.sql import functions as F

    def digits(column: str) -> Column:
        return F.lpad(F.coalesce(F.col(column), F.lit(0)).cast("string"), 20, "0")

    order = F.concat(F.col(SILVER_ORDER), F.lit("#"), digits(FILE_BLOCK), digits(ROW_POSITION))
    return valid.select(*data_columns(valid), order.alias(SILVER_ORDER), OP, COMMIT_TS)


def history_changes(engine: Engine, table: TableConfig, files: Sequence[BronzeFile]) -> DataFrame:
    """Every valid change of ``files`` (CDC files silver has applied), typed as silver stores them,
    as a batch's history takes them (``BatchPlan.changes.history``): what history lacks when a crash
    fell between silver's data commit and history's. Bad rows are left out, as the batch left them
    out (quarantined; a replay adds them to both)."""
    silver = engine.silver_table(table)
    changes = read_changes(engine, table, files)
    incoming = [(f.name, f.dataType.simpleString()) for f in silver_shape(latest_changes(changes, table)).schema.fields]
    schema = plan_schema_change(silver_columns(engine.spark, silver), incoming, bookkeeping=(SILVER_ORDER,))
    return _history_rows(_cast(changes.where(~has_error()), schema.cast)).localCheckpoint()


def choose_commit_way(
    engine: Engine,
    table: TableConfig,
    metadata: TableMetadata,
    columns: Sequence[str],
    absent: Sequence[str],
    unchanged: dict[str, str],
) -> CommitWay:
    """How the batch's data commit is made (``context.CommitWay``): "append" (append-only tables);
    "row-delta" (written files, one RowDelta, no scan) where the table allows it and the engine does
    not pin another way (``prepare_batch`` makes it "driver-row-delta" for a batch it collects);
    else "merge" into a small table (fewer than ``Engine.merge_below_records`` stored records; a
    table the batch creates) and "publish" (branch-staged) into a large one. A pinned "append" is
    "auto" for keyed tables."""
    if table.append_only:
        return "append"
    base = metadata.snapshot_id
    if engine.commit_path in ("auto", "row-delta", "driver-row-delta") and base is not None:
        why_not = row_delta_blocker(metadata, table.silver_key(), columns, absent, unchanged)
        if why_not is None:
            return "row-delta"
        log.debug("commit table=%s not through a RowDelta: %s", metadata.table.name, why_not)
    if engine.commit_path == "merge" or engine.commit_path == "publish":
        return engine.commit_path
    if base is None:
        return "merge"
    return "merge" if metadata.total_records < engine.merge_below_records else "publish"


# The effects a keyed batch's data commit applies, and those that leave a tombstone.
APPLIED = (EFFECT_INSERT, EFFECT_UPDATE, EFFECT_DELETE)
TOMBSTONED = (EFFECT_DELETE, EFFECT_DELETE_MISSING)
# The ways whose rows stay in Spark, by the name ``choose_commit_way`` gives them.
_IN_SPARK: dict[CommitWay, type[RowDelta] | type[Merge] | type[Publish]] = {
    "row-delta": RowDelta,
    "merge": Merge,
    "publish": Publish,
}


def with_effects(rows: DataFrame, effects: Sequence[str]) -> DataFrame:
    """The classified ``rows`` whose effect is one of ``effects``."""
    from pyspark.sql import functions as F

    return rows.where(F.col(EFFECT).isin(*effects))


def collected_with_effects(rows: pa.Table, effects: Sequence[str]) -> pa.Table:
    """``with_effects`` of classified rows collected into the driver."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return rows.filter(pc.is_in(rows.column(EFFECT), value_set=pa.array(list(effects))))


# What one touched stored row costs in a broadcast: its key, ``_cdc_order`` (35 characters), its
# data file's path (about 150 characters) and position, as an UnsafeRow in a hashed relation, built
# once in the driver and once more while it is serialised: twice what such a row takes, on purpose.
BROADCAST_BYTES_PER_KEY = 1024


def broadcast_fits(keys: int, heap_bytes: int, tables_at_once: int, share: float) -> bool:
    """Whether a batch of ``keys`` keys may broadcast its touched stored rows: the estimate must fit
    its part of ``share`` of the driver's heap while ``tables_at_once`` tables may broadcast at the
    same time (else the classification shuffles both sides: slower, never out of memory)."""
    budget = heap_bytes * share / max(tables_at_once, 1)
    return keys * BROADCAST_BYTES_PER_KEY <= budget


def driver_heap_bytes(engine: Engine) -> int:
    """The driver JVM's maximum heap (``spark.driver.memory``, as the JVM sees it)."""
    jvm = engine.spark.sparkContext._jvm
    assert jvm is not None
    return int(jvm.java.lang.Runtime.getRuntime().maxMemory())


def _one_task(engine: Engine, files: int, batch_bytes: int) -> bool:
    """Whether a batch of ``files`` files and ``batch_bytes`` bytes is small enough to prepare in
    one task (``Engine.single_task_batch_bytes``)."""
    return batch_bytes <= engine.single_task_batch_bytes or (files == 1 and batch_bytes <= engine.broadcast_batch_bytes)


def _cast(rows: DataFrame, casts: dict[str, str]) -> DataFrame:
    from pyspark.sql import functions as F

    for column, type_name in casts.items():
        rows = rows.withColumn(column, F.col(column).cast(type_name))
    return rows


def _classify(
    engine: Engine, table: TableConfig, rows: DataFrame, shape: DataFrame, metadata: TableMetadata, broadcast_keys: bool
) -> DataFrame:
    """The latest changes with their effect against the stored rows (at ``metadata``'s snapshot) and the
    tombstones, and where each key's stored row lives (``_cdc_stored_file``, ``_cdc_stored_pos``),
    so that the commit can delete it without reading the table again (``lake.row_delta``).

    ``broadcast_keys`` (``rows`` materialised): semi-join the stored keys with the batch's keys
    broadcast, so the table's key columns are streamed once instead of shuffled whole, and the
    cost follows the changes more than the table.
    """
    from pyspark.sql import functions as F

    key = table.silver_key()
    silver, base = metadata.table, metadata.snapshot_id
    tombstones = tombstones_of(silver)
    nothing = shape.select(*key, SILVER_ORDER)
    exists = metadata.tombstones_exist
    known_deleted = engine.spark.table(tombstones.identifier).select(*key, SILVER_ORDER) if exists else nothing
    if base is None:
        stored = nothing.withColumn(STORED_FILE, F.lit(None).cast("string")).withColumn(
            STORED_POS, F.lit(None).cast("long")
        )
    else:
        stored = engine.spark.sql(
            f"SELECT {', '.join(quote(k) for k in key)}, {SILVER_ORDER}, _file AS {STORED_FILE}, _pos AS {STORED_POS} "
            f"FROM {silver.identifier} VERSION AS OF {base}"
        )
    touched = stored
    if broadcast_keys:
        batch_keys = F.broadcast(rows.select(*key))
        known_deleted = known_deleted.join(batch_keys, list(key), "left_semi")
        # At most one stored row per change: small enough to broadcast into the classification.
        touched = F.broadcast(stored.join(batch_keys, list(key), "left_semi"))
    return classify_effects(rows, touched, known_deleted, key)


def latest_changes(changes: DataFrame, table: TableConfig, valid: Column | None = None) -> DataFrame:
    """What a batch applies: the latest change per key with its operation (deletes included);
    append-only tables: every change, with its operation kept in a column. ``valid``: rows where
    it is false are left out."""
    from pyspark.sql import functions as F

    if table.append_only:
        kept = changes if valid is None else changes.where(valid)
        return kept.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(
            *data_columns(changes), APPEND_ONLY_OP_COLUMN, OP, COMMIT_TS
        )
    columns = [*data_columns(changes), SILVER_ORDER, OP, COMMIT_TS]
    latest = latest_change_per_key(changes, table.silver_key(), columns, valid)
    flags = list(unchanged_flags(latest).values())
    return latest.select(*data_columns(changes), SILVER_ORDER, OP, COMMIT_TS, *flags)


def silver_shape(rows: DataFrame) -> DataFrame:
    """The columns a silver table stores: the data columns and, for keyed tables, ``_cdc_order``."""
    return rows.select(*data_columns(rows), *([SILVER_ORDER] if SILVER_ORDER in rows.columns else []))


def tombstone_rows(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """What a tombstone holds: the deleted key, the delete's order and its commit time."""
    from pyspark.sql import functions as F

    return changes.select(*key, SILVER_ORDER, F.col(COMMIT_TS).alias(TOMBSTONE_DELETED_AT))


def collected_tombstone_rows(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """``tombstone_rows`` of changes collected into the driver."""
    kept = [*key, SILVER_ORDER, COMMIT_TS]
    return changes.select(kept).rename_columns([*key, SILVER_ORDER, TOMBSTONE_DELETED_AT])
