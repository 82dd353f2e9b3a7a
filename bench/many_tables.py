"""Whole databases: the same changes as one table or spread over many tables, full load and CDC.

    .venv/bin/python -m bench.many_tables --tables 100          # a section of every `make bench` profile

A DMS task carries many tables and one batch (one Glue job run) holds files of many of them. The
figures here are ratios within one run: ``tables`` tables of ``rows / tables`` rows and
``changes / tables`` changes each, against one table of ``rows`` rows and ``changes`` changes; the
slope is what one more table adds to a batch when the total work stays the same.
Both sides go through the engine's real entry points (``engine.run.full_load`` and
``engine.run.apply_cdc_files``, the AWS path, with every table of the batch in one call).

Beside them, the baseline a user would write without cdclake: the plain-MERGE baseline's apply (read a
table's CDC files, keep each key's last change, one Iceberg MERGE) for every table, as many tables
at once as cdclake works on, into copies of the same full-loaded tables. It carries none of
cdclake's checks, ledger or tombstones; it says what a table costs Spark and Iceberg alone.
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
    from cdclake.dms.files import BronzeFile
    from cdclake.report import RunReport

log = logging.getLogger("bench")


@dataclass(frozen=True)
class ManyTables:
    tables: int  # the many-table side
    rows: int  # in all, on either side
    changes: int  # in all, on either side (10% D / 80% U / 10% I)
    files_per_table: int = 3  # CDC files per table (the one-table side has this many too)
    parallel_tables: int | None = None  # cdc.parallel_tables (None: the engine's default)


def table_name(index: int) -> str:
    return f"orders_{index:03d}"


def config_yaml(names: list[str], database: str, parallel_tables: int | None = None) -> str:
    """The configuration of ``names`` (each a copy of the benchmark table ``public.<name>``)."""
    columns = ", ".join(f'{name}: "{type_name}"' for name, type_name in gen.COLUMNS.items())
    tables = "\n".join(
        f"""  {gen.SCHEMA}.{name}:
    target: {name}
    primary_key: [id]
    columns: {{{columns}}}
    clean:
      cast: {{{gen.TIMESTAMP_COLUMN}: timestamp}}"""
        for name in names
    )
    parallel = f"\n  parallel_tables: {parallel_tables}" if parallel_tables else ""
    return f"""
bronze:
  path: bronze
  format: csv
  csv_header: false
  timestamp_column: {gen.TIMESTAMP_COLUMN}
  change_sequence_column: {gen.SEQ_COLUMN}
silver:
  database: {database}
cdc:
  max_files_per_batch: 500{parallel}
tables:
{tables}
"""


def copy_table(template: Path, root: Path, name: str) -> None:
    """The template table's files under ``root/public/<name>`` (hard links: no bytes copied)."""
    target = root / gen.SCHEMA / name
    target.mkdir(parents=True, exist_ok=True)
    for file in sorted(gen.table_dir(template).iterdir()):
        (target / file.name).hardlink_to(file)


def generate(spark: SparkSession, data: Path, sizes: ManyTables) -> tuple[Path, Path]:
    """Bronze for both sides: ``data/one`` (one table) and ``data/many`` (``sizes.tables`` tables)."""
    start = datetime(2024, 1, 2)
    one, many = data / "one", data / "many"
    per_rows, per_changes = sizes.rows // sizes.tables, sizes.changes // sizes.tables
    gen.full_load(spark, data / "tpl_one_load", sizes.rows, 1, "csv")
    gen.changes(spark, data / "tpl_one_cdc", gen.ChangeSet(sizes.rows, sizes.changes, sizes.files_per_table), start)
    gen.full_load(spark, data / "tpl_many_load", per_rows, 1, "csv")
    per_table = gen.ChangeSet(per_rows, per_changes, sizes.files_per_table)
    gen.changes(spark, data / "tpl_many_cdc", per_table, start)
    for kind in ("load", "cdc"):
        copy_table(data / f"tpl_one_{kind}", one, table_name(0))
        for index in range(sizes.tables):
            copy_table(data / f"tpl_many_{kind}", many, table_name(index))
    return one, many


def table_engine(spark: SparkSession, bronze: Path, tables: int, database: str, parallel: int | None = None) -> Engine:
    """An engine over ``bronze`` with the first ``tables`` benchmark tables configured."""
    from cdclake.config import parse_config
    from cdclake.context import Engine
    from cdclake.dms.store import LocalBronze

    config = parse_config(config_yaml([table_name(i) for i in range(tables)], database, parallel), "bench.yaml")
    config = replace(config, bronze=replace(config.bronze, path=str(bronze)))
    return Engine(spark=spark, config=config, store=LocalBronze(bronze))


def drop_database(spark: SparkSession, database: str) -> None:
    for row in spark.sql(f"SHOW TABLES IN silver.{database}").collect():
        spark.sql(f"DROP TABLE IF EXISTS silver.{database}.{row['tableName']} PURGE")


