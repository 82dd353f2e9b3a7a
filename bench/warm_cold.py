"""Warm vs cold: the same 30-table batch as a new JVM's first batch and as its tenth.

    PYTHONPATH=glue .venv/bin/python -m bench.warm_cold          # make bench-warm

What a follow loop saves per table by keeping its JVM: every Glue job run (and every
``run --follow`` start) begins with a new JVM whose first batch pays for class loading, the JIT
and Spark's first plans. Here ``tables`` tables are full-loaded in one process (``prepare``); then
each ``measure`` process (a new Python process: a new JVM and Spark session) applies ``rounds``
rounds of one CDC file per table, each round one ``apply_cdc_files`` call with every table (as a
follow round applies them), and times every round. Round 1 is cold, round ``rounds`` is warm. With
``processes`` > 1 the measurement is repeated in as many new processes, each on the next files.
The parent process never starts a JVM.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.paths import CACHE_DIR, ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("bench")
DATABASE = "warm"
RESULT_PREFIX = "RESULT "  # the line a measure process ends with


def session(warehouse: Path) -> SparkSession:
    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    return build_spark_session(SessionSettings(catalog=LocalCatalog(warehouse=warehouse, cache_dir=CACHE_DIR)))


def prepare(work: Path, tables: int, rows: int, changes_per_file: int, files: int) -> dict[str, float]:
    """Bronze for ``tables`` tables (a full load and ``files`` CDC files each, hard links of one
    template) and their full loads in ``work/warehouse``."""
    from datetime import datetime as dt

    from bench import generate as gen
    from bench.many_tables import _check, copy_table, table_engine, table_name
    from cdclake.engine.run import full_load

    spark = session(work / "warehouse")
    try:
        started = time.perf_counter()
        gen.full_load(spark, work / "tpl_load", rows, 1, "csv")
        gen.changes(spark, work / "tpl_cdc", gen.ChangeSet(rows, changes_per_file * files, files), dt(2024, 1, 2))
        for index in range(tables):
            copy_table(work / "tpl_load", work / "bronze", table_name(index))
            copy_table(work / "tpl_cdc", work / "bronze", table_name(index))
        generated = time.perf_counter() - started
        started = time.perf_counter()
        _check(full_load(table_engine(spark, work / "bronze", tables, DATABASE)), tables)
        return {"generate_seconds": generated, "full_load_seconds": time.perf_counter() - started}
    finally:
        spark.stop()


def measure(work: Path, tables: int, first_file: int, rounds: int) -> dict[str, Any]:
    """In this (new) process: ``rounds`` rounds of one CDC file per table, from the ``first_file``-th
    file of each table on; every round's seconds."""
    from bench.many_tables import _check, table_engine
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze
    from cdclake.engine.run import apply_cdc_files

    started = time.perf_counter()
    spark = session(work / "warehouse")
    session_seconds = time.perf_counter() - started
    try:
        engine = table_engine(spark, work / "bronze", tables, DATABASE)
        by_table: dict[str, list[Any]] = {}
        for file in list_bronze(engine.store).files:
            if file.kind is FileKind.CDC:
                by_table.setdefault(file.table, []).append(file)
        for found in by_table.values():
            found.sort(key=lambda f: f.key)
        seconds = []
        for number in range(rounds):
            batch = [found[first_file + number] for found in by_table.values()]
            started = time.perf_counter()
            report = apply_cdc_files(engine, batch)
            seconds.append(time.perf_counter() - started)
            _check(report, tables)
            log.info("round %d: %d tables in %.2f s", number + 1, tables, seconds[-1])
        return {"session_seconds": session_seconds, "round_seconds": seconds}
    finally:
        spark.stop()


