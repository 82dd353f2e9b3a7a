"""Large batches of several tables at once in a small driver: run in a JVM of its own.

    python tests/spark/small_driver.py WORKDIR --driver-memory 640m --tables 2 --rows 250000

Writes ``--tables`` tables of orders as DMS would (``cdclake.dms.writer``): a full load of
``--rows`` keys and one CDC file of ``--rows`` changes (of every ten: one delete, eight updates of
distinct stored keys spread over the key range, one insert of a new key), then applies them, all
tables at once (``cdc.parallel_tables``), in a Spark session with a driver of ``--driver-memory``.
Prints one JSON object: the run's failures, each table's rows that differ from a plain-Python
replay of the changes, and the classification each table chose (broadcast or shuffle, from the
engine's debug log).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import date, datetime, timedelta
from pathlib import Path

from cdclake.dms.writer import (
    SourceChange,
    Value,
    cdc_file_name,
    cdc_records,
    change_sequence,
    load_file_name,
    write_csv,
)

CACHE_DIR = Path.home() / ".cache" / "cdclake"
COLUMNS = {
    "id": "bigint",
    "customer_id": "int",
    "status": "string",
    "amount": "decimal(12,2)",
    "quantity": "int",
    "note": "string",
    "created": "date",
}
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
TIMESTAMP_COLUMN = "last_updated_ts"
LOAD_TS = "2024-01-01 00:00:00.000000"
CDC_START = datetime(2024, 1, 2)
# Larger than any table here and prime: key -> key * PRIME mod rows is a permutation of the keys.
PRIME = 1_000_000_007


class Decisions(logging.Handler):
    """The engine's ``classify`` debug lines: table -> whether its touched rows were broadcast."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.broadcast: dict[str, bool] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("classify table="):
            table, _keys, _heap, broadcast = record.args  # type: ignore[misc]
            self.broadcast[str(table)] = bool(broadcast)


def table_name(index: int) -> str:
    return f"orders_{index:03d}"


def order(key: int, version: int) -> dict[str, Value]:
    """The order ``key`` as its ``version``-th image holds it (0: the full load), in DMS's text."""
    return {
        "id": str(key),
        "customer_id": str(key * 7919 % 100_000),
        "status": STATUSES[(key + version) % len(STATUSES)],
        "amount": f"{(key * 13 + version) % 10_000}.{(key + version) % 100:02d}",
        "quantity": None if key % 50 == 0 else str((key + version) % 20 + 1),
        "note": None if key % 97 == 0 else f"order {key}, revision {version}",  # quoted: it holds a comma
        "created": (date(2020, 1, 1) + timedelta(days=key % 1500)).isoformat(),
    }


def change_log(rows: int) -> list[SourceChange]:
    """``rows`` changes to a table of ``rows`` keys, 1 ms apart, each key changed at most once."""
    log, existing, inserted = [], 0, 0
    for k in range(rows):
        ts = (CDC_START + timedelta(milliseconds=k)).strftime("%Y-%m-%d %H:%M:%S.%f")
        slot = k % 10
        if slot == 9:
            op, key = "I", rows + inserted
            inserted += 1
        else:
            op, key = ("D" if slot == 0 else "U"), existing * PRIME % rows
            existing += 1
        row = {"id": str(key)} if op == "D" else order(key, 1)  # a delete carries the key only
        log.append(SourceChange(op, row, ts, change_sequence(ts, k)))
    return log


def expected_rows(rows: int, log: list[SourceChange]) -> dict[int, tuple[str, str]]:
    """id -> (status, amount) after the full load and the change log: a plain-Python replay."""
    table = {key: order(key, 0) for key in range(rows)}
    for change in log:  # in commit order
        key = int(str(change.row["id"]))
        if change.op == "D":
            table.pop(key, None)
        else:
            table[key] = change.row
    return {key: (str(row["status"]), str(row["amount"])) for key, row in table.items()}


def write_table(bronze: Path, name: str, rows: int, log: list[SourceChange]) -> None:
    """The table's full load and its one CDC file, under ``bronze/public/<name>``."""
    folder = bronze / "public" / name
    load = [[LOAD_TS, *order(key, 0).values(), "0" * 35] for key in range(rows)]
    write_csv(folder / load_file_name(1), load)
    write_csv(folder / cdc_file_name(log[0].commit_ts), cdc_records(log, list(COLUMNS)))


def config_yaml(names: list[str], database: str) -> str:
    columns = ", ".join(f'{name}: "{type_name}"' for name, type_name in COLUMNS.items())
    tables = "\n".join(
        f"""  public.{name}:
    target: {name}
    primary_key: [id]
    columns: {{{columns}}}
    clean:
      cast: {{{TIMESTAMP_COLUMN}: timestamp}}"""
        for name in names
    )
    return f"""
bronze:
  path: bronze
  format: csv
  csv_header: false
  timestamp_column: {TIMESTAMP_COLUMN}
  change_sequence_column: AR_H_CHANGE_SEQ
silver:
  database: {database}
cdc:
  max_files_per_batch: 500
  parallel_tables: {len(names)}
tables:
{tables}
"""


def main(argv: list[str] | None = None) -> int:
    from dataclasses import replace

    from cdclake.config import parse_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze
    from cdclake.engine.run import run
    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--driver-memory", default="640m")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--rows", type=int, default=250_000, help="rows and changes of each table")
    parser.add_argument("--heap-share", type=float, default=None, help="BatchSizes.broadcast_heap_share")
    args = parser.parse_args(argv)
    bronze = args.workdir / "bronze"
    names = [table_name(i) for i in range(args.tables)]
    log = change_log(args.rows)
    for name in names:
        write_table(bronze, name, args.rows, log)
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
        config = parse_config(config_yaml(names, "small_driver"), "small_driver.yaml")
        config = replace(config, bronze=replace(config.bronze, path=str(bronze)))
        engine = Engine(spark=spark, config=config, store=LocalBronze(bronze))
        if args.heap_share is not None:
            engine = engine.tuned(broadcast_heap_share=args.heap_share)
        report = run(engine)
        expected = expected_rows(args.rows, log)
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
