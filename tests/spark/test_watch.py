"""Progress inside one long Spark action, read from Spark's status tracker while it runs."""

from __future__ import annotations

import logging
import re
import time

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
    assert all(re.search(r"tasks=[0-4]/4 elapsed_s=\d+ eta_s=(\d+|\?)$", r.getMessage()) for r in lines)
    assert all(0.0 <= r.__dict__["progress"] <= 1.0 for r in lines)
    # AND none after the block ended
    count = len(lines)
    time.sleep(0.5)
    assert len([r for r in caplog.records if r.getMessage().startswith("progress slow scan")]) == count
