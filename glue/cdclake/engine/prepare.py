"""Prepare: one CDC batch of one table -> a plan of everything its commit must write (reads only).

The plan holds the files to quarantine and why (empty, unreadable, an incompatible schema
change), the bad rows, the schema change, and the batch's rows read, classified against the
stored rows and the tombstones, and materialised once. ``engine.commit`` writes it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdclake.columns import (
    COMMIT_TS,
    EFFECT,
    EFFECT_INSERT,
    EFFECTS,
    SILVER_ORDER,
    STORED_FILE,
    STORED_POS,
)
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.dms.horizon import beyond_horizon
from cdclake.dms.reader import HeldFileError
from cdclake.engine.changes import data_columns, has_error, unchanged_flags
from cdclake.engine.commit_way import broadcast_fits, choose_commit_way, driver_heap_bytes, one_task
from cdclake.engine.data_commit import Chosen, data_commit, one_row_per_key
from cdclake.engine.driver_batch import prepare_in_driver
from cdclake.engine.effects import classify_effects
from cdclake.engine.plan import (
    BatchContext,
    BatchPlan,
    ChangeSet,
    Hold,
)
from cdclake.engine.read import (
    RowCounts,
    TooManyBadRowsError,
    bad_rows,
    cast_columns,
    history_rows,
    incoming_schema,
    latest_changes,
    read_changes,
    unreadable_files,
)
from cdclake.errors import ConfigError
from cdclake.identifiers import quote
from cdclake.lake.batch import (
    TableMetadata,
    WrittenColumns,
    read_table_metadata,
)
from cdclake.lake.driver_write import collect_rows, collectable
from cdclake.lake.journals import tombstones_of
from cdclake.lake.ledger_record import LedgerRecord
from cdclake.lake.row_delta import append_blocker
from cdclake.lake.tables import TableMovedError
from cdclake.runtime.session import interpreted_expressions
from cdclake.schema import SchemaPlan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation


log = logging.getLogger("cdclake")


def prepare_batch(
    engine: Engine,
    table: TableConfig,
    files: Sequence[BronzeFile],
    replay: bool = False,
    *,
    ledger_snapshot: int | None,
    checkpoint: Mapping[str, str] | None = None,
) -> BatchPlan:
    """Plan a batch, the plan's only author. The table's metadata is read once (``TableMetadata``)
    and every decision is taken from it. A file written before the tombstone horizon is held
    (``dms.horizon``: it could revive a deleted row) unless a person ``replay``s it; empty files
    are held without reading them; if Spark cannot read the batch, the unreadable files are found
    one by one, planned to be held, and the rest prepared. A batch of at most
    ``BatchSizes.interpreted_batch_bytes`` is evaluated by Spark's interpreter (``interpreted_expressions``).

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
    small = 0 < sum(f.size for f in files) <= engine.sizes.interpreted_batch_bytes
    with interpreted_expressions(engine.spark) if small else nullcontext():
        _prepare(BatchContext(engine, table, metadata, checkpoint or {}), files, plan)
    plan.holds.extend(Hold([x.file], x.reason) for x in late)
    return plan


def _prepare(batch: BatchContext, files: Sequence[BronzeFile], plan: BatchPlan) -> BatchPlan:
    """Prepare ``files`` but the empty, unreadable or refused ones, which the plan holds with their reason."""
    engine, table = batch.engine, batch.table
    remaining = [f for f in files if f.size != 0]
    if empty := [f for f in files if f.size == 0]:
        plan.holds.append(Hold(empty, "empty file"))
    failures = 0
    while remaining:
        try:
            return _prepare_readable(batch, remaining, plan)
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


@dataclass(frozen=True)
class _BatchRead:
    """Step 1: the batch's change rows, observed for their counts, and the schema they bring."""

    files: Sequence[BronzeFile]
    changes: DataFrame  # as read (the bad rows are found in it)
    observed: DataFrame  # ``changes`` counting ``counts`` when materialised
    counts: Observation
    shape: DataFrame  # no rows: the columns of the latest changes
    schema: SchemaPlan
    creates_table: bool

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class _Classified:
    """Step 2: the latest changes, typed as silver stores them, classified against the stored rows."""

    rows: DataFrame  # the latest changes (materialised for keyed tables)
    observed: DataFrame  # what the commit takes: the rows with their effect, counting ``effects``
    effects: Observation
    keys: int  # keyed tables: the batch's keys (each must get exactly one effect)
    history: DataFrame | None  # every valid change (tables with ``history: true``)


def _prepare_readable(batch: BatchContext, files: Sequence[BronzeFile], plan: BatchPlan) -> BatchPlan:
    """A small batch the driver can take is prepared there (``engine.driver_batch``); else plan the
    schema change, then read, count and classify the batch in one pass over its files (the counts
    are observed while the rows are materialised): read, classify, choose and materialise, assemble."""
    engine, table, metadata, checkpoint = batch.engine, batch.table, batch.metadata, batch.checkpoint
    plan.changes = prepare_in_driver(batch, files)
    if plan.changes is not None:
        return plan
    read = _read(engine, table, files, metadata)
    if read.schema.incompatible:
        plan.holds.append(Hold(list(files), "; ".join(read.schema.incompatible), type_change=True))
        return plan
    classified = _classify_batch(engine, table, read, metadata)
    chosen = _choose_and_materialise(engine, table, metadata, read, classified)
    plan.changes = _assemble(engine, table, metadata, read, classified, chosen, checkpoint)
    return plan


