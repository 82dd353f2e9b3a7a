"""History in step with silver: a history behind silver is caught up before a table's run.

Silver commits first and history after it (``engine.commit``), and every history commit records
the silver snapshot it reflects (``lake.history.SILVER_SEQUENCE_PROPERTY``). A crash between the
two (or a history commit that failed) leaves silver with batches history lacks: the CDC files of
silver's snapshots after the one history reflects (``lake.ledger.batches_after``: the lineage,
and the ledger archive for what maintenance expired). The next run, before anything else, reads
those files from bronze again and adds their changes to history, exactly once as always.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.dms.files import parse_key
from cdclake.engine.read import history_changes
from cdclake.errors import HistoryBehindError
from cdclake.lake.history import apply_history, history_of, history_started, reflected_sequence, reflecting
from cdclake.lake.ledger import batches_after, full_load_unfinished, newest_load
from cdclake.lake.ledger_record import LedgerRecord, SnapshotRef
from cdclake.lake.tables import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("cdclake")


@dataclass(frozen=True)
class HistoryLag:
    """What a table's history lacks of silver."""

    files: tuple[str, ...]  # CDC files silver applied whose changes history lacks, in commit order
    newest: SnapshotRef | None  # the silver snapshot that committed the last of them
    load: bool = False  # history lacks silver's newest full load as well (history was off then)

    def describe(self) -> str:
        """One phrase for ``status`` and the log."""
        if self.load:
            return "history lacks silver's last full load: reload the table or start its history again"
        return f"history behind silver by {len(self.files)} CDC file(s); the next run catches it up"


def history_lag(engine: Engine, table: TableConfig) -> HistoryLag | None:
    """What ``table``'s history lacks of silver, from table metadata (and the ledger archive for
    expired snapshots); None when it lacks nothing, or when there is nothing to compare: no history,
    a history written before it recorded silver's snapshot, a history turned on after the table
    started or not started after a load with rows (``lake.history.start_history`` starts it), a
    full load not finished (the next run loads the table again, and its history with it)."""
    if not table.history:
        return None
    silver = engine.silver_table(table)
    if not table_exists(engine.spark, silver):
        return None
    history = history_of(silver)
    reflected = reflected_sequence(engine.spark, history)
    if reflected is None:
        if history_started(engine.spark, history) or not table_exists(engine.spark, history):
            # Written before history recorded silver's snapshot: nothing to compare. Or turned on
            # after the table started: history starts from silver's rows (``start_history``).
            return None
        load = newest_load(engine.spark, silver)
        if load is None or load[1] > 0:
            return None  # a load with rows: history starts from silver's rows (start_history)
        # Created with silver (by its load's history step, or with a table its first batch
        # created) and never written: complete from the table's first change.
        reflected = load[0].sequence_number
    after = batches_after(engine.spark, silver, reflected)
    if after.load_after:
        if full_load_unfinished(engine.spark, silver):
            return None
        return HistoryLag(after.files, after.newest, load=True)
    return HistoryLag(after.files, after.newest) if after.files else None


@dataclass(frozen=True)
class BatchHistory:
    """A batch just committed to silver, with its history rows in hand (``ChangeSet.history``)."""

    files: tuple[str, ...]  # its bronze files
    rows: DataFrame  # every valid change of them
    properties: Mapping[str, str]  # its ledger record
    committed: SnapshotRef  # the silver snapshot that committed it


def catch_up_history(engine: Engine, table: TableConfig) -> int:
    """Bring ``table``'s history up to silver before anything else is done to the table: read the
    CDC files silver applied after the snapshot history reflects from bronze again and add their
    changes to history in one commit that reflects silver's newest batch. Returns how many files
    were read (0: history was not behind). HistoryBehindError when it cannot: a file gone from
    bronze, or a full load history never had."""
    return _bring_up(engine, table, None)


def append_batch_history(engine: Engine, table: TableConfig, batch: BatchHistory) -> None:
    """After a batch's silver commit: add its changes to history, with whatever else silver holds
    that history lacks (another writer's batch committed between this one and the snapshot history
    reflects: without it, this commit would say history reflects that batch too)."""
    _bring_up(engine, table, batch)


def _bring_up(engine: Engine, table: TableConfig, batch: BatchHistory | None) -> int:
    """Through the committer's seam (``append_history``), which also covers finding what history
    lacks: a writer that commits to silver meanwhile is seen."""
    if batch is None and history_lag(engine, table) is None:
        return 0  # in step: the common case, from table metadata
    read: list[int] = []
    engine.committer.append_history(lambda: read.append(_append(engine, table, batch)))
    return read[0] if read else 0


def _append(engine: Engine, table: TableConfig, batch: BatchHistory | None) -> int:
    """One history commit: the ``batch`` in hand (if any) and the files silver holds that history
    lacks besides, read from bronze again, reflecting the newest silver snapshot among them.
    Returns how many files were read from bronze."""
    lag = history_lag(engine, table)
    history = history_of(engine.silver_table(table))
    in_hand = set(batch.files) if batch else set()
    behind = [key for key in lag.files if key not in in_hand] if lag else []
    if lag is not None and (lag.load or behind):
        log.warning("history behind silver table=%s files=%d: %s", table.source, len(behind), lag.describe())
    if lag is not None and lag.load:
        raise HistoryBehindError(
            f"Table {table.source}: history {history.identifier} lacks silver's last full load (history was "
            "turned off then): reload the table (`cdclake full-load --reload`), or drop the history table to "
            "start it again from silver's rows."
        )
    if not behind and batch is None:
        return 0
    rows = _history_rows(engine, table, behind) if behind else None
    if batch is not None:
        rows = batch.rows if rows is None else batch.rows.unionByName(rows, allowMissingColumns=True)
    assert rows is not None
    newest = max(
        [r for r in (lag.newest if lag else None, batch.committed if batch else None) if r is not None],
        key=lambda r: r.sequence_number,
    )
    recorded = [*behind, *(batch.files if batch else ())]
    properties = {
        **(batch.properties if batch else {}),
        **LedgerRecord.batch(recorded).properties(),
        **reflecting(newest),
    }
    apply_history(engine.spark, history, rows, table.silver_key(), properties)
    if behind:
        log.warning("history caught up table=%s files=%d silver_snapshot=%d", table.source, len(behind),
                    newest.snapshot_id)  # fmt: skip
    return len(behind)


def _history_rows(engine: Engine, table: TableConfig, keys: Sequence[str]) -> DataFrame:
    """The history rows of CDC files silver applied, read from bronze again."""
    sizes = {key: engine.store.size(key) for key in keys}
    gone = [key for key, size in sizes.items() if size is None]
    if gone:
        history = history_of(engine.silver_table(table))
        raise HistoryBehindError(
            f"Table {table.source}: history {history.identifier} lacks the changes of {len(gone)} file(s) silver "
            f"holds, and bronze no longer has them ({', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''}): "
            "restore them to bronze and run again, or drop the history table to start it again from silver's rows."
        )
    transaction_path = engine.config.bronze.transaction_path
    return history_changes(engine, table, [parse_key(key, size or 0, transaction_path) for key, size in sizes.items()])
