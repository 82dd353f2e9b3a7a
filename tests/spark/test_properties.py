"""Property: whatever the delivery — files split at random, shuffled, late, duplicated, batches
crashing and re-run, a column added mid-stream — silver equals the source state replayed in plain
Python. The example count is small for CI; raise it with CDCLAKE_PROPERTY_EXAMPLES=200 for a long run.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import BatchSizes, Engine
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import SourceChange, change_sequence, write_csv
from cdclake.engine.run import apply_cdc_files, full_load
from cdclake.engine.select import files_from_keys
from cdclake.errors import TablesFailedError
from faults import CrashingCommitter
from oracle import replay_change_log
from property_settings import property_settings

TABLES = ("alpha", "beta")
KEY = ("region", "id")
VALUES = ["a", "b, c", 'say "hi"', "two\nlines", "", None, "ünï ✓"]
CONFIG = """
bronze: {csv_header: true, timestamp_column: ts, change_sequence_column: seq}
tables:
  s.alpha: {primary_key: [region, id]}
  s.beta: {primary_key: [region, id]}
"""


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    """Initial rows, a change log over two tables, how it is cut into files and delivered."""
    keys = st.tuples(st.sampled_from(TABLES), st.sampled_from(["eu", "us"]), st.integers(0, 2))
    initial = draw(st.lists(keys, max_size=8, unique=True))
    step = st.tuples(keys, st.sampled_from("IUD"), st.booleans(), st.sampled_from(VALUES))
    steps = draw(st.lists(step, min_size=5, max_size=30))
    extra_from = draw(st.one_of(st.none(), st.integers(0, len(steps))))  # a column added at the source
    cuts = draw(st.lists(st.integers(1, 6), min_size=len(steps), max_size=len(steps)))
    order = draw(st.permutations(range(len(steps))))  # delivery order of files, by their index
    duplicates = draw(st.lists(st.integers(0, len(steps) - 1), max_size=3))
    batch_sizes = draw(st.lists(st.integers(1, 4), min_size=len(steps) + 3, max_size=len(steps) + 3))
    crash_at = draw(st.one_of(st.none(), st.integers(0, 5)))
    # Which commit path applies the batches: written files and a RowDelta (auto), one MERGE, or
    # the branch-staged RowDelta.
    commit_path = draw(st.sampled_from(["auto", "merge", "publish"]))
    # Who writes a RowDelta batch's files: the driver (a small batch collected as Arrow), or Spark.
    driver_writes = draw(st.booleans())
    return {
        "initial": initial, "steps": steps, "extra_from": extra_from, "cuts": cuts, "order": order,
        "duplicates": duplicates, "batch_sizes": batch_sizes, "crash_at": crash_at,
        "commit_path": commit_path, "driver_writes": driver_writes,
    }  # fmt: skip


def _build_log(scenario: dict) -> tuple[dict[str, list[dict]], dict[str, list[SourceChange]]]:
    load_ts = "2024-01-01 00:00:00.000000"
    initial: dict[str, list[dict]] = {t: [] for t in TABLES}
    live: set[tuple] = set()
    for table, region, ident in scenario["initial"]:
        initial[table].append({"region": region, "id": str(ident), "name": f"load-{ident}", "qty": "1", "ts": load_ts})
        live.add((table, region, ident))
    log: dict[str, list[SourceChange]] = {t: [] for t in TABLES}
    second = 0
    for n, ((table, region, ident), op, tick, value) in enumerate(scenario["steps"]):
        second += 1 if tick else 0
        ts = f"2024-01-02 00:{second // 60:02d}:{second % 60:02d}.000000"
        exists = (table, region, ident) in live
        op = ("D" if op == "D" else "U") if exists else "I"  # a valid history at the source
        row = {"region": region, "id": str(ident), "name": value, "qty": str(n), "ts": ts}
        if scenario["extra_from"] is not None and n >= scenario["extra_from"]:
            row["extra"] = f"x{n}"
        live.discard((table, region, ident)) if op == "D" else live.add((table, region, ident))
        log[table].append(SourceChange(op, row, ts, change_sequence(ts, n + 1)))
    return initial, log


def _write_files(bronze: Path, initial: dict, log: dict, cuts: list[int]) -> list[str]:
    """LOAD files, then CDC files cut from each table's log; returns the CDC keys in write order."""
    for table, rows in initial.items():
        header = ["ts", "region", "id", "name", "qty", "seq"]
        records = [[r[h] if h != "seq" else "" for h in header] for r in rows]
        write_csv(bronze / "s" / table / "LOAD00000001.csv", records, header=header)
    keys, cut_iter, counter = [], iter(cuts), 0
    for table, changes in log.items():
        start = 0
        while start < len(changes):
            chunk = changes[start : start + next(cut_iter, 3)]
            start += len(chunk)
            counter += 1
            columns = ["region", "id", "name", "qty"] + (["extra"] if any("extra" in c.row for c in chunk) else [])
            header = ["Op", "ts", *columns, "seq"]
            records = [[c.op, c.commit_ts, *[c.row.get(col) for col in columns], c.seq] for c in chunk]
            key = f"s/{table}/20240102-{counter:010d}.csv"
            write_csv(bronze / key, records, header=header)
            keys.append(key)
    return keys