def _read(engine: Engine, table: TableConfig, files: Sequence[BronzeFile], metadata: TableMetadata) -> _BatchRead:
    """Read the files and plan the schema change their columns bring (no Spark job)."""
    from pyspark.sql import Observation as Observed

    changes = read_changes(engine, table, files)
    if one_task(engine, len(files), sum(f.size for f in files)):
        # One partition: Spark plans the latest-per-key aggregate and the classification's joins
        # (their other side broadcast) without a shuffle.
        changes = changes.coalesce(1)
    shape, schema = incoming_schema(changes, table, metadata)
    creates_table = not metadata.exists
    # Observations count what the one materialising action below sees; no other action may
    # run on the observed frames first, or it would be the one observed.
    counts = Observed(f"cdclake_read_{uuid.uuid4().hex}")
    observed = changes.observe(counts, *RowCounts.columns())
    return _BatchRead(files, changes, observed, counts, shape, schema, creates_table)


def _classify_batch(engine: Engine, table: TableConfig, read: _BatchRead, metadata: TableMetadata) -> _Classified:
    """The latest change per key, typed, and (keyed tables) its effect against the stored rows; the
    keys are materialised once here (the classification reads them two or three times)."""
    from pyspark.sql import Observation as Observed
    from pyspark.sql import functions as F

    history, keys = None, 0
    if table.history:
        # Every valid change is kept, not only the latest per key: materialise the read once
        # (this action is the observed one) and take both the history and the latest from it.
        valid = cast_columns(read.observed.where(~has_error()), read.schema.cast).localCheckpoint()
        history = history_rows(valid)
        rows = latest_changes(valid, table)
    else:
        rows = cast_columns(latest_changes(read.observed, table, valid=~has_error()), read.schema.cast)
    effects = Observed(f"cdclake_effects_{uuid.uuid4().hex}")
    latest = F.max(COMMIT_TS).alias(_LATEST)
    if table.append_only:
        return _Classified(
            rows, rows.observe(effects, F.count(F.lit(1)).alias(EFFECT_INSERT), latest), effects, 0, history
        )
    keys_seen = Observed(f"cdclake_keys_{uuid.uuid4().hex}")
    rows = rows.observe(keys_seen, F.count(F.lit(1)).alias("keys")).localCheckpoint()
    keys, heap = int(keys_seen.get["keys"]), driver_heap_bytes(engine)
    small = read.bytes <= engine.sizes.broadcast_batch_bytes and broadcast_fits(
        keys, heap, engine.parallel_tables, engine.sizes.broadcast_heap_share
    )
    log.debug("classify table=%s keys=%d heap=%d broadcast=%s", table.source, keys, heap, small)
    classified = _classify(engine, table, rows, read.shape, metadata, small)
    observed = classified.observe(effects, *[F.count_if(F.col(EFFECT) == e).alias(e) for e in EFFECTS], latest)
    return _Classified(rows, observed, effects, keys, history)


def _choose_and_materialise(
    engine: Engine, table: TableConfig, metadata: TableMetadata, read: _BatchRead, classified: _Classified
) -> Chosen:
    """The commit's way, and the one point where the batch's rows leave Spark or stay: small
    enough to collect into the driver (``BatchSizes.driver_write_bytes``), the driver writes its files;
    else the rows are materialised once. The commit's type says which from here on."""
    written = WrittenColumns(
        table.silver_key(), data_columns(classified.rows), read.schema.absent, unchanged_flags(classified.rows)
    )
    way = choose_commit_way(engine, table, metadata, written)
    collected: pa.Table | None = None
    materialized = classified.observed
    driver_way = way == "row-delta" or (way == "append" and not read.creates_table and append_blocker(metadata) is None)
    if driver_way and read.bytes <= engine.sizes.driver_write_bytes and collectable(classified.observed):
        collected = collect_rows(classified.observed)  # its files are written by the driver, no Spark job
    else:
        # A local checkpoint, not a cache: it also cuts the lineage back to the reader's row ids
        # (monotonically_increasing_id), which a copy-on-write MERGE refuses as non-deterministic.
        materialized = classified.observed.localCheckpoint()
    classified.rows.unpersist()  # a checkpoint of its own, if any: the materialised rows no longer need it
    return Chosen(way, written, collected, materialized)


def _assemble(
    engine: Engine,
    table: TableConfig,
    metadata: TableMetadata,
    read: _BatchRead,
    classified: _Classified,
    chosen: Chosen,
    checkpoint: Mapping[str, str],
) -> ChangeSet:
    """The change set from what the materialising action observed: counts, effects, bad rows, and
    the data commit with its rows and its ledger record."""
    silver = engine.silver_table(table)
    stats = classified.effects.get
    counts = RowCounts.of(read.counts.get)
    effects = {e: int(stats[e]) for e in stats if e != _LATEST}
    one_row_per_key(table, silver, effects, classified.keys)
    bad = bad_rows(engine, table, read.changes, read.files, counts)
    if bad is not None:  # a few rows: read from bronze once, here, not again by the commit
        bad = replace(bad, rows=bad.rows.localCheckpoint())
    properties = LedgerRecord.batch([f.key for f in read.files], stats[_LATEST]).properties() | dict(checkpoint)
    commit = data_commit(silver, table, metadata, read.creates_table, chosen, effects, properties)
    return ChangeSet(
        files=list(read.files),
        shape=read.shape,
        schema=read.schema,
        creates_table=read.creates_table,
        counts=counts,
        effects=effects,
        latest_commit_ts=stats[_LATEST],
        bad=bad,
        history=classified.history,
        commit=commit,
    )


# The observed name of the batch's newest commit time.
_LATEST = "_cdc_latest"


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
        stored = nothing.withColumns({STORED_FILE: F.lit(None).cast("string"), STORED_POS: F.lit(None).cast("long")})
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
