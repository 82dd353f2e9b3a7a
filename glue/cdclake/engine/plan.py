"""The plan of one CDC batch: what its commit writes (``engine.prepare`` is its only author,
``engine.commit`` its reader), and the row helpers both sides use.

The plan holds the files to quarantine and why (``Hold``), and the rows to apply (``ChangeSet``): read,
classified against the stored rows and the tombstones, materialised once, with the data commit chosen
for them (``lake.batch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdclake.columns import (
    COMMIT_TS,
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_UPDATE,
    SILVER_ORDER,
    TOMBSTONE_DELETED_AT,
)
from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import BronzeFile
from cdclake.engine.read import BadRows, RowCounts
from cdclake.lake.batch import DataCommit, TableMetadata
from cdclake.schema import SchemaPlan

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class BatchContext:
    """What every step of preparing one batch reads: the engine, the table, its metadata as the plan
    read it, and the checkpoint the commit also records."""

    engine: Engine
    table: TableConfig
    metadata: TableMetadata
    checkpoint: Mapping[str, str]


@dataclass(frozen=True)
class Hold:
    """Files to keep in quarantine (not applied, held until a replay), and why."""

    files: list[BronzeFile]
    reason: str
    type_change: bool = False  # a type change no widening covers (``SchemaPlan.incompatible``): held until a reload


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


# The effects a keyed batch's data commit applies, and those that leave a tombstone.
APPLIED = (EFFECT_INSERT, EFFECT_UPDATE, EFFECT_DELETE)
TOMBSTONED = (EFFECT_DELETE, EFFECT_DELETE_MISSING)


def with_effects(rows: DataFrame, effects: Sequence[str]) -> DataFrame:
    """The classified ``rows`` whose effect is one of ``effects``."""
    from pyspark.sql import functions as F

    return rows.where(F.col(EFFECT).isin(*effects))


def collected_with_effects(rows: pa.Table, effects: Sequence[str]) -> pa.Table:
    """``with_effects`` of classified rows collected into the driver."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return rows.filter(pc.is_in(rows.column(EFFECT), value_set=pa.array(list(effects))))


def tombstone_rows(changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """What a tombstone holds: the deleted key, the delete's order and its commit time."""
    from pyspark.sql import functions as F

    return changes.select(*key, SILVER_ORDER, F.col(COMMIT_TS).alias(TOMBSTONE_DELETED_AT))


def collected_tombstone_rows(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """``tombstone_rows`` of changes collected into the driver."""
    kept = [*key, SILVER_ORDER, COMMIT_TS]
    return changes.select(kept).rename_columns([*key, SILVER_ORDER, TOMBSTONE_DELETED_AT])
