"""`cdclake status` at database size: 40 small tables, the per-table status as it was vs now,
and the command as a user types it (a new process: a cold JVM, the target is under 10 s).

    .venv/bin/python -m bench.status --tables 40        # make bench-status

Both sides answer for the same tables in the same session, so the ratio holds on a loaded machine.
The tables go through the engine's real entry points: a full load, then CDC files with deletes
(merge-on-read delete files and tombstones, so row counts are not free from metadata). The old
side, ``per_table_statuses``, is the status as it was: six to eight Spark jobs per table; the
new one is ``cdclake.ops.status.table_statuses``. Each side's answer is checked equal to the other's.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.many_tables import ManyTables, generate, table_engine

# The baseline is the tests' oracle for the new status (tests/status_oracle.py), timed here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from status_oracle import per_table_statuses

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdclake.ops.table_status import TableStatus


log = logging.getLogger("bench")


def measure(spark: SparkSession, work: Path, tables: int, reps: int = 3) -> dict[str, Any]:
    """Build ``tables`` tables (full load + CDC), then time both statuses ``reps`` times, alternating."""
    from cdclake.engine.run import apply_cdc_files, full_load
    from cdclake.ops.status import table_statuses

    data = work / "status"
    shutil.rmtree(data, ignore_errors=True)
    _, many = generate(spark, data, ManyTables(tables, rows=tables * 200, changes=tables * 40, files_per_table=2))
    engine = table_engine(spark, many, tables, "status_bench")
    full_load(engine).checked()
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze

    apply_cdc_files(engine, [f for f in list_bronze(engine.store).files if f.kind is FileKind.CDC]).checked()
    now = datetime.now(UTC)
    timings: dict[str, list[float]] = {"per table (before)": [], "now": []}
    answers: dict[str, list[TableStatus]] = {}
    for _ in range(reps):
        for side, status in (("per table (before)", per_table_statuses), ("now", table_statuses)):
            started = time.perf_counter()
            answers[side] = status(engine, now)
            timings[side].append(time.perf_counter() - started)
            log.info("status %-20s %d tables %6.2f s", side, tables, timings[side][-1])
    if answers["now"] != answers["per table (before)"]:
        raise AssertionError("the two statuses differ")
    best = {side: min(times) for side, times in timings.items()}
    return {
        "tables": tables,
        "seconds": {side: round(seconds, 2) for side, seconds in best.items()},
        "ratio": round(best["per table (before)"] / best["now"], 1),
    }


def cold_command(work: Path, tables: int, reps: int = 3) -> dict[str, Any]:
    """``cdclake status`` as a user types it, a new process each time (a cold JVM, or none on a
    local warehouse), on the tables ``measure`` built: seconds from start to exit, each run, and the
    best. As in a user's shell, Python keeps the modules' compiled bytecode (an environment that sets
    PYTHONDONTWRITEBYTECODE has the command compile cdclake's sources again every time, about 0.3 s);
    a first run, not timed, writes it."""
    import os
    import subprocess

    from bench.many_tables import config_yaml, table_name

    config = work / "status.yaml"
    text = config_yaml([table_name(i) for i in range(tables)], "status_bench")
    config.write_text(text.replace("path: bronze", f"path: {work / 'status' / 'many'}"), encoding="utf-8")
    command = [sys.executable, "-m", "cdclake.shells.cli", "--config", str(config), "--warehouse"]
    command.append(str(work / "warehouse"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([*command, "status"], capture_output=True, check=False, env=env)
    seconds = []
    for _ in range(reps):
        started = time.perf_counter()
        done = subprocess.run([*command, "status"], capture_output=True, text=True, check=False, env=env)
        seconds.append(round(time.perf_counter() - started, 2))
        if done.returncode != 0 or done.stdout.count("up to date") != tables:
            raise AssertionError(f"status exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        log.info("cdclake status, cold command, %d tables %6.2f s", tables, seconds[-1])
    return {"runs": seconds, "best": min(seconds)}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    from bench.paths import ROOT, scratch_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=40)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-status")
    args = parser.parse_args(argv)
    with scratch_session(args.workdir) as spark:
        result = measure(spark, args.workdir, args.tables, args.reps)
        result["cold command seconds"] = cold_command(args.workdir, args.tables, args.reps)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
