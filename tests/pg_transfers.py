"""A cross-table workload on a source database: money moved between the rows of a busy and a quiet table in
transactions that keep the total constant, and ``cdclake capture --follow`` writing bronze meanwhile (used by
``tests/spark/postgres/test_pg_cut.py``, ``test_pg_verify_cut.py`` and ``test_pg_capture.py``)."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from typing import Any

SourceDatabase = Any  # conftest.SourceDatabase

ROWS_BUSY, ROWS_QUIET, OPENING = 40, 4, 1000
TOTAL = (ROWS_BUSY + ROWS_QUIET) * OPENING
SCHEMA = f"""
CREATE TABLE busy (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE quiet (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO busy SELECT g, {OPENING} FROM generate_series(1, {ROWS_BUSY}) g;
INSERT INTO quiet SELECT g, {OPENING} FROM generate_series(1, {ROWS_QUIET}) g;
"""


class Transfers(threading.Thread):
    """Transfers in one transaction each: within the busy table always, and between the two tables
    while ``cross`` is set (the quiet table is written by nothing else)."""

    def __init__(self, db: SourceDatabase) -> None:
        super().__init__(daemon=True)
        self.db, self.rng = db, random.Random(5)
        self.cross = threading.Event()
        self.done = threading.Event()
        self.count = 0

    def run(self) -> None:
        import psycopg2

        conn = psycopg2.connect(self.db.dsn)
        try:
            while not self.done.is_set():
                rng, amount = self.rng, self.rng.randint(1, 50)
                a, b = rng.randint(1, ROWS_BUSY), rng.randint(1, ROWS_BUSY)
                target = ("quiet", rng.randint(1, ROWS_QUIET)) if self.cross.is_set() else ("busy", b)
                with conn, conn.cursor() as cur:
                    cur.execute("UPDATE busy SET balance = balance - %s WHERE id = %s", (amount, a))
                    cur.execute(f"UPDATE {target[0]} SET balance = balance + %s WHERE id = %s", (amount, target[1]))
                self.count += 1
                time.sleep(0.01)
        finally:
            conn.close()


def start_capture(db: SourceDatabase, batch_seconds: str = "0.5", file_bytes: str = "64") -> subprocess.Popen[bytes]:
    """``cdclake capture --follow`` in a process of its own, flushing every ``batch_seconds`` or ``file_bytes``."""
    settings = db.settings()
    command = [
        sys.executable, "-m", "cdclake.shells.cli", "-q", "--config", str(db.config_path), "--bronze", str(db.bronze),
        "capture", "--dsn", db.dsn, "--state-dir", str(settings.state_dir), "--slot", settings.slot, "--follow",
        "--max-batch-interval", batch_seconds, "--min-file-size", file_bytes, "--poll-interval", "0.05",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
