"""Refresh gold marts from pinned silver snapshots: one Iceberg commit per mart.

A refresh pins the current snapshot of every table a mart reads (silver tables, and marts it reads)
and evaluates the mart's SQL against those snapshots only (temporary views of ``VERSION AS OF``
reads, named for this refresh alone, so marts refresh concurrently in one session), so a mart
reflects one cut of silver. The commit records the snapshot ids in its summary
(``cdclake.gold.sources``); when none changed since, and the definition did not either, the refresh
is a no-op, decided from Iceberg metadata without a Spark job.

* **Full**: ``createOrReplace`` of the mart with the SQL's result (an atomic replace, one commit).
* **Incremental** (marts with ``keys`` whose SQL is a GROUP BY of those keys): the groups whose
  source rows changed since the snapshots last reflected are found by evaluating the SQL over the
  changed rows only (``snapshots.changed_rows``: before-images against the old snapshots,
  after-images against the new, read from the data files the changes touch), the SQL is evaluated
  again for those groups only (a semi-join on the keys, which Spark pushes below the aggregation,
  and a filter on the keys' ranges, which reaches the scan), and one MERGE replaces them (groups
  that no longer exist are deleted). It is taken only while it costs less than a full refresh
  (``gold.cost``, from the tables' metadata): not when finding the affected groups reads
  ``gold.full_refresh_share`` of what a full refresh reads or more, nor when the tables are smaller
  than ``gold.full_refresh_below_mb``; then the mart is refreshed in full, saying why.

A mart whose SQL does not compile, or whose refresh fails, is reported with the reason and keeps
its previous content; the other marts refresh.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdclake.config import gold_database as gold_database  # the gold modules and jobs import it from here
from cdclake.errors import first_line
from cdclake.gold.cost import SourceReads, full_refresh_reason
from cdclake.gold.groups import groups_and_key_ranges, incremental_shape_problem
from cdclake.gold.pinned import PinnedSource, PinnedViews, mart_sources, pinned_read, pinned_views
from cdclake.gold.snapshots import (
    ChangeScope,
    IncrementalUnavailable,
    StagedScans,
    change_scope,
    changed_rows,
    current_snapshot,
    latest_commit_ts_at,
    staged_scans,
    table_bytes,
)
from cdclake.identifiers import quote
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.ledger_record import KIND_PROPERTY, MART_SOURCES_PROPERTY
from cdclake.lake.tables import (
    TABLE_PROPERTIES,
    SilverTable,
    commit_with_properties,
    ensure_database,
    table_exists,
)
from cdclake.mart_config import MartConfig
from cdclake.mart_sql import definition_id, group_merge_statement, substitute_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdclake.context import Engine

log = logging.getLogger("cdclake.gold")

KIND_GOLD = "gold"
SOURCES_PROPERTY = MART_SOURCES_PROPERTY
PATH_PROPERTY = "cdclake.gold.path"  # "incremental" or "full"
REASON_PROPERTY = "cdclake.gold.reason"  # why a keyed mart was recomputed in full
DEFINITION_PROPERTY = "cdclake.gold.definition"  # digest of sql, keys, partition_by, consistent
GROUPS_PROPERTY = "cdclake.gold.groups"  # groups an incremental refresh recomputed
SOURCE_COMMIT_TS_PROPERTY = "cdclake.gold.source-commit-ts"  # every source is complete up to this commit
CUT_PROPERTY = "cdclake.gold.cut-commit-ts"  # consistent marts: the one source commit time computed at

PATH_FULL, PATH_INCREMENTAL = "full", "incremental"
REFRESHED, UP_TO_DATE, FAILED, WAITING = "refreshed", "up to date", "failed", "waiting"
_KEY_PREFIX = "_cdc_key_"
_PRESENT = "_cdc_present"


@dataclass(frozen=True)
class MartRefresh:
    """What one mart's refresh did."""

    mart: str  # gold_database.name
    outcome: str  # refreshed | up to date | failed | waiting
    path: str | None = None  # incremental | full (refreshed only)
    reason: str = ""  # why full, why failed, what it waits for
    groups: int | None = None  # groups recomputed by an incremental refresh
    sources: dict[str, int] = field(default_factory=dict)  # silver snapshot ids reflected
    seconds: float = 0.0


@dataclass(frozen=True)
class LastRefresh:
    """The newest gold commit of a mart (read from its snapshot summary)."""

    snapshot_id: int
    committed_at: str  # UTC (the session's time zone), yyyy-MM-dd HH:mm:ss[.fff]
    sources: dict[str, int]
    definition: str | None
    path: str | None
    reason: str | None
    cut: str | None


