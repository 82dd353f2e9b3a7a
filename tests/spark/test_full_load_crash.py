"""A full load (and a reload) is done in one step or not at all: killed at any step of finishing it,
the runs and maintenance after it leave silver, history and the ledger as a plain-Python replay of
the source says, and `status` never calls the table up to date before they do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.writer import SourceChange, Value, cdc_file_name, cdc_records, change_sequence, write_csv
from cdclake.engine.commit import FULL_LOAD_STEPS
from cdclake.engine.run import full_load, run
from cdclake.lake.history import history_of
from cdclake.lake.journals import tombstones_of
from cdclake.lake.ledger import read_ledger
from cdclake.lake.ledger_record import LoadedFile
from cdclake.lake.tables import iceberg_table, table_exists
from cdclake.ops.maintenance import MaintenanceSettings, maintain
from cdclake.ops.status import table_statuses
from faults import FullLoadCrash
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]

ITEMS = """
bronze: {timestamp_column: ts, change_sequence_column: seq}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}, history: true}
"""
COLUMNS = ("id", "name")
# Expire every snapshot but the current one, as if a day had passed; keep the tombstones (their
# pruning holds old files back, another subject: tests/spark/test_tombstone_horizon.py).
EXPIRE_ALL = MaintenanceSettings(snapshot_retention_hours=1, retain_last_snapshots=1, tombstone_retention_days=36500)

# Every place a crash can fall: before each step of finishing the load, and after the last one.
WINDOWS = [(step, False) for step in FULL_LOAD_STEPS] + [(FULL_LOAD_STEPS[-1], True)]
WINDOW_IDS = [f"before-{step}" for step in FULL_LOAD_STEPS] + [f"after-{FULL_LOAD_STEPS[-1]}"]


def _row(ident: int, name: str, ts: str) -> dict[str, Value]:
    return {"id": str(ident), "name": name, "ts": ts}


def _change(op: str, ident: int, name: str, ts: str, n: int) -> SourceChange:
    return SourceChange(op, _row(ident, name, ts), ts, change_sequence(ts, n))


@dataclass
class Source:
    """The source table as the test drives it: its LOAD and CDC files written to its bronze
    ``folder``, and in plain Python what silver, history, the ledger and the tombstones must hold."""

    folder: Path
    first_load: list[dict[str, Value]] = field(default_factory=list)
    load: list[dict[str, Value]] = field(default_factory=list)  # the rows of the newest (re)load
    changes: list[SourceChange] = field(default_factory=list)  # every change in a CDC file
    since_load: list[SourceChange] = field(default_factory=list)  # the changes the newest load lacks
    cdc_files: dict[str, list[SourceChange]] = field(default_factory=dict)  # bronze key -> its changes
    superseded: set[str] = field(default_factory=set)  # CDC files written before the newest load

    def write_load(self, rows: Sequence[dict[str, Value]], lacks: Sequence[SourceChange] = ()) -> None:
        """A (re)load in two LOAD files, its rows read before the changes it ``lacks`` (written to
        CDC files already). A reload's files have the same byte sizes as the first load's: no size
        tells the reload from the old load, only the ledger can."""
        self.first_load = self.first_load or list(rows)
        self.load = list(rows)
        self.since_load = list(lacks)
        self.superseded = {key for key, changes in self.cdc_files.items() if not any(c in lacks for c in changes)}
        half = (len(rows) + 1) // 2
        for number, part in enumerate((rows[:half], rows[half:]), start=1):
            write_csv(
                self.folder / f"LOAD{number:08X}.csv",
                [[r["ts"], r["id"], r["name"], change_sequence(str(r["ts"]), 0)] for r in part],
            )

    def write_cdc(self, changes: Sequence[SourceChange]) -> None:
        """One CDC file, named (as DMS names them) by its last change's commit time."""
        path = write_csv(self.folder / cdc_file_name(changes[-1].commit_ts), cdc_records(changes, COLUMNS))
        self.cdc_files[self._key(path)] = list(changes)
        self.changes += changes
        self.since_load += changes

    def _key(self, path: Path) -> str:
        return str(path.relative_to(self.folder.parent.parent))

    def silver(self) -> dict[int, Value]:
        state = replay_change_log(self.load, self.since_load, ["id"])
        return {int(str(ident)): row["name"] for (ident,), row in state.items()}

    def history(self) -> list[tuple[int, str, Value, bool]]:
        """(id, operation, name, is_current) of every version: each key's row in the first load (the
        last of a repeated key; a reload adds a version only for a key no load held before), then
        each change in order."""
        loaded = {r["id"]: r for r in self.load} | {r["id"]: r for r in self.first_load}  # a key's last row
        timelines: dict[int, list[tuple[str, Value]]] = {int(str(i)): [("I", r["name"])] for i, r in loaded.items()}
        for c in sorted(self.changes, key=lambda c: (c.commit_ts, c.seq)):
            timelines.setdefault(int(str(c.row["id"])), []).append((c.op, c.row["name"]))
        return sorted(
            (ident, op, name, n == len(versions) - 1 and op != "D")
            for ident, versions in timelines.items()
            for n, (op, name) in enumerate(versions)
        )

    def applied(self) -> set[str]:
        """Every file in bronze."""
        return {self._key(path) for path in self.folder.iterdir()}

    def loaded(self) -> dict[str, LoadedFile]:
        """The newest load's LOAD files with their sizes and versions (modification times), and the
        CDC files it superseded."""
        loads = [
            LoadedFile(self._key(p), p.stat().st_size, str(p.stat().st_mtime_ns)) for p in self.folder.glob("LOAD*.csv")
        ]
        return {f.key: f for f in (*loads, *map(LoadedFile, self.superseded))}

    def tombstones(self) -> list[int]:
        """The keys deleted since the newest load (the old load's tombstones are forgotten)."""
        return sorted(int(str(c.row["id"])) for c in self.since_load if c.op == "D")


