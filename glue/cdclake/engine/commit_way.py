"""How a batch's data commit is made (``lake.batch.CommitWay``), from the table as the plan read it."""

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
    else "merge" into a small table (fewer than ``Engine.merge_below_records`` stored records; a
    table the batch creates) and "publish" (branch-staged) into a large one. A pinned "append" is
    "auto" for keyed tables."""
    if table.append_only:
        return "append"
    base = metadata.snapshot_id
    if engine.commit_path in ("auto", "row-delta", "driver-row-delta") and base is not None:
        why_not = why_not_row_delta(metadata, written)
        if why_not is None:
            return "row-delta"
        log.debug("commit table=%s not through a RowDelta: %s", metadata.table.name, why_not)
    if engine.commit_path == "merge" or engine.commit_path == "publish":
        return engine.commit_path
    if base is None:
        return "merge"
    return "merge" if metadata.total_records < engine.merge_below_records else "publish"
