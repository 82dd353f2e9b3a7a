"""Marts computed as of one source commit time that every table they read has reached.

DMS writes each table's files on its own clock, so two silver tables at their latest snapshots can
disagree (an order applied, its lines not yet). Each silver CDC commit records the source commit time
it is complete up to (``cdclake.latest-commit-ts``; along the lineage, the running maximum). A
``consistent: true`` mart is computed at one time T:

* a table that keeps history can be read as of any T it has reached (its versions valid at T);
* a table without history only at the times its snapshots reached exactly: a snapshot that reached
  t holds every change up to t and none after it.

T is the latest time that every table without history has a snapshot at and every table with history
has reached, or the database's published cut (``engine.cut``: every silver table at one source
moment, quiet tables included) when it is at least as late and holds every table the mart reads.
When there is none yet (the tables' batches never ended at the same source commit), the mart waits:
it keeps its content and the refresh says what it waits for. Always a full recompute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdclake.errors import first_line
from cdclake.gold import refresh as gold
from cdclake.gold.pinned import PinnedSource, mart_sources, pinned_read, pinned_views
from cdclake.lake.ledger_record import LATEST_COMMIT_TS_PROPERTY
from cdclake.lake.tables import SilverTable, ensure_database, table_exists
from cdclake.mart_config import MartConfig
from cdclake.mart_sql import definition_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdclake.context import Engine


@dataclass(frozen=True)
class SourceTimeline:
    """One table a mart reads: the source commit time reached at each snapshot of its lineage."""

    name: str  # database.table as the SQL names it
    table: SilverTable
    reached: list[tuple[int, str]]  # (snapshot id, complete up to), oldest first; CDC commits only
    history: SilverTable | None  # its __history table, if kept


def choose_cut(timelines: list[SourceTimeline]) -> str | None:
    """The latest source commit time every table can be read at (pure; None: none yet)."""
    if any(not t.reached for t in timelines):
        return None
    bound = min((t.reached[-1][1] for t in timelines if t.history), default=None)
    exact = [{reached for _, reached in t.reached} for t in timelines if not t.history]
    if not exact:
        return bound
    candidates = set.intersection(*exact)
    if bound is not None:
        candidates = {c for c in candidates if c <= bound}
    return max(candidates, default=None)


def _timeline(spark: SparkSession, name: str, table: SilverTable, history: SilverTable | None) -> SourceTimeline:
    rows = spark.sql(
        f"""
        SELECT h.snapshot_id, s.summary['{LATEST_COMMIT_TS_PROPERTY}'] AS latest
        FROM {table.metadata("history")} h JOIN {table.metadata("snapshots")} s ON h.snapshot_id = s.snapshot_id
        WHERE h.is_current_ancestor ORDER BY h.made_current_at
        """
    ).collect()
    reached: list[tuple[int, str]] = []
    for row in rows:
        newest = max(filter(None, [row["latest"], reached[-1][1] if reached else None]), default=None)
        if newest is not None:
            reached.append((int(row["snapshot_id"]), newest))
    return SourceTimeline(name, table, reached, history)


def _published_cut(engine: Engine, timelines: list[SourceTimeline]) -> tuple[str, dict[str, int]] | None:
    """The database's latest published cut (``lake.cuts``) as (T, snapshot id by the mart's name of each
    table), when it holds every table the mart reads and has a source commit time; else None."""
    from cdclake.lake.cuts import latest_cut

    database = engine.config.database
    if any(t.table.database != database for t in timelines):
        return None  # a mart reading another mart: not in the silver database's cut
    cut = latest_cut(engine.spark, engine.catalog, database)
    if cut is None or cut.commit_ts is None or any(t.table.name not in cut.snapshots for t in timelines):
        return None
    return cut.commit_ts, {t.name: cut.snapshots[t.table.name] for t in timelines}


def _as_of(spark: SparkSession, history: SilverTable, cut: str) -> DataFrame:
    """A table's rows as they were at source commit time ``cut``, from its history."""
    from cdclake.lake.history import HISTORY_COLUMNS

    frame = spark.table(history.identifier)
    columns = [c for c in frame.columns if c not in HISTORY_COLUMNS]
    moment = "CAST('" + cut.replace("'", "''") + "' AS TIMESTAMP)"
    return frame.where(
        f"valid_from <= {moment} AND (valid_to IS NULL OR valid_to > {moment}) AND operation <> 'D'"
    ).select(*columns)


def refresh_consistent(engine: Engine, mart: MartConfig, label: str, started: float) -> gold.MartRefresh:
    """Refresh ``mart`` as of the latest source commit time every table it reads has reached."""
    from cdclake.lake.history import history_of

    spark = engine.spark
    target = gold.mart_table(engine, mart)
    timelines = []
    for name, table in mart_sources(engine, mart):
        if not table_exists(spark, table):
            return gold.MartRefresh(label, gold.WAITING, reason=f"silver table {name} has no data yet")
        config = next((t for t in engine.config.tables if t.target == table.name), None)
        history = history_of(table) if config is not None and config.history else None
        if history is not None and not table_exists(spark, history):
            history = None
        timelines.append(_timeline(spark, name, table, history))
    cut = choose_cut(timelines)
    published = _published_cut(engine, timelines)
    if published is not None and (cut is None or published[0] >= cut):
        cut = published[0]
        # every table at the published cut's snapshot (``engine.cut``): history is not needed
        timelines = [replace(t, history=None, reached=[(published[1][t.name], cut)]) for t in timelines]
    if cut is None:
        reached = ", ".join(f"{t.name} at {t.reached[-1][1] if t.reached else 'no CDC commit'}" for t in timelines)
        return gold.MartRefresh(
            label, gold.WAITING, reason=f"no source commit time every table has reached yet ({reached})"
        )
    chosen: dict[str, int] = {}
    for t in timelines:
        matching = [sid for sid, reached in t.reached if reached == cut] if not t.history else []
        chosen[t.name] = matching[-1] if matching else t.reached[-1][0]
    pinned = [PinnedSource(t.name, t.table, chosen[t.name]) for t in timelines]
    previous = gold.last_refresh(spark, target)
    definition = definition_id(mart.sql, mart.keys, mart.partition_by, mart.consistent)
    if previous and previous.cut == cut and previous.sources == chosen and previous.definition == definition:
        return gold.MartRefresh(label, gold.UP_TO_DATE, sources=chosen, seconds=time.monotonic() - started)
    with pinned_views(spark) as registered:
        views = {}
        for i, t in enumerate(timelines):
            frame = _as_of(spark, t.history, cut) if t.history else pinned_read(spark, t.table, chosen[t.name])
            views[t.name] = registered.register(f"cut_{i}", frame)
        try:
            current = gold.evaluate(spark, mart, views, engine.catalog)
        except Exception as exc:
            reason = f"its SQL does not compile: {first_line(exc)}"
            return gold.MartRefresh(label, gold.FAILED, reason=reason, seconds=time.monotonic() - started)
        try:
            ensure_database(spark, target.catalog, target.database)
            props = gold.mart_properties(mart, pinned, gold.PATH_FULL, cut, reason="consistent cut", cut=cut)
            gold.replace_mart(spark, target, current, mart, props)
        except Exception as exc:
            reason = first_line(exc)
            return gold.MartRefresh(label, gold.FAILED, reason=reason, seconds=time.monotonic() - started)
    outcome = gold.MartRefresh(label, gold.REFRESHED, gold.PATH_FULL, reason=f"consistent cut at {cut}", sources=chosen)
    return gold.timed(outcome, started)
