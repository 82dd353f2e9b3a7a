"""A small batch's versions added to history from the driver: one scan, one RowDelta, no MERGE.

``lake.history.apply_history`` in Spark joins the batch's versions with history (several jobs) and
commits them with a MERGE (more jobs: its own join, its writes). When the batch's change rows were
computed in the driver (the local relation of a small batch, ``engine.driver_batch``), or Spark
holds a few of them (``DRIVER_VERSIONS``: a batch prepared in Spark, from Parquet files or with a
bad row), and the history table takes files written outside Spark's writer
(``lake.row_delta.row_delta_blocker``), the same is done here:

1. the versions, cast as history stores them, evaluated in the driver (``runtime.local_relation``)
   or collected by one job;
2. the stored versions of the batch's keys, with their data file and position (``_file``,
   ``_pos``), read by one scan filtered by the keys (``lake.key_filter``);
3. each touched key's timeline in Python, by the rule of ``with_validity``: stored and new versions
   in ``_cdc_order``, each valid until the next one's ``valid_from``, the last current unless a
   delete; a version already stored (same key and ``_cdc_order``) is not added again;
4. the new versions, and the stored ones whose ``valid_to`` or ``is_current`` moved, written as one
   data file, the moved ones' old rows deleted by position (``lake.driver_write.commit_collected``),
   in one RowDelta validated from the snapshot the scan read: a concurrent history commit makes it
   fail rather than close a version twice.

Anything else (a history not started, a format or type the driver's files do not carry (or Arrow
does not carry both ways exactly, ``lake.driver_write.collectable``), a key with a NULL or a value
no SQL literal states exactly, more versions in Spark than ``DRIVER_VERSIONS``) returns None and
Spark applies the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdclake.columns import IS_CURRENT, OPERATION, SILVER_ORDER, STORED_FILE, STORED_POS, VALID_FROM, VALID_TO
from cdclake.identifiers import quote
from cdclake.lake.batch import read_table_metadata
from cdclake.lake.driver_write import arrow_shape, collect_rows, collectable, commit_collected
from cdclake.lake.key_filter import key_filter, keys_of
from cdclake.lake.row_delta import row_delta_blocker
from cdclake.lake.tables import SilverTable, iceberg_table
from cdclake.runtime.local_relation import local_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

Key = tuple[Any, ...]
# At most this many versions held by Spark (a batch prepared there: Parquet files, a bad row) are
# taken into the driver by one job and applied this way; more stay in Spark (the key filter would
# be a long IN list, and the timeline a long Python loop).
DRIVER_VERSIONS = 5_000


def apply_in_driver(
    spark: SparkSession,
    history: SilverTable,
    versions: DataFrame,
    key: Sequence[str],
    properties: Mapping[str, str],
    most: int = DRIVER_VERSIONS,
) -> tuple[int, int] | None:
    """Add ``versions`` (one row per change: data columns, ``_cdc_order``, ``operation``,
    ``valid_from``; no validity yet) to ``history`` as one RowDelta carrying ``properties``; how
    many versions were added and how many stored ones closed. None: this way cannot take them.
    ``most``: how many versions Spark holds that are taken into the driver (0: none)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    metadata = read_table_metadata(spark, history)
    if metadata.snapshot_id is None or metadata.schema is None or row_delta_blocker(metadata) is not None:
        return None
    types = {f.name: f.dataType for f in metadata.schema.fields}
    if any(c not in types for c in versions.columns):
        return None
    shaped = versions.select(
        *[
            (F.col(quote(name)) if name in versions.columns else F.lit(None)).cast(data_type).alias(name)
            for name, data_type in types.items()
            if name not in (VALID_TO, IS_CURRENT)
        ]
    )
    rows = _in_driver(shaped, most)
    if rows is None:
        return None
    keys = keys_of(rows, key)
    if any(None in k for k in keys):
        return None  # a NULL key matches no stored version in Spark's join: that way decides
    literals = {name: data_type.simpleString() for name, data_type in types.items()}
    where = key_filter(rows, key, literals) if rows.num_rows else "false"
    if where is None:
        return None
    stored = collect_rows(
        spark.sql(
            f"SELECT *, _file AS {STORED_FILE}, _pos AS {STORED_POS} "
            f"FROM {history.identifier} VERSION AS OF {metadata.snapshot_id} WHERE {where}"
        )
    )
    added, moved = _timelines(rows, keys, stored, key)
    if not added and not moved and not properties:
        return 0, 0
    ids = {f.name: f.id for f in metadata.fields}
    columns = [(f.name, ids[f.name], f.dataType) for f in metadata.schema.fields]
    images = pa.concat_tables(
        [arrow_shape(_validated(stored, moved), columns), arrow_shape(_validated(rows, added), columns)]
    )
    replaced = stored.take(pa.array(sorted(moved), pa.int64()))
    table = iceberg_table(spark, history.identifier)
    commit_collected(spark, table, metadata.snapshot_id, properties, images, replaced)
    return len(added), len(moved)