def _expected(initial: list[dict], changes: list[SourceChange]) -> dict[tuple, dict]:
    state = replay_change_log(initial, changes, KEY)
    return {k: {"name": r["name"], "qty": r["qty"], "extra": r.get("extra")} for k, r in state.items()}


def _silver(engine: Engine, table: str) -> dict[tuple, dict]:
    frame = engine.spark.table(f"silver.{engine.config.database}.{table}")
    has_extra = "extra" in frame.columns
    return {
        (r["region"], r["id"]): {"name": r["name"], "qty": r["qty"], "extra": r["extra"] if has_extra else None}
        for r in frame.collect()
    }


@property_settings(6, [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=scenarios())
def test_any_delivery_converges_to_the_source(spark: SparkSession, tmp_path: Path, scenario: dict) -> None:
    # GIVEN the scenario's files in a fresh bronze folder and database
    bronze = tmp_path / uuid.uuid4().hex
    initial, log = _build_log(scenario)
    keys = _write_files(bronze, initial, log, scenario["cuts"])
    config = parse_config(CONFIG)
    engine = Engine(spark, replace(config, database=f"p_{uuid.uuid4().hex[:10]}"), LocalBronze(bronze)).tuned(
        way=scenario["commit_path"],
        driver_write_bytes=BatchSizes.driver_write_bytes if scenario["driver_writes"] else 0,
    )
    full_load(engine).checked()
    # WHEN the CDC files are delivered shuffled, some twice, in random batches, one batch crashing once
    delivery = [keys[i] for i in scenario["order"] if i < len(keys)] + [
        keys[i] for i in scenario["duplicates"] if i < len(keys)
    ]
    sizes, batches = iter(scenario["batch_sizes"]), []
    while delivery:
        size = next(sizes, 2)
        batches.append(delivery[:size])
        delivery = delivery[size:]
    delivered: set[str] = set()
    for number, batch in enumerate(batches):
        files = files_from_keys(engine.store, batch)
        if number == scenario["crash_at"] and set(batch) - delivered:  # a batch of redeliveries commits nothing
            # The crash stops every table of the batch (several at once: TablesFailedError).
            with pytest.raises((RuntimeError, TablesFailedError), match="killed"):
                apply_cdc_files(replace(engine, committer=CrashingCommitter()), files).checked()
        apply_cdc_files(engine, files).checked()
        delivered |= set(batch)
    # THEN every table equals the source state replayed in commit order
    for table in TABLES:
        assert _silver(engine, table) == _expected(initial[table], log[table]), table
