"""The tables of one run, worked on concurrently in one Spark session.

A table's work (its full load, or its CDC batches one after the other) is one unit that shares no
mutable state with another table's: its own configuration, state and reports. A bounded pool of
``Engine.parallel_tables`` threads takes the units in order; each runs its Spark jobs in a FAIR
scheduler pool of its own (``spark.scheduler.mode=FAIR``, set by ``runtime.session``), so a small
table's jobs are not queued behind a big table's stages. What tables do share is serialised where
it lives: the journals of a database (``lake.journals``), table creation (``lake.tables``).

A table that fails is recorded with its error and the others go on. Ctrl-C (KeyboardInterrupt in
the main thread, ``Engine.stopping`` set) stops the pool: no unit starts any more, running Spark jobs
are cancelled until every unit has stopped, units stop between batches and no fallback takes a
cancelled job for bad input; every commit is atomic, so nothing is half done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from cdclake.config import TableConfig
from cdclake.context import Engine
from cdclake.engine.select import TableState
from cdclake.errors import CdclakeError, first_line
from cdclake.report import TableFailure, TableReport

log = logging.getLogger("cdclake")

_WAKE_SECONDS = 0.2  # how often the main thread, waiting for the tables, looks for a Ctrl-C


@dataclass
class TableRun:
    """One table's part of a run: filled by the one thread that works on the table."""

    table: TableConfig
    kind: str  # "full-load", "cdc" or "state" (its state read): what its reports and failure say it was doing
    stopping: threading.Event
    reports: list[TableReport] = field(default_factory=list)
    state: TableState | None = None  # the table's state once its work is done
    failure: TableFailure | None = None


def for_each_table(
    engine: Engine, tables: Sequence[TableConfig], kind: str, work: Callable[[TableRun], None]
) -> list[TableRun]:
    """Run ``work`` once per table, up to ``engine.parallel_tables`` at a time; the runs in the
    order of ``tables``, each with its reports and, if it failed, its failure.

    The units always run in pool threads, even one table: the main thread only waits, so a
    Ctrl-C lands there outside any py4j call and can cancel Spark's jobs (PySpark's own handler
    cancels them from inside the interrupted call, which breaks that thread's gateway connection).
    """
    stopping = engine.stopping
    runs = [TableRun(table, kind, stopping) for table in tables]
    if not runs:
        return runs
    workers = min(engine.parallel_tables, len(runs))
    with ThreadPoolExecutor(max(workers, 1), thread_name_prefix="cdclake-table") as pool:
        futures = [pool.submit(_run_unit, engine, table_run, work, workers > 1) for table_run in runs]
        try:
            # Waits that wake up: a signal reaches Python's handler only when the main thread runs
            # (an endless wait on a lock may sleep through Ctrl-C until the table is done).
            while wait(futures, timeout=_WAKE_SECONDS).not_done:
                pass
            for future in futures:
                future.result()
        except BaseException:  # Ctrl-C in the main thread: stop everything, lose nothing
            stopping.set()
            for future in futures:
                future.cancel()
            # Until every unit has stopped: a job submitted just after a cancel (its action was
            # being planned) would otherwise run to its end.
            while True:
                engine.spark.sparkContext.cancelAllJobs()
                if not wait(futures, timeout=_WAKE_SECONDS).not_done:
                    break
            raise
    return runs


def _run_unit(engine: Engine, table_run: TableRun, work: Callable[[TableRun], None], pooled: bool) -> None:
    if table_run.stopping.is_set():
        return
    context = engine.spark.sparkContext
    # A stop cancels the jobs; their running tasks are interrupted too, not left to finish a
    # whole file's scan first (nothing they write is committed).
    context.setLocalProperty("spark.job.interruptOnCancel", "true")
    if pooled:
        # Local properties of this thread's JVM twin (PySpark pins Python threads to JVM threads).
        context.setLocalProperty("spark.scheduler.pool", f"cdclake {table_run.table.source}")
    try:
        work(table_run)
    except Exception as error:
        if table_run.stopping.is_set():
            return  # its Spark job was cancelled by the stop: not the table's failure
        table_run.failure = TableFailure(table_run.table.source, table_run.kind, error)
        if table_run.kind == "state":  # a run's first read (``turn.read_states``): the table's turn reads it again
            log.warning("state read failed table=%s: %s; its turn reads it again", table_run.table.source,
                        first_line(error))  # fmt: skip
        elif isinstance(error, CdclakeError):
            log.error("table failed table=%s: %s", table_run.table.source, first_line(error))
        else:
            log.exception("table failed table=%s: %s", table_run.table.source, first_line(error))
    finally:
        if pooled:
            context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
