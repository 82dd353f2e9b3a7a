"""A batch's data commit, from its classified rows wherever they are (collected into the driver, or
in Spark) and the way chosen for them; shared by the batch prepared with Spark (``engine.prepare``)
and the one prepared in the driver (``engine.driver_batch``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.columns import EFFECT_DELETE, EFFECT_INSERT, EFFECT_UPDATE
from cdclake.config import TableConfig
from cdclake.engine.plan import (
    APPLIED,
    TOMBSTONED,
    collected_tombstone_rows,
    collected_with_effects,
    tombstone_rows,
    with_effects,
)
from cdclake.errors import CdclakeError
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
    WrittenColumns,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from cdclake.lake.tables import SilverTable


@dataclass(frozen=True)
class Chosen:
    """The data commit's way, and its rows: collected into the driver, or materialised in Spark."""

    way: CommitWay
    written: WrittenColumns
    collected: pa.Table | None
    materialized: DataFrame | None


def one_row_per_key(table: TableConfig, silver: SilverTable, effects: Mapping[str, int], keys: int) -> None:
    """Every key of a keyed batch got exactly one effect: else silver holds one of them twice."""
    if not table.append_only and sum(effects.values()) != keys:
        raise CdclakeError(
            f"Table {table.source}: silver table {silver.identifier} holds some of this batch's keys more "
            f"than once ({sum(effects.values()) - keys} extra rows); a mirror holds each key "
            "once. Reload the table (`cdclake full-load --reload`) to rebuild it from bronze."
        )


def data_commit(
    silver: SilverTable,
    table: TableConfig,
    metadata: TableMetadata,
    creates_table: bool,
    chosen: Chosen,
    effects: Mapping[str, int],
    properties: dict[str, str],
) -> DataCommit:
    """The batch's data commit, by the way chosen and where its rows are (collected into the driver,
    or in Spark), from ``metadata`` unless the batch creates the table."""
    key, written = table.silver_key(), chosen.written
    base = None if creates_table else metadata

    def keyed(changes: Rows) -> KeyedBatch[Rows]:
        return KeyedBatch(
            table=silver,
            changes=changes,
            key=written.key,
            columns=written.columns,
            properties=properties,
            metadata=base,
            absent=written.absent,
            unchanged=written.unchanged,
            image_count=effects[EFFECT_INSERT] + effects[EFFECT_UPDATE],
            replaced_count=effects[EFFECT_UPDATE] + effects[EFFECT_DELETE],
        )

    collected, materialized = chosen.collected, chosen.materialized
    if table.append_only and collected is not None:
        return DriverAppend(collected, properties, metadata)
    if collected is not None:
        tombstones = collected_tombstone_rows(collected_with_effects(collected, TOMBSTONED), key)
        return DriverRowDelta(keyed(collected_with_effects(collected, APPLIED)), tombstones)
    assert materialized is not None  # rows not collected stay in Spark
    if table.append_only:
        return Append(materialized, properties, effects[EFFECT_INSERT], base)
    deletes = tombstone_rows(with_effects(materialized, TOMBSTONED), key)
    return _IN_SPARK[chosen.way](keyed(with_effects(materialized, APPLIED)), deletes, materialized)


# The ways whose rows stay in Spark, by the name ``choose_commit_way`` gives them.
_IN_SPARK: dict[CommitWay, type[RowDelta] | type[Merge] | type[Publish]] = {
    "row-delta": RowDelta,
    "merge": Merge,
    "publish": Publish,
}