def _lake(engine: Engine) -> tuple[object, ...]:
    """What the lake holds: silver, history versions, ledger (applied, loaded), tombstones."""
    table = engine.config.tables[0]
    silver = engine.silver_table(table)
    rows = {r["id"]: r["name"] for r in engine.spark.table(silver.identifier).collect()}
    versions = history_of(silver)
    history = sorted(
        (r["id"], r["operation"], r["name"], r["is_current"])
        for r in (engine.spark.table(versions.identifier).collect() if table_exists(engine.spark, versions) else [])
    )
    ledger = read_ledger(engine.spark, silver, whole=True)
    tombstones = tombstones_of(silver)
    dead = (
        sorted(r["id"] for r in engine.spark.table(tombstones.identifier).collect())
        if table_exists(engine.spark, tombstones)
        else []
    )
    return rows, history, ledger.full_load_done, set(ledger.applied.keys), dict(ledger.loaded), dead


def _expected(source: Source) -> tuple[object, ...]:
    return source.silver(), source.history(), True, source.applied(), source.loaded(), source.tombstones()


def _status(engine: Engine) -> str:
    [status] = table_statuses(engine)
    return status.behind


def _never_up_to_date_before_right(engine: Engine, source: Source, when: str) -> None:
    """`status` may say "up to date" only when the lake holds what the source says."""
    if _status(engine) == "up to date":
        assert _lake(engine) == _expected(source), f"status says up to date {when}, yet the lake is wrong"


def _maintain(engine: Engine) -> None:
    maintain(engine, EXPIRE_ALL, now=datetime.now(UTC) + timedelta(days=1))


def _sorted_by_id(engine: Engine) -> bool:
    iceberg = iceberg_table(engine.spark, engine.silver_table(engine.config.tables[0]).identifier)
    fields = iceberg.sortOrder().fields()
    return fields.size() == 1 and fields.get(0).sourceId() == iceberg.schema().findField("id").fieldId()


def _after_the_crash(engine: Engine, source: Source, more: Sequence[SourceChange]) -> None:
    """The runs and maintenance that follow a crashed load, checked at each step; then more CDC."""
    _never_up_to_date_before_right(engine, source, "after the crash")
    _maintain(engine)  # maintenance may come before the next run: it must not expire the crash away
    _never_up_to_date_before_right(engine, source, "after maintenance")
    run(engine).checked()
    _never_up_to_date_before_right(engine, source, "after the run")
    _maintain(engine)
    _never_up_to_date_before_right(engine, source, "after maintenance")
    source.write_cdc(more)
    _never_up_to_date_before_right(engine, source, "with a new CDC file")
    run(engine).checked()
    assert (_status(engine), _lake(engine)) == ("up to date", _expected(source))
    assert _sorted_by_id(engine)


