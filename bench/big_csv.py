"""One big CSV LOAD file: the full load read whole (one task) vs in parallel splits.

    .venv/bin/python -m bench.big_csv                # one LOAD file of 8M rows (about 1 GB)
    .venv/bin/python -m bench.big_csv --rows 2000000 # a quicker check (about 270 MB)

It writes one DMS LOAD file with ``bench/generate.py`` (values without newlines, so the file may
be split), then loads it with cdclake's real full load, alternating: ``whole`` with
``bronze.split_csv_files_above_mb: 0`` (every file one task, the reader before splitting) and
``split`` with the default threshold (one parallel quote check, then ``maxPartitionBytes``
splits); best of two after a warm-up, the table replaced each time, the row count checked. It
also reports the quote check alone and the driver JVM's peak RSS per mode. The figures are
ratios of one run on one machine: with N idle cores the split read can be up to N times faster
than the whole one, less the quote check.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import replace
from pathlib import Path

from bench import generate as gen
from bench.memory import find_jvm, reset_peak, status_kib
from bench.paths import CACHE_DIR, ROOT
from bench.run import Bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000_000)
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-big-csv")
    args = parser.parse_args(argv)

    from cdclake.dms.reader import plan_scans, split_files
    from cdclake.dms.store import list_bronze
    from cdclake.engine.run import full_load
    from cdclake.runtime.session import LocalCatalog, SessionSettings, build_spark_session

    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    catalog = LocalCatalog(warehouse=args.workdir / "warehouse", cache_dir=CACHE_DIR)
    spark = build_spark_session(SessionSettings(catalog=catalog, app_name="cdclake-big-csv"))
    try:
        bronze = args.workdir / "data" / "load"
        [path] = gen.full_load(spark, bronze, args.rows, 1, "csv")
        megabytes = path.stat().st_size / 1e6
        bench, jvm = Bench(spark, args.workdir), find_jvm()

        def load(split_bytes: int) -> tuple[float, float]:
            engine = bench.engine("orders", bronze)
            engine = replace(
                engine, config=replace(engine.config, bronze=replace(engine.config.bronze, csv_split_bytes=split_bytes))
            )
            if jvm:
                reset_peak(jvm)
            started = time.perf_counter()
            full_load(engine, engine.config.tables[:1], reload=True)
            seconds = time.perf_counter() - started
            rows = spark.table(engine.silver_table(engine.config.tables[0]).identifier).count()
            if rows != args.rows:
                raise AssertionError(f"loaded {rows} rows, expected {args.rows}")
            return seconds, (status_kib(jvm, "VmHWM") / 1024 if jvm else float("nan"))

        split_bytes = bench.engine("orders", bronze).config.bronze.csv_split_bytes
        load(0)  # warm-up
        runs: dict[str, list[tuple[float, float]]] = {"whole": [], "split": []}
        for _ in range(2):
            runs["whole"].append(load(0))
            runs["split"].append(load(split_bytes))
        engine = bench.engine("orders", bronze)
        [file] = list_bronze(engine.store).files
        started = time.perf_counter()
        [layout] = plan_scans(engine.store, engine.config.bronze, engine.config.tables[0], [file])
        chosen = split_files(spark, engine.config.bronze, layout, [(file, str(path))])
        check = time.perf_counter() - started
        whole, split = (min(runs[m]) for m in ("whole", "split"))
        print(f"one LOAD file: {args.rows:,} rows, {megabytes:,.0f} MB, {spark.sparkContext.defaultParallelism} cores")
        print("| read | full load (best of 2) | driver JVM peak |")
        print("|---|---:|---:|")
        print(f"| whole (one task) | {whole[0]:.1f} s | {whole[1]:,.0f} MiB |")
        print(f"| split (quote check + splits) | {split[0]:.1f} s | {split[1]:,.0f} MiB |")
        print(
            f"split / whole: {split[0] / whole[0]:.2f}x; the quote check alone: {check:.1f} s (split: {bool(chosen)})"
        )
    finally:
        spark.stop()
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
