"""Change history of a silver table (SCD type 2): ``<table>__history`` keeps every version of every row.

Fed from the same ordered change rows a CDC batch applies to silver, every change and not only the
latest per key (late ones included: silver ignores a change older than the stored row, history
places it in its timeline). One version per change, identified by (key, ``_cdc_order``):

* ``valid_from``: the change's source commit time; ``valid_to``: the next version's ``valid_from``
  (NULL for the newest); ``is_current``: newest and not a delete; ``operation``: I, U or D.
* A delete is a version too (``operation = 'D'``, never current): it closes the version before it,
  and a late change older than the delete lands before it, not after.
* A late change splits the version it falls into: that version's ``valid_to`` becomes the late
  change's ``valid_from``, and the late version ends where the next one starts.
* Exactly once: a change whose (key, ``_cdc_order``) is already in history is not added again, so
  re-applying a batch (a redelivered file, a re-run after a crash) changes nothing.
* In step with silver: every history commit records in its snapshot summary the silver snapshot
  it reflects (``SILVER_SNAPSHOT_PROPERTY``, ``SILVER_SEQUENCE_PROPERTY``); silver commits first,
  so a crash leaves history behind silver, never ahead, and the next run catches it up
  (``engine.history_sync``).

Reading: the rows of a key valid at time T are ``valid_from <= T AND (valid_to > T OR valid_to IS
NULL) AND operation <> 'D'``; the current rows (``is_current``) equal silver.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import and_
from typing import TYPE_CHECKING

from cdclake.columns import (
    COMMIT_TS,
    HISTORY_PLACE_PREFIX,
    HISTORY_SUFFIX,
    IS_CURRENT,
    OP,
    OPERATION,
    SILVER_ORDER,
    VALID_FROM,
    VALID_TO,
)
from cdclake.errors import CdclakeError
from cdclake.identifiers import quote
from cdclake.lake.history_delta import DRIVER_VERSIONS, apply_in_driver
from cdclake.lake.iceberg import IcebergTable, Snapshot
from cdclake.lake.ledger_record import SnapshotRef
from cdclake.lake.tables import (
    SilverTable,
    commit_with_properties,
    current_snapshot_id,
    ensure_table,
    evolve_schema,
    silver_columns,
    table_exists,
)
from cdclake.schema import plan_schema_change

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

HISTORY_COLUMNS = (VALID_FROM, VALID_TO, IS_CURRENT, OPERATION)
# Set on a history started from silver's rows (``start_history``): when it was turned on. Versions
# before that moment are unknown; ``cdclake status`` says so.
HISTORY_SINCE_PROPERTY = "cdclake.history-since"
# In each history commit's snapshot summary: the silver snapshot whose changes history holds (all
# of them, with that commit), and its sequence number (which orders it among silver's snapshots).
SILVER_SNAPSHOT_PROPERTY = "cdclake.silver-snapshot"
SILVER_SEQUENCE_PROPERTY = "cdclake.silver-sequence"


@dataclass(frozen=True)
class HistoryReport:
    versions_added: int  # changes not in history before
    versions_closed: int  # existing versions whose valid_to or is_current changed


def reflecting(silver: SnapshotRef) -> dict[str, str]:
    """The snapshot-summary properties of a history commit that reflects ``silver``."""
    return {SILVER_SNAPSHOT_PROPERTY: str(silver.snapshot_id), SILVER_SEQUENCE_PROPERTY: str(silver.sequence_number)}


def reflected_sequence(spark: SparkSession, history: SilverTable) -> int | None:
    """The sequence number of the silver snapshot ``history`` reflects: the newest
    ``SILVER_SEQUENCE_PROPERTY`` in its lineage (a compaction of history commits without one);
    None when history has no commit that says (a history written before the property was kept)."""
    found = _reflecting_snapshot(spark, history)
    return None if found is None else int(found.summary[SILVER_SEQUENCE_PROPERTY])


def reflecting_snapshot_id(spark: SparkSession, history: SilverTable) -> int | None:
    """The id of history's newest snapshot that records the silver snapshot it reflects: maintenance
    keeps it (and every later one), or history would look as if it recorded none."""
    found = _reflecting_snapshot(spark, history)
    return None if found is None else found.snapshot_id


def _reflecting_snapshot(
    spark: SparkSession, history: SilverTable, keys: tuple[str, ...] = (SILVER_SEQUENCE_PROPERTY,)
) -> Snapshot | None:
    """History's newest snapshot whose summary records the silver snapshot it reflects (with the
    summary's ``keys``)."""
    if not table_exists(spark, history):
        return None
    lineage = IcebergTable.latest(spark, history.identifier).lineage(keys)
    return next((s for s in lineage if SILVER_SEQUENCE_PROPERTY in s.summary), None)


