"""Apply a CDC batch with a cost that follows the batch, not the table, in ONE snapshot on ``main``.

Spark plans ``MERGE INTO`` with an insert clause as a right-outer join that shuffles every stored
row (the changes can never be the broadcast side). This path does the same work as
``changes.merge_statement`` without that join:

1. *Touched rows*: the stored rows of the batch's keys, found by a semi-join with the batch's keys
   broadcast (the table's key column is streamed once, never shuffled), read at the base snapshot.
2. *Decide*: per change, by the effect the classification gave it (late changes and deletes of
   missing keys are not in the batch): the stored row of its key is replaced; "unchanged" columns
   and columns the batch does not write keep the stored value on update and are NULL on insert;
   ``absent`` columns become NULL.
3. *Stage*: on a private branch created at the base snapshot, ``DELETE`` the replaced rows (an IN
   subquery over the broadcast keys: a semi-join again) and append the new images. Spark writes
   every file (position deletes or rewritten files, data files) and commits to the branch only.
4. *Publish*: one ``RowDelta`` on ``main`` through the Iceberg Java API with the branch's net file
   changes, validated against the base snapshot (a concurrent commit that adds or removes data or
   delete files makes it fail, never silently lose a change), carrying the ledger ``properties``
   in its summary. Readers of ``main`` see the batch at once or not at all.
5. *Clean up*: drop the branch and forget its snapshots (their files now belong to ``main``'s
   snapshot; no file is deleted).

Why not ``fast_forward`` main to the branch (plain write-audit-publish)? It also publishes one
step, but main's lineage then holds the branch's intermediate DELETE snapshot, which is missing
from the ``history`` metadata table (the snapshot log records only the new head). The ledger
reader then joined snapshots with ``history`` and stopped at that gap, forgetting every batch
before the last (it walks parent pointers now). The RowDelta keeps main's history linear: one
snapshot per batch, as with MERGE. Both were measured (``bench/publish_probe.py``); the commit
step is metadata-only either way.

Crash windows: before the RowDelta nothing is visible on main and the ledger does not list the
batch, so the next run applies it again; a leftover ``cdclake_publish_*`` branch is dropped by
the next publish on the table (its files are never referenced by main: snapshot expiry and
orphan-file removal delete them). After the RowDelta the batch and its ledger entry are on main
together; a leftover branch is only clutter, dropped the same way.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.columns import EFFECT, EFFECT_DELETE, EFFECT_UPDATE, OP, SILVER_ORDER
from cdclake.identifiers import quote
from cdclake.lake.batch import KeyedBatch
from cdclake.lake.iceberg import IcebergTable, Snapshot
from cdclake.lake.tables import iceberg_table, merge_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("cdclake")
BRANCH_PREFIX = "cdclake_publish_"
_STORED = "_cdc_stored_"  # prefix of the touched stored row's columns beside a change
_MATCHED = "_cdc_stored_matched"  # a stored row of the key is replaced


@dataclass(frozen=True)
class StagedBatch:
    """A batch written to a private branch, not yet visible on ``main``."""

    table_identifier: str
    base_snapshot_id: int
    branch: str
    branch_snapshot_ids: tuple[int, ...]  # the branch's own snapshots, newest first
    rows_replaced: int  # keys whose stored row, if any, the batch deletes
    rows_written: int  # new images (inserts and updates)


def branch_identifier(table_identifier: str, branch: str) -> str:
    return f"{table_identifier}.{quote('branch_' + branch)}"


def drop_leftover_branches(spark: SparkSession, table_identifier: str) -> list[str]:
    """Drop ``cdclake_publish_*`` branches a crashed run left behind; return their names.

    One writer per table at a time is assumed (cdclake's serial lane): a branch of a publish in
    flight elsewhere would be dropped too, and that publish would then fail, not lose data.
    """
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    leftovers = [name for name in table.refs().keySet() if str(name).startswith(BRANCH_PREFIX)]
    if leftovers:
        manage = table.manageSnapshots()
        for name in leftovers:
            manage = manage.removeBranch(name)
        manage.commit()
    return [str(n) for n in leftovers]


def key_bounds(changes: DataFrame, key: Sequence[str]) -> tuple[Any, Any] | None:
    """(lowest, highest) key of a one-column key, for file pruning; None for composite keys."""
    from pyspark.sql import functions as F

    if len(key) != 1:
        return None
    row = changes.agg(F.min(key[0]).alias("lo"), F.max(key[0]).alias("hi")).first()
    if row is None or row["lo"] is None:
        return None
    return row["lo"], row["hi"]


def _images_and_replaced(
    spark: SparkSession, base_snapshot_id: int, batch: KeyedBatch[DataFrame]
) -> tuple[DataFrame, list[Column]]:
    """The batch's changes with ``_cdc_stored_matched`` (a stored row is replaced), and the
    expressions of their new images in table column order.

    The changes' effects (``effects.classify_effects`` against this same snapshot: insert, update
    and delete only, late changes and deletes of missing keys already left out) are trusted: the
    stored rows are read only when an update must keep stored values.
    """
    from pyspark.sql import functions as F

    table_identifier, changes, key, columns = batch.table.identifier, batch.changes, batch.key, batch.columns
    absent, unchanged = batch.absent, batch.unchanged
    stored = spark.sql(f"SELECT * FROM {table_identifier} VERSION AS OF {base_snapshot_id}")
    # The images follow the table's current schema (a batch may have just added or widened columns,
    # which makes no snapshot); a column the base snapshot lacks held NULL in every stored row.
    types = {f.name: f.dataType for f in spark.table(table_identifier).schema.fields}
    table_columns = list(types)
    in_snapshot = set(stored.columns)
    written = {*columns, *absent, SILVER_ORDER}
    missing = [c for c in (*key, SILVER_ORDER) if c not in types]
    if missing:
        raise ValueError(f"{table_identifier} has no column {', '.join(missing)}")
    # Columns whose stored value an update may keep: flagged "unchanged" ones and any the batch
    # does not write at all (MERGE's UPDATE SET leaves those alone).
    kept = [c for c in table_columns if c not in key and ((c in unchanged and c in columns) or c not in written)]
    read = [c for c in kept if c in in_snapshot]
    if read:
        stored = stored.select(*key, *read)
        bounds = key_bounds(changes, key)
        if bounds is not None:  # a filter Iceberg prunes files and row groups with (key-clustered layouts)
            stored = stored.where(F.col(key[0]).between(*bounds))
        touched = stored.join(F.broadcast(changes.select(*key)), list(key), "left_semi")
        touched = touched.select(*key, *[F.col(c).alias(_STORED + c) for c in read], F.lit(True).alias(_MATCHED))
        changes = changes.join(F.broadcast(touched), list(key), "left")
    # Every key's stored row is deleted: an insert's key may still hold a stored row that the
    # classification did not see as matched (a NULL ``_cdc_order``); the MERGE would update it.
    matched = F.coalesce(F.col(_MATCHED), F.lit(False)) if read else F.col(EFFECT).isin(EFFECT_UPDATE, EFFECT_DELETE)
    applied = changes.withColumn(_MATCHED, matched)

    def stored_value(column: str) -> Column:
        return F.col(_STORED + column) if column in read else F.lit(None)

    def image(column: str) -> Column:
        if column in key or column == SILVER_ORDER:
            value = F.col(column)
        elif column in unchanged and column in columns:
            value = F.when(F.col(_MATCHED) & F.col(unchanged[column]), stored_value(column)).otherwise(F.col(column))
        elif column in columns:
            value = F.col(column)
        elif column in kept:  # not written by the batch: kept on update, NULL on insert
            value = F.when(F.col(_MATCHED), stored_value(column))
        else:  # absent: dropped at the source
            value = F.lit(None)
        return value.cast(types[column]).alias(column)

    return applied, [image(c) for c in table_columns]


def stage_changes(spark: SparkSession, batch: KeyedBatch[DataFrame]) -> StagedBatch:
    """Write the batch's deletes (the stored row of every key it changes) and new images to a new
    private branch of its table, created at the snapshot the batch was classified against: a
    commit on main since then makes the publish fail (``commit_staged``), and the batch is
    classified again, never applied over rows its classification did not see."""
    from pyspark.sql import functions as F

    table_identifier, key = batch.table.identifier, batch.key
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    base = batch.base_snapshot_id
    if base is None:  # a silver table is created with a snapshot (``lake.ledger.replace_table``)
        raise ValueError(f"{table_identifier}: the batch was classified against no snapshot, nothing to stage it on")
    applied, image = _images_and_replaced(spark, base, batch)
    # Decided once, on a frame the size of the batch: the DELETE and the INSERT read it, not the table.
    applied = applied.localCheckpoint()
    started = time.monotonic()
    replaced, written, bounds = _replaced_written_bounds(applied, key)
    log.debug("publish %s: decided in %.2fs", table_identifier, time.monotonic() - started)
    deleted = applied.select(*key)
    images = applied.where(F.col(OP) != "D").select(*image)
    branch = BRANCH_PREFIX + uuid.uuid4().hex[:12]
    target = branch_identifier(table_identifier, branch)
    spark.sql(f"ALTER TABLE {table_identifier} CREATE BRANCH {quote(branch)} AS OF VERSION {base}")
    view = f"cdclake_publish_keys_{branch}"
    try:
        if replaced:
            deleted.createOrReplaceTempView(view)
            keys = ", ".join(quote(k) for k in key)
            prune = f"{quote(key[0])} BETWEEN :lo AND :hi AND " if bounds is not None else ""
            spark.sql(
                f"DELETE FROM {target} WHERE {prune}({keys}) IN (SELECT /*+ BROADCAST({quote(view)}) */ {keys} "
                f"FROM {quote(view)})",
                args={"lo": bounds[0], "hi": bounds[1]} if bounds is not None else None,
            )
        log.debug("publish %s: deleted in %.2fs", table_identifier, time.monotonic() - started)
        if written:
            images.writeTo(target).append()
        log.debug("publish %s: staged in %.2fs", table_identifier, time.monotonic() - started)
    except BaseException:
        table.refresh()
        if table.refs().containsKey(branch):
            table.manageSnapshots().removeBranch(branch).commit()
        raise
    finally:
        spark.catalog.dropTempView(view)
        applied.unpersist()
    table.refresh()
    return StagedBatch(table_identifier, base, branch, _branch_commits(table, branch, base), replaced, written)


def _replaced_written_bounds(applied: DataFrame, key: Sequence[str]) -> tuple[int, int, tuple[Any, Any] | None]:
    """In one Spark job: how many stored rows the batch replaces, how many new images it writes,
    and the replaced keys' (lowest, highest) for a one-column key (else None)."""
    from pyspark.sql import functions as F

    counts = applied.agg(
        F.count(F.lit(1)).alias("replaced"),
        F.count_if(F.col(OP) != "D").alias("written"),
        F.min(F.col(key[0])).alias("lo"),
        F.max(F.col(key[0])).alias("hi"),
    ).first()
    assert counts is not None
    # The replaced keys' range as literals lets Iceberg skip files (and row groups) outside it.
    bounds = (counts["lo"], counts["hi"]) if len(key) == 1 and counts["lo"] is not None else None
    return int(counts["replaced"]), int(counts["written"]), bounds


