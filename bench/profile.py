"""Where a full load and a CDC apply spend their time: every Spark job, its duration and call site.

    .venv/bin/python -m bench.profile                    # make bench-profile: 1M rows, 100k changes
    .venv/bin/python -m bench.profile --rows 10000000    # the target sizes (about 5 minutes)

It generates the benchmark data (``bench/generate.py``), runs the floor and cdclake's real code path
like ``bench/run.py`` does, and reads the job list from the Spark UI's REST API (enabled for this
run only). The output explains a ratio; the ratios themselves come from ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import generate as gen
from bench.paths import CACHE_DIR, ROOT
from bench.run import Bench

_UI = "http://localhost:{port}/api/v1/applications"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fGMT"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:  # the local Spark UI
        return json.load(response)


def _seconds(job: dict[str, Any]) -> float:
    started = datetime.strptime(job["submissionTime"], _TIME_FORMAT)
    ended = datetime.strptime(job.get("completionTime", job["submissionTime"]), _TIME_FORMAT)
    return (ended - started).total_seconds()


class JobLog:
    """The jobs of one Spark application, read back from its UI."""

    def __init__(self, port: int) -> None:
        base = _UI.format(port=port)
        self.jobs_url = f"{base}/{_get(base)[0]['id']}/jobs"

    def jobs(self) -> list[dict[str, Any]]:
        return sorted(_get(self.jobs_url), key=lambda job: int(job["jobId"]))

    def step(self, name: str, action: Callable[[], object]) -> None:
        """Run ``action`` and print its wall time and every job it ran."""
        first = max((int(j["jobId"]) for j in self.jobs()), default=-1) + 1
        started = time.perf_counter()
        action()
        wall = time.perf_counter() - started
        jobs = [j for j in self.jobs() if int(j["jobId"]) >= first]
        print(f"== {name}: {wall:.2f} s wall, {len(jobs)} Spark jobs, {sum(map(_seconds, jobs)):.2f} s in jobs")
        for job in jobs:
            print(f"   job {job['jobId']:>4} {_seconds(job):7.2f} s  tasks={job['numTasks']:<4} {job['name'][:100]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="table rows; the CDC apply is a tenth of it")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-profile")
    parser.add_argument("--ui-port", type=int, default=4040)
    args = parser.parse_args(argv)

    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    catalog = LocalCatalog(warehouse=args.workdir / "warehouse", cache_dir=CACHE_DIR)
    ui = {"spark.ui.enabled": "true", "spark.ui.port": str(args.ui_port)}
    spark = build_spark_session(SessionSettings(catalog=catalog, app_name="cdclake-profile", extra_conf=ui))
    try:
        data = args.workdir / "data"
        load = gen.full_load(spark, data / "load", args.rows, 4, "csv")
        change = gen.ChangeSet(args.rows, args.rows // 10, 10)
        changes = gen.changes(spark, data / "cdc", change, datetime(2024, 1, 2))
        bench, log = Bench(spark, args.workdir), JobLog(args.ui_port)
        log.step("warm-up: cdclake full load", lambda: bench.full_load("warm_up", data / "load"))
        log.step("floor: CSV -> Parquet", lambda: bench.floor_copy(load, "csv", "load", "load"))
        log.step("cdclake full load", lambda: bench.full_load("orders", data / "load"))
        log.step("floor: CDC files -> Parquet", lambda: bench.floor_copy(changes, "csv", "cdc", "cdc"))
        log.step("cdclake CDC apply", lambda: bench.apply("orders", data / "cdc"))
    finally:
        spark.stop()
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
