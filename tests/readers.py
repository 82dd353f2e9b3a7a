"""A reader of a table's ``main`` that the tests run beside the writes they check."""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from cdclake.lake.tables import iceberg_table


class MainPoller(threading.Thread):
    """Watches main's head (Iceberg metadata only, no Spark job) while batches apply; ``seen`` holds
    every snapshot a reader could have read."""

    def __init__(self, spark: SparkSession, identifier: str) -> None:
        super().__init__(daemon=True)
        self.table = iceberg_table(spark, identifier)
        self.seen: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.table.refresh()
            self.seen.add(int(self.table.currentSnapshot().snapshotId()))
