"""Gold: an incremental mart refresh after 1% changes vs the full refresh of the same mart.

    .venv/bin/python -m bench.gold_refresh --rows 1000000     # a section of every `make bench` profile

The silver table is the benchmark's ``orders`` (``bench/generate.py``), loaded and then changed by
1% through the engine; the mart is a GROUP BY over ``customer_id`` (100,000 groups at most), keyed
for the incremental path. Both refreshes go through ``cdclake.gold.run.refresh_marts``: the full one
with the mart's table dropped first, the incremental one from the refresh before the changes. Each
result is checked against the mart's SQL evaluated from scratch.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import generate as gen

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.context import Engine

log = logging.getLogger("bench")
DATABASE = "gold_bench"
MART_SQL = (
    f"SELECT customer_id, count(*) AS orders, sum(amount) AS amount, max(created) AS last_created "
    f"FROM {DATABASE}.orders GROUP BY customer_id"
)


def _engine(spark: SparkSession, bronze: Path) -> Engine:
    from cdclake.config import parse_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze

    text = gen.config_yaml("orders", database=DATABASE) + (
        f"marts:\n  - name: orders_per_customer\n    sql: >-\n      {MART_SQL}\n    keys: [customer_id]\n"
    )
    config = parse_config(text, "bench.yaml")
    return Engine(spark=spark, config=replace(config, bronze=replace(config.bronze, path=str(bronze))),
                  store=LocalBronze(bronze))  # fmt: skip


def _refresh(engine: Engine, expect_path: str) -> float:
    from cdclake.gold.run import refresh_marts

    started = time.perf_counter()
    (result,) = refresh_marts(engine)
    seconds = time.perf_counter() - started
    if result.path != expect_path:
        raise AssertionError(f"the mart took the {result.path} path ({result.reason}), expected {expect_path}")
    stored = engine.spark.sql(f"SELECT * FROM silver.{DATABASE}_gold.orders_per_customer EXCEPT ALL {MART_SQL}")
    fresh = engine.spark.sql(f"{MART_SQL} EXCEPT ALL SELECT * FROM silver.{DATABASE}_gold.orders_per_customer")
    if stored.count() or fresh.count():
        raise AssertionError("the refreshed mart differs from its SQL evaluated from scratch")
    return seconds


def measure(spark: SparkSession, work: Path, rows: int, reps: int = 2) -> dict[str, Any]:
    """The best of ``reps`` of each refresh after 1% changes (rows // 100) into ``rows`` rows."""
    from cdclake.engine.run import full_load, run
    from cdclake.lake.tables import SilverTable, current_snapshot_id

    data = work / "gold-refresh"
    shutil.rmtree(data, ignore_errors=True)
    gen.full_load(spark, data, rows, 4, "csv")
    engine = _engine(spark, data)
    full_load(engine).checked()
    change = gen.ChangeSet(rows, rows // 100, 2)
    mart = SilverTable("silver", f"{DATABASE}_gold", "orders_per_customer")
    silver = SilverTable("silver", DATABASE, "orders")
    timings: dict[str, list[float]] = {"full": [], "incremental": []}
    for rep in range(reps):
        spark.sql(f"DROP TABLE IF EXISTS {mart.identifier} PURGE")
        _refresh(engine, "full")  # the mart before the changes
        before_changes = current_snapshot_id(spark, silver.identifier)
        cdc = data / f"cdc_{rep}"
        gen.changes(spark, cdc, replace(change, batch=rep), datetime(2024, 1, 2 + rep))
        for file in sorted(gen.table_dir(cdc).iterdir()):
            file.rename(gen.table_dir(data) / file.name)
        run(engine).checked()
        timings["incremental"].append(_refresh(engine, "incremental"))
        spark.sql(f"DROP TABLE IF EXISTS {mart.identifier} PURGE")
        timings["full"].append(_refresh(engine, "full"))
        log.info("gold refresh rep %d: incremental %.2f s, full %.2f s (silver snapshot before the changes %s)",
                 rep + 1, timings["incremental"][-1], timings["full"][-1], before_changes)  # fmt: skip
    for table in ("orders", "orders__tombstones"):
        spark.sql(f"DROP TABLE IF EXISTS silver.{DATABASE}.{table} PURGE")
    spark.sql(f"DROP TABLE IF EXISTS {mart.identifier} PURGE")
    shutil.rmtree(data, ignore_errors=True)
    best = {name: min(runs) for name, runs in timings.items()}
    return {
        "rows": rows,
        "changes": rows // 100,
        "runs": timings,
        "timings": best,
        "speedup": best["full"] / best["incremental"],
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-gold")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.workdir, args.rows, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
