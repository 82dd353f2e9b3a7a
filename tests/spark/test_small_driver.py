"""Two large batches at once in a small driver: the classification shuffles, nothing dies of memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCENARIO = Path(__file__).with_name("small_driver.py")


def test_two_large_batches_at_once_in_a_small_driver_shuffle_and_match_a_replay(tmp_path: Path) -> None:
    # GIVEN two tables of 100k rows, each with one CDC batch of 100k changes (10% deletes, 80%
    # updates, 10% inserts), applied at once in a driver of 640 MB: 100k touched rows at 1 KiB each
    # do not fit a quarter of its heap shared by two tables in flight
    # WHEN the scenario runs in a JVM of its own
    done = subprocess.run(
        [sys.executable, str(SCENARIO), str(tmp_path), "--driver-memory", "640m", "--tables", "2", "--rows", "100000"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # THEN no table failed, both classified by a shuffle join, and both equal a plain-Python replay
    assert result["failures"] == []
    assert result["heap_bytes"] <= 700 * 1024 * 1024
    assert result["broadcast"] == {"public.orders_000": False, "public.orders_001": False}
    assert result["expected_rows"] == 100_000
    assert result["differences"] == {"orders_000": 0, "orders_001": 0}