def _in_driver(versions: DataFrame, most: int) -> pa.Table | None:
    """``versions`` as Arrow: computed by the driver (a local relation: no job), or, when Spark
    holds them, collected by one job if there are at most ``most``; None otherwise."""
    if not collectable(versions):
        return None
    rows = local_arrow(versions)
    if rows is not None or most <= 0:
        return rows
    held = collect_rows(versions.limit(most + 1))
    return held if held.num_rows <= most else None


# A version's new validity: (valid_to, is_current), by its row's index in its table.
Validity = dict[int, tuple[Any, bool]]


def _timelines(rows: pa.Table, keys: list[Key], stored: pa.Table, key: Sequence[str]) -> tuple[Validity, Validity]:
    """Each touched key's timeline of ``stored`` versions and new ``rows`` (``keys``: their keys);
    the validity of every new version (by its index in ``rows``) and of every stored version whose
    validity moves (by its index in ``stored``)."""
    touched = set(keys)
    timeline: dict[Key, list[tuple[tuple[bool, str], Any, str, bool, int]]] = {}
    known: set[tuple[Key, str | None]] = set()
    stored_orders = stored.column(SILVER_ORDER).to_pylist()
    stored_from = stored.column(VALID_FROM).to_pylist()
    stored_ops = stored.column(OPERATION).to_pylist()
    for index, at in enumerate(keys_of(stored, key)):
        if at not in touched:  # the filter's columns matched one by one: another key's version
            continue
        order = stored_orders[index]
        known.add((at, order))
        timeline.setdefault(at, []).append((_rank(order), stored_from[index], stored_ops[index], True, index))
    orders = rows.column(SILVER_ORDER).to_pylist()
    valid_from = rows.column(VALID_FROM).to_pylist()
    ops = rows.column(OPERATION).to_pylist()
    for index, at in enumerate(keys):
        if (at, orders[index]) in known:
            continue  # stored already, or twice in the batch: a version is added once
        known.add((at, orders[index]))
        timeline.setdefault(at, []).append((_rank(orders[index]), valid_from[index], ops[index], False, index))
    was_to = stored.column(VALID_TO).to_pylist()
    was_current = stored.column(IS_CURRENT).to_pylist()
    added: Validity = {}
    moved: Validity = {}
    for versions in timeline.values():
        versions.sort(key=lambda version: version[0])
        for place, (_, _, op, is_stored, index) in enumerate(versions):
            last = place == len(versions) - 1
            validity = (None if last else versions[place + 1][1], last and op != "D")
            if not is_stored:
                added[index] = validity
            elif validity != (was_to[index], was_current[index]):
                moved[index] = validity
    return added, moved


def _validated(rows: pa.Table, validity: Validity) -> pa.Table:
    """The rows ``validity`` names, with its ``valid_to`` and ``is_current`` in place of theirs."""
    import pyarrow as pa

    chosen = sorted(validity)
    taken = rows.take(pa.array(chosen, pa.int64())).drop_columns(
        [c for c in (VALID_TO, IS_CURRENT) if c in rows.column_names]
    )
    moment = rows.schema.field(VALID_FROM).type
    return taken.append_column(VALID_TO, pa.array([validity[i][0] for i in chosen], moment)).append_column(
        IS_CURRENT, pa.array([validity[i][1] for i in chosen], pa.bool_())
    )


def _rank(order: str | None) -> tuple[bool, str]:
    """``_cdc_order`` as Spark orders it ascending: NULL first, then text by code point (the order
    of its UTF-8 bytes)."""
    return (order is not None, order or "")