def _check(report: RunReport, tables: int) -> None:
    if report.failures:
        raise AssertionError(f"tables failed: {[f.summary() for f in report.failures]}")
    applied = {t.table for t in report.tables if t.files_applied}
    if len(applied) != tables:
        raise AssertionError(f"{len(applied)} tables applied files, expected {tables}")


def plain_copies(spark: SparkSession, engine: Engine, database: str) -> dict[str, str]:
    """Each full-loaded silver table copied for the plain MERGE baseline: source table -> copy."""
    copies = {}
    for table in engine.config.tables:
        silver, copy = engine.silver_table(table).identifier, f"silver.{database}.plain_{table.target}"
        spark.sql(
            f"CREATE TABLE {copy} TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
            f"'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read') AS SELECT * FROM {silver}"
        )
        copies[table.source_table] = copy
    return copies


def plain_merges(
    spark: SparkSession, bronze: Path, files: list[BronzeFile], copies: dict[str, str], threads: int
) -> None:
    """The plain-MERGE baseline's MERGE of each table's CDC files into its copy, ``threads`` tables at once."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.seed import seed_merge

    by_table: dict[str, list[Path]] = {}
    for file in files:
        by_table.setdefault(file.table, []).append(bronze / file.key)

    def merge(table: str) -> None:
        seed_merge(spark, by_table[table], copies[table], view=f"seed_changes_{table}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(merge, sorted(by_table)))


def _same_rows(spark: SparkSession, engine: Engine, copies: dict[str, str]) -> None:
    """The plain MERGE left each copy with as many rows as cdclake's table (the baseline did the work)."""
    for table in engine.config.tables:
        ours = spark.table(engine.silver_table(table).identifier).count()
        plain = spark.table(copies[table.source_table]).count()
        if ours != plain:
            raise AssertionError(f"{table.source}: cdclake holds {ours} rows, the plain MERGE {plain}")


def measure(spark: SparkSession, work: Path, sizes: ManyTables, reps: int = 2) -> dict[str, Any]:
    """Full load then CDC of each side, best of ``reps`` (each rep in fresh databases), and the
    plain MERGE per table of the same CDC files."""
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze
    from cdclake.engine.run import apply_cdc_files, full_load

    data = work / "many-tables"
    shutil.rmtree(data, ignore_errors=True)
    one, many = generate(spark, data, sizes)
    timings: dict[str, list[float]] = {}

    def timed(name: str, step: Any) -> Any:
        started = time.perf_counter()
        result = step()
        timings.setdefault(name, []).append(time.perf_counter() - started)
        log.info("%-60s %8.2f s", name, timings[name][-1])
        return result

    for rep in range(reps):
        for side, bronze, tables in (("1 table", one, 1), (f"{sizes.tables} tables", many, sizes.tables)):
            database = f"many_{tables}_{rep}"
            engine = table_engine(spark, bronze, tables, database, sizes.parallel_tables)
            _check(timed(f"full load {side}", lambda engine=engine: full_load(engine)), tables)
            copies = plain_copies(spark, engine, database)
            files = [f for f in list_bronze(engine.store).files if f.kind is FileKind.CDC]
            _check(timed(f"CDC {side}", lambda engine=engine, files=files: apply_cdc_files(engine, files)), tables)
            timed(
                f"plain MERGE per table {side}",
                lambda bronze=bronze, files=files, copies=copies, threads=engine.parallel_tables: plain_merges(
                    spark, bronze, files, copies, threads
                ),
            )
            _same_rows(spark, engine, copies)
            drop_database(spark, database)
    shutil.rmtree(data, ignore_errors=True)
    best = {name: min(runs) for name, runs in timings.items()}
    many_side = f"{sizes.tables} tables"
    return {
        "sizes": {"tables": sizes.tables, "rows": sizes.rows, "changes": sizes.changes},
        "parallel_tables": engine.parallel_tables,
        "runs": timings,
        "timings": best,
        "full_load_ratio": best[f"full load {many_side}"] / best["full load 1 table"],
        "cdc_ratio": best[f"CDC {many_side}"] / best["CDC 1 table"],
        "plain_ratio": best[f"plain MERGE per table {many_side}"] / best["plain MERGE per table 1 table"],
        "plain_slope_seconds": (best[f"plain MERGE per table {many_side}"] - best["plain MERGE per table 1 table"])
        / (sizes.tables - 1),
        "cdc_slope_seconds": (best[f"CDC {many_side}"] - best["CDC 1 table"]) / (sizes.tables - 1),
        "full_load_slope_seconds": (best[f"full load {many_side}"] - best["full load 1 table"]) / (sizes.tables - 1),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=None, help="cdc.parallel_tables (default: the engine's)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-many")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        sizes = ManyTables(args.tables, args.rows, args.changes, parallel_tables=args.parallel)
        result = measure(spark, args.workdir, sizes, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
