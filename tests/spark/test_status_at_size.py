"""`status` at database size: the same answer as the per-table status it
replaces, from table metadata and a few Spark jobs for the whole database, not six to eight a table."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.lake.counts import table_files
from cdclake.lake.iceberg import IcebergTable
from cdclake.lake.journals import tombstones_of
from cdclake.ops.status import TableToCount, count_rows_and_tombstones, table_statuses
from cdclake.ops.table_status import NO_FILES
from status_oracle import per_table_statuses

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
quarantine: {max_bad_row_ratio: 0.5}
tables:
  s.kept: {primary_key: [id], columns: {id: int, name: string}}
  s.changed: {primary_key: [id], columns: {id: int, name: string}, history: true}
  s.pending: {primary_key: [id], columns: {id: int, name: string}}
  s.absent: {primary_key: [id], columns: {id: int, name: string}}
"""


@contextmanager
def counted_jobs(spark: SparkSession, group: str) -> Iterator[list[int]]:
    """The ids of the Spark jobs run inside the block (by this thread), in the list yielded."""
    jobs: list[int] = []
    spark.sparkContext.setJobGroup(group, group)
    try:
        yield jobs
    finally:
        jobs += spark.sparkContext.statusTracker().getJobIdsForGroup(group)
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def test_status_answers_as_before_with_a_few_jobs_for_all_tables(
    make_engine: EngineFactory, tmp_path: Path, spark: SparkSession
) -> None:
    # GIVEN tables in different states: loaded only (s.kept: no delete file, its count is exact in
    # the metadata), loaded then updated and deleted with history on (s.changed: delete files and
    # tombstones), loaded with a CDC file not applied yet (s.pending), and one no file arrived for (s.absent)
    bronze = tmp_path / "bronze"
    load = [["2024-01-01 00:00:00.000000", str(i), f"n{i}"] for i in range(1, 6)]
    for table in ("kept", "changed", "pending"):
        write_csv(bronze / "s" / table / "LOAD00000001.csv", load)
    engine = make_engine(CONFIG)
    run(engine).checked()
    write_csv(
        bronze / "s" / "changed" / "20240102-0000000000.csv",
        [["U", "2024-01-02 00:00:00.000000", "1", "x"], ["D", "2024-01-02 00:00:00.000000", "2", "n2"]],
    )
    run(engine).checked()
    write_csv(bronze / "s" / "pending" / "20240103-0000000000.csv", [["I", "2024-01-03 00:00:00.000000", "9", "z"]])
    now = datetime.now(UTC)
    # WHEN status answers, counting its Spark jobs
    with counted_jobs(spark, "status-at-size") as jobs:
        statuses = table_statuses(engine, now)
    # THEN every field is what the per-table status said (three snapshots: the load staged, the
    # load recorded, the CDC batch)
    assert statuses == per_table_statuses(engine, now)
    by_source = {s.source: s for s in statuses}
    assert [by_source[f"s.{t}"].rows for t in ("kept", "changed", "pending")] == [5, 4, 5]
    changed = by_source["s.changed"]
    assert (changed.tombstones, changed.snapshots, changed.latest_change) == (1, 3, "2024-01-02 00:00:00.000000")
    assert by_source["s.pending"].pending_files == 1 and by_source["s.absent"].behind.startswith(NO_FILES)
    # AND on a local warehouse it ran no Spark job at all (the old status ran six to eight per
    # table): counts the metadata does not say exactly are read by pyiceberg, empty journals not at all
    assert jobs == []
    # AND the counts Spark takes for tables elsewhere (S3) are the same, in a few jobs for all tables
    silver = engine.silver_table(engine.config.table("s.changed"))
    tombstones = tombstones_of(silver)
    elsewhere = {
        "rows": TableToCount(
            silver, replace(table_files(IcebergTable.load(spark, silver.identifier)), counted_here=False)
        ),
        "keys": TableToCount(
            tombstones,
            replace(table_files(IcebergTable.load(spark, tombstones.identifier)), counted_here=False),
            ["id"],
        ),
    }
    here = {name: replace(c, files=replace(c.files, counted_here=True)) for name, c in elsewhere.items()}
    with counted_jobs(spark, "status-counts-by-spark") as jobs:
        by_spark = count_rows_and_tombstones(engine, {"changed": elsewhere["rows"]}, {"changed": elsewhere["keys"]})
    assert by_spark == count_rows_and_tombstones(engine, {"changed": here["rows"]}, {"changed": here["keys"]})
    assert by_spark == {("rows", "changed"): 4, ("tombstones", "changed"): 1} and 0 < len(jobs) <= 6, jobs

    # WHEN a bad row is quarantined (the journals hold rows) and status answers again
    write_csv(
        bronze / "s" / "kept" / "20240104-0000000000.csv",
        [["I", "2024-01-04 00:00:00.000000", "x", "bad"], ["I", "2024-01-04 00:00:00.000000", "6", "good"]],
    )
    run(engine).checked()
    # THEN it still says what the per-table status says
    statuses = table_statuses(engine, now)
    assert statuses == per_table_statuses(engine, now)
    assert {s.source: (s.quarantined_rows, s.rows) for s in statuses}["s.kept"] == (1, 6)
