"""Refresh the marts: each on its own, one commit per mart; consistent marts at one source cut.

Marts read silver only, never one another, so they refresh concurrently (``Engine.parallel_tables``
at once), each in a Spark session of its own (a clone of the caller's: the same SparkContext and
configuration) with its own temporary views (a refresh registers its pinned sources as views) and
its own FAIR scheduler pool. A mart whose sources did not change since its last refresh costs a few metadata reads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from cdclake.gold import refresh
from cdclake.gold.consistent import refresh_consistent
from cdclake.gold.refresh import REFRESHED, MartRefresh, mart_table
from cdclake.mart_config import MartConfig

if TYPE_CHECKING:
    from cdclake.context import Engine


def refresh_mart(engine: Engine, mart: MartConfig) -> MartRefresh:
    """Refresh one mart; never raises for the mart's own problems (they are in the result)."""
    if mart.consistent:
        target = mart_table(engine, mart)
        return refresh_consistent(engine, mart, f"{target.database}.{target.name}", time.monotonic())
    return refresh.refresh_mart(engine, mart)


def refresh_marts(engine: Engine, marts: Sequence[MartConfig] | None = None) -> list[MartRefresh]:
    """Refresh ``marts`` (all configured ones by default), each on its own: one commit per mart."""
    chosen = list(engine.config.gold.marts if marts is None else marts)
    workers = min(engine.parallel_tables, len(chosen))
    if workers <= 1:
        return [refresh_mart(engine, mart) for mart in chosen]
    with ThreadPoolExecutor(workers, thread_name_prefix="cdclake-mart") as pool:
        return list(pool.map(lambda mart: _in_own_session(engine, mart), chosen))


def _in_own_session(engine: Engine, mart: MartConfig) -> MartRefresh:
    context = engine.spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", f"cdclake mart {mart.name}")
    try:
        from pyspark.sql import SparkSession

        # A clone of the caller's session: its SQL configuration (catalogs a job defined at run
        # time included) and nothing it registers afterwards leaks back.
        own = SparkSession(engine.spark.sparkContext, engine.spark._jsparkSession.cloneSession())
        outcome = refresh_mart(replace(engine, spark=own), mart)
        if outcome.outcome == REFRESHED:
            # The caller's session caches the mart's table metadata of before this session's commit.
            engine.spark.catalog.refreshTable(mart_table(engine, mart).identifier)
        return outcome
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
