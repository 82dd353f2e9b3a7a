"""The batch-sized publish path (cdclake.lake.publish) against the MERGE it replaces."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from cdclake.columns import OP, SILVER_ORDER, UNCHANGED_PREFIX
from cdclake.config import Layout
from cdclake.engine.effects import classify_effects
from cdclake.engine.plan import APPLIED, with_effects
from cdclake.engine.statements import merge_statement
from cdclake.lake.batch import KeyedBatch, WrittenColumns, read_table_metadata
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.layout import apply_layout, has_layout, layout_statements
from cdclake.lake.ledger import read_ledger, replace_table
from cdclake.lake.ledger_record import FILES_PROPERTY, KIND_CDC, KIND_PROPERTY, LedgerRecord, LoadedFile
from cdclake.lake.publish import (
    commit_staged,
    iceberg_table,
    publish_changes,
    stage_changes,
)
from cdclake.lake.tables import SilverTable, is_commit_conflict
from readers import MainPoller

# A silver table: key (id, part), data columns, `gone` (dropped at the source: absent from every
# batch), `kept` (named nowhere: MERGE's UPDATE leaves it alone) and `_cdc_order`.
TABLE_SCHEMA = "id bigint, part string, v string, w string, n int, gone string, kept string, _cdc_order string"
COLUMNS = ["id", "part", "v", "w", "n"]  # what a batch carries
ABSENT = ["gone"]
UNCHANGED = {"w": UNCHANGED_PREFIX + "w"}
CHANGE_SCHEMA = f"id bigint, part string, v string, w string, n int, {SILVER_ORDER} string, {OP} string, " + (
    f"{UNCHANGED_PREFIX}w boolean"
)

MODES = {
    "merge-on-read v2": {"format-version": "2", "write.delete.mode": "merge-on-read"},
    "copy-on-write v2": {"format-version": "2", "write.delete.mode": "copy-on-write"},
    "merge-on-read v3": {"format-version": "3", "write.delete.mode": "merge-on-read"},
}


def _order(step: int) -> str:
    return f"{step:08d}"


def _create(spark: SparkSession, identifier: str, properties: dict[str, str], rows: list[tuple[Any, ...]]) -> None:
    props = {**properties, "write.merge.mode": properties["write.delete.mode"]}
    props["write.update.mode"] = properties["write.delete.mode"]
    tbl = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
    spark.sql(f"CREATE TABLE {identifier} ({TABLE_SCHEMA}) USING iceberg TBLPROPERTIES ({tbl})")
    spark.createDataFrame(rows, TABLE_SCHEMA).writeTo(identifier).append()


def _initial_rows(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    return [
        (i, f"p{i % 3}", f"v{i}", f"w{i}", i, f"g{i}", f"k{i}", _order(rng.randrange(0, 50)) if i % 7 else None)
        for i in range(count)
    ]


def _random_batch(rng: random.Random, universe: int, size: int, step: int) -> list[tuple[Any, ...]]:
    """One change per key: inserts, updates, deletes (to present or missing keys), some older than
    the stored row, some with the `w` column not captured."""
    rows = []
    for i in rng.sample(range(universe), size):
        op = rng.choice("IUUUD")
        order = _order(step * 100 + rng.randrange(100)) if rng.random() > 0.15 else _order(rng.randrange(0, 60))
        flag = rng.random() < 0.3
        w = None if flag else f"w{i}-{step}"
        rows.append((i, f"p{i % 3}", f"v{i}-{step}", w, rng.choice([None, step]), order, op, flag))
    return rows


def _rows(spark: SparkSession, identifier: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.table(identifier).collect()), key=repr)


def _merge(spark: SparkSession, identifier: str, changes: DataFrame, key: Sequence[str]) -> None:
    def statement(target: str, view: str) -> str:
        return merge_statement(target, view, WrittenColumns(key, COLUMNS, ABSENT, UNCHANGED))

    batch = KeyedBatch(SilverTable(*identifier.split(".")), changes, key, COLUMNS, {"cdclake.kind": "cdc"}, None)
    IcebergCommitter().merge(spark, batch, statement)


def _main_history(spark: SparkSession, identifier: str) -> list[int]:
    rows = spark.sql(f"SELECT snapshot_id FROM {identifier}.history ORDER BY made_current_at").collect()
    return [r["snapshot_id"] for r in rows]


def _branches(spark: SparkSession, identifier: str) -> list[str]:
    return [r["name"] for r in spark.sql(f"SELECT name FROM {identifier}.refs").collect() if r["name"] != "main"]


def _batch(table: str | SilverTable, changes: DataFrame, key: Sequence[str], properties: dict[str, str]) -> KeyedBatch:
    """A batch as the pipeline hands it to ``publish_changes``, with the table's metadata as the plan
    read it (the snapshot it was classified against)."""
    silver = table if isinstance(table, SilverTable) else SilverTable(*table.split("."))
    metadata = read_table_metadata(changes.sparkSession, silver)
    return KeyedBatch(silver, changes, key, COLUMNS, properties, metadata, ABSENT, UNCHANGED)


@pytest.fixture
def database(spark: SparkSession) -> Iterator[str]:
    name = f"pub_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{name}")
    yield f"silver.{name}"


def _planned(spark: SparkSession, identifier: str, changes: DataFrame, key: Sequence[str]) -> DataFrame:
    """The changes as the pipeline's plan hands them to a data commit: classified against the
    stored rows (no tombstones), inserts, updates and deletes only."""
    stored = spark.table(identifier).select(*key, SILVER_ORDER)
    return with_effects(classify_effects(changes, stored, stored.limit(0), key).localCheckpoint(), APPLIED)


@pytest.mark.parametrize("mode", ["merge-on-read v2", "copy-on-write v2", "merge-on-read v3"])
def test_same_table_as_merge_one_snapshot_per_batch(spark: SparkSession, database: str, mode: str) -> None:
    # GIVEN two identical tables (composite key for copy-on-write, one column otherwise)
    key = ["id", "part"] if mode.startswith("copy") else ["id"]
    rng = random.Random(len(mode) + 1)
    merged, published = f"{database}.merged", f"{database}.published"
    initial = _initial_rows(rng, 300)
    for identifier in (merged, published):
        _create(spark, identifier, MODES[mode], initial)
    boundaries = {_main_history(spark, published)[-1]}
    with MainPoller(spark, published) as poller:
        for step in range(1, 4):
            # WHEN the same random batch, planned as the pipeline does (only the effects that
            # apply), goes through MERGE and through publish_changes
            raw = spark.createDataFrame(_random_batch(rng, 360, 120, step), CHANGE_SCHEMA)
            changes = _planned(spark, published, raw, key)
            _merge(spark, merged, changes, key)
            history_before = _main_history(spark, published)
            properties = LedgerRecord.batch([f"batch-{step}"], "2024-01-01 00:00:00").properties()
            made = publish_changes(spark, _batch(published, changes, key, properties))
            snapshot = made.snapshot_id
            boundaries.add(snapshot)
            # THEN the tables are equal, main gained exactly one snapshot that carries the ledger
            assert _rows(spark, published) == _rows(spark, merged)
            history = _main_history(spark, published)
            assert history == [*history_before, snapshot]
            summary = spark.sql(
                f"SELECT parent_id, summary FROM {published}.snapshots WHERE snapshot_id = {snapshot}"
            ).first()
            assert summary is not None
            assert summary["parent_id"] == history_before[-1]
            # AND the publish returned that very snapshot: its parent and its ledger record
            assert made.parent_id == history_before[-1] and {k: made.summary[k] for k in properties} == properties
            assert {k: summary["summary"][k] for k in properties} == properties
            assert _branches(spark, published) == []
    # AND a reader polling main only ever saw batch boundaries
    assert poller.seen <= boundaries
    assert len(poller.seen) >= 2


def test_ledger_reader_sees_every_published_batch(spark: SparkSession, database: str) -> None:
    # GIVEN a full load recorded in the ledger
    silver = SilverTable("silver", database.split(".")[1], "hosts")
    initial = spark.createDataFrame(_initial_rows(random.Random(1), 50), TABLE_SCHEMA)
    replace_table(spark, silver, initial, [LoadedFile("LOAD00000001.csv")])
    rng = random.Random(2)
    # WHEN two batches are published with their ledger properties
    for step in (1, 2):
        raw = spark.createDataFrame(_random_batch(rng, 60, 20, step), CHANGE_SCHEMA)
        changes = _planned(spark, silver.identifier, raw, ["id"])
        properties = LedgerRecord.batch([f"cdc-{step}.csv"]).properties()
        publish_changes(spark, _batch(silver, changes, ["id"], properties))
    # THEN read_ledger walks main's lineage through both batches back to the full load
    ledger = read_ledger(spark, silver)
    assert ledger.full_load_done
    assert ledger.applied == {"LOAD00000001.csv", "cdc-1.csv", "cdc-2.csv"}
    assert ledger.last_file == "cdc-2.csv"


def test_crashed_stage_is_invisible_and_the_next_run_cleans_up(spark: SparkSession, database: str) -> None:
    # GIVEN a batch staged on a branch by a run that crashed before publishing
    merged, published = f"{database}.merged", f"{database}.published"
    initial = _initial_rows(random.Random(3), 100)
    for identifier in (merged, published):
        _create(spark, identifier, MODES["merge-on-read v2"], initial)
    raw = spark.createDataFrame(_random_batch(random.Random(4), 120, 40, 1), CHANGE_SCHEMA)
    changes = _planned(spark, published, raw, ["id"])
    head = _main_history(spark, published)
    staged = stage_changes(spark, _batch(published, changes, ["id"], {}))
    # THEN main, its history and its contents are untouched
    assert _main_history(spark, published) == head
    assert _rows(spark, published) == _rows(spark, merged)
    assert _branches(spark, published) == [staged.branch]
    # WHEN the next run publishes the same batch
    properties = {KIND_PROPERTY: KIND_CDC, FILES_PROPERTY: '["f"]'}
    publish_changes(spark, _batch(published, changes, ["id"], properties))
    _merge(spark, merged, changes, ["id"])
    # THEN the leftover branch is gone and the result is the MERGE's, in one snapshot
    assert _branches(spark, published) == []
    assert _rows(spark, published) == _rows(spark, merged)
    assert len(_main_history(spark, published)) == len(head) + 1


def test_a_concurrent_commit_on_main_makes_the_publish_fail(spark: SparkSession, database: str) -> None:
    # GIVEN a staged batch, and another writer appending to main before it is published
    published = f"{database}.published"
    _create(spark, published, MODES["merge-on-read v2"], _initial_rows(random.Random(5), 100))
    raw = spark.createDataFrame(_random_batch(random.Random(6), 120, 40, 1), CHANGE_SCHEMA)
    staged = stage_changes(spark, _batch(published, _planned(spark, published, raw, ["id"]), ["id"], {}))
    intruder = (999, "p0", "x", "x", 0, None, None, _order(1))
    spark.createDataFrame([intruder], TABLE_SCHEMA).writeTo(published).append()
    before = _rows(spark, published)
    # WHEN the staged batch is published
    # THEN Iceberg's validation refuses it and main keeps the other writer's row, nothing else
    with pytest.raises(Exception, match=r"[Ff]ound conflicting files"):
        commit_staged(spark, staged, {KIND_PROPERTY: KIND_CDC})
    assert _rows(spark, published) == before
    assert intruder in before


def test_layout_statements() -> None:
    assert layout_statements("c.d.t", ["id"], "none") == []
    assert layout_statements("c.d.t", ["a", "b"], "sorted") == ["ALTER TABLE c.d.t WRITE ORDERED BY `a`, `b`"]
    assert layout_statements("c.d.t", ["a", "b"], "bucket", 8) == [
        "ALTER TABLE c.d.t ADD PARTITION FIELD bucket(8, `a`)"
    ]


@pytest.mark.parametrize("layout", ["sorted", "bucket"])
def test_a_layout_applied_again_changes_nothing(spark: SparkSession, database: str, layout: Layout) -> None:
    # GIVEN a table given its layout once
    identifier = f"{database}.layout_{layout}"
    _create(spark, identifier, MODES["merge-on-read v2"], [])
    apply_layout(spark, identifier, ["id"], layout)
    table = iceberg_table(spark, identifier)
    metadata = table.operations().current().metadataFileLocation()
    # WHEN it is applied again (every reload and maintenance run does)
    apply_layout(spark, identifier, ["id"], layout)
    # THEN the table has the layout and no new metadata version was written
    table.refresh()
    assert has_layout(table, ["id"], layout)
    assert not has_layout(table, ["id"], "bucket" if layout == "sorted" else "sorted")
    assert table.operations().current().metadataFileLocation() == metadata


def test_a_commit_on_main_after_the_batch_was_classified_makes_the_publish_fail(
    spark: SparkSession, database: str
) -> None:
    # GIVEN a batch that updates a key, classified against the table, and another writer's newer
    # version of that key committed on main before the batch is published
    published = f"{database}.published"
    _create(spark, published, MODES["merge-on-read v2"], _initial_rows(random.Random(7), 20))
    raw = spark.createDataFrame([(5, "p2", "mine", "w", 1, _order(10), "U", False)], CHANGE_SCHEMA)
    batch = _batch(published, _planned(spark, published, raw, ["id"]), ["id"], {})
    spark.sql(f"UPDATE {published} SET v = 'theirs', _cdc_order = '{_order(99)}' WHERE id = 5")
    before = _rows(spark, published)
    # WHEN the batch is published
    with pytest.raises(Exception) as refused:
        publish_changes(spark, batch)
    # THEN it is refused as a commit conflict (the run classifies again and retries): main keeps the
    # other writer's newer row, and no branch is left
    assert is_commit_conflict(refused.value), refused.value
    assert _rows(spark, published) == before and _branches(spark, published) == []
