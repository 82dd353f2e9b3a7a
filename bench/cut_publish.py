"""What publishing a consistent cut costs at many tables: the record and every table's tags.

    .venv/bin/python -m bench.cut_publish --tables 300        # make bench-cut-publish

``tables`` Iceberg tables in a local warehouse, each given a new snapshot before every publication
(untimed), so that every table's tags move. Timed, alternated for ``reps`` rounds in one session:

- ``sql serial``: the way before (each table: exists, its tag read, ``ALTER TABLE ... CREATE OR REPLACE
  TAG``, one after another), the baseline;
- ``publish``: ``lake.cuts.CutPublisher.publish`` as the engine calls it (the record, then each table's tags in
  one metadata commit, ``CutTags.workers`` tables at a time);
- ``publish, one at a time``: the same with one worker, to tell the commit's way from the overlap.

Each figure is the best of its rounds; the ratios compare figures of the same run. A local disk
commits in milliseconds; S3 and the Glue Data Catalog take tens of milliseconds a call, so on AWS the
overlap counts for more than here.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.paths import ROOT, scratch_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.lake.cuts import PublishedCut

CATALOG, DATABASE = "silver", "cuts_bench"


def _tables(spark: SparkSession, count: int) -> list[str]:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{DATABASE}")
    names = [f"t{i:04d}" for i in range(count)]
    for name in names:
        spark.sql(f"CREATE TABLE {CATALOG}.{DATABASE}.{name} (id bigint) USING iceberg")
    return names


def _new_snapshots(spark: SparkSession, names: list[str], second: int) -> PublishedCut:
    """A new snapshot on every table (an empty append, in the driver) and the cut that names them."""
    from cdclake.lake.cuts import PublishedCut
    from cdclake.lake.iceberg import IcebergTable

    snapshots = {}
    for name in names:
        snapshot = IcebergTable.latest(spark, f"{CATALOG}.{DATABASE}.{name}").append_nothing({"bench": str(second)})
        snapshots[name] = snapshot.snapshot_id
    # one cut an hour, so every publication also adds a dated tag, as the first cut of an hour does
    commit_ts = f"2024-01-02 {second:02d}:00:00.000000"
    return PublishedCut("capture", f"{second:020d}", f"0/{second:X}", commit_ts, snapshots)


def _sql_serial(spark: SparkSession, cut: PublishedCut) -> None:
    """The tags as they were moved before: a statement per table, one table after another."""
    from cdclake.identifiers import quote
    from cdclake.lake.cuts import CUT_TAG, record_cut
    from cdclake.lake.iceberg import IcebergTable
    from cdclake.lake.tables import SilverTable, table_exists

    record_cut(spark, CATALOG, DATABASE, cut)
    for name, snapshot_id in sorted(cut.snapshots.items()):
        table = SilverTable(CATALOG, DATABASE, name)
        if not table_exists(spark, table) or IcebergTable.latest(spark, table.identifier).tag(CUT_TAG) == snapshot_id:
            continue
        spark.sql(f"ALTER TABLE {table.identifier} CREATE OR REPLACE TAG {quote(CUT_TAG)} AS OF VERSION {snapshot_id}")


def _publish(workers: int) -> Callable[[SparkSession, PublishedCut], None]:
    def publish(spark: SparkSession, cut: PublishedCut) -> None:
        from cdclake.lake.committer import IcebergCommitter
        from cdclake.lake.cuts import CutPublisher, CutTags

        CutPublisher(spark, CATALOG, DATABASE, IcebergCommitter(), CutTags(workers=workers)).publish(cut)

    return publish


def measure(spark: SparkSession, tables: int, reps: int) -> dict[str, Any]:
    from cdclake.lake.cuts import CUT_TAG, latest_cut, tagged_snapshot
    from cdclake.lake.tables import SilverTable

    names = _tables(spark, tables)
    ways: dict[str, Callable[[SparkSession, PublishedCut], None]] = {
        "sql serial": _sql_serial,
        "publish": _publish(8),
        "publish, one at a time": _publish(1),
    }
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    second = 0
    for _ in range(reps):
        for way, publish in ways.items():
            second += 1
            cut = _new_snapshots(spark, names, second)
            started = time.perf_counter()
            publish(spark, cut)
            seconds[way].append(round(time.perf_counter() - started, 2))
            # every way must have done the whole work: the record and every table's tag at the cut
            assert latest_cut(spark, CATALOG, DATABASE) == cut, way
            sample = names[:: max(1, tables // 10)]
            tagged = {n: tagged_snapshot(spark, SilverTable(CATALOG, DATABASE, n)) for n in sample}
            assert tagged == {n: cut.snapshots[n] for n in sample}, (way, CUT_TAG)
    best = {way: min(values) for way, values in seconds.items()}
    return {
        "tables": tables,
        "seconds": seconds,
        "best seconds": best,
        "publish per table seconds": round(best["publish"] / tables, 4),
        "sql serial vs publish": round(best["sql serial"] / best["publish"], 2),
        "one at a time vs publish": round(best["publish, one at a time"] / best["publish"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-cut-publish")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.tables, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