T0, T1, T2, T3, T4 = (f"2024-01-0{d} 00:00:0{d}.000000" for d in range(1, 6))


# The careful path (a repeated key) differs from the one scan in how the load's rows are made, not in the steps
# that finish it: it is killed before the first step and after the last, the one scan at every window.
LOAD_WINDOWS = [(*window, False) for window in WINDOWS] + [(*WINDOWS[0], True), (*WINDOWS[-1], True)]
LOAD_WINDOW_IDS = [f"{i}-one-scan" for i in WINDOW_IDS] + [f"{WINDOW_IDS[0]}-careful", f"{WINDOW_IDS[-1]}-careful"]


@pytest.mark.parametrize(("step", "after", "repeated_key"), LOAD_WINDOWS, ids=LOAD_WINDOW_IDS)
def test_a_full_load_killed_at_any_step_is_finished_by_the_next_run(
    make_engine: EngineFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    step: str,
    after: bool,
    repeated_key: bool,
) -> None:
    # GIVEN a table's first LOAD files and a CDC file after them; with a repeated key (a LOAD row
    # written twice), the load takes the careful path after its one scan
    engine = make_engine(ITEMS)
    source = Source(tmp_path / "bronze" / "s" / "items")
    rows = [_row(i, f"a{i}", T0) for i in (4, 1, 2, 3)]
    source.write_load([*rows, _row(4, "z4", T0)] if repeated_key else rows)  # the second file repeats key 4
    source.write_cdc([_change("U", 1, "b1", T1, 1), _change("D", 2, "a2", T1, 2), _change("I", 5, "b5", T1, 3)])
    # WHEN the full load is killed at the step
    with pytest.raises(RuntimeError, match="killed"):
        full_load(replace(engine, committer=FullLoadCrash(step, after))).checked()
    careful = "keeping each key's last row" in caplog.text
    assert careful == repeated_key
    # THEN whatever follows (maintenance, runs, more CDC) converges on the source, and `status`
    # calls the table up to date only once it has
    _after_the_crash(engine, source, [_change("U", 3, "c3", T2, 1), _change("D", 1, "b1", T2, 2)])


@pytest.mark.parametrize(("step", "after"), WINDOWS, ids=WINDOW_IDS)
def test_a_reload_killed_at_any_step_is_finished_by_the_next_run(
    make_engine: EngineFactory, tmp_path: Path, step: str, after: bool
) -> None:
    # GIVEN a loaded table with applied CDC files (a delete among them: a tombstone), its ledger
    # archived by maintenance; the last CDC file is newer than the reload taken after it
    engine = make_engine(ITEMS)
    source = Source(tmp_path / "bronze" / "s" / "items")
    source.write_load([_row(i, f"a{i}", T0) for i in (1, 2, 3, 4)])
    source.write_cdc([_change("U", 1, "b1", T1, 1), _change("D", 2, "a2", T1, 2), _change("I", 5, "b5", T1, 3)])
    run(engine).checked()
    reload_rows = [_row(int(str(k)), str(v), T2) for k, v in sorted(source.silver().items())]
    late = [_change("U", 3, "c3", T3, 1), _change("D", 4, "a4", T3, 2)]  # read after the reload's rows
    source.write_cdc(late)
    run(engine).checked()
    _maintain(engine)
    # WHEN the table is reloaded (the LOAD files written again, as of before the last CDC file)
    # and the reload is killed at the step
    source.write_load(reload_rows, lacks=late)
    with pytest.raises(RuntimeError, match="killed"):
        full_load(replace(engine, committer=FullLoadCrash(step, after)), reload=True).checked()
    # THEN whatever follows converges on the source, and `status` is never early
    _after_the_crash(engine, source, [_change("U", 5, "d5", T4, 1), _change("I", 2, "d2", T4, 2)])
