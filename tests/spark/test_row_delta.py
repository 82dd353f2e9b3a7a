"""The written-files RowDelta commit (cdclake.lake.row_delta) against the MERGE it replaces."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdclake.columns import EFFECT, OP, SILVER_ORDER, STORED_FILE, STORED_POS
from cdclake.engine.effects import classify_effects
from cdclake.engine.statements import merge_statement
from cdclake.lake.batch import KeyedBatch, TableMetadata, WrittenColumns, read_table_metadata
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.driver_write import apply_collected_row_delta, arrow_shape, collect_rows, write_parquet
from cdclake.lake.ledger_record import LedgerRecord
from cdclake.lake.row_delta import WrittenFile, WrittenFiles, apply_row_delta, why_not_row_delta
from cdclake.lake.tables import SilverTable, iceberg_fields, iceberg_table, is_commit_conflict
from faults import iceberg_failure
from readers import MainPoller, delete_file_schemas

# Every plain type the path writes itself, and `gone` (dropped at the source: absent from batches).
TABLE_SCHEMA = (
    "id bigint, part string, v string, n int, amount decimal(12,2), at timestamp, day date, ok boolean, "
    "score double, gone string, _cdc_order string"
)
COLUMNS = ["id", "part", "v", "n", "amount", "at", "day", "ok", "score"]
ABSENT = ["gone"]
CHANGE_SCHEMA = (
    "id bigint, part string, v string, n int, amount decimal(12,2), at timestamp, day date, ok boolean, "
    f"score double, {SILVER_ORDER} string, {OP} string"
)
PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
}


def _order(step: int) -> str:
    return f"{step:08d}"


def _values(i: int, step: int) -> tuple[Any, ...]:
    return (
        f"v{i}-{step}",
        step if i % 5 else None,
        Decimal(f"{i}.{step % 100:02d}"),
        datetime(2024, 1, 1 + step % 20, i % 24, 30, 15, 123456),
        date(2024, 2, 1 + i % 28),
        bool(i % 2),
        i / 7,
    )


def _create(spark: SparkSession, identifier: str, rows: list[tuple[Any, ...]], **extra: str) -> None:
    props = ", ".join(f"'{k}'='{v}'" for k, v in {**PROPERTIES, **extra}.items())
    spark.sql(f"CREATE TABLE {identifier} ({TABLE_SCHEMA}) USING iceberg TBLPROPERTIES ({props})")
    spark.createDataFrame(rows, TABLE_SCHEMA).repartition(3).writeTo(identifier).append()


def _initial_rows(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    # Some stored rows have no order (NULL): MERGE updates them whatever the change's order.
    return [
        (i, f"p{i % 3}", *_values(i, 0), f"g{i}", _order(rng.randrange(0, 50)) if i % 7 else None) for i in range(count)
    ]


def _random_batch(rng: random.Random, universe: int, size: int, step: int) -> list[tuple[Any, ...]]:
    """One change per key: inserts, updates, deletes (to present or missing keys), some older than the stored row."""
    rows = []
    for i in rng.sample(range(universe), size):
        order = _order(step * 100 + rng.randrange(100)) if rng.random() > 0.15 else _order(rng.randrange(0, 60))
        rows.append((i, f"p{i % 3}", *_values(i, step), order, rng.choice("IUUUD")))
    return rows


def _rows(spark: SparkSession, identifier: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in spark.table(identifier).collect()), key=repr)


def _history(spark: SparkSession, identifier: str) -> list[int]:
    rows = spark.sql(f"SELECT snapshot_id FROM {identifier}.history ORDER BY made_current_at").collect()
    return [r["snapshot_id"] for r in rows]


def _metadata(spark: SparkSession, identifier: str) -> TableMetadata:
    return read_table_metadata(spark, SilverTable(*identifier.split(".")))


def _classified(
    spark: SparkSession, identifier: str, changes: DataFrame, key: Sequence[str]
) -> tuple[DataFrame, TableMetadata]:
    """The pipeline's classification at the current snapshot, with the stored rows' places, and the
    table's metadata as it found it."""
    metadata = _metadata(spark, identifier)
    base = metadata.snapshot_id
    assert base is not None
    stored = spark.sql(
        f"SELECT {', '.join(key)}, {SILVER_ORDER}, _file AS {STORED_FILE}, _pos AS {STORED_POS} "
        f"FROM {identifier} VERSION AS OF {base}"
    )
    classified = classify_effects(changes, stored, stored.select(*key, SILVER_ORDER).limit(0), key).localCheckpoint()
    return classified.where(F.col(EFFECT).isin("insert", "update", "delete")), metadata


