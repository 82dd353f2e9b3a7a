"""Commits that overlap: in a warm round of many tables, how many tables' data commits run at once.

    .venv/bin/python -m bench.commit_overlap --tables 30        # make bench-commit-overlap (TABLES=300)

A round's commits are I/O (the data and delete files, the manifests, the manifest list, the metadata
file; on AWS each an S3 request, and a Glue Data Catalog call): if anything serialized them, a round of
300 tables would cost 300 commit latencies one after another whatever the pool. Here ``tables`` small
tables (``bench/many_tables.py``'s data) are full-loaded, then one warm round of the follow loop applies
their CDC files, as many tables at once as the engine runs (``cdc.parallel_tables``), with every data
commit (its files written and the Iceberg commit, ``lake.committer``) timed. Reported: the commits' seconds
summed, the time at least one ran, their mean and largest concurrency, and the round's wall time.
A first round in another database warms the JVM.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from bench.many_tables import ManyTables, drop_database, generate, table_engine
from bench.paths import ROOT, scratch_session
from bench.table_cost import warm_follow_round
from cdclake.lake.committer import IcebergCommitter

log = logging.getLogger("bench")

T = TypeVar("T")


class TimedCommitter(IcebergCommitter):
    """The engine's committer, each data commit's span (start, end) recorded."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def _timed(self, take: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return take()
        finally:
            ended = time.perf_counter()
            with self._lock:
                self.spans.append((started, ended))

    def merge(self, spark: Any, batch: Any, statement: Any) -> Any:
        return self._timed(lambda: super(TimedCommitter, self).merge(spark, batch, statement))

    def publish(self, spark: Any, batch: Any) -> Any:
        return self._timed(lambda: super(TimedCommitter, self).publish(spark, batch))

    def row_delta(self, spark: Any, batch: Any, before_commit: Any = None) -> Any:
        return self._timed(lambda: super(TimedCommitter, self).row_delta(spark, batch, before_commit))

    def driver_row_delta(self, spark: Any, batch: Any, before_commit: Any = None) -> Any:
        return self._timed(lambda: super(TimedCommitter, self).driver_row_delta(spark, batch, before_commit))


def overlap(spans: list[tuple[float, float]]) -> dict[str, float]:
    """The spans' seconds summed, the time at least one was open, and how many were open at once."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    open_now = largest = 0
    covered = 0.0
    since = 0.0
    for at, step in events:
        if open_now > 0:
            covered += at - since
        open_now += step
        largest = max(largest, open_now)
        since = at
    summed = sum(end - start for start, end in spans)
    return {
        "commits": len(spans),
        "commit_seconds_summed": round(summed, 2),
        "seconds_with_a_commit_open": round(covered, 2),
        "mean_commits_at_once": round(summed / covered, 2) if covered else 0.0,
        "most_commits_at_once": largest,
    }


def measure(work: Path, tables: int, changes_per_table: int) -> dict[str, Any]:
    from cdclake.engine.run import full_load

    result: dict[str, Any] = {"tables": tables, "changes_per_table": changes_per_table}
    with scratch_session(work) as spark:
        sizes = ManyTables(tables, rows=tables * 1000, changes=tables * changes_per_table)
        _, many = generate(spark, work / "data", sizes)
        for round_ in ("warm-up", "measured"):
            database = f"overlap_{round_.replace('-', '_')}"
            committer = TimedCommitter()
            engine = replace(table_engine(spark, many, tables, database), committer=committer)
            full_load(engine).checked()
            committer.spans.clear()  # the full load's own commits are not the round's
            seconds = warm_follow_round(engine)
            log.info("%s: a round of %d tables in %.2f s, %d commits", round_, tables, seconds, len(committer.spans))
            if round_ == "measured":
                result |= {"parallel_tables": engine.parallel_tables, "round_seconds": round(seconds, 2)}
                result |= overlap(committer.spans)
            drop_database(spark, database)
        shutil.rmtree(work / "data", ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--changes-per-table", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-commit-overlap")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(json.dumps(measure(args.workdir, args.tables, args.changes_per_table), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