def mart_table(engine: Engine, mart: MartConfig) -> SilverTable:
    """The Iceberg table a mart is kept in: ``<catalog>.<gold database>.<mart name>``."""
    return SilverTable(engine.catalog, gold_database(engine.config), mart.name)


def last_refresh(spark: SparkSession, target: SilverTable) -> LastRefresh | None:
    """The newest commit on the mart's current lineage that recorded a refresh (None: never
    refreshed); read from the table's metadata, without a Spark job."""
    from datetime import UTC, datetime

    if not table_exists(spark, target):
        return None
    keys = (SOURCES_PROPERTY, DEFINITION_PROPERTY, PATH_PROPERTY, REASON_PROPERTY, CUT_PROPERTY)
    lineage = IcebergTable.latest(spark, target.identifier).lineage(keys)
    snapshot = next((s for s in lineage if SOURCES_PROPERTY in s.summary), None)
    if snapshot is None:
        return None
    summary = snapshot.summary
    committed = datetime.fromtimestamp(snapshot.timestamp_millis / 1000, UTC)
    return LastRefresh(
        snapshot_id=snapshot.snapshot_id,
        committed_at=committed.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
        sources={k: int(v) for k, v in json.loads(summary[SOURCES_PROPERTY]).items()},
        definition=summary.get(DEFINITION_PROPERTY),
        path=summary.get(PATH_PROPERTY),
        reason=summary.get(REASON_PROPERTY),
        cut=summary.get(CUT_PROPERTY),
    )


def mart_properties(
    mart: MartConfig,
    pinned: Sequence[PinnedSource],
    path: str,
    source_commit_ts: str | None,
    reason: str = "",
    groups: int | None = None,
    cut: str | None = None,
) -> dict[str, str]:
    properties = {
        KIND_PROPERTY: KIND_GOLD,
        SOURCES_PROPERTY: json.dumps({p.name: p.snapshot_id for p in pinned}, separators=(",", ":"), sort_keys=True),
        PATH_PROPERTY: path,
        DEFINITION_PROPERTY: definition_id(mart.sql, mart.keys, mart.partition_by, mart.consistent),
    }
    if reason:
        properties[REASON_PROPERTY] = reason
    if groups is not None:
        properties[GROUPS_PROPERTY] = str(groups)
    if source_commit_ts:
        properties[SOURCE_COMMIT_TS_PROPERTY] = source_commit_ts
    if cut:
        properties[CUT_PROPERTY] = cut
    return properties


def replace_mart(
    spark: SparkSession, target: SilverTable, frame: DataFrame, mart: MartConfig, props: dict[str, str]
) -> None:
    """Create or atomically replace the mart with ``frame``: one commit carrying ``props``."""
    from pyspark.sql import functions as F

    missing = [c for c in mart.partition_by if c not in frame.columns]
    if missing:
        raise ValueError(f"partition_by names column(s) the SQL does not produce: {', '.join(missing)}")
    writer = frame.writeTo(target.identifier).using("iceberg")
    for key, value in TABLE_PROPERTIES.items():
        writer = writer.tableProperty(key, value)
    if mart.partition_by:
        writer = writer.partitionedBy(*[F.col(c) for c in mart.partition_by])
    commit_with_properties(spark, props, writer.createOrReplace)


def _schema(frame: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]


def evaluate(spark: SparkSession, mart: MartConfig, views: dict[str, str], catalog: str = "silver") -> DataFrame:
    """The mart's SQL with its silver tables replaced by the given views (``database.table`` -> view)."""
    return spark.sql(substitute_tables(mart.sql, views, catalog))


def _affected_groups(
    engine: Engine,
    mart: MartConfig,
    pinned: Sequence[PinnedSource],
    previous: dict[str, int],
    scopes: dict[str, ChangeScope],
    new_views: dict[str, str],
    registered: PinnedViews,
    scans: StagedScans,
) -> DataFrame:
    """The keys of the groups whose source rows changed between ``previous`` and ``pinned`` snapshots.

    For each changed table (``scopes``: what changed in it), the SQL runs over its before-images
    with the other tables at their previous snapshots, and over its after-images with the others
    at their pinned snapshots.
    """
    spark = engine.spark
    old_views = {
        p.name: registered.register(f"old_{i}", pinned_read(spark, p.table, previous[p.name]))
        for i, p in enumerate(pinned)
    }
    keys: DataFrame | None = None
    for i, source in enumerate(pinned):
        if source.name not in scopes:
            continue
        delta = changed_rows(spark, source.table, scopes[source.name], source.snapshot_id, scans)
        before = registered.register(f"before_{i}", delta.before)
        after = registered.register(f"after_{i}", delta.after)
        for side in (old_views | {source.name: before}, new_views | {source.name: after}):
            found = evaluate(spark, mart, side, engine.catalog).select(*[quote(k) for k in mart.keys])
            keys = found if keys is None else keys.unionByName(found)
    assert keys is not None, "called only when a source changed"
    return keys.distinct()


