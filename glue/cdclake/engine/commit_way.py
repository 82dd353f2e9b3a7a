"""How a batch is worked, by its size and its table: its data commit's way (``lake.batch.CommitWay``),
one task or many, its stored keys broadcast or shuffled (``engine.prepare``)."""

from __future__ import annotations

import logging

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.lake.batch import CommitWay, TableMetadata, WrittenColumns
from cdclake.lake.row_delta import why_not_row_delta

log = logging.getLogger("cdclake")


def choose_commit_way(
    engine: Engine,
    table: TableConfig,
    metadata: TableMetadata,
    written: WrittenColumns,
) -> CommitWay:
    """How the batch's data commit is made (``lake.batch.CommitWay``): "append" (append-only tables);
    "row-delta" (written files, one RowDelta, no scan) where the table allows it and the engine does
    not pin another way (``prepare_batch`` makes it "driver-row-delta" for a batch it collects);
    else "merge" into a small table (fewer than ``BatchSizes.merge_below_records`` stored records; a
    table the batch creates) and "publish" (branch-staged) into a large one. A pinned "append" is
    "auto" for keyed tables."""
    if table.append_only:
        return "append"
    base = metadata.snapshot_id
    if engine.commits.way in ("auto", "row-delta", "driver-row-delta") and base is not None:
        why_not = why_not_row_delta(metadata, written)
        if why_not is None:
            return "row-delta"
        log.debug("commit table=%s not through a RowDelta: %s", metadata.table.name, why_not)
    if engine.commits.way == "merge" or engine.commits.way == "publish":
        return engine.commits.way
    if base is None:
        return "merge"
    return "merge" if metadata.total_records < engine.sizes.merge_below_records else "publish"


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


def one_task(engine: Engine, files: int, batch_bytes: int) -> bool:
    """Whether a batch of ``files`` files and ``batch_bytes`` bytes is small enough to prepare in
    one task (``BatchSizes.single_task_batch_bytes``)."""
    return batch_bytes <= engine.sizes.single_task_batch_bytes or (
        files == 1 and batch_bytes <= engine.sizes.broadcast_batch_bytes
    )
