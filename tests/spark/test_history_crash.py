"""History is crash-consistent with silver: killed between any silver commit and
the history append after it (a CDC batch on every commit path, a history started from silver's
rows, a table loaded empty, the catch-up itself, with maintenance in between), the next run
catches history up before anything else: its versions equal a plain-Python replay of the change
log, its current rows equal silver, and every history commit names the silver snapshot it reflects.
`status` says history is behind until then."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cdclake.columns import SILVER_ORDER
from cdclake.context import Engine
from cdclake.dms.files import FileKind
from cdclake.dms.store import list_bronze
from cdclake.dms.writer import SourceChange, Value, cdc_file_name, cdc_records, change_sequence, write_csv
from cdclake.engine.read import history_changes
from cdclake.engine.run import run
from cdclake.lake.history import SILVER_SNAPSHOT_PROPERTY, apply_history, history_of
from cdclake.lake.tables import current_snapshot_id
from cdclake.ops.maintenance import MaintenanceSettings, maintain
from cdclake.ops.status import table_statuses
from faults import HistoryCrash, RivalBeforeHistory
from oracle import replay_change_log, replay_versions

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {{timestamp_column: ts, change_sequence_column: seq}}
cdc: {{max_files_per_batch: 1}}
tables:
  s.items: {{primary_key: [id], columns: {{id: int, name: string}}{history}}}
"""
WITH_HISTORY, WITHOUT_HISTORY = CONFIG.format(history=", history: true"), CONFIG.format(history="")
COLUMNS = ("id", "name")
KILLED = "killed between the silver commit and the history append"
# Every snapshot but the current one expired, as if a day had passed (the archive keeps their ledger).
EXPIRE_ALL = MaintenanceSettings(snapshot_retention_hours=1, retain_last_snapshots=1, tombstone_retention_days=36500)
T0, T1, T2, T3 = (f"2024-01-0{d} 00:00:0{d}.000000" for d in range(1, 5))


def _row(ident: int, name: str, ts: str = T0) -> dict[str, Value]:
    return {"id": str(ident), "name": name, "ts": ts}


def _change(op: str, ident: int, name: str, ts: str, n: int) -> SourceChange:
    return SourceChange(op, _row(ident, name, ts), ts, change_sequence(ts, n))


@dataclass
class Source:
    """The source table as the test writes it to bronze, and its change log."""

    folder: Path
    load: list[dict[str, Value]] = field(default_factory=list)
    changes: list[SourceChange] = field(default_factory=list)
    header: bool = False  # CSV files with a header line (DMS's AddColumnName)

    def write_load(self, rows: Sequence[dict[str, Value]]) -> None:
        self.load = list(rows)
        write_csv(
            self.folder / "LOAD00000001.csv", [[r["ts"], r["id"], r["name"], change_sequence(T0, 0)] for r in rows]
        )

    def write_cdc(self, changes: Sequence[SourceChange]) -> None:
        header = ["Op", "ts", *COLUMNS, "seq"] if self.header else None
        write_csv(self.folder / cdc_file_name(changes[-1].commit_ts), cdc_records(changes, COLUMNS), header)
        self.changes += changes

    def silver(self) -> list[tuple[int, Value]]:
        return sorted(
            (int(str(i)), r["name"]) for (i,), r in replay_change_log(self.load, self.changes, ["id"]).items()
        )

    def versions(self, since: int = 0) -> list[tuple[int, str, Value, bool]]:
        """(id, operation, name, is_current) of every version: the load's rows (or, with ``since``,
        silver's rows after the first ``since`` changes: a history started then), then each change."""
        start = replay_change_log(self.load, self.changes[:since], ["id"]).values()
        return sorted(
            (int(str(i)), op, row["name"], current)
            for (i,), op, row, current in replay_versions(start, self.changes[since:], ["id"])
        )


def _silver(engine: Engine) -> list[tuple[int, Value]]:
    rows = engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier).collect()
    return sorted((int(r["id"]), r["name"]) for r in rows)  # int: a table created from CSV headers has text ids


def _history(engine: Engine) -> tuple[list[tuple[int, str, Value, bool]], list[tuple[int, Value]]]:
    """History's versions (id, operation, name, is_current) and its current rows (id, name)."""
    rows = engine.spark.table(history_of(engine.silver_table(engine.config.tables[0])).identifier).collect()
    versions = sorted((int(r["id"]), r["operation"], r["name"], r["is_current"]) for r in rows)
    return versions, sorted((int(r["id"]), r["name"]) for r in rows if r["is_current"])


