"""What a small batch's history commit costs: written by the driver as one RowDelta vs one Spark MERGE.

    .venv/bin/python -m bench.history_apply --keys 10000 --changes 20     # make bench-history

Two history tables start alike (``keys`` keys, one version each, untimed). Then ``batches`` batches
of ``changes`` changes (updates and deletes of random keys, each later than the last) go into both,
alternated, timed one by one through ``lake.history.apply_history``:

- ``merge``: the batch's rows held by Spark (``createDataFrame`` parallelizes them), kept there
  (``driver_versions=0``): the versions joined with history and one MERGE (the baseline);
- ``collected``: the same rows held by Spark, as a batch prepared in Spark hands them (Parquet
  files, a bad row), collected by one job, then as ``driver``;
- ``driver``: the same rows held by the driver (a ``LocalRelation``, as a small batch prepared in
  the driver hands them): one scan of the batch's keys and one RowDelta (``lake.history_delta``).

At the end the three tables must hold the same versions. The figures are medians of the batches; the
ratio compares figures of the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.paths import ROOT, scratch_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CATALOG, DATABASE = "silver", "history_bench"
SCHEMA = "id bigint, name string, amount bigint, _cdc_order string, _cdc_op string, _cdc_ts string"
START = datetime(2024, 1, 1)


def _rows(changes: list[tuple[Any, ...]], first: int) -> list[tuple[Any, ...]]:
    """Change rows (key, name, amount, operation, commit time) as a batch hands them to history:
    its ``_cdc_order`` from the commit time and a running number (``first`` onward)."""
    return [(k, name, amount, f"{ts}|{first + n:08d}", op, ts) for n, (k, name, amount, op, ts) in enumerate(changes)]


def _frame(spark: SparkSession, rows: list[tuple[Any, ...]], way: str) -> DataFrame:
    from cdclake.lake.driver_write import collect_rows
    from cdclake.runtime.local_relation import local_frame

    frame = spark.createDataFrame(rows, SCHEMA)
    if way != "driver":
        return frame
    local = local_frame(spark, collect_rows(frame), frame.schema)
    assert local is not None
    return local


def _batch(rng: random.Random, keys: int, changes: int, at: datetime) -> list[tuple[Any, ...]]:
    """``changes`` changes of random keys (a fifth of them deletes), a second apart from ``at``."""
    out: list[tuple[Any, ...]] = []
    for n in range(changes):
        ts = (at + timedelta(seconds=n)).strftime("%Y-%m-%d %H:%M:%S")
        key = rng.randrange(keys)
        if rng.random() < 0.2:
            out.append((key, None, None, "D", ts))
        else:
            out.append((key, f"name {rng.randrange(1000)}", rng.randrange(10**6), "U", ts))
    return out


def measure(spark: SparkSession, keys: int, changes: int, batches: int, seed: int) -> dict[str, Any]:
    from cdclake.lake.history import apply_history, history_of
    from cdclake.lake.tables import SilverTable

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{DATABASE}")
    ways = ("merge", "collected", "driver")
    tables = {way: history_of(SilverTable(CATALOG, DATABASE, f"people_{way}")) for way in ways}
    stamp = START.strftime("%Y-%m-%d %H:%M:%S")
    first = [(k, f"name {k}", k, f"{stamp}|{k:08d}", "I", stamp) for k in range(keys)]
    for way in ways:
        apply_history(spark, tables[way], spark.createDataFrame(first, SCHEMA), ["id"])
    rng = random.Random(seed)
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    number = keys
    for index in range(batches):
        rows = _rows(_batch(rng, keys, changes, START + timedelta(hours=index + 1)), number)
        number += changes
        for way in ways if index % 2 == 0 else reversed(ways):
            frame = _frame(spark, rows, way)
            started = time.perf_counter()
            apply_history(spark, tables[way], frame, ["id"], driver_versions=0 if way == "merge" else changes)
            seconds[way].append(round(time.perf_counter() - started, 3))
    held = {way: sorted(map(repr, spark.table(tables[way].identifier).collect())) for way in ways}
    assert held["merge"] == held["driver"] == held["collected"], "the ways left different histories"
    median = {way: round(statistics.median(values), 3) for way, values in seconds.items()}
    return {
        "keys": keys,
        "changes per batch": changes,
        "batches": batches,
        "versions at the end": len(held["driver"]),
        "seconds": seconds,
        "median seconds": median,
        "merge vs driver": round(median["merge"] / median["driver"], 2),
        "merge vs collected": round(median["merge"] / median["collected"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-history")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.keys, args.changes, args.batches, args.seed)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
