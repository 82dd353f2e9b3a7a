"""Two writers on one table (two follow loops, a Glue run beside `run --follow`): every file is
committed exactly once, whichever way the batch commits, and whenever the other writer commits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdclake.context import CommitPath, Engine
from cdclake.dms.notices import Polling
from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, change_sequence, write_csv
from cdclake.engine.cdc import CdcBatch
from cdclake.engine.follow import FollowSettings, follow
from cdclake.engine.run import apply_cdc_files, run
from cdclake.engine.select import files_from_keys
from cdclake.engine.turn import apply_batch, read_state
from cdclake.lake.ledger_record import FILES_PROPERTY
from cdclake.lake.tables import SilverTable, iceberg_table
from faults import BeforeDataCommits
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]

TABLES = """
bronze: {timestamp_column: ts, change_sequence_column: seq}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}}
  s.events: {append_only: true, columns: {id: int, name: string}}
"""


class RivalFirst(BeforeDataCommits):
    """A committer whose first data commit is overtaken: the batch is planned from the ledger, then
    ``rival`` (another loop applying the same files) commits, then this commit is tried."""

    def __init__(self, rival: Callable[[], Any]) -> None:
        self.rival = rival
        self.attempts = 0

    def before(self, table: SilverTable) -> None:
        self.attempts += 1
        if self.attempts == 1:
            self.rival()


def _cdc(bronze: Path, table: str, name: str, rows: list[tuple[str, int, int, str]]) -> str:
    """A headerless CDC file of (op, commit second, id, name) rows; its key."""
    records = []
    for n, (op, second, ident, value) in enumerate(rows):
        ts = f"2024-01-02 00:00:{second:02d}.000000"
        records.append([op, ts, str(ident), value, change_sequence(ts, n)])
    key = f"s/{table}/{name}"
    write_csv(bronze / key, records)
    return key


def _rows(engine: Engine, table: str) -> list[tuple[int, str]]:
    frame = engine.spark.table(f"silver.{engine.config.database}.{table}")
    return sorted((r["id"], r["name"]) for r in frame.collect())


def _recorded(engine: Engine, table: str) -> list[str]:
    """Every bronze key the table's snapshot lineage records, once per snapshot that records it."""
    iceberg = iceberg_table(engine.spark, f"silver.{engine.config.database}.{table}")
    iceberg.refresh()
    keys: list[str] = []
    snapshot = iceberg.currentSnapshot()
    while snapshot is not None:
        files = snapshot.summary().get(FILES_PROPERTY)
        keys += json.loads(files) if files else []
        parent = snapshot.parentId()
        snapshot = iceberg.snapshot(parent) if parent is not None else None
    return sorted(keys)


@pytest.mark.parametrize(
    ("table", "path", "driver_bytes"),
    [("events", "auto", None), ("events", "auto", 0), ("items", "driver-row-delta", None), ("items", "row-delta", 0),
     ("items", "merge", None), ("items", "publish", None)],
)  # fmt: skip
def test_a_file_the_other_loop_committed_meanwhile_is_not_committed_again(
    make_engine: EngineFactory, tmp_path: Path, table: str, path: CommitPath, driver_bytes: int | None
) -> None:
    # GIVEN a table with one batch applied, and a second file both loops see as pending (files the
    # driver writes, or Spark with driver_bytes 0)
    engine = make_engine(TABLES).tuned(backoff_seconds=0.01, way=path)
    if driver_bytes is not None:
        engine = engine.tuned(driver_write_bytes=driver_bytes)
    bronze = tmp_path / "bronze"
    first = _cdc(bronze, table, "20240102-0000010000.csv", [("I", 1, 1, "a"), ("I", 1, 2, "b")])
    second = _cdc(bronze, table, "20240102-0000020000.csv", [("U", 2, 1, "a2"), ("I", 2, 3, "c")])
    apply_cdc_files(engine.tuned(way="auto"), files_from_keys(engine.store, [first])).checked()
    # WHEN one loop plans the second file, and the other loop commits the same file before it does
    files = files_from_keys(engine.store, [second])
    rival = RivalFirst(lambda: apply_cdc_files(engine, files).checked())
    report = apply_cdc_files(replace(engine, committer=rival), files).checked()
    # THEN the loser's commit conflicted, it read the ledger again and skipped the file
    assert rival.attempts == 1
    assert (report.tables[0].files_applied, report.tables[0].files_skipped) == (0, 1)
    # AND the file is recorded once and its rows are in silver once
    assert _recorded(engine, table) == sorted([first, second])
    if table == "events":
        assert _rows(engine, table) == [(1, "a"), (1, "a2"), (2, "b"), (3, "c")]
    else:
        assert _rows(engine, table) == [(1, "a2"), (2, "b"), (3, "c")]


