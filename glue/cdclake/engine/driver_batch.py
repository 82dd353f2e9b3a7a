"""A small CDC batch prepared in the driver: one Spark job, for the stored rows of its keys.

The Spark path (``engine.prepare``) runs four jobs for a batch of a few changes: the latest
changes materialised, the stored rows of their keys and their tombstones (each broadcast), the
classified rows collected. Here the batch's files are read in the driver (``dms.local_reader``)
and every expression that types, checks, cleans and orders them runs unchanged over those rows,
evaluated by Spark's optimizer in the driver (``runtime.local_relation``); the rows come back as
Arrow. The latest change of each key is kept by the apply order ``change_order`` gives Spark;
the stored rows and tombstones of those keys are read in one job, each table's scan filtered by
the keys, so Iceberg prunes its data files by their column bounds; each change is classified as
``engine.effects.classify_effects`` classifies it; the driver writes the files and commits one
RowDelta (``lake.driver_write``).

It takes a batch only where it gives what the Spark path gives: a table that exists and takes a
RowDelta (keyed) or a driver append (append-only), files the driver reads as Spark does, at most
``BatchSizes.driver_read_bytes``, no bad row (the quarantine is the Spark path's), no "unchanged"
value (``CsvNoSupValue``), key values a SQL literal states exactly, a plan Spark evaluates in the
driver. Anything else returns None and the Spark path prepares the batch, so both give the same
silver, history and quarantine (``tests/spark/test_driver_batch.py``, and the bad-input corpus in
``tests/spark/test_bad_input_corpus.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdclake.columns import (
    APPEND_ONLY_OP_COLUMN,
    CHANGE_SEQ,
    COMMIT_TS,
    EFFECT,
    EFFECT_DELETE,
    EFFECT_DELETE_MISSING,
    EFFECT_INSERT,
    EFFECT_LATE,
    EFFECT_UPDATE,
    EFFECTS,
    FILE_BLOCK,
    FILE_INDEX,
    OP,
    ROW_POSITION,
    SILVER_ORDER,
    STORED_FILE,
    STORED_POS,
)
from cdclake.dms.files import BronzeFile
from cdclake.dms.local_reader import read_locally
from cdclake.engine.changes import data_columns, has_error
from cdclake.engine.commit_way import choose_commit_way
from cdclake.engine.data_commit import Chosen, data_commit, one_row_per_key
from cdclake.engine.plan import BatchContext, ChangeSet
from cdclake.engine.read import RowCounts, cast_columns, changes_of, history_rows, schema_change
from cdclake.identifiers import quote
from cdclake.lake.batch import WrittenColumns
from cdclake.lake.driver_write import collect_rows, collectable
from cdclake.lake.journals import tombstones_of
from cdclake.lake.key_filter import key_filter, keys_of
from cdclake.lake.ledger_record import LedgerRecord
from cdclake.lake.row_delta import append_blocker, row_delta_blocker
from cdclake.runtime.local_relation import local_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger("cdclake")

_BAD = "_cdc_bad"
_TOMB = "_cdc_tomb"
# The apply order (``engine.effects.change_order``), compared as Spark compares the struct (``_rank``).
_ORDER = (COMMIT_TS, CHANGE_SEQ, FILE_INDEX, FILE_BLOCK, ROW_POSITION)


def prepare_in_driver(batch: BatchContext, files: Sequence[BronzeFile]) -> ChangeSet | None:
    """The batch's change set, prepared in the driver; None: the Spark path prepares it (module docstring)."""
    from pyspark.sql import functions as F

    engine, table, metadata = batch.engine, batch.table, batch.metadata
    silver = engine.silver_table(table)
    limit = min(engine.sizes.driver_read_bytes, engine.sizes.driver_write_bytes)  # the driver writes its files too
    if not metadata.exists or sum(f.size for f in files) > limit:
        return None
    # Declined before any file is read, as a table declines every batch: one that takes no driver
    # append or RowDelta; every table when DMS marks values it did not capture (CsvNoSupValue:
    # "unchanged" columns, which the driver does not carry).
    blocker = append_blocker(metadata) if table.append_only else row_delta_blocker(metadata)
    if blocker is not None or engine.config.bronze.csv_no_sup_value is not None:
        return None
    raw = read_locally(engine.spark, engine.store, engine.config.bronze, table, files)
    if raw is None:
        return None
    changes = changes_of(raw, engine, table, files)
    # The latest changes' columns (``engine.read.latest_changes``: with no "unchanged" flags,
    # these), without planning its aggregate.
    kept = APPEND_ONLY_OP_COLUMN if table.append_only else SILVER_ORDER
    columns = [*data_columns(changes), kept, OP, COMMIT_TS]
    shape = changes.withColumn(APPEND_ONLY_OP_COLUMN, F.col(OP)).select(*columns).limit(0)
    schema = schema_change(shape, metadata)
    written = WrittenColumns(table.silver_key(), data_columns(shape), schema.absent, {})
    way = choose_commit_way(engine, table, metadata, written)
    if schema.incompatible or way != ("append" if table.append_only else "row-delta") or not collectable(shape):
        return None
    typed = cast_columns(changes, schema.cast)
    rows = local_arrow(typed.withColumn(_BAD, has_error()))
    if rows is None or rows.num_rows == 0 or any(rows.column(_BAD).to_pylist()):
        return None  # a plan Spark cannot evaluate in the driver, nothing, or bad rows (the Spark path quarantines)
    if table.append_only:
        classified = rows.append_column(APPEND_ONLY_OP_COLUMN, rows.column(OP)).select(columns)
        effects = {EFFECT_INSERT: rows.num_rows}
    else:
        classified = _classified_latest(batch, rows, shape)
        if classified is None:
            return None
        effects = {e: classified.column(EFFECT).to_pylist().count(e) for e in EFFECTS}
        one_row_per_key(table, silver, effects, len(set(keys_of(classified, table.silver_key()))))
    newest = max(classified.column(COMMIT_TS).to_pylist(), default=None)
    properties = LedgerRecord.batch([f.key for f in files], newest).properties() | dict(batch.checkpoint)
    # Every change, as history takes it: the same rows, evaluated in the driver again when written.
    history = history_rows(typed) if table.history else None
    log.debug("prepared in the driver table=%s changes=%d rows=%d", table.source, rows.num_rows, classified.num_rows)
    return ChangeSet(
        files=list(files),
        shape=shape,
        schema=schema,
        creates_table=False,
        counts=RowCounts(rows.num_rows, 0, min(rows.column(COMMIT_TS).to_pylist(), default=None)),
        effects=effects,
        latest_commit_ts=newest,
        bad=None,
        history=history,
        commit=data_commit(silver, table, metadata, False, Chosen(way, written, classified, None), effects, properties),
    )