@dataclass(frozen=True)
class _IncrementalRefresh:
    """One mart's incremental refresh: the mart and its table, the source snapshots it pins, the
    ones it reflected before and what changed since, the mart's query over them."""

    mart: MartConfig
    target: SilverTable
    pinned: Sequence[PinnedSource]
    previous: dict[str, int]  # source table -> the snapshot the mart reflected
    scopes: dict[str, ChangeScope]  # what changed in each source since
    current: DataFrame  # the mart's query at the pinned snapshots
    views: dict[str, str]
    registered: PinnedViews
    source_commit_ts: str | None


def _refresh_incremental(engine: Engine, refresh: _IncrementalRefresh) -> int:
    """Recompute the affected groups and MERGE them; return how many groups."""
    from pyspark.sql import functions as F

    spark = engine.spark
    mart, target, pinned, current = refresh.mart, refresh.target, refresh.pinned, refresh.current
    previous, scopes, views, registered = refresh.previous, refresh.scopes, refresh.views, refresh.registered
    source_commit_ts = refresh.source_commit_ts
    with staged_scans(spark) as scans:
        affected = _affected_groups(engine, mart, pinned, previous, scopes, views, registered, scans).localCheckpoint()
    groups, ranges = groups_and_key_ranges(affected, mart.keys)
    props = mart_properties(mart, pinned, PATH_INCREMENTAL, source_commit_ts, groups=groups)
    if groups == 0:  # nothing the mart reads changed: record the new cut, add no data
        empty = spark.table(target.identifier).limit(0)
        commit_with_properties(spark, props, empty.writeTo(target.identifier).append)
        return 0
    keyed = affected.select(*[F.col(quote(k)).alias(_KEY_PREFIX + k) for k in mart.keys])
    match = [F.col(quote(_KEY_PREFIX + k)).eqNullSafe(F.col(quote(k))) for k in mart.keys]
    condition = match[0]
    for extra in match[1:]:
        condition = condition & extra
    scoped = current if ranges is None else current.where(ranges)
    recomputed = scoped.join(F.broadcast(keyed), condition, "left_semi").withColumn(_PRESENT, F.lit(True))
    # Computed once, here: the MERGE would evaluate its source twice (its runtime filter on the
    # mart's files, then the join), each time a scan of the silver tables.
    source = (
        keyed.join(recomputed, condition, "left")
        .select(*[quote(_KEY_PREFIX + k) for k in mart.keys], _PRESENT, *[quote(c) for c in current.columns])
        .localCheckpoint()
    )
    view = registered.register("merge", source)
    statement = group_merge_statement(target.identifier, view, current.columns, mart.keys)
    commit_with_properties(spark, props, lambda: spark.sql(statement))
    return groups