@pytest.mark.parametrize("table", ["events", "items"])
def test_a_state_read_before_the_other_loop_committed_is_planned_again(
    make_engine: EngineFactory, tmp_path: Path, table: str
) -> None:
    # GIVEN a loop that read the table's ledger, and another loop that then applied a file
    engine = make_engine(TABLES).tuned(backoff_seconds=0.01)
    bronze = tmp_path / "bronze"
    first = _cdc(bronze, table, "20240102-0000010000.csv", [("I", 1, 1, "a")])
    apply_cdc_files(engine, files_from_keys(engine.store, [first])).checked()
    config = next(t for t in engine.config.tables if t.target == table)
    stale = read_state(engine, config)
    second = _cdc(bronze, table, "20240102-0000020000.csv", [("I", 2, 2, "b")])
    files = files_from_keys(engine.store, [second])
    apply_cdc_files(engine, files).checked()
    # WHEN the first loop applies the file from the state it read before
    applied, after = apply_batch(engine, CdcBatch(config, files), stale)
    # THEN the file is skipped (the ledger was read again), recorded and applied once
    assert (applied.files_applied, applied.files_skipped) == (0, 1)
    assert second in after.applied and after.snapshot_id == read_state(engine, config).snapshot_id
    assert _recorded(engine, table) == sorted([first, second])
    assert _rows(engine, table) == [(1, "a"), (2, "b")]


def test_two_follow_loops_at_once_commit_every_arriving_file_exactly_once(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a keyed and an append-only table with a first batch applied
    engine = make_engine(TABLES).tuned(backoff_seconds=0.05, attempts=8)
    bronze = tmp_path / "bronze"
    log: list[SourceChange] = []
    events: list[tuple[int, str]] = []
    second = 0

    def arrive(step: int) -> None:
        nonlocal second
        second += 1
        ts = f"2024-01-02 00:{second // 60:02d}:{second % 60:02d}.000000"
        rows = [("U", str(step % 4), f"v{step}"), ("I", str(100 + step), f"n{step}")]
        if step % 3 == 2:
            rows.append(("D", str(100 + step - 1), ""))
        changes = [
            SourceChange(op, {"id": ident, "name": name}, ts, change_sequence(ts, n))
            for n, (op, ident, name) in enumerate(rows)
        ]
        log.extend(changes)
        for table in ("items", "events"):
            write_csv(bronze / "s" / table / cdc_file_name(ts), cdc_records(changes, ["id", "name"]))
        events.extend((int(ident), name) for _, ident, name in rows)

    arrive(0)
    run(engine).checked()
    # WHEN two loops follow the same bronze and catalog at once while files keep arriving
    settings = FollowSettings(poll_seconds=0.2, idle_seconds=4.0)
    outcomes: list[Any] = []

    def loop() -> None:
        outcomes.append(follow(replace(engine, stopping=threading.Event()), settings, Polling()))

    loops = [threading.Thread(target=loop) for _ in range(2)]
    for loop in loops:
        loop.start()
    for step in range(1, 9):
        arrive(step)
        time.sleep(0.4)
    for loop in loops:
        loop.join(timeout=300)
    # THEN both ended idle without a failure
    assert [o.stopped_by for o in outcomes] == ["idle", "idle"]
    assert [o.failures for o in outcomes] == [{}, {}]
    # AND every file is recorded exactly once in each table's lineage, and silver equals the replay:
    # the keyed table the source's state, the append-only table every change row once
    files = sorted(p.name for p in (bronze / "s" / "items").glob("*.csv"))
    assert _recorded(engine, "items") == [f"s/items/{f}" for f in files]
    assert _recorded(engine, "events") == [f"s/events/{f}" for f in files]
    expected = replay_change_log([], log, ["id"])
    assert _rows(engine, "items") == sorted((int(r["id"]), r["name"]) for r in expected.values())
    assert _rows(engine, "events") == sorted(events)
