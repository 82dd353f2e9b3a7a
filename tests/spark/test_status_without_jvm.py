"""`status` on a local warehouse starts no JVM: ``ops.status_local`` reads the tables' metadata files
and pyiceberg, and says exactly what ``ops.status.table_statuses`` (Spark) says on the same warehouse."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.lake.counts import Count, count_all, counted
from cdclake.lake.journals import record_schema_changes
from cdclake.lake.local_tables import LocalWarehouse
from cdclake.ops.status import table_statuses
from cdclake.ops.status_local import local_table_statuses, needs_spark
from cdclake.shells.status_view import status_text
from readers import warehouse_of

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
quarantine: {max_bad_row_ratio: 0.5}
tables:
  s.kept: {primary_key: [id], columns: {id: int, name: string}}
  s.changed: {primary_key: [id], columns: {id: int, name: string}}
  s.pending: {primary_key: [id], columns: {id: int, name: string}}
  s.absent: {primary_key: [id], columns: {id: int, name: string}}
"""


def test_status_without_a_jvm_says_what_the_spark_status_says(
    make_engine: EngineFactory, tmp_path: Path, spark: SparkSession
) -> None:
    # GIVEN tables in every state status tells apart: loaded only, updated and deleted (delete
    # files: rows not exact in the metadata; tombstones), a CDC file pending, no file at all; a
    # bad row and a corrupt file held in quarantine, a schema change recorded, a stray table
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
    write_csv(
        bronze / "s" / "kept" / "20240104-0000000000.csv",
        [["I", "2024-01-04 00:00:00.000000", "x", "bad"], ["I", "2024-01-04 00:00:00.000000", "6", "good"]],
    )
    (bronze / "s" / "kept" / "20240105-0000000000.parquet").write_bytes(b"PAR1 not a parquet file PAR1")
    run(engine)
    write_csv(bronze / "s" / "pending" / "20240103-0000000000.csv", [["I", "2024-01-03 00:00:00.000000", "9", "z"]])
    kept = engine.silver_table(engine.config.table("s.kept"))
    record_schema_changes(spark, kept, ["added column color string"], datetime(2024, 1, 5, tzinfo=UTC))
    spark.sql(f"CREATE TABLE silver.{engine.config.database}.prodcuts (id int) USING iceberg")
    spark.sql(f"INSERT INTO silver.{engine.config.database}.prodcuts VALUES (1), (2)")
    now = datetime.now(UTC)
    holds = {"s.pending": "a type change"}
    # WHEN status answers with no JVM and through Spark
    warehouse = warehouse_of(spark, f"silver.{engine.config.database}.prodcuts")
    local = local_table_statuses(engine.config, engine.store, warehouse, now, holds)
    by_spark = table_statuses(engine, now, holds)
    # THEN every field is the same, and so is every format's text
    assert local == by_spark
    for style, wide in (("table", False), ("table", True), ("csv", False), ("json", False)):
        assert status_text(local, [], style, wide) == status_text(by_spark, [], style, wide)
    # AND the answer is the real one, not two empty ones alike
    by_source = {s.source: s for s in local}
    assert [by_source[f"s.{t}"].rows for t in ("kept", "changed", "pending")] == [6, 4, 5]
    assert (by_source["s.changed"].tombstones, by_source["s.changed"].latest_change) == (
        1,
        "2024-01-02 00:00:00.000000",
    )
    assert (by_source["s.kept"].quarantined_rows, by_source["s.kept"].quarantined_files) == (1, 1)
    assert (by_source["s.kept"].schema_changes, by_source["s.kept"].last_schema_change) == (
        1,
        "added column color string",
    )
    assert by_source["s.pending"].pending_files == 1 and by_source["s.pending"].held_by_capture
    assert by_source["prodcuts"].not_configured and by_source["prodcuts"].rows == 2
    # AND counts read in forked processes (as a larger database's are) are the ones read in this process
    tables = LocalWarehouse(warehouse)
    changed, tombstones = (tables.table(engine.config.database, n) for n in ("changed", "changed__tombstones"))
    assert changed is not None and tombstones is not None
    counts = [Count(changed.files()), Count(tombstones.files(), ("id",))] * 3
    assert count_all(counts, pool_from=2) == [counted(c) for c in counts] == [4, 1] * 3


def test_status_takes_spark_only_for_what_needs_it(make_engine: EngineFactory) -> None:
    # GIVEN a configuration without history or marts, and one with a history table
    plain = make_engine(CONFIG).config
    history = replace(plain, tables=[replace(plain.tables[0], history=True), *plain.tables[1:]])
    # WHEN asked whether status needs Spark
    # THEN only the history lag sends it there
    assert needs_spark(plain) is None
    assert needs_spark(history) == "a table keeps history (its lag is read through Spark)"


def test_the_status_command_starts_no_jvm_on_a_local_warehouse(tmp_path: Path) -> None:
    # GIVEN a configuration and an empty local warehouse
    config = tmp_path / "cdclake.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    (tmp_path / "bronze").mkdir()
    probe = (
        "import sys, runpy\n"
        "config, warehouse, bronze = sys.argv[1:4]\n"
        "sys.argv = ['cdclake', '--config', config, '--warehouse', warehouse, '--bronze', bronze, 'status']\n"
        "import cdclake.runtime.session as s\n"
        "def refuse(*a, **k): raise SystemExit('a Spark session was started')\n"
        "s.build_spark_session = refuse\n"
        "runpy.run_module('cdclake.shells.cli', run_name='__main__')\n"
    )
    # WHEN `cdclake status` runs in a new process whose Spark session start fails
    done = subprocess.run(
        [sys.executable, "-c", probe, str(config), str(tmp_path / "warehouse"), str(tmp_path / "bronze")],
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN it answered all the same: no Spark session was asked for
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("no files yet") == 8, done.stdout  # four STATE cells, four reasons
