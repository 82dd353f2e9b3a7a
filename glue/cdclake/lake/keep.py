"""What maintenance must not expire: the snapshots a crash recovery or a mart's next refresh still
needs. The rules live here, beside the ledger and the history that define them; ``ops/maintenance``
asks and expires the rest.

* A silver table whose full load was staged and never recorded as done (a crash) keeps every
  snapshot: expiring the staged load's snapshot would archive the old load's ledger past it, and
  the archive would then call the half-finished load done (``ledger.full_load_unfinished``).
* The snapshots the configured marts' last refreshes read (silver's, history's, other marts') stay,
  with every later one: a mart's next incremental refresh reads the changes since them.
* History keeps its newest commit that records the silver snapshot it reflects (a compaction
  records none): without it, a history behind silver could not be told (``engine.history_sync``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.lake.history import history_of, reflecting_snapshot_id
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.ledger import full_load_unfinished
from cdclake.lake.ledger_record import MART_SOURCES_PROPERTY
from cdclake.lake.tables import SilverTable, table_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class SnapshotsToKeep:
    """What one silver table's maintenance keeps, for the table and each table beside it."""

    silver_expires: bool  # False: a full load is unfinished, every silver snapshot stays
    marts_read: frozenset[int]  # snapshot ids (of any table) the marts' last refreshes read
    history: frozenset[int]  # for history: those, and its commit recording what it reflects


def snapshots_marts_read(spark: SparkSession, marts: Iterable[SilverTable]) -> frozenset[int]:
    """The snapshot ids the marts' last refreshes read, from each mart's newest commit that recorded
    them. Iceberg snapshot ids are random 64-bit numbers, so a set of ids names them in whichever
    table they are."""
    kept: set[int] = set()
    for mart in marts:
        if not table_exists(spark, mart):
            continue
        lineage = IcebergTable.latest(spark, mart.identifier).lineage((MART_SOURCES_PROPERTY,))
        refresh = next((s for s in lineage if MART_SOURCES_PROPERTY in s.summary), None)
        if refresh is not None:
            kept.update(int(v) for v in json.loads(refresh.summary[MART_SOURCES_PROPERTY]).values())
    return frozenset(kept)


def snapshots_to_keep(spark: SparkSession, silver: SilverTable, marts_read: frozenset[int]) -> SnapshotsToKeep:
    """The rules above for ``silver`` and its history, given what the marts read (``snapshots_marts_read``)."""
    reflecting = reflecting_snapshot_id(spark, history_of(silver))
    return SnapshotsToKeep(
        silver_expires=not full_load_unfinished(spark, silver),
        marts_read=marts_read,
        history=marts_read if reflecting is None else marts_read | {reflecting},
    )