def _classified_latest(batch: BatchContext, rows: pa.Table, shape: DataFrame) -> pa.Table | None:
    """The latest change of each key of ``rows``, classified against the stored rows and the
    tombstones; None when a key has no exact literal for the stored rows' filter."""
    key = batch.table.silver_key()
    latest = _latest_per_key(rows, key, shape.columns)
    where = key_filter(latest, key, {f.name: f.dataType.simpleString() for f in shape.schema.fields})
    if where is None:
        return None
    return _classified(latest, _stored(batch, key, where), key)


def _latest_per_key(rows: pa.Table, key: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """The last change of each key by the apply order (``engine.effects.latest_change_per_key``;
    no row of these is bad), with ``columns``."""
    import pyarrow as pa

    orders = [_rank(order) for order in zip(*[rows.column(c).to_pylist() for c in _ORDER], strict=True)]
    last: dict[tuple[Any, ...], int] = {}
    for index, at in enumerate(keys_of(rows, key)):
        if at not in last or orders[index] > orders[last[at]]:
            last[at] = index
    return rows.take(pa.array(sorted(last.values()), pa.int64())).select(list(columns))


def _rank(order: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """An apply order as Python compares it the way Spark compares the struct: NULL fields first;
    text by code point, which is the order of its UTF-8 bytes."""
    return tuple((value is not None, value) for value in order)


def _stored(batch: BatchContext, key: Sequence[str], where: str) -> pa.Table:
    """The stored rows of ``latest``'s keys at the batch's snapshot (key, order, data file and
    position) and their tombstones (key, order; ``_cdc_tomb`` true), in one Spark job: each
    table's scan filtered by ``where`` (``lake.key_filter``), so Iceberg prunes its data files by
    their column bounds."""
    engine, metadata = batch.engine, batch.metadata
    silver = engine.silver_table(batch.table)
    keys = ", ".join(quote(k) for k in key)
    parts = [
        f"SELECT {keys}, {SILVER_ORDER}, _file AS {STORED_FILE}, _pos AS {STORED_POS}, false AS {_TOMB} "
        f"FROM {silver.identifier} VERSION AS OF {metadata.snapshot_id} WHERE {where}"
    ]
    if metadata.tombstones_exist:
        parts.append(
            f"SELECT {keys}, {SILVER_ORDER}, CAST(NULL AS STRING), CAST(NULL AS BIGINT), true "
            f"FROM {tombstones_of(silver).identifier} WHERE {where}"
        )
    return collect_rows(engine.spark.sql(" UNION ALL ".join(parts)))


def _classified(latest: pa.Table, stored: pa.Table, key: Sequence[str]) -> pa.Table:
    """``latest`` with each change's effect against the stored rows and the newest tombstone of its
    key, and where its stored row lives (``engine.effects.classify_effects``). A key stored twice
    gets a row per stored row, as the Spark path's join gives it (``one_row_per_key`` refuses it)."""
    import pyarrow as pa

    found: dict[tuple[Any, ...], list[tuple[str, str, int] | None]] = {}
    tombs: dict[tuple[Any, ...], str] = {}
    for at, row in zip(keys_of(stored, key), stored.to_pylist(), strict=True):
        if row[_TOMB]:
            tombs[at] = max(tombs.get(at, row[SILVER_ORDER]), row[SILVER_ORDER])
        else:
            found.setdefault(at, []).append((row[SILVER_ORDER], row[STORED_FILE], row[STORED_POS]))
    taken: list[int] = []
    effects: list[str] = []
    places: list[tuple[str | None, int | None]] = []
    changes = zip(
        keys_of(latest, key), latest.column(SILVER_ORDER).to_pylist(), latest.column(OP).to_pylist(), strict=True
    )
    for index, (at, order, op) in enumerate(changes):
        for match in found.get(at) or [None]:
            tomb = tombs.get(at)
            if match is not None:
                kind = EFFECT_LATE if order < match[0] else EFFECT_DELETE if op == "D" else EFFECT_UPDATE
            elif tomb is not None and order < tomb:
                kind = EFFECT_LATE
            else:
                kind = EFFECT_DELETE_MISSING if op == "D" else EFFECT_INSERT
            taken.append(index)
            effects.append(kind)
            places.append((None, None) if match is None else (match[1], match[2]))
    return (
        latest.take(pa.array(taken, pa.int64()))
        .append_column(STORED_FILE, pa.array([p[0] for p in places], pa.string()))
        .append_column(STORED_POS, pa.array([p[1] for p in places], pa.int64()))
        .append_column(EFFECT, pa.array(effects, pa.string()))
    )