def _branch_commits(table: Any, branch: str, base: int) -> tuple[int, ...]:
    """The snapshot ids ``branch`` of the (refreshed) Java table holds above ``base``, newest first."""
    head = table.snapshot(branch)
    ids: list[int] = []
    snapshot = table.snapshot(head.snapshotId()) if head is not None else None
    while snapshot is not None and int(snapshot.snapshotId()) != base:
        ids.append(int(snapshot.snapshotId()))
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    return tuple(ids)


def commit_staged(spark: SparkSession, staged: StagedBatch, properties: Mapping[str, str]) -> Snapshot:
    """Publish a staged batch to ``main`` as one RowDelta carrying ``properties``; return the snapshot it made.

    Fails (Iceberg ``ValidationException``) when a commit since the base snapshot added data or
    delete files, or removed a file this batch deletes from or replaces; then nothing changes on
    main and the batch can be applied again from scratch.
    """
    jvm: Any = spark.sparkContext._jvm
    table = iceberg_table(spark, staged.table_identifier)
    table.refresh()
    handle = IcebergTable(table, jvm)
    net = handle.net_files(staged.branch_snapshot_ids)
    referenced = []
    for file in net.added_deletes:
        # A DV names its data file; a file-scoped position delete file says it by its bounds.
        if file.referenced is None:
            # Partition-scoped position deletes (write.delete.granularity=partition) do not say
            # which data files they reference: then refuse any commit on main since the base.
            if int(table.currentSnapshot().snapshotId()) != staged.base_snapshot_id:
                raise RuntimeError(f"{staged.table_identifier}: main moved since the batch was staged")
        else:
            referenced.append(file.referenced)
    committed = handle.commit_row_delta(
        staged.base_snapshot_id, properties,
        added_data=[f.java for f in net.added_data], added_deletes=[f.java for f in net.added_deletes],
        removed_data=[f.java for f in net.removed_data], removed_deletes=[f.java for f in net.removed_deletes],
        referenced=referenced,
    )  # fmt: skip
    _forget_branch(table, staged)
    return committed


