"""Full loads against their floor: cdclake's full load and plain Spark's copy of the same LOAD files.

    .venv/bin/python -m bench.full_load_floor                      # 1M rows, 4 files, best of 3
    .venv/bin/python -m bench.full_load_floor --rows 10000000 --files 16 --reps 2
    .venv/bin/python -m bench.full_load_floor --jobs               # also every Spark job of one load per format

Only the full-load pair of ``make bench`` (``bench/run.py``): the same generated LOAD files (CSV and
typed Parquet), the same floor (``Bench.floor_copy``: read them, write them as Parquet) and cdclake's
real code path (``engine.run.full_load`` with ``reload``), in one session. After a warm-up of each,
the floor and cdclake alternate, format by format, ``--reps`` times; the figure is the best cdclake
run over the best floor run, and each round's own ratio is printed too, so a burst of load on the
shared machine shows as one odd round. The loaded row count is checked after every cdclake run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from bench import generate as gen
from bench.paths import ROOT, scratch_session
from bench.run import Bench

FORMATS = ("csv", "parquet")


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4, help="LOAD files per format (the full profile: 16)")
    parser.add_argument("--reps", type=int, default=3, help="alternated rounds after the warm-up")
    parser.add_argument("--jobs", action="store_true", help="print every Spark job of one cdclake load per format")
    parser.add_argument(
        "--with-cdc",
        action="store_true",
        help="a CDC file listed beside the LOAD files, as DMS leaves them (the scan observes its earliest instant)",
    )
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-full-load-floor")
    args = parser.parse_args(argv)

    ui = {"spark.ui.enabled": "true", "spark.ui.port": "4047"} if args.jobs else {}
    with scratch_session(args.workdir, extra_conf=ui) as spark:
        data = args.workdir / "data"
        files = {fmt: gen.full_load(spark, data / fmt, args.rows, args.files, fmt) for fmt in FORMATS}
        if args.with_cdc:  # named after the load's rows: listed, never superseded, never read by a full load
            for fmt in FORMATS:
                (gen.table_dir(data / fmt) / f"20240102-000000000000000.{fmt}").write_bytes(b"")
        bench = Bench(spark, args.workdir)

        def floor(fmt: str) -> None:
            bench.floor_copy(files[fmt], fmt, "load", fmt)

        def cdclake(fmt: str) -> None:
            bench.full_load(f"orders_{fmt}", data / fmt)
            if (rows := bench.count(f"orders_{fmt}")) != args.rows:
                raise AssertionError(f"full load {fmt}: {rows} rows, expected {args.rows}")

        for fmt in FORMATS:  # warm-up: JIT, catalog, file system caches
            floor(fmt)
            cdclake(fmt)
        runs: dict[tuple[str, str], list[float]] = {(fmt, who): [] for fmt in FORMATS for who in ("floor", "cdclake")}
        for rep in range(args.reps):
            for fmt in FORMATS:
                runs[fmt, "floor"].append(timed(lambda: floor(fmt)))  # noqa: B023 (called at once)
                runs[fmt, "cdclake"].append(timed(lambda: cdclake(fmt)))  # noqa: B023
                floor_s, cdclake_s = runs[fmt, "floor"][-1], runs[fmt, "cdclake"][-1]
                print(
                    f"round {rep + 1} {fmt:8} floor {floor_s:6.2f} s  cdclake {cdclake_s:6.2f} s  "
                    f"{cdclake_s / floor_s:.2f}x",
                    flush=True,
                )
        print(f"\n{args.rows:,} rows in {args.files} LOAD files, best of {args.reps}:")
        print("| format | floor | cdclake | cdclake / floor |")
        print("|---|---:|---:|---:|")
        for fmt in FORMATS:
            best_floor, best = min(runs[fmt, "floor"]), min(runs[fmt, "cdclake"])
            print(f"| {fmt} | {best_floor:.2f} s | {best:.2f} s | {best / best_floor:.2f}x |")
        if args.jobs:
            from bench.profile import JobLog

            log = JobLog(4047)
            for fmt in FORMATS:
                log.step(f"floor {fmt}", lambda: floor(fmt))  # noqa: B023
                log.step(f"cdclake {fmt}", lambda: cdclake(fmt))  # noqa: B023
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
