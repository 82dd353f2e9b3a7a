"""Refresh the marts: each on its own, one commit per mart, independent marts at the same time.

Marts refresh concurrently in the one Spark session, ``Engine.parallel_tables`` at a time, each in
a FAIR scheduler pool of its own (the pattern of ``engine.parallel``). A refresh shares nothing
mutable with another: its pinned snapshots are temporary views of its own names, its commit is
one Iceberg commit on its own table. A mart whose SQL reads another mart (``<gold database>.<mart>``)
waits for that mart's refresh: marts go in waves, each wave's marts reading only marts of earlier
waves. A mart that fails is reported with its reason and stops nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from cdclake.errors import first_line
from cdclake.gold import refresh
from cdclake.gold.consistent import refresh_consistent
from cdclake.gold.refresh import FAILED, MartRefresh, gold_database, mart_table
from cdclake.mart_config import MartConfig
from cdclake.mart_sql import referenced_tables

if TYPE_CHECKING:
    from cdclake.context import Engine

log = logging.getLogger("cdclake.gold")


def refresh_mart(engine: Engine, mart: MartConfig) -> MartRefresh:
    """Refresh one mart; never raises for the mart's own problems (they are in the result)."""
    target = mart_table(engine, mart)
    label = f"{target.database}.{target.name}"
    started = time.monotonic()
    try:
        if mart.consistent:
            return refresh_consistent(engine, mart, label, started)
        return refresh.refresh_pinned(engine, mart)
    except Exception as exc:  # anything the refresh did not foresee: this mart failed, the others go on
        log.exception("gold mart failed mart=%s", label)
        return MartRefresh(label, FAILED, reason=first_line(exc), seconds=time.monotonic() - started)


def mart_waves(engine: Engine, marts: Sequence[MartConfig]) -> tuple[list[list[int]], list[int]]:
    """The marts (indexes into ``marts``) in waves, each reading only marts of earlier waves; and
    the marts that read each other in a cycle (they cannot be ordered)."""
    gold_db = gold_database(engine.config)
    names = {f"{gold_db}.{m.name}": m.name for m in marts}
    index = {m.name: i for i, m in enumerate(marts)}
    reads = [
        {index[names[n]] for n in referenced_tables(m.sql, names, engine.catalog)} - {i} for i, m in enumerate(marts)
    ]
    waves: list[list[int]] = []
    placed: set[int] = set()
    while True:
        wave = [i for i in range(len(marts)) if i not in placed and reads[i] <= placed]
        if not wave:
            break
        waves.append(wave)
        placed.update(wave)
    return waves, [i for i in range(len(marts)) if i not in placed]


def refresh_marts(engine: Engine, marts: Sequence[MartConfig] | None = None) -> list[MartRefresh]:
    """Refresh ``marts`` (all configured ones by default), each on its own: one commit per mart;
    the results in the order of ``marts``."""
    chosen = list(engine.config.gold.marts if marts is None else marts)
    results: dict[int, MartRefresh] = {}
    waves, cycle = mart_waves(engine, chosen)
    for i in cycle:
        target = mart_table(engine, chosen[i])
        others = ", ".join(chosen[j].name for j in cycle if j != i)
        reason = f"its SQL reads marts that read it back ({others})"
        results[i] = MartRefresh(f"{target.database}.{target.name}", FAILED, reason=reason)
    for wave in waves:
        results.update(_refresh_wave(engine, [(i, chosen[i]) for i in wave]))
    return [results[i] for i in range(len(chosen))]


def _refresh_wave(engine: Engine, wave: list[tuple[int, MartConfig]]) -> dict[int, MartRefresh]:
    workers = min(engine.parallel_tables, len(wave))
    if workers <= 1:
        return {i: refresh_mart(engine, mart) for i, mart in wave}
    with ThreadPoolExecutor(workers, thread_name_prefix="cdclake-mart") as pool:
        futures = {i: pool.submit(_pooled, engine, mart) for i, mart in wave}
        try:
            return {i: future.result() for i, future in futures.items()}
        except BaseException:  # Ctrl-C in the main thread: start no other mart, cancel running jobs
            for future in futures.values():
                future.cancel()
            engine.spark.sparkContext.cancelAllJobs()
            raise


def _pooled(engine: Engine, mart: MartConfig) -> MartRefresh:
    context = engine.spark.sparkContext
    # Local properties of this thread's JVM twin (PySpark pins Python threads to JVM threads).
    context.setLocalProperty("spark.scheduler.pool", f"cdclake gold {mart.name}")
    try:
        return refresh_mart(engine, mart)
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