def _forget_branch(table: Any, staged: StagedBatch) -> None:
    """Drop the branch and its snapshots; no file is deleted (main's snapshot now holds them)."""
    table.refresh()
    if table.refs().containsKey(staged.branch):
        table.manageSnapshots().removeBranch(staged.branch).commit()
    if staged.branch_snapshot_ids:
        expire = table.expireSnapshots().cleanExpiredFiles(False)
        for snapshot_id in staged.branch_snapshot_ids:
            expire = expire.expireSnapshotId(snapshot_id)
        expire.commit()


def abandon_staged(spark: SparkSession, staged: StagedBatch) -> None:
    """Drop a staged batch that will not be published (its files become orphans)."""
    table = iceberg_table(spark, staged.table_identifier)
    table.refresh()
    if table.refs().containsKey(staged.branch):
        table.manageSnapshots().removeBranch(staged.branch).commit()


def publish_changes(spark: SparkSession, batch: KeyedBatch[DataFrame]) -> Snapshot:
    """Apply the batch's classified changes exactly as ``merge_statement`` would, as ONE new snapshot
    on ``main`` whose summary carries its properties; return that snapshot.

    ``batch.changes``: one row per key (``key`` columns, the data ``columns``, ``_cdc_order``,
    ``_cdc_op``, ``_cdc_effect`` and the flag columns named in ``unchanged``), as
    ``engine.prepare`` plans them: classified (``classify_effects``) against the table's current
    snapshot, inserts, updates and deletes only. The stored row of every key is deleted; inserts
    and updates write their new image.
    ``unchanged``: column -> boolean flag column; a flagged value keeps the stored one on update.
    ``absent``: table columns the batch does not carry; they become NULL. Table columns named
    nowhere keep their stored value on update and are NULL on insert.
    Raises if a concurrent commit on main conflicts (nothing is then published).
    """
    drop_leftover_branches(spark, batch.table.identifier)
    staged = stage_changes(spark, batch)
    try:
        return commit_staged(spark, staged, batch.properties)
    except BaseException:
        abandon_staged(spark, staged)
        raise