def _status(engine: Engine) -> Any:
    [status] = table_statuses(engine)
    return status


def _reflects_silver(engine: Engine) -> None:
    """Every history commit names a silver snapshot (but maintenance's compactions, which add no
    version); the newest names silver's current one."""
    silver = engine.silver_table(engine.config.tables[0])
    summaries = engine.spark.sql(
        f"SELECT summary FROM {history_of(silver).metadata('snapshots')} WHERE operation != 'replace' "
        "ORDER BY committed_at, snapshot_id"
    ).collect()
    named = [s["summary"].get(SILVER_SNAPSHOT_PROPERTY) for s in summaries]
    assert None not in named, named
    assert int(named[-1]) == current_snapshot_id(engine.spark, silver.identifier)


def _caught_up(engine: Engine, source: Source, since: int = 0) -> None:
    assert _silver(engine) == source.silver()
    assert _history(engine) == (source.versions(since), source.silver())
    assert _status(engine).behind == "up to date"
    _reflects_silver(engine)


@pytest.mark.parametrize(
    "settings",
    [{}, {"driver_write_bytes": 0}, {"way": "merge"}, {"way": "publish"}],
    ids=["row-delta-driver", "row-delta-spark", "merge", "publish"],
)
def test_a_batch_killed_before_its_history_is_caught_up_by_the_next_run(
    make_engine: EngineFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, settings: dict[str, Any]
) -> None:
    # GIVEN a loaded table with history, committed through one of the commit paths
    engine = make_engine(WITH_HISTORY).tuned(**settings)
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in (1, 2, 3, 4)])
    run(engine).checked()
    # WHEN a CDC file (a key changed twice, a delete, an insert) is applied and the job is killed
    # between silver's commit and history's
    source.write_cdc(
        [_change("U", 1, "b1", T1, 1), _change("U", 1, "c1", T1, 2), _change("D", 2, "a2", T1, 3),
         _change("I", 5, "b5", T1, 4)]
    )  # fmt: skip
    with pytest.raises(RuntimeError, match=KILLED):
        run(replace(engine, committer=HistoryCrash())).checked()
    # THEN silver holds the batch, history does not, and `status` says so
    assert _silver(engine) == source.silver()
    assert _history(engine)[0] == sorted((i, "I", f"a{i}", True) for i in (1, 2, 3, 4))
    status = _status(engine)
    assert "history behind silver by 1 CDC file(s)" in status.behind
    assert status.history_note.startswith("history behind silver")
    # WHEN another CDC file arrives (the deleted key back, the changed one deleted) and the next run
    source.write_cdc([_change("I", 2, "c2", T2, 1), _change("D", 1, "c1", T2, 2), _change("U", 3, "c3", T2, 3)])
    run(engine).checked()
    # THEN history was caught up first: every version of the change log, its current rows silver's
    assert "history behind silver table=s.items files=1" in caplog.text
    _caught_up(engine, source)


def test_a_catch_up_killed_again_after_maintenance_expired_the_batch(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a loaded table with history
    engine = make_engine(WITH_HISTORY)
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in (1, 2, 3)])
    run(engine).checked()
    # WHEN a run of two batches is killed before the second batch's history, maintenance then
    # compacts silver and expires that batch's snapshot, and the next run's catch-up is killed too
    source.write_cdc([_change("U", 1, "b1", T1, 1), _change("D", 3, "a3", T1, 2)])
    source.write_cdc([_change("U", 2, "c2", T2, 1), _change("U", 1, "c1", T2, 2), _change("I", 4, "c4", T2, 3)])
    with pytest.raises(RuntimeError, match=KILLED):
        run(replace(engine, committer=HistoryCrash(at=2))).checked()
    assert _silver(engine) == source.silver()
    assert _history(engine)[0] == sorted(
        [
            (1, "I", "a1", False),
            (1, "U", "b1", True),
            (2, "I", "a2", True),
            (3, "I", "a3", False),
            (3, "D", "a3", False),
        ]
    )
    maintain(engine, EXPIRE_ALL, now=datetime.now(UTC) + timedelta(days=1))
    assert "history behind silver by 1 CDC file(s)" in _status(engine).behind
    # (killed: neither the run's state read nor its table's turn, which reads the state again, gets through)
    with pytest.raises(RuntimeError, match=KILLED):
        run(replace(engine, committer=HistoryCrash(times=2))).checked()
    # THEN the run after it catches history up from the ledger archive, before a new batch
    source.write_cdc([_change("D", 2, "c2", T3, 1)])
    run(engine).checked()
    _caught_up(engine, source)


