"""The follow loop's warm round has a budget: Spark jobs and metadata reads per table, not seconds.

A round of the follow loop over many tables, each with one small new file, costs what its tables'
batches cost: the loop hands each table the state the previous round left (no ledger read, no
quarantine journal read), each table's metadata is read once, and each batch runs a fixed, small
number of Spark jobs. A change that adds a Spark job per table, or reads a table's ledger again each
round, fails here (a timing would not: a job is 50 ms on a quiet machine and seconds on a busy one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import cdclake.engine.prepare as prepare
import cdclake.engine.turn as turn
from cdclake.context import Engine
from cdclake.dms.notices import Polling
from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, write_csv
from cdclake.engine.follow import Follower, FollowSettings
from cdclake.lake.ledger import read_ledger
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]
TABLES = [f"t{i:02d}" for i in range(30)]
CONFIG = """
bronze: {timestamp_column: ts}
cdc: {parallel_tables: 2}
tables:
""" + "".join(f"  s.{t}: {{primary_key: [id], columns: {{id: int, name: string}}}}\n" for t in TABLES)
LOAD_TS = "2024-01-01 00:00:00.000000"
# The Spark jobs of one small batch into a keyed table with tombstones, prepared in the driver
# (``engine.driver_batch``): one, the stored rows of its keys and their tombstones. (The Spark path
# ran four: the latest changes materialised, the stored rows and the tombstones each broadcast into
# the classification, the classified rows collected for the driver-written files.)
JOBS_PER_TABLE = 1


def _cdc_file(bronze: Path, table: str, second: int, changes: list[tuple[str, int, str]]) -> list[SourceChange]:
    ts = f"2024-01-02 00:00:{second:02d}.000000"
    written = [SourceChange(op, {"id": str(i), "name": n, "ts": ts}, ts, "") for op, i, n in changes]
    records = cdc_records(written, ["id", "name"], with_timestamp=True, with_seq=False)
    write_csv(bronze / "s" / table / cdc_file_name(ts), records)
    return written


def test_a_warm_round_of_30_tables_stays_within_its_job_and_read_budget(
    make_engine: EngineFactory, tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN 30 loaded tables, each with a CDC file applied by a first round of the loop
    bronze = tmp_path / "bronze"
    log: dict[str, list[SourceChange]] = {}
    initial = [{"id": str(i), "name": f"n{i}", "ts": LOAD_TS} for i in (1, 2, 3)]
    for table in TABLES:
        write_csv(bronze / "s" / table / "LOAD00000001.csv", [[LOAD_TS, r["id"], r["name"]] for r in initial])
        log[table] = _cdc_file(bronze, table, 1, [("U", 1, "a"), ("I", 4, "b")])
    engine = make_engine(CONFIG)
    follower = Follower(engine, FollowSettings(poll_seconds=0.1), Polling(), None, alerts=_NoAlerts())
    follower.index.relist()
    follower.round(follower.selected, None)
    assert follower.outcome.failures == {}
    assert len(follower.states) == len(TABLES) and not follower.unvouched
    # AND one more small CDC file per table
    for table in TABLES:
        log[table] += _cdc_file(bronze, table, 2, [("U", 2, "c"), ("D", 3, ""), ("I", 5, "d")])
    new = follower.look(set(), set())
    due = follower.due(new, set())
    assert len(due) == len(TABLES)
    reads: Counter[str] = Counter()
    monkeypatch.setattr(turn, "read_ledger", _counted(reads, "ledger", turn.read_ledger))
    monkeypatch.setattr(
        turn, "quarantined_files_by_table", _counted(reads, "quarantine", turn.quarantined_files_by_table)
    )
    monkeypatch.setattr(prepare, "read_table_metadata", _counted(reads, "metadata", prepare.read_table_metadata))
    in_driver: list[bool] = []
    monkeypatch.setattr(prepare, "prepare_in_driver", _noted(in_driver, prepare.prepare_in_driver))
    applied_before = follower.outcome.files_applied
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))

    # WHEN the next round applies them
    follower.round(due, None)

    # THEN every file is applied, silver equals the replay of the change log,
    jobs = len(set(tracker.getJobIdsForGroup(None)) - jobs_before)
    assert follower.outcome.failures == {}
    assert follower.outcome.files_applied - applied_before == len(TABLES)
    for table in ("t00", "t17", "t29"):
        silver = engine.silver_table(engine.config.table(f"s.{table}"))
        rows = spark.sql(f"SELECT id, name FROM {silver.identifier}").collect()
        expected = replay_change_log(initial, log[table], key=["id"]).values()
        assert sorted((r.id, r.name) for r in rows) == sorted((int(r["id"]), r["name"]) for r in expected)
    # AND the round read no ledger and no quarantine journal, each table's metadata once,
    assert reads == Counter({"metadata": len(TABLES)}), reads
    # AND prepared every batch in the driver, running at most the budget's Spark jobs per table
    assert in_driver == [True] * len(TABLES), in_driver
    assert jobs <= JOBS_PER_TABLE * len(TABLES), (
        f"{jobs} Spark jobs for {len(TABLES)} tables ({jobs / len(TABLES):.1f} a table)"
    )
    # (the states the round left still describe the tables: a fresh read agrees)
    for table in engine.config.tables:
        ledger = read_ledger(spark, engine.silver_table(table))
        assert follower.states[table.source].applied == ledger.applied
        assert follower.states[table.source].snapshot_id == ledger.snapshot_id


def _counted(counts: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return function(*args, **kwargs)

    return counting


def _noted(taken: list[bool], function: Callable[..., Any]) -> Callable[..., Any]:
    def noting(*args: Any, **kwargs: Any) -> Any:
        prepared = function(*args, **kwargs)
        taken.append(prepared is not None)
        return prepared

    return noting


class _NoAlerts:
    def send(self, subject: str, message: str) -> None:
        raise AssertionError(f"unexpected alert: {subject}: {message}")