def _batch(
    identifier: str, changes: DataFrame | pa.Table, metadata: TableMetadata, properties: dict[str, str]
) -> KeyedBatch:
    return KeyedBatch(SilverTable(*identifier.split(".")), changes, ["id"], COLUMNS, properties, metadata, ABSENT)


def _merge(spark: SparkSession, identifier: str, changes: DataFrame, key: Sequence[str]) -> None:
    def statement(target: str, view: str) -> str:
        return merge_statement(target, view, WrittenColumns(key, COLUMNS, ABSENT))

    batch = KeyedBatch(SilverTable(*identifier.split(".")), changes, key, COLUMNS, {"cdclake.kind": "cdc"}, None)
    IcebergCommitter().merge(spark, batch, statement)


@pytest.fixture
def database(spark: SparkSession) -> Iterator[str]:
    name = f"rd_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE NAMESPACE silver.{name}")
    yield f"silver.{name}"


@pytest.mark.parametrize("sorted_layout", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("writer", ["spark", "driver"])
def test_same_table_as_merge_one_snapshot_per_batch(
    spark: SparkSession, database: str, sorted_layout: bool, writer: str
) -> None:
    # GIVEN two identical merge-on-read tables, one of them ordered by its key; the files of the
    # RowDelta written by Spark, or by the driver from the changes collected as Arrow
    rng = random.Random(11 + sorted_layout)
    merged, written = f"{database}.merged", f"{database}.written"
    initial = _initial_rows(rng, 300)
    for identifier in (merged, written):
        _create(spark, identifier, initial)
    if sorted_layout:
        spark.sql(f"ALTER TABLE {written} WRITE ORDERED BY id")
    assert why_not_row_delta(_metadata(spark, written), WrittenColumns(["id"], COLUMNS, ABSENT)) is None
    boundaries = {_history(spark, written)[-1]}
    with MainPoller(spark, written) as poller:
        for step in range(1, 4):
            # WHEN the same classified batch goes through MERGE and through the RowDelta of written files
            changes = spark.createDataFrame(_random_batch(rng, 360, 120, step), CHANGE_SCHEMA)
            classified, metadata = _classified(spark, written, changes, ["id"])
            _merge(spark, merged, classified, ["id"])
            before = _history(spark, written)
            properties = LedgerRecord.batch([f"batch-{step}"], "2024-01-01 00:00:00").properties()
            if writer == "spark":
                made = apply_row_delta(spark, _batch(written, classified, metadata, properties))
            else:
                collected = collect_rows(classified)
                made = apply_collected_row_delta(spark, _batch(written, collected, metadata, properties))
            snapshot = made.snapshot_id
            boundaries.add(snapshot)
            # THEN the tables are equal, main gained one snapshot carrying the ledger, with delete files
            assert _rows(spark, written) == _rows(spark, merged)
            assert _history(spark, written) == [*before, snapshot]
            query = f"SELECT parent_id, summary FROM {written}.snapshots WHERE snapshot_id = {snapshot}"
            summary = spark.sql(query).first()
            assert summary is not None and summary["parent_id"] == before[-1]
            assert {k: summary["summary"][k] for k in properties} == properties
            # AND the commit returned that very snapshot: its parent and its ledger record
            assert made.parent_id == before[-1] and {k: made.summary[k] for k in properties} == properties
            assert int(summary["summary"]["added-position-deletes"]) > 0
    # AND a reader polling main only ever saw batch boundaries
    assert poller.seen <= boundaries
    assert len(poller.seen) >= 2
    # AND Iceberg's file statistics are right: filters that prune by them find every row
    rows = spark.table(merged).collect()
    for row in rng.sample(rows, 5):
        for column in ("id", "amount", "at", "day", "v"):
            found = spark.table(written).where(F.col(column) == row[column]).select("id").collect()
            assert row["id"] in {r["id"] for r in found}, (column, row[column])
    # AND the new images' files carry the table's sort order (none: 0)
    orders = {r[0] for r in spark.sql(f"SELECT sort_order_id FROM {written}.data_files").collect()}
    assert orders == ({0, 1} if sorted_layout else {0})
    # AND each delete file holds the deletes of one data file (as Iceberg's own writer makes them),
    # though a batch deleted from several data files
    delete_files = [r[0] for r in spark.sql(f"SELECT file_path FROM {written}.delete_files").collect()]
    assert len(delete_files) > 3
    for path in delete_files:
        assert spark.read.parquet(path).select("file_path").distinct().count() == 1, path
    # AND maintenance applies the delete files: compacted, the rows are the same
    _compact(spark, written)
    assert _rows(spark, written) == _rows(spark, merged)


def test_metrics_parsed_from_a_kept_footer_are_those_read_back_from_the_file(
    spark: SparkSession, database: str
) -> None:
    # GIVEN a file the driver wrote for a table of every plain type, NULLs and a dropped column included
    written = f"{database}.footers"
    _create(spark, written, _initial_rows(random.Random(3), 50))
    table = iceberg_table(spark, written)
    rows = pa.Table.from_batches(spark.table(written)._collect_as_arrow())
    ids = {f.name: f.id for f in iceberg_fields(spark, table)}
    columns = [(f.name, ids[f.name], f.dataType) for f in spark.table(written).schema.fields]
    file = write_parquet(table, arrow_shape(rows, columns, nulls={"gone"}), "data")
    files = WrittenFiles(spark, table)
    config = spark.sparkContext._jvm.org.apache.iceberg.MetricsConfig.forTable(table)
    # WHEN its metrics are parsed from the footer kept in memory and read back from storage
    kept = files._metrics(file, config)
    read = files._metrics(WrittenFile(file.path, file.size), config)
    # THEN they are the same: counts, sizes, NULL counts and every column's bounds
    assert file.footer is not None and int(kept.recordCount()) == int(read.recordCount()) == 50
    for name in ("columnSizes", "valueCounts", "nullValueCounts", "lowerBounds", "upperBounds"):
        assert getattr(kept, name)().equals(getattr(read, name)()), name
    assert kept.lowerBounds().size() >= len(COLUMNS)


@pytest.mark.parametrize("writer", ["spark", "driver", "iceberg"])
def test_delete_files_declare_their_columns_required_under_the_reserved_field_ids(
    spark: SparkSession, database: str, writer: str
) -> None:
    # GIVEN a batch that updates and deletes stored rows
    identifier = f"{database}.deletes"
    rng = random.Random(21)
    _create(spark, identifier, _initial_rows(rng, 60))
    changes = spark.createDataFrame(_random_batch(rng, 60, 30, 1), CHANGE_SCHEMA)
    classified, metadata = _classified(spark, identifier, changes, ["id"])
    # WHEN its position deletes are written by Spark's Parquet writer, by the driver's pyarrow, or
    # by Iceberg's own writer (a MERGE)
    if writer == "spark":
        apply_row_delta(spark, _batch(identifier, classified, metadata, {}))
    elif writer == "driver":
        apply_collected_row_delta(spark, _batch(identifier, collect_rows(classified), metadata, {}))
    else:
        _merge(spark, identifier, classified, ["id"])
    # THEN every delete file's footer declares file_path and pos required, with the field ids the
    # Iceberg spec reserves for them (other engines look columns up by id)
    schemas = delete_file_schemas(spark, identifier)
    assert schemas
    for path, schema in schemas.items():
        assert [(f.name, str(f.type), f.nullable, f.metadata) for f in schema] == [
            ("file_path", "string", False, {b"PARQUET:field_id": b"2147483546"}),
            ("pos", "int64", False, {b"PARQUET:field_id": b"2147483545"}),
        ], path


def _compact(spark: SparkSession, identifier: str) -> None:
    table = identifier.split(".", 1)[1]
    spark.sql(f"CALL silver.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))")


def test_a_concurrent_commit_makes_it_fail_and_leaves_nothing(spark: SparkSession, database: str) -> None:
    # GIVEN a batch classified at the current snapshot, then another writer's append
    written = f"{database}.written"
    _create(spark, written, _initial_rows(random.Random(5), 100))
    changes = spark.createDataFrame(_random_batch(random.Random(6), 120, 40, 1), CHANGE_SCHEMA)
    classified, metadata = _classified(spark, written, changes, ["id"])
    intruder = (999, "p0", *_values(999, 9), None, _order(1))
    spark.createDataFrame([intruder], TABLE_SCHEMA).writeTo(written).append()
    before = _rows(spark, written)
    data_dir = iceberg_table(spark, written).location().replace("file:", "") + "/data"
    written_before = set(_files_under(data_dir))
    # WHEN the batch is committed
    # THEN Iceberg's validation refuses it as a commit conflict (the engine retries those), main
    # keeps the other writer's row and nothing else, and the batch's files are removed again
    with pytest.raises(Exception) as failure:
        apply_row_delta(spark, _batch(written, classified, metadata, {}))
    assert is_commit_conflict(failure.value)
    assert _rows(spark, written) == before
    assert set(_files_under(data_dir)) == written_before


def test_written_files_leave_with_the_block_unless_the_table_keeps_them(spark: SparkSession, database: str) -> None:
    # GIVEN a table and two files the driver writes for it inside a WrittenFiles block each
    written = f"{database}.kept"
    _create(spark, written, _initial_rows(random.Random(9), 10))
    table = iceberg_table(spark, written)
    rows = pa.Table.from_batches(spark.table(written)._collect_as_arrow())
    ids = {f.name: f.id for f in iceberg_fields(spark, table)}
    shaped = arrow_shape(rows, [(f.name, ids[f.name], f.dataType) for f in spark.table(written).schema.fields])
    data_dir = iceberg_table(spark, written).location().replace("file:", "") + "/data"
    before = set(_files_under(data_dir))
    # WHEN the first block fails before its files are the table's, and the second after
    with pytest.raises(RuntimeError), WrittenFiles(spark, table) as files:
        files.track(write_parquet(table, shaped, "data"))
        assert len(set(_files_under(data_dir)) - before) == 1
        raise RuntimeError("the commit failed")
    removed = set(_files_under(data_dir))
    with pytest.raises(RuntimeError), WrittenFiles(spark, table) as files:
        kept = files.track(write_parquet(table, shaped, "data"))
        files.keep()
        raise RuntimeError("a failure after the commit")
    # THEN the first block's file is gone and the second's stays
    assert removed == before
    assert set(_files_under(data_dir)) - before == {kept.path.replace("file:", "")}


def test_a_compaction_since_the_classification_makes_it_fail(spark: SparkSession, database: str) -> None:
    # GIVEN a batch classified at the current snapshot, then a compaction rewriting every data file
    written = f"{database}.written"
    _create(spark, written, _initial_rows(random.Random(7), 100))
    changes = spark.createDataFrame(_random_batch(random.Random(8), 100, 40, 1), CHANGE_SCHEMA)
    classified, metadata = _classified(spark, written, changes, ["id"])
    _compact(spark, written)
    before = _rows(spark, written)
    # WHEN the batch is committed, THEN its deletes would point into removed files: refused
    with pytest.raises(Exception) as failure:
        apply_row_delta(spark, _batch(written, classified, metadata, {}))
    assert is_commit_conflict(failure.value)
    assert _rows(spark, written) == before


def test_a_commit_conflict_is_told_by_its_class_not_by_its_text(spark: SparkSession) -> None:
    # GIVEN Iceberg's conflict exceptions as PySpark raises them (bare, or wrapped by Spark), one
    # raised from a Python error, and failures that merely mention a conflict in their text
    stale = iceberg_failure("CommitFailedException", "Cannot commit changes based on stale table metadata")
    wrapped = iceberg_failure("ValidationException", "Found conflicting files", wrapped_in="Writing job aborted")
    try:
        raise RuntimeError("the batch's commit failed") from stale
    except RuntimeError as error:
        raised_from = error
    unrelated = iceberg_failure("NoSuchTableException", "Table does not exist: Cannot commit")
    try:
        try:
            raise stale
        except Exception:
            raise ValueError("a cleanup failed while the conflict was handled") from None
    except ValueError as error:
        during_handling = error
    # WHEN they are classified THEN only the conflicts are, whatever the messages say
    assert [is_commit_conflict(e) for e in (stale, wrapped, raised_from)] == [True, True, True]
    assert not is_commit_conflict(unrelated)
    assert not is_commit_conflict(during_handling)
    assert not is_commit_conflict(RuntimeError("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit"))


def _files_under(directory: str) -> Iterator[str]:
    import os

    for root, _dirs, names in os.walk(directory):
        for name in names:
            if name.endswith(".parquet"):
                yield os.path.join(root, name)


@pytest.mark.parametrize(
    ("ddl", "table_properties", "columns", "unchanged", "reason"),
    [
        ("", {"format-version": "3"}, COLUMNS, None, "format v3"),
        ("ALTER TABLE {t} ADD PARTITION FIELD bucket(4, id)", {}, COLUMNS, None, "a partitioned table"),
        ("", {"write.merge.mode": "copy-on-write"}, COLUMNS, None, "a copy-on-write table"),
        ("ALTER TABLE {t} ADD COLUMN tags array<string>", {}, COLUMNS, None, "column tags of type list<string>"),
        ("", {}, [c for c in COLUMNS if c != "score"], None, "updates keep the stored values of score"),
        ("", {}, COLUMNS, {"v": "_cdc_unchanged_v"}, "updates keep the stored values of v"),
    ],
)
def test_what_keeps_a_table_off_this_path(
    spark: SparkSession,
    database: str,
    ddl: str,
    table_properties: dict[str, str],
    columns: list[str],
    unchanged: dict[str, str] | None,
    reason: str,
) -> None:
    table = f"{database}.t"
    _create(spark, table, _initial_rows(random.Random(1), 5), **table_properties)
    if ddl:
        spark.sql(ddl.format(t=table))
    assert (
        why_not_row_delta(_metadata(spark, table), WrittenColumns(["id"], columns, ABSENT, unchanged or {})) == reason
    )
