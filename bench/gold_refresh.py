"""Gold: a mart refresh after 1% changes (the path it chooses) vs the full refresh of the same mart.

    .venv/bin/python -m bench.gold_refresh --rows 1000000     # a section of every `make bench` profile

The silver table is the benchmark's ``orders`` (``bench/generate.py``); the mart is a GROUP BY over
``customer_id`` (100,000 groups at most), keyed for the incremental path. Two cases:

* **spread**: 1% changes through the engine (``bench.generate``'s keys: the first ~6% of the ids)
  and the default settings: the refresh after them chooses its path (``gold.cost``); its time is
  reported with the path taken and why.
* **clustered**: silver rewritten sorted by ``customer_id`` into ``--files`` data files, then 1%
  changes confined to 1% of the customers (one slice of the files), with the size below which
  marts refresh in full lifted: the incremental path against a full refresh.

Every refresh goes through ``cdclake.gold.run.refresh_marts``: the full one with the mart's table
dropped first, the other from the refresh before the changes. Each result is checked against the
mart's SQL evaluated from scratch. After the changes, silver is read once, untimed, before either
refresh (``warm_after_changes``), so both start from the same state of Iceberg's executor cache.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, replace
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
SILVER = f"silver.{DATABASE}.orders"
MART = f"silver.{DATABASE}_gold.orders_per_customer"


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


@dataclass(frozen=True)
class Refresh:
    """One timed refresh: how long, the path it took and why."""

    seconds: float
    path: str
    reason: str


def _refresh(engine: Engine, expect_path: str | None = None) -> Refresh:
    """Refresh the mart (checking it against its SQL from scratch); ``expect_path``: the path it must take."""
    from cdclake.gold.run import refresh_marts

    started = time.perf_counter()
    (result,) = refresh_marts(engine)
    seconds = time.perf_counter() - started
    if result.path is None or (expect_path and result.path != expect_path):
        raise AssertionError(f"the mart took the {result.path} path ({result.reason}), expected {expect_path}")
    stored = engine.spark.sql(f"SELECT * FROM {MART} EXCEPT ALL {MART_SQL}")
    fresh = engine.spark.sql(f"{MART_SQL} EXCEPT ALL SELECT * FROM {MART}")
    if stored.count() or fresh.count():
        raise AssertionError("the refreshed mart differs from its SQL evaluated from scratch")
    return Refresh(seconds, result.path, result.reason)


def _from_scratch(engine: Engine) -> Refresh:
    """A full refresh of the mart from nothing (its table dropped first)."""
    engine.spark.sql(f"DROP TABLE IF EXISTS {MART} PURGE")
    return _refresh(engine, "full")


def warm_after_changes(spark: SparkSession) -> None:
    """Read silver once after a commit, untimed. The first scan after a commit loads its new delete
    files into Iceberg's executor cache (the one JVM, locally), and later scans find them there:
    without this, the refresh measured first after the changes paid about 2 s at 10M rows that the
    full refresh measured second did not."""
    spark.table(SILVER).count()


def measure_spread(engine: Engine, data: Path, rows: int, reps: int) -> dict[str, Any]:
    """1% changes (``bench.generate``'s mix) applied by the engine: keys all over the table, so the
    changes touch every data file. The refresh after them is free to choose its path."""
    from cdclake.engine.run import run

    change = gen.ChangeSet(rows, rows // 100, 2)
    timings: dict[str, list[float]] = {"full": [], "incremental": []}
    paths: list[str] = []
    reason = ""
    for rep in range(reps):
        _from_scratch(engine)  # the mart before the changes
        cdc = data / f"cdc_{rep}"
        gen.changes(engine.spark, cdc, replace(change, batch=rep), datetime(2024, 1, 2 + rep))
        for file in sorted(gen.table_dir(cdc).iterdir()):
            file.rename(gen.table_dir(data) / file.name)
        run(engine).checked()
        warm_after_changes(engine.spark)
        after = _refresh(engine)
        timings["incremental"].append(after.seconds)
        paths.append(after.path)
        reason = after.reason
        timings["full"].append(_from_scratch(engine).seconds)
        log.info("gold refresh, spread changes, rep %d: after the changes %.2f s (%s path), full %.2f s",
                 rep + 1, after.seconds, after.path, timings["full"][-1])  # fmt: skip
    return _summary(timings, {"paths": paths, "reason": reason})


def cluster_by_customer(spark: SparkSession, files: int) -> int:
    """Rewrite silver orders sorted by the mart's key as ``files`` data files, each holding its own
    range of customers (one overwrite commit); return how many data files it has."""
    from pyspark.sql import functions as F

    rows = spark.table(SILVER).repartitionByRange(files, "customer_id").sortWithinPartitions("customer_id")
    rows.localCheckpoint().writeTo(SILVER).option("distribution-mode", "none").overwrite(F.lit(True))
    count = spark.sql(f"SELECT count(*) FROM {SILVER}.files WHERE content = 0").first()
    assert count is not None
    return int(count[0])


def measure_clustered(engine: Engine, reps: int, files: int) -> dict[str, Any]:
    """Silver sorted by the mart's key into ``files`` data files; 1% changes (the orders of 1% of
    the customers, rep by rep another slice) as one merge-on-read UPDATE: the commit shape of a
    CDC batch (position deletes and one new data file), confined to one slice of the files. The
    size below which marts refresh in full is lifted (``full_refresh_below_mb: 0``), to measure
    the incremental path on a table that small."""
    spark = engine.spark
    data_files = cluster_by_customer(spark, files)
    lifted = replace(engine.config.gold, full_refresh_below_bytes=0)
    engine = replace(engine, config=replace(engine.config, gold=lifted))
    customers = 100_000  # bench.generate: customer_id = id * 7919 mod 100,000
    timings: dict[str, list[float]] = {"full": [], "incremental": []}
    paths: list[str] = []
    changes: list[int] = []
    for rep in range(reps):
        _from_scratch(engine)  # the mart before the changes
        in_slice = f"customer_id >= {rep * customers // 100} AND customer_id < {(rep + 1) * customers // 100}"
        counted = spark.sql(f"SELECT count(*) FROM {SILVER} WHERE {in_slice}").first()
        changes.append(int(counted[0]) if counted else 0)
        spark.sql(f"UPDATE {SILVER} SET amount = amount + 1, status = 'revised' WHERE {in_slice}")
        warm_after_changes(spark)
        after = _refresh(engine)
        timings["incremental"].append(after.seconds)
        paths.append(after.path)
        timings["full"].append(_from_scratch(engine).seconds)
        log.info("gold refresh, clustered changes, rep %d: after the changes %.2f s (%s path), full %.2f s",
                 rep + 1, after.seconds, after.path, timings["full"][-1])  # fmt: skip
    return _summary(timings, {"paths": paths, "data_files": data_files, "changes": min(changes)})


def _summary(timings: dict[str, list[float]], extra: dict[str, Any]) -> dict[str, Any]:
    best = {name: min(runs) for name, runs in timings.items()}
    return {"runs": timings, "timings": best, "speedup": best["full"] / best["incremental"], **extra}


CASES = ("spread", "clustered")


def measure(
    spark: SparkSession, work: Path, rows: int, reps: int = 2, files: int = 24, cases: tuple[str, ...] = CASES
) -> dict[str, Any]:
    """The best of ``reps`` of each refresh after 1% changes (rows // 100) into ``rows`` rows: spread
    over the table (the engine's CDC), then confined to a slice of ``files`` key-sorted data files."""
    from cdclake.engine.run import full_load

    data = work / "gold-refresh"
    shutil.rmtree(data, ignore_errors=True)
    gen.full_load(spark, data, rows, 4, "csv")
    engine = _engine(spark, data)
    full_load(engine).checked()
    result: dict[str, Any] = {"rows": rows, "changes": rows // 100}
    try:
        if "spread" in cases:
            result.update(measure_spread(engine, data, rows, reps))
        if "clustered" in cases:
            result["clustered"] = measure_clustered(engine, reps, files)
    finally:
        for table in ("orders", "orders__tombstones"):
            spark.sql(f"DROP TABLE IF EXISTS silver.{DATABASE}.{table} PURGE")
        spark.sql(f"DROP TABLE IF EXISTS {MART} PURGE")
        shutil.rmtree(data, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--files", type=int, default=24, help="data files of the key-sorted (clustered) case")
    parser.add_argument("--cases", default=",".join(CASES), help="which cases, comma-separated (spread,clustered)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-gold")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.workdir, args.rows, args.reps, args.files, tuple(args.cases.split(",")))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