def refresh_pinned(engine: Engine, mart: MartConfig) -> MartRefresh:
    """Refresh one mart that is not ``consistent`` at the current snapshots of what it reads (see
    the module docstring); never raises for the mart's own problems."""
    started = time.monotonic()
    spark = engine.spark
    target = mart_table(engine, mart)
    label = f"{target.database}.{target.name}"
    sources = mart_sources(engine, mart)
    pinned: list[PinnedSource] = []
    for name, table in sources:
        snapshot = current_snapshot(spark, table)
        if snapshot is None:
            return MartRefresh(label, WAITING, reason=f"silver table {name} has no data yet")
        pinned.append(PinnedSource(name, table, snapshot))
    sources_now = {p.name: p.snapshot_id for p in pinned}
    definition = definition_id(mart.sql, mart.keys, mart.partition_by, mart.consistent)
    previous = last_refresh(spark, target)
    if previous and previous.sources == sources_now and previous.definition == definition:
        return MartRefresh(label, UP_TO_DATE, sources=sources_now, seconds=time.monotonic() - started)
    with pinned_views(spark) as registered:
        views = {
            p.name: registered.register(f"pin_{i}", pinned_read(spark, p.table, p.snapshot_id))
            for i, p in enumerate(pinned)
        }
        try:
            current = evaluate(spark, mart, views, engine.catalog)
        except Exception as exc:  # AnalysisException / ParseException: the SQL no longer compiles
            failure = f"its SQL does not compile: {first_line(exc)}"
            log.error("gold mart skipped mart=%s reason=%s", label, failure)
            return MartRefresh(label, FAILED, reason=failure, seconds=time.monotonic() - started)
        commit_ts = _source_commit_ts(spark, pinned)
        try:
            reason = _full_reason(spark, mart, target, previous, definition, current, sources_now)
            if reason is None and previous is not None:
                try:
                    scopes, reason = _weigh_paths(engine, label, pinned, previous.sources)
                    if reason is None:
                        refresh = _IncrementalRefresh(
                            mart, target, pinned, previous.sources, scopes, current, views, registered, commit_ts
                        )
                        groups = _refresh_incremental(engine, refresh)
                        outcome = MartRefresh(label, REFRESHED, PATH_INCREMENTAL, groups=groups, sources=sources_now)
                        log.info("gold mart refreshed mart=%s path=incremental groups=%d", label, groups)
                        return timed(outcome, started)
                except IncrementalUnavailable as exc:
                    reason = str(exc)
            ensure_database(spark, target.catalog, target.database)
            props = mart_properties(mart, pinned, PATH_FULL, commit_ts, reason=reason or "")
            replace_mart(spark, target, current, mart, props)
            log.info("gold mart refreshed mart=%s path=full reason=%s", label, reason)
            return timed(MartRefresh(label, REFRESHED, PATH_FULL, reason=reason or "", sources=sources_now), started)
        except Exception as exc:
            log.error("gold mart failed mart=%s reason=%s", label, first_line(exc))
            return timed(MartRefresh(label, FAILED, reason=first_line(exc)), started)


def _weigh_paths(
    engine: Engine, label: str, pinned: Sequence[PinnedSource], previous: dict[str, int]
) -> tuple[dict[str, ChangeScope], str | None]:
    """What changed in each source table since the snapshot last reflected (the tables that did),
    and why the incremental refresh would cost more than a full one (None: it would not); from
    the tables' metadata. The changes are not planned when the tables' size alone decides."""
    gold = engine.config.gold
    totals = [SourceReads(p.name, table_bytes(engine.spark, p.table, p.snapshot_id)) for p in pinned]
    reason = full_refresh_reason(totals, gold.full_refresh_share, gold.full_refresh_below_bytes)
    if reason is not None:
        return {}, reason
    scopes = {
        p.name: change_scope(engine.spark, p.table, previous[p.name], p.snapshot_id)
        for p in pinned
        if previous[p.name] != p.snapshot_id
    }
    reads = [
        replace(total, changed=True, changed_bytes=scopes[total.table].changed_bytes)
        if total.table in scopes
        else total
        for total in totals
    ]
    for read in reads:
        log.info(
            "gold mart reads mart=%s table=%s total_bytes=%d changed=%s changed_bytes=%d",
            label, read.table, read.total_bytes, read.changed, read.changed_bytes,
        )  # fmt: skip
    return scopes, full_refresh_reason(reads, gold.full_refresh_share, gold.full_refresh_below_bytes)


def timed(outcome: MartRefresh, started: float) -> MartRefresh:
    return replace(outcome, seconds=time.monotonic() - started)


def _source_commit_ts(spark: SparkSession, pinned: Sequence[PinnedSource]) -> str | None:
    """The source commit time every pinned table is complete up to (the smallest of their newest)."""
    times = [latest_commit_ts_at(spark, p.table, p.snapshot_id) for p in pinned]
    return None if not times or any(t is None for t in times) else min(t for t in times if t)


def _full_reason(
    spark: SparkSession,
    mart: MartConfig,
    target: SilverTable,
    previous: LastRefresh | None,
    definition: str,
    current: DataFrame,
    sources_now: dict[str, int],
) -> str | None:
    """Why this refresh recomputes the mart in full (None: it can go group by group)."""
    if not mart.keys:
        return "no keys"
    if previous is None:
        return "first refresh"
    if previous.definition != definition:
        return "the mart's definition changed"
    if set(previous.sources) != set(sources_now):
        return "the mart reads other tables than at its last refresh"
    if _schema(current) != _schema(spark.table(target.identifier)):
        return "the mart's columns changed"
    return incremental_shape_problem(current, mart.keys)