def test_a_history_started_from_silver_and_killed_before_the_batch_is_caught_up(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table loaded and changed without history
    without = make_engine(WITHOUT_HISTORY)
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in (1, 2, 3)])
    source.write_cdc([_change("U", 1, "b1", T1, 1)])
    run(without).checked()
    # WHEN `history: true` is turned on and the next batch is killed after its silver commit
    # (history started from silver's rows before it)
    engine = replace(without, config=replace(without.config, tables=[replace(without.config.tables[0], history=True)]))
    source.write_cdc([_change("U", 2, "c2", T2, 1), _change("I", 4, "c4", T2, 2)])
    with pytest.raises(RuntimeError, match=KILLED):
        run(replace(engine, committer=HistoryCrash())).checked()
    # THEN the next run catches history up: silver's rows then, and every change after
    run(engine).checked()
    _caught_up(engine, source, since=1)


# A table created by its first CDC batch: no LOAD file and no declared columns (headers name them).
CREATED_BY_CDC = """
bronze: {timestamp_column: ts, change_sequence_column: seq, csv_header: true}
tables:
  s.items: {primary_key: [id], history: true}
"""


@pytest.mark.parametrize("created_by_cdc", [False, True], ids=["loaded-empty", "created-by-cdc"])
def test_a_table_started_empty_killed_before_its_first_history_is_caught_up(
    make_engine: EngineFactory, tmp_path: Path, created_by_cdc: bool
) -> None:
    # GIVEN a table with history, empty at the source (no LOAD file): declared columns (loaded
    # empty), or none (created by its first CDC batch)
    engine = make_engine(CREATED_BY_CDC if created_by_cdc else WITH_HISTORY)
    source = Source(tmp_path / "bronze" / "s" / "items", header=created_by_cdc)
    source.write_cdc([_change("I", 1, "b1", T1, 1), _change("I", 2, "b2", T1, 2)])
    # WHEN its first batch is killed before history is written at all
    with pytest.raises(RuntimeError, match=KILLED):
        run(replace(engine, committer=HistoryCrash())).checked()
    assert "history behind silver" in _status(engine).behind
    # THEN the next run catches history up from its first change (not started from silver's rows)
    source.write_cdc([_change("U", 1, "c1", T2, 1)])
    run(engine).checked()
    _caught_up(engine, source)


def test_another_writers_batch_between_a_batch_and_its_history_is_added_with_it(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a loaded table with history and a CDC file
    engine = make_engine(WITH_HISTORY)
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in (1, 2)])
    run(engine).checked()
    source.write_cdc([_change("U", 1, "b1", T1, 1)])

    def rival() -> None:
        # another writer: its run catches history up with the first writer's batch, applies a
        # newer file and is killed before that file's history
        source.write_cdc([_change("U", 1, "c1", T2, 1), _change("I", 3, "c3", T2, 2)])
        with pytest.raises(RuntimeError, match=KILLED):
            run(replace(engine, committer=HistoryCrash(at=2))).checked()

    # WHEN the other writer commits between this run's silver commit and its history
    run(replace(engine, committer=RivalBeforeHistory(rival))).checked()
    # THEN this run's history commit adds the other writer's batch too: nothing is left behind
    _caught_up(engine, source)


def _many(op: str, idents: range, name: str, ts: str, first: int) -> list[SourceChange]:
    return [_change(op, i, f"{name}{i}", ts, first + n) for n, i in enumerate(idents)]


