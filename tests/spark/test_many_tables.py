"""Many tables in one run: applied concurrently, each table's outcome its own, checked against a replay."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cdclake.context import Engine
from cdclake.dms.writer import SourceChange, change_sequence, write_csv
from cdclake.engine.run import apply_cdc_files, run
from cdclake.engine.select import files_from_keys
from cdclake.lake.tables import SilverTable
from cdclake.shells.commands.run import print_report
from faults import BeforeRowDeltas
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]
TABLES = ("alpha", "beta", "gamma")
CONFIG = """
bronze: {timestamp_column: ts, change_sequence_column: seq}
cdc: {parallel_tables: 3}
tables:
""" + "".join(
    f"""  s.{name}:
    primary_key: [id]
    columns: {{id: int, name: string}}
"""
    for name in TABLES
)
LOAD_TS = "2024-01-01 00:00:00.000000"


class RefusedFor(BeforeRowDeltas):
    """A committer whose data commits to one table are refused by storage."""

    def __init__(self, table: str) -> None:
        self.table = table

    def before(self, table: SilverTable) -> None:
        if table.name == self.table:
            raise OSError("storage refused the commit")


class MeetingCommitter(BeforeRowDeltas):
    """Each data commit waits until ``parties`` commits are under way at once: a run that applied
    its tables one after the other would never get there (the barrier breaks after ``timeout``)."""

    def __init__(self, parties: int, timeout: float = 60.0) -> None:
        self.barrier = threading.Barrier(parties, timeout=timeout)
        self.threads: set[str] = set()

    def before(self, table: SilverTable) -> None:
        self.threads.add(threading.current_thread().name)
        self.barrier.wait()


def _write_table(bronze: Path, table: str, loaded: list[tuple[int, str]], changes: list[tuple[str, int, str]]) -> tuple:
    """A LOAD file and one CDC file of ``table``; the change log as the oracle sees it."""
    write_csv(bronze / "s" / table / "LOAD00000001.csv", [[LOAD_TS, str(i), n, ""] for i, n in loaded])
    log, records = [], []
    for number, (op, ident, name) in enumerate(changes, start=1):
        ts = f"2024-01-02 00:00:{number:02d}.000000"
        row = {"id": str(ident), "name": name, "ts": ts}
        log.append(SourceChange(op, row, ts, change_sequence(ts, number)))
        records.append([op, ts, str(ident), name, change_sequence(ts, number)])
    write_csv(bronze / "s" / table / "20240102-0000010000.csv", records)
    initial = [{"id": str(i), "name": n, "ts": LOAD_TS} for i, n in loaded]
    return initial, log


def _silver(engine: Engine, table: str) -> dict[tuple, str]:
    frame = engine.spark.table(f"silver.{engine.config.database}.{table}")
    return {(str(r["id"]),): r["name"] for r in frame.collect()}


def test_tables_of_a_batch_commit_concurrently_and_each_equals_its_replay(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN three loaded tables, each with a CDC file of inserts, updates and deletes
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze"
    logs = {
        name: _write_table(
            bronze, name, [(1, "a"), (2, "b"), (3, "c")], [("U", 1, f"{name}-1"), ("D", 2, ""), ("I", 4, name)]
        )
        for name in TABLES
    }
    run(engine).checked()  # the full loads, then the CDC files
    # WHEN a second CDC file of each table arrives, applied as one manifest by a committer that
    # lets no data commit through until all three tables are committing at once
    keys = []
    for name in TABLES:
        ts = "2024-01-02 00:01:00.000000"
        write_csv(
            bronze / "s" / name / "20240102-0000020000.csv", [["U", ts, "3", f"{name}-3", change_sequence(ts, 9)]]
        )
        logs[name][1].append(SourceChange("U", {"id": "3", "name": f"{name}-3", "ts": ts}, ts, change_sequence(ts, 9)))
        keys.append(f"s/{name}/20240102-0000020000.csv")
    meeting = MeetingCommitter(parties=len(TABLES))
    report = apply_cdc_files(replace(engine, committer=meeting), files_from_keys(engine.store, keys)).checked()
    # THEN the three commits ran in three threads at once, and each table equals its own replay
    assert len(meeting.threads) == len(TABLES)
    assert [t.table for t in report.tables] == [f"s.{name}" for name in TABLES]
    for name, (initial, log) in logs.items():
        expected = replay_change_log(initial, log, ("id",))
        assert _silver(engine, name) == {k: row["name"] for k, row in expected.items()}, name


def test_a_failing_table_stops_only_itself_and_the_report_says_which(
    make_engine: EngineFactory, tmp_path: Path, capsys: Any
) -> None:
    # GIVEN three tables; beta's commits fail (storage refuses them), alpha's and gamma's CDC
    # hold an empty file each (quarantined at the same time: one journal)
    engine = replace(make_engine(CONFIG), committer=RefusedFor("beta"))
    bronze = tmp_path / "bronze"
    for name in TABLES:
        _write_table(bronze, name, [(1, "a")], [("U", 1, f"{name}-new")])
    (bronze / "s" / "alpha" / "20240102-0000000001.csv").write_text("")
    (bronze / "s" / "gamma" / "20240102-0000000001.csv").write_text("")
    # WHEN the run applies them
    report = run(engine)
    # THEN beta failed with its own error, nothing of it applied past its full load
    assert [(f.table, type(f.error)) for f in report.failures] == [("s.beta", OSError)]
    assert "storage refused the commit" in str(report.failures[0].error)
    assert _silver(engine, "beta") == {("1",): "a"}
    # AND alpha and gamma were applied, their empty files both held in the quarantine journal
    assert _silver(engine, "alpha") == {("1",): "alpha-new"}
    assert _silver(engine, "gamma") == {("1",): "gamma-new"}
    held = engine.spark.sql(
        f"SELECT silver_table, file_key FROM silver.{engine.config.database}.cdclake_quarantine ORDER BY 1"
    ).collect()
    assert [tuple(r) for r in held] == [
        ("alpha", "s/alpha/20240102-0000000001.csv"),
        ("gamma", "s/gamma/20240102-0000000001.csv"),
    ]
    # AND the command line prints every table's lines, names the failed table and exits 1 (a fault)
    assert print_report(report) == 1
    out, err = capsys.readouterr()
    assert "s.alpha" in out and "s.gamma" in out
    assert "cdclake: s.beta: storage refused the commit" in err


def test_batches_too_large_to_broadcast_are_classified_without_forcing_one(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN three tables with updates, deletes and inserts, and an engine whose broadcast budget is
    # nothing (as a batch of millions of keys in a small driver, several tables in flight)
    engine = make_engine(CONFIG).tuned(broadcast_heap_share=0.0)
    logs = {
        name: _write_table(
            tmp_path / "bronze", name, [(1, "a"), (2, "b")], [("U", 1, f"{name}-1"), ("D", 2, ""), ("I", 5, name)]
        )
        for name in TABLES
    }
    # WHEN they run THEN each equals its replay: the plain join classifies as the broadcast does
    run(engine).checked()
    for name, (initial, log) in logs.items():
        expected = replay_change_log(initial, log, ("id",))
        assert _silver(engine, name) == {k: row["name"] for k, row in expected.items()}, name
