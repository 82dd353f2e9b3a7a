"""Progress inside one long Spark action, read from Spark's status tracker while it runs."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.runtime.progress import watch_stages


def test_a_long_action_logs_its_tasks_while_it_runs(spark: SparkSession, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cdclake")

    # WHEN a Spark action of 4 slow tasks runs under a watch polling every 0.2 s
    def slow(value: int) -> int:  # pickled by value: the Python workers cannot import this module
        time.sleep(0.6)
        return value

    with watch_stages(spark, "slow scan", interval=0.2):
        assert spark.sparkContext.parallelize(range(4), 4).map(slow).count() == 4
    # THEN progress lines came while it ran, each with its tasks out of 4 and a share for the bar
    lines = [r for r in caplog.records if r.getMessage().startswith("progress slow scan stage=")]
    assert len(lines) >= 2
    pattern = r"tasks=[0-4]/4 rows=\d+ mb=[\d.]+ rows_per_s=\d+ elapsed_s=\d+ eta_s=(\d+|\?)$"
    assert all(re.search(pattern, r.getMessage()) for r in lines)
    assert all(0.0 <= r.__dict__["progress"] <= 1.0 for r in lines)
    # AND none after the block ended
    count = len(lines)
    time.sleep(0.5)
    assert len([r for r in caplog.records if r.getMessage().startswith("progress slow scan")]) == count


def test_the_lines_of_a_scan_count_the_rows_read(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    # GIVEN CSV files of 100 rows, each a task of its own that takes about 0.6 s, three per core
    # (so tasks end while others still run, whatever the machine)
    files = 3 * spark.sparkContext.defaultParallelism
    for part in range(files):
        (tmp_path / f"part{part}.csv").write_text("".join(f"{part},{i}\n" for i in range(100)))
    caplog.set_level(logging.INFO, logger="cdclake")

    @F.udf(StringType())
    def slow(value: str) -> str:
        time.sleep(0.006)
        return value

    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1024")
    try:
        # WHEN they are read under a watch
        with watch_stages(spark, "scan", interval=0.2):
            rows = spark.read.schema("part string, i string").csv(str(tmp_path)).select(slow("part"))
            assert len(rows.collect()) == 100 * files
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", before)
    # THEN once a task has ended, the lines count its rows: at least a file of 100 per task done
    found = [re.search(rf"^progress scan .* tasks=(\d+)/{files} rows=(\d+) ", r.getMessage()) for r in caplog.records]
    counted = [(int(m.group(1)), int(m.group(2))) for m in found if m]
    assert any(rows > 0 for _, rows in counted), [r.getMessage() for r in caplog.records]
    assert all(100 * done <= rows <= 100 * files for done, rows in counted), counted
