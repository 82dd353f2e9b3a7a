"""The tables of one run, worked on concurrently in one Spark session.

A table's work (its full load, or its CDC batches one after the other) is one unit that shares no
mutable state with another table's: its own configuration, state and reports. A bounded pool of
``Engine.parallel_tables`` threads takes the units in order; each runs its Spark jobs in a FAIR
scheduler pool of its own (``spark.scheduler.mode=FAIR``, set by ``runtime.session``), so a small
table's jobs are not queued behind a big table's stages. What tables do share is serialised where
it lives: the journals of a database (``lake.journals``), table creation (``lake.tables``).

A table that fails is recorded with its error and the others go on. Ctrl-C (KeyboardInterrupt in
the main thread) stops the pool: no unit starts any more, every running Spark job is cancelled, and
units stop between batches (``TableRun.stopping``); every commit is atomic, so nothing is half done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.engine.read import first_line
from cdclake.engine.select import TableState
from cdclake.errors import CdclakeError
from cdclake.report import TableFailure, TableReport

log = logging.getLogger("cdclake")


@dataclass
class TableRun:
    """One table's part of a run: filled by the one thread that works on the table."""

    table: TableConfig
    kind: str  # "full-load" or "cdc": what the table's reports and failure say it was doing
    stopping: threading.Event
    reports: list[TableReport] = field(default_factory=list)
    state: TableState | None = None  # the table's state once its work is done
    failure: TableFailure | None = None


def for_each_table(
    engine: Engine, tables: Sequence[TableConfig], kind: str, work: Callable[[TableRun], None]
) -> list[TableRun]:
    """Run ``work`` once per table, up to ``engine.parallel_tables`` at a time; the runs in the
    order of ``tables``, each with its reports and, if it failed, its failure."""
    stopping = threading.Event()
    runs = [TableRun(table, kind, stopping) for table in tables]
    workers = min(engine.parallel_tables, len(runs))
    if workers <= 1:
        for table_run in runs:
            _attempt(engine, table_run, work, pooled=False)
        return runs
    with ThreadPoolExecutor(workers, thread_name_prefix="cdclake-table") as pool:
        futures = [pool.submit(_attempt, engine, table_run, work, True) for table_run in runs]
        try:
            for future in futures:
                future.result()
        except BaseException:  # Ctrl-C in the main thread: stop everything, lose nothing
            stopping.set()
            for future in futures:
                future.cancel()
            engine.spark.sparkContext.cancelAllJobs()
            raise
    return runs


def _attempt(engine: Engine, table_run: TableRun, work: Callable[[TableRun], None], pooled: bool) -> None:
    if table_run.stopping.is_set():
        return
    context = engine.spark.sparkContext
    if pooled:
        # Local properties of this thread's JVM twin (PySpark pins Python threads to JVM threads).
        context.setLocalProperty("spark.scheduler.pool", f"cdclake {table_run.table.source}")
    try:
        work(table_run)
    except Exception as error:
        table_run.failure = TableFailure(table_run.table.source, table_run.kind, error)
        if isinstance(error, CdclakeError):
            log.error("table failed table=%s: %s", table_run.table.source, first_line(error))
        else:
            log.exception("table failed table=%s: %s", table_run.table.source, first_line(error))
    finally:
        if pooled:
            context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
