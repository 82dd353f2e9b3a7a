"""MERGE vs the batch-sized publish path, on tables of 1M and 10M rows (seconds, one batch each).

    .venv/bin/python -m bench.publish_probe                 # all cases (about 15 minutes on 2 cores)
    .venv/bin/python -m bench.publish_probe --quick         # 1M / 100k only
    .venv/bin/python -m bench.publish_probe --json out.json

Per table (rows, layout, format version), each method applies the same batch (10% deletes, 80%
updates, 10% inserts; keys spread over the whole table unless ``recent``) from the same base
snapshot; the table is rolled back between methods and every method's result is checked equal
to the MERGE's. Methods:

- ``merge``: ``changes.merge_statement`` in one commit with the ledger properties (today's path).
- ``publish``: ``cdclake.lake.publish.publish_changes`` (branch-staged, one RowDelta on main).
- ``fast-forward``: the same staging, published with ``CALL system.fast_forward`` (plain
  write-audit-publish; not usable as is: the ledger reader loses main's lineage).
- ``floor``: write the changes as Parquet.

``files`` columns: the table's data files, and how many of them the batch's key range selects
(what min/max pruning can skip).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.columns import EFFECT, OP, SILVER_ORDER
from cdclake.config import Layout
from cdclake.engine.statements import merge_statement
from cdclake.lake.batch import KeyedBatch
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.layout import apply_layout
from cdclake.lake.ledger_record import LedgerRecord
from cdclake.lake.publish import (
    drop_leftover_branches,
    key_bounds,
    publish_changes,
    stage_changes,
)
from cdclake.lake.tables import SilverTable, iceberg_table
from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("bench.publish_probe")
CACHE_DIR = Path.home() / ".cache" / "cdclake"
COLUMNS = ["id", "v", "w", "n"]
FILE_BYTES = 16 * 1024 * 1024  # small target files, so that pruning has files to skip


@dataclass(frozen=True)
class Case:
    rows: int
    changes: int
    layout: Layout = "none"
    version: int = 2
    keys: str = "spread"  # spread: keys over the whole table; recent: the newest 5% of keys
    methods: tuple[str, ...] = ("merge", "publish", "fast-forward")


@dataclass
class Result:
    rows: int
    changes: int
    layout: str
    version: int
    keys: str
    method: str
    seconds: float
    data_files: int
    files_in_key_range: int


def _table_rows(spark: SparkSession, rows: int) -> DataFrame:
    from pyspark.sql import functions as F

    return (
        spark.range(rows)
        .select(
            F.col("id"),
            F.concat(F.lit("value-"), F.col("id").cast("string")).alias("v"),
            F.sha1(F.col("id").cast("string")).alias("w"),
            (F.col("id") % 1000).cast("int").alias("n"),
            F.lit("0000").alias(SILVER_ORDER),
        )
        .repartition(8)  # round-robin: every file spans the whole key range, as after random CDC
    )


def _changes(spark: SparkSession, case: Case) -> DataFrame:
    """10% deletes, 80% updates of existing keys, 10% inserts of new keys; unique keys."""
    from pyspark.sql import functions as F

    i, n, k = F.col("id"), case.rows, case.changes
    recent = max(n // 20, k)  # the newest keys (7919 is prime: i * 7919 % recent is one-to-one)
    existing = (i * 7919 + 13) % n if case.keys == "spread" else F.lit(n - 1) - (i * 7919 % recent)
    key = F.when(i < int(k * 0.9), existing).otherwise(F.lit(n) + i)
    op = F.when(i < int(k * 0.1), "D").when(i < int(k * 0.9), "U").otherwise("I")
    frame = spark.range(k).select(
        key.cast("bigint").alias("id"),
        F.concat(F.lit("changed-"), i.cast("string")).alias("v"),
        F.sha1(i.cast("string")).alias("w"),
        (i % 7).cast("int").alias("n"),
        F.lit("0001").alias(SILVER_ORDER),
        op.alias(OP),
        # What classify_effects says of these changes (all newer than the stored rows).
        F.when(op == "D", "delete").when(op == "U", "update").otherwise("insert").alias(EFFECT),
    )
    return frame.localCheckpoint()


def _create(spark: SparkSession, identifier: str, case: Case) -> int:
    properties = {
        "format-version": str(case.version),
        "write.delete.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.merge.mode": "merge-on-read",
        "write.parquet.compression-codec": "zstd",
        "write.target-file-size-bytes": str(FILE_BYTES),
        "write.distribution-mode": "hash",
    }
    props = ", ".join(f"'{k}'='{v}'" for k, v in properties.items())
    spark.sql(f"CREATE TABLE {identifier} (id bigint, v string, w string, n int, {SILVER_ORDER} string) "
              f"USING iceberg TBLPROPERTIES ({props})")  # fmt: skip
    apply_layout(spark, identifier, ["id"], case.layout)
    _table_rows(spark, case.rows).writeTo(identifier).append()
    return int(iceberg_table(spark, identifier).currentSnapshot().snapshotId())


def _fingerprint(spark: SparkSession, identifier: str) -> tuple[int, int]:
    row = spark.sql(f"SELECT count(*) AS c, sum(xxhash64(*)) AS h FROM {identifier}").first()
    assert row is not None
    return int(row["c"]), int(row["h"] or 0)


def _files_in_range(spark: SparkSession, identifier: str, changes: DataFrame) -> tuple[int, int]:
    """(data files, data files whose id range meets the batch's key range)."""
    jvm: Any = spark.sparkContext._jvm
    table = iceberg_table(spark, identifier)
    table.refresh()
    total = _count(table.newScan().planFiles())
    bounds = key_bounds(changes, ["id"])
    assert bounds is not None
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    low, high = int(bounds[0]), int(bounds[1])
    scan = table.newScan().filter(expressions.greaterThanOrEqual("id", low))
    scan = scan.filter(expressions.lessThanOrEqual("id", high))
    return total, _count(scan.planFiles())


def _count(tasks: Any) -> int:
    """How many items a Java CloseableIterable yields (closed afterwards)."""
    iterator, count = tasks.iterator(), 0
    while iterator.hasNext():
        iterator.next()
        count += 1
    tasks.close()
    return count


def _timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def run_case(spark: SparkSession, case: Case, database: str, scratch: Path) -> list[Result]:
    identifier = f"silver.{database}.t_{case.rows}_{case.layout}_v{case.version}_{case.keys}"
    name = identifier.split(".", 1)[1]
    base = _create(spark, identifier, case)
    changes = _changes(spark, case)
    files, in_range = _files_in_range(spark, identifier, changes)
    properties = LedgerRecord.batch(["bench-batch"], "2024-01-01 00:00:00").properties()
    expected: tuple[int, int] | None = None
    results = []

    batch = KeyedBatch(SilverTable(*identifier.split(".")), changes, ["id"], COLUMNS, properties, None)

    def merge() -> None:
        statement = lambda target, view: merge_statement(target, view, batch.written)  # noqa: E731
        IcebergCommitter().merge(spark, batch, statement)

    def publish() -> None:
        publish_changes(spark, batch)

    def fast_forward() -> None:
        drop_leftover_branches(spark, identifier)
        staged = stage_changes(spark, batch)
        spark.sql(f"CALL silver.system.fast_forward('{name}', 'main', '{staged.branch}')")
        spark.sql(f"ALTER TABLE {identifier} DROP BRANCH `{staged.branch}`")

    def floor() -> None:
        changes.write.mode("overwrite").parquet(str(scratch / "floor"))

    actions = {"merge": merge, "publish": publish, "fast-forward": fast_forward}
    for method in case.methods:
        seconds = _timed(actions[method])
        fingerprint = _fingerprint(spark, identifier)
        if expected is None:
            expected = fingerprint
        elif fingerprint != expected:
            raise AssertionError(f"{method} on {identifier}: {fingerprint} != {expected}")
        spark.sql(f"CALL silver.system.rollback_to_snapshot('{name}', {base})")
        results.append(Result(case.rows, case.changes, case.layout, case.version, case.keys, method,
                              round(seconds, 2), files, in_range))  # fmt: skip
        log.info("%s", results[-1])
    seconds = _timed(floor)
    results.append(Result(case.rows, case.changes, case.layout, case.version, case.keys, "floor",
                          round(seconds, 2), files, in_range))  # fmt: skip
    spark.sql(f"DROP TABLE {identifier} PURGE")
    return results


def cases(quick: bool) -> list[Case]:
    m, k = 1_000_000, 1_000
    if quick:
        return [Case(m, 100 * k), Case(m, 100 * k, layout="sorted", keys="recent", methods=("merge", "publish"))]
    return [
        Case(m, 100 * k),
        Case(10 * m, 100 * k),
        Case(10 * m, m),
        Case(10 * m, 100 * k, version=3, methods=("merge", "publish")),
        Case(10 * m, 100 * k, keys="recent", methods=("merge", "publish")),
        Case(10 * m, 100 * k, layout="sorted", methods=("publish",)),
        Case(10 * m, 100 * k, layout="sorted", keys="recent", methods=("merge", "publish")),
        Case(10 * m, 100 * k, layout="bucket", methods=("merge", "publish")),
    ]


def markdown(results: list[Result]) -> str:
    lines = [
        "| rows / changes | keys | layout | format | method | seconds | data files (in key range) |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.rows:,} / {r.changes:,} | {r.keys} | {r.layout} | v{r.version} | {r.method} | "
            f"{r.seconds:.2f} | {r.data_files} ({r.files_in_key_range}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1M rows / 100k changes only")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    scratch = Path(tempfile.mkdtemp(prefix="cdclake-publish-probe-"))
    try:
        settings = SessionSettings(
            LocalCatalog(warehouse=scratch / "warehouse", cache_dir=CACHE_DIR, driver_memory=args.driver_memory)
        )
        spark = build_spark_session(settings)
        spark.sql("CREATE NAMESPACE IF NOT EXISTS silver.probe")
        # Warm the JVM (class loading, code generation) so the first timed case is not penalised.
        run_case(spark, Case(20_000, 2_000), "probe", scratch)
        results: list[Result] = []
        for case in cases(args.quick):
            results += run_case(spark, case, "probe", scratch)
        print(markdown(results))
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
        spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