def test_a_batch_read_in_other_company_by_another_writers_catch_up_is_in_history_once(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a loaded table with history, and two CDC files that one batch reads together (the
    # smaller one lands in Spark's second partition)
    engine = make_engine(WITH_HISTORY.replace("max_files_per_batch: 1", "max_files_per_batch: 5"))
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in range(1, 41)])
    run(engine).checked()
    source.write_cdc(_many("U", range(1, 41), "b", T1, 1))
    source.write_cdc([_change("U", 1, "c1", T2, 1), _change("D", 2, "a2", T2, 2), _change("I", 50, "c50", T2, 3)])

    def rival() -> None:
        # another writer on another machine, whose Spark packs files into partitions otherwise
        # (one core: both files in one partition, the smaller after the larger): its run catches
        # history up with the first writer's batch, applies a newer file and is killed before
        # that file's history
        spark = engine.spark
        spark.conf.set("spark.sql.files.minPartitionNum", "1")
        try:
            source.write_cdc([_change("U", 3, "d3", T3, 1)])
            with pytest.raises(RuntimeError, match=KILLED):
                run(replace(engine, committer=HistoryCrash(at=2))).checked()
        finally:
            spark.conf.unset("spark.sql.files.minPartitionNum")

    # WHEN the other writer catches history up between this batch's silver commit and its history
    run(replace(engine, committer=RivalBeforeHistory(rival))).checked()
    # THEN history holds each change of the change log once, whichever read recorded it first
    _caught_up(engine, source)


def test_maintain_drops_the_versions_a_change_was_recorded_twice_with(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table with history whose CDC files' changes were all recorded a second time with
    # other places in their files (as a catch-up that read them in other company recorded them
    # before a change's place was its row index in its file)
    engine = make_engine(WITH_HISTORY.replace("max_files_per_batch: 1", "max_files_per_batch: 5"))
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}") for i in range(1, 6)])
    run(engine).checked()
    source.write_cdc([_change("U", 1, "b1", T1, 1), _change("U", 1, "c1", T1, 2), _change("D", 2, "a2", T1, 3)])
    source.write_cdc([_change("I", 2, "b2", T2, 1), _change("U", 3, "b3", T2, 2), _change("I", 6, "b6", T2, 3)])
    run(engine).checked()
    table = engine.config.tables[0]
    silver = engine.silver_table(table)
    history = history_of(silver)
    files = list_bronze(engine.store).for_table("s", "items", FileKind.CDC)
    again = history_changes(engine, table, files)
    place = F.substring(SILVER_ORDER, -20, 20).cast("long") + (1 << 33)
    shifted = again.withColumn(
        SILVER_ORDER,
        F.concat(
            F.expr(f"substring({SILVER_ORDER}, 1, length({SILVER_ORDER}) - 20)"), F.lpad(place.cast("string"), 20, "0")
        ),
    )
    apply_history(engine.spark, history, shifted, table.silver_key())
    recorded = len(source.changes)
    assert len(_history(engine)[0]) == len(source.versions()) + recorded
    # WHEN the table is maintained
    [report] = maintain(engine, MaintenanceSettings()).tables
    # THEN each change is in history once, with its validity as the change log's timeline says
    [upkeep] = [side for side in report.side_tables if side.role == "history"]
    assert upkeep.repeated_versions_removed == recorded
    assert "repeated versions removed 6" in upkeep.summary()
    assert _history(engine) == (source.versions(), source.silver())
    versions = _timelines(engine)
    for timeline in versions.values():
        for (_, _, to, current, _op), (_, following, *_) in pairwise(timeline):
            assert to == following and not current
        _, _, to, current, op = timeline[-1]
        assert to is None and current == (op != "D")
    # AND a second maintenance finds nothing to drop and changes no version
    [again_report] = maintain(engine, MaintenanceSettings()).tables
    [upkeep] = [side for side in again_report.side_tables if side.role == "history"]
    assert upkeep.repeated_versions_removed == 0
    assert _timelines(engine) == versions


def _timelines(engine: Engine) -> dict[int, list[tuple[str, Any, Any, bool, str]]]:
    """Each key's versions in history's order: (_cdc_order, valid_from, valid_to, is_current, operation)."""
    rows = engine.spark.table(history_of(engine.silver_table(engine.config.tables[0])).identifier).collect()
    timelines: dict[int, list[tuple[str, Any, Any, bool, str]]] = {}
    for r in sorted(rows, key=lambda r: (int(r["id"]), r["_cdc_order"])):
        timelines.setdefault(int(r["id"]), []).append(
            (r["_cdc_order"], r["valid_from"], r["valid_to"], r["is_current"], r["operation"])
        )
    return timelines