def append_validated(
    spark: SparkSession, table_identifier: str, rows: DataFrame, base_snapshot_id: int, properties: Mapping[str, str]
) -> Snapshot:
    """Append ``rows`` to ``main`` as ONE snapshot carrying ``properties``, only while ``main`` has
    had no data commit since ``base_snapshot_id``; return the snapshot it made.

    A plain append never conflicts: two writers that both read the ledger at the base snapshot
    would both append the same files' rows. So the rows are appended on a private branch created
    at the base and published as one RowDelta validated from it (``commit_staged``): a commit on
    main since then that added data or delete files makes it fail as a conflict, and the batch is
    planned again from the ledger as it is now (``engine.turn.apply_batch``).
    """
    return _validated(
        spark, table_identifier, base_snapshot_id, properties, lambda target: rows.writeTo(target).append()
    )


def merge_validated(
    spark: SparkSession, batch: KeyedBatch[DataFrame], statement: Callable[[str, str], str]
) -> Snapshot:
    """Run the MERGE ``statement(target, view)`` of the batch's changes so that ``main`` gets ONE
    snapshot carrying its properties, only while ``main`` has had no data commit since the batch's
    base snapshot; return the snapshot it made.

    Spark's MERGE validates from the snapshot its own scan reads, not from the one the batch was
    planned at (its ledger read): a commit by another writer in between would go unseen and the
    batch's files would be recorded twice. So the MERGE runs on a private branch created at the
    base and is published as one RowDelta validated from it (``commit_staged``)."""
    base = batch.base_snapshot_id
    if base is None:
        raise ValueError(f"{batch.table.identifier}: the batch was planned against no snapshot")
    return _validated(
        spark,
        batch.table.identifier,
        base,
        batch.properties,
        lambda target: merge_frame(spark, batch.changes, lambda view: statement(target, view)),
    )


def _validated(
    spark: SparkSession,
    table_identifier: str,
    base_snapshot_id: int,
    properties: Mapping[str, str],
    write: Callable[[str], object],
) -> Snapshot:
    """``write(target)`` on a new private branch at ``base_snapshot_id``, then published to ``main``
    as one RowDelta carrying ``properties`` and validated from the base (``commit_staged``)."""
    drop_leftover_branches(spark, table_identifier)
    table = iceberg_table(spark, table_identifier)
    branch = BRANCH_PREFIX + uuid.uuid4().hex[:12]
    table.manageSnapshots().createBranch(branch, base_snapshot_id).commit()
    try:
        write(branch_identifier(table_identifier, branch))
    except BaseException:
        table.refresh()
        if table.refs().containsKey(branch):
            table.manageSnapshots().removeBranch(branch).commit()
        raise
    table.refresh()
    ids: list[int] = []
    snapshot = table.snapshot(branch)
    while snapshot is not None and int(snapshot.snapshotId()) != base_snapshot_id:
        ids.append(int(snapshot.snapshotId()))
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    staged = StagedBatch(table_identifier, base_snapshot_id, branch, tuple(ids), 0, 0)
    try:
        return commit_staged(spark, staged, properties)
    except BaseException:
        abandon_staged(spark, staged)
        raise