def child(step: str, *args: str) -> dict[str, Any]:
    """Run a step in a new Python process (a new JVM); its result is its last ``RESULT`` line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "glue"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "bench.warm_cold", "--step", step, *args],
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith(RESULT_PREFIX))
    return dict(json.loads(line[len(RESULT_PREFIX) :]))


def summarise(runs: list[dict[str, Any]], tables: int) -> dict[str, Any]:
    """Cold (round 1) and warm (the last round) per table, over the measure processes (their mean)."""
    cold = statistics.fmean(r["round_seconds"][0] for r in runs) / tables
    warm = statistics.fmean(r["round_seconds"][-1] for r in runs) / tables
    # One round is one sample on a shared machine: the second half's mean says the same, less noisily.
    half = max(1, len(runs[0]["round_seconds"]) // 2)
    plateau = statistics.fmean(x for r in runs for x in r["round_seconds"][-half:]) / tables
    return {
        "cold_per_table": cold,
        "warm_per_table": warm,
        "saved_per_table": cold - warm,
        "cold_over_warm": cold / warm,
        "warm_half_rounds": half,
        "warm_mean_per_table": plateau,
        "session_seconds": statistics.fmean(r["session_seconds"] for r in runs),
    }


def render(result: dict[str, Any], command: str) -> str:
    s, t = result["settings"], result["summary"]
    rounds = s["rounds"]
    lines = [
        f"#### Warm vs cold — measured {result['finished']}",
        "",
        f"Command: `{command}` (wall time {result['wall_seconds'] / 60:.1f} min; load average "
        f"{result['load_average']} when it ended).",
        "",
        f"{s['tables']} tables of {s['rows']:,} rows (full-loaded in a first process: "
        f"{result['prepare']['full_load_seconds']:.1f} s), {s['changes_per_file']} changes per CDC file; "
        f"{len(result['runs'])} new process(es), each {rounds} rounds of one file per table. Spark session "
        f"start {t['session_seconds']:.1f} s (not in any round).",
        "",
        f"| one file per table, {s['tables']} tables | the round | per table (round / tables) |",
        "|---|---:|---:|",
        f"| round 1 (cold: a new JVM) | {t['cold_per_table'] * s['tables']:.1f} s | {t['cold_per_table']:.2f} s |",
        f"| round {rounds} (warm) | {t['warm_per_table'] * s['tables']:.1f} s | {t['warm_per_table']:.2f} s |",
        f"| rounds {rounds - t['warm_half_rounds'] + 1}–{rounds} (warm, their mean) | "
        f"{t['warm_mean_per_table'] * s['tables']:.1f} s | {t['warm_mean_per_table']:.2f} s |",
        f"| saved by the warm loop (round 1 - round {rounds}) | {t['saved_per_table'] * s['tables']:.1f} s | "
        f"**{t['saved_per_table']:.2f} s** ({t['cold_over_warm']:.2f}× cold / warm) |",
        "",
        "Every round (seconds), per process: "
        + "; ".join(", ".join(f"{x:.1f}" for x in r["round_seconds"]) for r in result["runs"])
        + ".",
    ]
    return "\n".join(lines)


def _command(s: dict[str, Any]) -> str:
    """How to run it again: the make target at its defaults, else the module with the options."""
    if (s["tables"], s["rows"], s["changes_per_file"], s["rounds"]) == (30, 5_000, 100, 10):
        return f"make bench-warm PROCESSES={s['processes']}"
    return (
        f"PYTHONPATH=glue .venv/bin/python -m bench.warm_cold --processes {s['processes']} --tables {s['tables']} "
        f"--rows {s['rows']} --changes {s['changes_per_file']} --rounds {s['rounds']}"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    import shutil

    from bench.report import splice

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--rows", type=int, default=5_000, help="per table (default: %(default)s)")
    parser.add_argument("--changes", type=int, default=100, help="per CDC file (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2, help="new processes measured (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-warm")
    parser.add_argument("--docs", type=Path, default=None, help="write the section into DOCS/benchmarks.md")
    parser.add_argument("--step", choices=("prepare", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--first-file", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--render-only", action="store_true", help="rewrite the section from DOCS' stored results")
    args = parser.parse_args(argv)
    if args.render_only:
        stored = json.loads((args.docs / "benchmarks-warm.json").read_text())
        stored["summary"] = summarise(stored["runs"], stored["settings"]["tables"])
        (args.docs / "benchmarks-warm.json").write_text(json.dumps(stored, indent=2) + "\n")
        document = args.docs / "benchmarks.md"
        command = _command(stored["settings"])
        document.write_text(splice(document.read_text(), "warm", render(stored, command)))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    for noisy in ("cdclake", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.step == "prepare":
        files = args.rounds * args.processes
        print(RESULT_PREFIX + json.dumps(prepare(args.workdir, args.tables, args.rows, args.changes, files)))
        return 0
    if args.step == "measure":
        print(RESULT_PREFIX + json.dumps(measure(args.workdir, args.tables, args.first_file, args.rounds)))
        return 0

    started = time.perf_counter()
    shutil.rmtree(args.workdir, ignore_errors=True)
    sizes = ["--tables", str(args.tables), "--rounds", str(args.rounds), "--workdir", str(args.workdir)]
    prepared = child(
        "prepare", *sizes, "--rows", str(args.rows), "--changes", str(args.changes), "--processes", str(args.processes)
    )
    log.info("prepared: %s", prepared)
    runs = [child("measure", *sizes, "--first-file", str(process * args.rounds)) for process in range(args.processes)]
    shutil.rmtree(args.workdir, ignore_errors=True)
    settings = {
        "tables": args.tables,
        "rows": args.rows,
        "changes_per_file": args.changes,
        "rounds": args.rounds,
        "processes": args.processes,
    }
    result: dict[str, Any] = {
        "settings": settings,
        "prepare": prepared,
        "runs": runs,
        "summary": summarise(runs, args.tables),
        "wall_seconds": time.perf_counter() - started,
        "finished": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "load_average": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    section = render(result, _command(settings))
    print(section)
    if args.docs:
        (args.docs / "benchmarks-warm.json").write_text(json.dumps(result, indent=2) + "\n")
        document = args.docs / "benchmarks.md"
        document.write_text(splice(document.read_text(), "warm", section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
