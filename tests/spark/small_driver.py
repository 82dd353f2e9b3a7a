"""Large batches of several tables at once in a small driver: run in a JVM of its own.

    python tests/spark/small_driver.py WORKDIR --driver-memory 640m --tables 2 --rows 250000

Loads ``--tables`` copies of the benchmark table (``bench.generate``) and applies one CDC batch of
``--rows`` changes to each, all tables at once (``cdc.parallel_tables``), in a Spark session with
a driver of ``--driver-memory``. Prints one JSON object: the run's failures, each table's rows that
differ from a plain-Python replay of the generated changes (``bench.generate.op_of``/``key_of``),
and the classification each table chose (broadcast or shuffle, from the engine's debug log).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # bench.generate, the benchmark tables' generator and its Python twins

from bench import generate as gen  # noqa: E402
from bench.many_tables import copy_table, table_engine, table_name  # noqa: E402
from bench.paths import CACHE_DIR  # noqa: E402


class Decisions(logging.Handler):
    """The engine's ``classify`` debug lines: table -> whether its touched rows were broadcast."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.broadcast: dict[str, bool] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("classify table="):
            table, _keys, _heap, broadcast = record.args  # type: ignore[misc]
            self.broadcast[str(table)] = bool(broadcast)


def expected_rows(rows: int, changes: int) -> dict[int, tuple[str, str]]:
    """id -> (status, amount) after the full load and one change set: a plain-Python replay."""
    change = gen.ChangeSet(rows, changes, files=1)

    def values(key: int, version: int) -> tuple[str, str]:
        status = gen.STATUSES[(key + version) % len(gen.STATUSES)]
        return status, f"{(key * 13 + version) % 10_000}.{(key + version) % 100:02d}"

    table = {key: values(key, 0) for key in range(rows)}
    for k in range(changes):  # in commit order; each key changes at most once per set
        key = gen.key_of(change, k)
        if gen.op_of(k) == "D":
            table.pop(key, None)
        else:
            table[key] = values(key, change.batch + 1)
    return table


def main(argv: list[str] | None = None) -> int:
    from dataclasses import replace

    from cdclake.engine.run import run
    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--driver-memory", default="640m")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--rows", type=int, default=250_000, help="rows and changes of each table")
    parser.add_argument("--heap-share", type=float, default=None, help="Engine.broadcast_heap_share")
    args = parser.parse_args(argv)
    decisions = Decisions()
    logging.getLogger("cdclake").addHandler(decisions)
    logging.getLogger("cdclake").setLevel(logging.DEBUG)
    catalog = LocalCatalog(
        warehouse=args.workdir / "warehouse",
        cache_dir=CACHE_DIR,
        driver_memory=args.driver_memory,
    )
    spark = build_spark_session(SessionSettings(catalog=catalog))
    try:
        bronze = args.workdir / "bronze"
        template = args.workdir / "template"
        gen.full_load(spark, template, args.rows, 1, "csv")
        gen.changes(spark, template, gen.ChangeSet(args.rows, args.rows, files=1), datetime(2024, 1, 2))
        names = [table_name(i) for i in range(args.tables)]
        for name in names:
            copy_table(template, bronze, name)
        engine = table_engine(spark, bronze, args.tables, "small_driver", args.tables)
        if args.heap_share is not None:
            engine = replace(engine, broadcast_heap_share=args.heap_share)
        report = run(engine)
        expected = expected_rows(args.rows, args.rows)
        differences = {}
        for name in names:
            stored = {
                int(r["id"]): (r["status"], str(r["amount"]))
                for r in spark.table(f"silver.small_driver.{name}").select("id", "status", "amount").toLocalIterator()
            }
            differences[name] = len(set(stored.items()) ^ set(expected.items()))
        result = {
            "failures": [f.summary() for f in report.failures],
            "differences": differences,
            "expected_rows": len(expected),
            "broadcast": decisions.broadcast,
            "heap_bytes": int(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory()),  # type: ignore[union-attr]
        }
    finally:
        spark.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