def history_of(table: SilverTable) -> SilverTable:
    """Where the history of ``table`` lives: ``<table>__history`` beside it."""
    return SilverTable(table.catalog, table.database, f"{table.name}{HISTORY_SUFFIX}")


def _versions(changes: DataFrame, data: Sequence[str]) -> DataFrame:
    """Change rows -> version rows without validity: data columns, ``_cdc_order``, operation, valid_from."""
    from pyspark.sql import functions as F

    valid_from = F.col(COMMIT_TS).cast("timestamp")
    return changes.select(
        *[quote(c) for c in data],
        F.col(SILVER_ORDER).cast("string").alias(SILVER_ORDER),
        F.col(OP).alias(OPERATION),
        valid_from.alias(VALID_FROM),
    )


def with_validity(versions: DataFrame, key: Sequence[str]) -> DataFrame:
    """``valid_to`` and ``is_current`` of every version from its key's timeline (ordered by ``_cdc_order``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    timeline = Window.partitionBy(*[quote(k) for k in key]).orderBy(SILVER_ORDER)
    following = F.lead(VALID_FROM).over(timeline)
    is_last = F.lead(SILVER_ORDER).over(timeline).isNull()
    return versions.withColumn(VALID_TO, following).withColumn(IS_CURRENT, is_last & (F.col(OPERATION) != "D"))


def _ensure_history(spark: SparkSession, history: SilverTable, shape: DataFrame) -> None:
    """Create the history table with ``shape``'s columns, or evolve it as silver evolves: the same
    plan (``cdclake.schema``) and the same Iceberg changes (``evolve_schema``), so a column added
    to silver is added here and a widened one (int -> bigint, ...) widened here, and a dropped one
    kept. Without the widening the new values would be cast to the stored type and wrap."""
    if not table_exists(spark, history):
        # Created without a snapshot (a CREATE TABLE, not an empty CTAS, which commits one): a
        # crash before its first write leaves a history that has not started (``history_started``).
        ensure_table(spark, history, shape)
        return
    incoming = [(f.name, f.dataType.simpleString()) for f in shape.schema.fields]
    plan = plan_schema_change(silver_columns(spark, history), incoming, bookkeeping=(SILVER_ORDER, *HISTORY_COLUMNS))
    if plan.incompatible:
        raise CdclakeError(
            f"History table {history.identifier} cannot take these changes: {'; '.join(plan.incompatible)} "
            "(rename or drop the history table to start it again from silver)."
        )
    evolve_schema(spark, history, plan.add, plan.widen)


def apply_history(
    spark: SparkSession,
    history: SilverTable,
    changes: DataFrame,
    key: Sequence[str],
    properties: dict[str, str] | None = None,
    driver_versions: int = DRIVER_VERSIONS,
) -> HistoryReport:
    """Add a batch of ordered changes to ``history`` exactly once, as one Iceberg commit: a small
    batch (computed in the driver, or up to ``driver_versions`` held by Spark) as one RowDelta
    the driver writes (``lake.history_delta``), any other in Spark, its versions' validity by
    ``with_validity`` and one MERGE.

    ``changes``: one row per change (every change of the batch, in any row order): the key and
    data columns as silver stores them, ``_cdc_order`` (the change's order text, as in silver),
    ``_cdc_op`` (I, U or D) and ``_cdc_ts`` (the source commit time, text or timestamp). Other
    ``_cdc_*`` columns are ignored. ``properties`` go into the commit's snapshot summary (the
    engine records the batch's files there, like silver's ledger). The history table is created
    on first use and follows silver's schema changes (``_ensure_history``).
    """
    from pyspark.sql import functions as F

    data = _data_columns(changes)
    missing = [k for k in key if k not in data]
    if missing:
        raise ValueError(f"the changes lack the key column(s) {', '.join(missing)}")
    versions = _versions(changes, data)
    incoming = with_validity(versions, key).dropDuplicates([*key, SILVER_ORDER])
    _ensure_history(spark, history, incoming)
    in_driver = apply_in_driver(spark, history, versions, key, properties or {}, driver_versions)
    if in_driver is not None:
        return HistoryReport(*in_driver)
    stored = spark.table(history.identifier)
    columns = stored.columns
    incoming = incoming.select(
        *[F.col(quote(c)) if c in incoming.columns else F.lit(None).alias(c) for c in columns]
    ).withColumns({f.name: F.col(quote(f.name)).cast(f.dataType) for f in stored.schema.fields})
    identity = [*key, SILVER_ORDER]
    touched = stored.join(incoming.select(*[quote(k) for k in key]).distinct(), list(key), "left_semi")
    new = incoming.join(touched.select(*[quote(c) for c in identity]), identity, "left_anti")
    timeline = with_validity(
        touched.drop(VALID_TO, IS_CURRENT).unionByName(new.drop(VALID_TO, IS_CURRENT)), key
    ).select(*[quote(c) for c in columns])
    same = touched.select(*[F.col(quote(c)).alias(f"_cdc_was_{c}") for c in [*identity, VALID_TO, IS_CURRENT]])
    unchanged = [F.col(quote(c)).eqNullSafe(F.col(quote(f"_cdc_was_{c}"))) for c in [*identity, VALID_TO, IS_CURRENT]]
    changed = timeline.join(same, reduce(and_, unchanged), "left_anti").localCheckpoint()
    closed = changed.join(touched.select(*[quote(c) for c in identity]), identity, "left_semi").count()
    added = changed.count() - closed
    if added == 0 and closed == 0:
        if properties:  # record the batch all the same, so the ledger says it was applied
            commit_with_properties(spark, properties, stored.limit(0).writeTo(history.identifier).append)
        return HistoryReport(0, 0)
    view = f"cdclake_history_{uuid.uuid4().hex}"  # a view name must be a plain identifier
    changed.createOrReplaceTempView(view)
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in identity)
    statement = (
        f"MERGE INTO {history.identifier} t USING {view} s ON {on} "
        f"WHEN MATCHED THEN UPDATE SET t.{VALID_TO} = s.{VALID_TO}, t.{IS_CURRENT} = s.{IS_CURRENT} "
        "WHEN NOT MATCHED THEN INSERT *"
    )
    try:
        commit_with_properties(spark, properties or {}, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)
    return HistoryReport(versions_added=added, versions_closed=closed)


def create_history(spark: SparkSession, history: SilverTable, changes: DataFrame, key: Sequence[str]) -> None:
    """Create ``history`` (no snapshot) for a silver table that starts with ``history: true``, from
    change rows' columns (as ``apply_history`` takes them): its existence says history is to be
    complete from the table's first change, not started later from silver's rows."""
    _ensure_history(spark, history, with_validity(_versions(changes, _data_columns(changes)), key))


def history_started(spark: SparkSession, history: SilverTable) -> bool:
    """Whether ``history`` holds anything yet: it exists and has a snapshot (a table created but
    never written, as a crash between the two leaves it, has not started)."""
    return table_exists(spark, history) and current_snapshot_id(spark, history.identifier) is not None


def start_history(
    spark: SparkSession,
    history: SilverTable,
    stored: DataFrame,
    key: Sequence[str],
    since: datetime,
    properties: dict[str, str] | None = None,
) -> bool:
    """Start ``history`` from silver's ``stored`` rows, when ``history: true`` was turned on after
    the table was loaded: one version per row (``operation = 'I'``, ``valid_from = since``: what
    came before is unknown), and ``HISTORY_SINCE_PROPERTY`` set to ``since``. Without it, history
    would hold only the keys changed from then on, silently partial.

    Nothing happens (False) when history has started already or silver holds no rows (a table
    loaded empty: its history is complete from its first change). The property is set before the
    rows are written; a crash in between leaves a history without a snapshot, started again.
    ``properties`` go into the commit's snapshot summary (the silver snapshot ``stored`` is).
    """
    from pyspark.sql import functions as F

    if history_started(spark, history) or stored.isEmpty():
        return False
    rows = stored.withColumn(OP, F.lit("I")).withColumn(COMMIT_TS, F.lit(since).cast("string"))
    _ensure_history(spark, history, with_validity(_versions(rows, _data_columns(rows)), key))
    spark.sql(
        f"ALTER TABLE {history.identifier} SET TBLPROPERTIES ('{HISTORY_SINCE_PROPERTY}' = '{since.isoformat()}')"
    )
    apply_history(spark, history, rows, key, properties)
    return True


# A version's ``_cdc_order`` that ends with its change's place in its file (``engine.read.history_rows``):
# '#' and 40 digits after silver's order.
_PLACE_DIGITS = len(HISTORY_PLACE_PREFIX) - 1 + 20
_PLACED = f"#[0-9]{{{_PLACE_DIGITS}}}$"


def drop_repeated_versions(spark: SparkSession, history: SilverTable, key: Sequence[str]) -> int:
    """Drop the versions ``history`` holds of one change twice, and set ``valid_to`` and
    ``is_current`` again on the keys they were in, in one Iceberg commit; how many were dropped
    (0: no commit). Idempotent.

    Before a change's place was its row index in its file, it counted from the rows Spark read
    before it in its partition: a file read again in other company (history's catch-up, another
    writer) gave the same change another ``_cdc_order``, and history added it again. Such a
    repeat is found by the rule: versions of one key whose ``_cdc_order`` agrees before its place
    (commit instant, change sequence and file: silver's order) and that agree in operation and
    every value are one change; the one with the greatest ``_cdc_order`` stays, the others go.

    What that rule can drop, and why it is safe: the versions of one silver order share their
    ``valid_from`` (the commit instant), so every one of them but the last (greatest order) is
    valid from that instant to that same instant, and no query as of any time returns it. The
    last version of each group is kept (it is the greatest of its own values), so the group's
    last values, every other group and the answer as of any time stay what they were. With a
    change sequence column (DMS's ``AR_H_CHANGE_SEQ``, unique per change) a silver order names one
    change of a key, and only repeats of it are dropped. Without one, the case it cannot tell from
    a repeat is one key changed to the same values with the same operation twice at one commit
    instant in one file (an update repeated in one transaction): the earlier of the two goes,
    a version that lasted no time.

    The rule looks only at versions whose order ends in a place (CDC changes: not a full load's
    first versions nor a history started from silver's rows). The first pass reads the key and
    order columns alone; the values are compared only on keys it finds with a repeated order.
    The commit records the silver snapshot history already reflected (it adds no change)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not history_started(spark, history):
        return 0
    stored = spark.table(history.identifier)
    keys = [quote(k) for k in key]
    placed = F.col(SILVER_ORDER).rlike(_PLACED)
    silver_order = F.expr(f"substring({SILVER_ORDER}, 1, length({SILVER_ORDER}) - {_PLACE_DIGITS + 1})")
    repeated = (
        stored.where(placed)
        .groupBy(*keys, silver_order.alias("_cdc_silver_order"))
        .agg(F.count(F.lit(1)).alias("_cdc_versions"))
        .where("_cdc_versions > 1")
        .select(*keys)
        .distinct()
        .localCheckpoint()
    )
    if repeated.isEmpty():
        return 0
    touched = stored.join(repeated, list(key), "left_semi").localCheckpoint()
    values = [quote(c) for c in touched.columns if c not in (SILVER_ORDER, VALID_TO, IS_CURRENT)]
    one_change = Window.partitionBy(placed, *values, silver_order).orderBy(F.col(SILVER_ORDER).desc())
    ranked = touched.withColumn("_cdc_repeat", placed & (F.row_number().over(one_change) > 1)).localCheckpoint()
    dropped = ranked.where("_cdc_repeat").count()
    if dropped == 0:
        return 0
    _merge_repeats(spark, history, key, touched, ranked)
    return dropped


def _merge_repeats(
    spark: SparkSession, history: SilverTable, key: Sequence[str], touched: DataFrame, ranked: DataFrame
) -> None:
    """One MERGE into ``history``: the versions ``ranked`` marks (``_cdc_repeat``) deleted, and
    ``valid_to`` and ``is_current`` set again on those of ``touched`` (the keys' versions as stored)
    whose validity the deletion moves; committed with the silver snapshot history already reflects."""
    from pyspark.sql import functions as F

    identity = [*[quote(k) for k in key], SILVER_ORDER]
    kept = with_validity(ranked.where("NOT _cdc_repeat").drop("_cdc_repeat", VALID_TO, IS_CURRENT), key)
    was = touched.select(*identity, F.col(VALID_TO).alias("_cdc_was_to"), F.col(IS_CURRENT).alias("_cdc_was_current"))
    moved = (
        kept.join(was, [*key, SILVER_ORDER])
        .where(
            ~F.col(VALID_TO).eqNullSafe(F.col("_cdc_was_to")) | ~F.col(IS_CURRENT).eqNullSafe(F.col("_cdc_was_current"))
        )
        .select(*identity, VALID_TO, IS_CURRENT, F.lit(False).alias("_cdc_repeat"))
    )
    gone = ranked.where("_cdc_repeat").select(
        *identity,
        F.lit(None).cast("timestamp").alias(VALID_TO),
        F.lit(None).cast("boolean").alias(IS_CURRENT),
        "_cdc_repeat",
    )
    view = f"cdclake_history_repeats_{uuid.uuid4().hex}"
    moved.unionByName(gone).createOrReplaceTempView(view)
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in [*key, SILVER_ORDER])
    statement = (
        f"MERGE INTO {history.identifier} t USING {view} s ON {on} "
        "WHEN MATCHED AND s._cdc_repeat THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.{VALID_TO} = s.{VALID_TO}, t.{IS_CURRENT} = s.{IS_CURRENT}"
    )
    reflected = _reflecting_snapshot(spark, history, (SILVER_SNAPSHOT_PROPERTY, SILVER_SEQUENCE_PROPERTY))
    properties = {} if reflected is None else dict(reflected.summary)
    try:
        commit_with_properties(spark, properties, lambda: spark.sql(statement))
    finally:
        spark.catalog.dropTempView(view)


def _data_columns(rows: DataFrame) -> list[str]:
    return [c for c in rows.columns if not c.startswith("_cdc_")]
