"""Where one more table's time goes in a CDC batch: the engine's functions by time per table.

    .venv/bin/python -m bench.table_cost --tables 30        # make bench-table-cost

``tables`` small tables (``bench/many_tables.py``'s data) are full-loaded, then their CDC files are
applied in one batch, one table at a time (``cdc.parallel_tables: 1``, so that Python's profiler,
which sees the calling thread only, sees every table's work). A first round warms the JVM; the
second, in fresh databases, is profiled; a third applies them as one warm round of the follow loop
(the tables' states handed in, as the loop's earlier rounds leave them). The output lists cdclake's
functions by cumulative time per table and the Python<->JVM round trips per table; the bare MERGE
per table (the demo's apply) is timed beside it, one table at a time too, as the floor under that cost.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.many_tables import ManyTables, drop_database, generate, plain_copies, plain_merges, table_engine
from bench.paths import ROOT, scratch_session

log = logging.getLogger("bench")


def measure(work: Path, tables: int, changes_per_table: int, top: int, stats: Path | None = None) -> dict[str, Any]:
    from cdclake.dms.files import FileKind
    from cdclake.dms.store import list_bronze
    from cdclake.engine.run import apply_cdc_files, full_load

    with scratch_session(work) as spark:
        sizes = ManyTables(tables, rows=tables * 1000, changes=tables * changes_per_table, parallel_tables=1)
        _, many = generate(spark, work / "data", sizes)
        result: dict[str, Any] = {"tables": tables, "changes_per_table": changes_per_table}
        for round_ in ("warm-up", "profiled", "follow"):
            database = f"cost_{round_.replace('-', '_')}"
            engine = table_engine(spark, many, tables, database, parallel=1)
            full_load(engine).checked()
            copies = plain_copies(spark, engine, database)
            files = [f for f in list_bronze(engine.store).files if f.kind is FileKind.CDC]
            if round_ == "profiled":
                result["driver_read_seconds"] = round(driver_read(engine, files), 2)
            profiler = cProfile.Profile()
            if round_ == "follow":
                cdc = warm_follow_round(engine)
            else:
                started = time.perf_counter()
                with _profiled_tables(profiler if round_ == "profiled" else None):
                    apply_cdc_files(engine, files).checked()
                cdc = time.perf_counter() - started
            started = time.perf_counter()
            plain_merges(spark, many, files, copies, 1)
            merge = time.perf_counter() - started
            log.info("%s: CDC %.2f s, bare MERGE %.2f s (%d tables, one at a time)", round_, cdc, merge, tables)
            result[round_] = {"cdc_seconds": round(cdc, 2), "bare_merge_seconds": round(merge, 2)}
            if round_ == "profiled":
                result["functions"] = _functions(profiler, tables, top)
                result["jvm_calls_per_table"] = _jvm_calls(profiler) // tables
                if stats is not None:
                    profiler.dump_stats(stats)
            drop_database(spark, database)
        shutil.rmtree(work / "data", ignore_errors=True)
    profiled, warm = result["profiled"], result["follow"]
    result["cdc_vs_bare_merge"] = round(profiled["cdc_seconds"] / profiled["bare_merge_seconds"], 2)
    result["follow_round_vs_bare_merge"] = round(warm["cdc_seconds"] / warm["bare_merge_seconds"], 2)
    result["driver_read_seconds_per_table"] = round(result["driver_read_seconds"] / tables, 3)
    return result


def warm_follow_round(engine: Any) -> float:
    """Seconds of a warm round of the follow loop that applies every table's CDC files: the tables'
    states are handed in as an earlier round would have left them (read before the clock starts)."""
    from cdclake.alerts import LoggedAlerts
    from cdclake.dms.notices import Polling
    from cdclake.engine.follow import Follower, FollowSettings
    from cdclake.engine.turn import read_state

    follower = Follower(engine, FollowSettings(), Polling(), None, LoggedAlerts())
    follower.index.relist()
    follower.states = {t.source: read_state(engine, t) for t in follower.selected}
    started = time.perf_counter()
    follower.round(follower.selected, None)
    seconds = time.perf_counter() - started
    if follower.outcome.failures:
        raise RuntimeError(f"the follow round failed: {follower.outcome.failures}")
    return seconds


def driver_read(engine: Any, files: list[Any]) -> float:
    """Seconds for what a batch's Spark jobs do, done in the driver with Arrow instead, every table one
    at a time: its CDC files read and typed (pyarrow's CSV reader), each key's last change kept, and
    silver's rows of those keys looked up (pyiceberg, a key filter). No row check, no classification:
    the floor of a small batch read without Spark, to set beside the two Spark jobs it would replace.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyarrow import csv
    from pyiceberg.table import StaticTable

    from bench import generate as gen
    from cdclake.dms.files import FileKind
    from cdclake.dms.layout import headerless_columns
    from cdclake.lake.counts import table_files
    from cdclake.lake.iceberg import IcebergTable

    arrow_types = {
        "bigint": pa.int64(),
        "int": pa.int32(),
        "string": pa.string(),
        "decimal(12,2)": pa.decimal128(12, 2),
        "date": pa.date32(),
    }
    types = {name: arrow_types[type_name] for name, type_name in gen.COLUMNS.items()}
    started = time.perf_counter()
    for table in engine.config.tables:
        mine = [f for f in files if (f.schema, f.table) == (table.source_schema, table.source_table)]
        names = list(headerless_columns(engine.config.bronze, table, FileKind.CDC))
        options = csv.ConvertOptions(column_types=types | {gen.TIMESTAMP_COLUMN: pa.timestamp("us")})
        read = [
            csv.read_csv(engine.store.directory / f.key, csv.ReadOptions(column_names=names), convert_options=options)
            for f in mine
        ]
        changes = pa.concat_tables(read)
        changes = changes.append_column("_row", pa.array(range(changes.num_rows), pa.int64()))
        ordered = changes.sort_by([(gen.SEQ_COLUMN, "ascending"), ("_row", "ascending")])
        ordered = ordered.append_column("_place", pa.array(range(ordered.num_rows), pa.int64()))
        last = ordered.group_by("id").aggregate([("_place", "max")])
        latest = ordered.take(last["_place_max"])
        metadata = table_files(IcebergTable.load(engine.spark, engine.silver_table(table).identifier))
        stored = StaticTable.from_metadata(
            metadata.metadata_location, {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        )
        keys = ", ".join(str(key) for key in pc.unique(latest["id"]).to_pylist())
        found = stored.scan(row_filter=f"id IN ({keys})").to_arrow()
        if latest.num_rows == 0 or found.num_columns == 0:
            raise RuntimeError(f"nothing read for {table.source}")
    return time.perf_counter() - started


@contextmanager
def _profiled_tables(profiler: cProfile.Profile | None) -> Iterator[None]:
    """Each table's unit of work (run in a pool thread, one at a time) under ``profiler``."""
    from cdclake.engine import parallel

    original = parallel._run_unit
    if profiler is not None:
        parallel._run_unit = lambda *args: profiler.runcall(original, *args)
    try:
        yield
    finally:
        parallel._run_unit = original


def _functions(profiler: cProfile.Profile, tables: int, top: int) -> list[dict[str, Any]]:
    """cdclake's functions by cumulative seconds per table (callers include their callees)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (filename, line, name), (_, calls, _, cumulative, _) in stats.items():
        if "/cdclake/" not in filename:
            continue
        where = filename.split("/cdclake/", 1)[1]
        rows.append(
            {
                "function": f"{where}:{line}:{name}",
                "seconds_per_table": round(cumulative / tables, 3),
                "calls_per_table": round(calls / tables, 1),
            }
        )
    return sorted(rows, key=lambda r: -float(r["seconds_per_table"]))[:top]


def _jvm_calls(profiler: cProfile.Profile) -> int:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    calls = sum(c for (filename, _, name), (_, c, *_) in stats.items() if name == "send_command" and "py4j" in filename)
    return int(calls) // 2  # py4j's client and gateway each count a call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=30)
    parser.add_argument("--changes-per-table", type=int, default=100)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--stats", type=Path, help="also write the profile here (pstats) to read further")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".cdclake" / "bench-table-cost")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.workdir, args.tables, args.changes_per_table, args.top, args.stats), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
